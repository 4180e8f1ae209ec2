"""Every reader of a file a user hands us, fed damaged bytes: the project's own valid files
mutated (cut short, NUL bytes, invalid UTF-8, a BOM, CRLF, huge numbers, NaN, duplicate
keys, deep nesting, alias bombs) and bytes made up. Each answer is a value or the reader's
one-line error naming the file; never another exception, never an unbounded cost (the
guards stop a document at nesting depth 100 and at an alias budget, see yamlsource)."""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import GpupoolError, SourceError, UsageError
from tests.hostile import alias_bomb

ROOT = Path(__file__).resolve().parents[2]
SEEDS = {
    "inventory": [
        ROOT / "inventories" / "example.yaml",
        ROOT / "gpupoolctl" / "data" / "sim.yaml",
        ROOT / "tests" / "fixtures" / "inventories" / "ini_fleet" / "hosts.ini",
        ROOT / "tests" / "fixtures" / "inventories" / "json_fleet" / "hosts.json",
    ],
    "spec": [
        ROOT / "playbooks" / "layouts.yaml",
        ROOT / "tests" / "fixtures" / "mig-parted" / "examples" / "config.yaml",
    ],
    "vars": [
        ROOT / "tests" / "fixtures" / "inventories" / "yaml_fleet" / "group_vars" / "all.yml",
        ROOT / "tests" / "fixtures" / "inventories" / "json_fleet" / "group_vars" / "gpus.json",
    ],
}
HOOKS = b"version: v1\nhooks:\n  pre-apply-mode:\n  - workdir: /tmp\n    command: /bin/true\n"


HOSTILE = [
    b"\x00\x01binary",
    b"[" * 100_000,
    b"{a: " * 5_000,
    b"- " * 5_000 + b"x",
    alias_bomb(),
    b"a: &a [*a]\n",
    b"\xef\xbb\xbfall:\n  hosts:\n    h1:\n",
    b"all:\r\n  hosts:\r\n    h1:\r\n",
    b"all:\n  hosts:\n    h1:\n      port: 99999999999999999999999999999999\n",
    b"all:\n  vars: {a: .nan, b: -.inf}\n  hosts: {h1: {}}\n",
    b"all:\n  hosts:\n    h1:\n  hosts:\n    h2:\n",
    b"all:\n  hosts: [h1, h2]\n",
    b"\xff\xfe\xfd not utf-8\n",
    b"version: v1\nmig-configs:\n  x:\n  - devices: all\n    mig-enabled: true\n"
    b"    mig-devices: {1g.10gb: 1e400}\n",
]


def mutations(seed: bytes) -> st.SearchStrategy[bytes]:
    cut = st.integers(0, len(seed)).map(lambda n: seed[:n])
    spliced = st.tuples(
        st.integers(0, len(seed)),
        st.sampled_from(
            [b"\x00", b"\xff\xfe", b"\xef\xbb\xbf", b"\r\n", b": [", b"{", b"&x ", b"*x", b"\t",
             b"1e999", b"-.inf", b"!!python/object:os.system ", b"<<: *x\n", b"]" * 50]
        ),
    ).map(lambda t: seed[: t[0]] + t[1] + seed[t[0] :])  # fmt: skip
    return st.one_of(cut, spliced, st.sampled_from(HOSTILE), st.binary(max_size=300))


def seeds(kind: str) -> list[bytes]:
    return [path.read_bytes() for path in SEEDS[kind]]


def check(read: Callable[[Path], Any], name: str, data: bytes) -> None:
    """The reader answers a value or its one-line error naming the file; nothing else."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        try:
            read(path)
        except (SourceError, UsageError) as exc:
            message = str(exc)
            assert "\n" not in message, message
            assert str(path) in message or path.name in message, message
        except GpupoolError as exc:  # a typed error of the library: one line all the same
            assert "\n" not in str(exc), str(exc)


FUZZ = settings(
    max_examples=100,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def read_inventory(path: Path) -> Any:
    from gpupoolctl.inventory import load_inventory

    return load_inventory(path)


def read_spec(path: Path) -> Any:
    from gpupoolctl.partition.spec import load_spec

    return load_spec(path)


def read_vars(path: Path) -> Any:
    from gpupoolctl.inventory.varsfiles import load_vars_file

    return load_vars_file(path)


def read_hooks(path: Path) -> Any:
    from gpupoolctl.partition.hooks import load_hooks

    return load_hooks(path)


def read_limit_file(path: Path) -> Any:
    from gpupoolctl.inventory import load_inventory
    from gpupoolctl.inventory.patterns import select

    inventory = load_inventory(ROOT / "gpupoolctl" / "data" / "sim.yaml")
    return select(inventory, f"@{path}", cwd=path.parent)


@pytest.mark.parametrize("name", ["hosts.yml", "hosts.ini", "inventory", "hosts.json"])
@given(data=st.data())
@FUZZ
def test_inventory_reader(name: str, data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(seeds("inventory")))
    check(read_inventory, name, data.draw(mutations(seed)))


@given(data=st.data())
@FUZZ
def test_partition_spec_reader(data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(seeds("spec")))
    check(read_spec, "layouts.yaml", data.draw(mutations(seed)))


@given(data=st.data())
@FUZZ
def test_vars_file_reader(data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from(seeds("vars")))
    check(read_vars, "all.yml", data.draw(mutations(seed)))


@given(data=st.data())
@FUZZ
def test_hooks_file_reader(data: st.DataObject) -> None:
    check(read_hooks, "hooks.yaml", data.draw(mutations(HOOKS)))


@given(data=st.data())
@FUZZ
def test_limit_file_reader(data: st.DataObject) -> None:
    check(read_limit_file, "limit.txt", data.draw(mutations(b"sg-dgx01\nsingapore:!l40s\n")))


@pytest.mark.parametrize("data", HOSTILE, ids=range(len(HOSTILE)))
@pytest.mark.parametrize(
    ("read", "name"),
    [(read_inventory, "hosts.yml"), (read_spec, "layouts.yaml"), (read_hooks, "hooks.yaml")],
)
def test_each_hostile_document_is_one_line(read, name: str, data: bytes) -> None:
    check(read, name, data)


@pytest.mark.parametrize(
    ("data", "words"),
    [
        (b"\x00\x01binary", "(is it a text file?)"),
        (b"[" * 100_000, "nested deeper than 100 levels"),
        (alias_bomb(), "aliases expand to more than"),
        (b"a: &a [*a]\n", "refers to a node it is inside"),
    ],
    ids=["binary", "deep", "alias-bomb", "self-alias"],
)
@pytest.mark.parametrize(
    ("read", "name"),
    [(read_inventory, "inv.yaml"), (read_spec, "layouts.yaml"), (read_hooks, "hooks.yaml")],
)
def test_the_three_reported_cases_are_refused_by_every_yaml_reader(read, name, data, words):
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        with pytest.raises(SourceError) as caught:
            read(path)
    assert words in str(caught.value) and caught.value.path == str(path)


def test_a_limit_pattern_of_100000_brackets_is_refused_at_once(tmp_path: Path) -> None:
    """fnmatch's translation of unclosed `[` is quadratic: this took minutes unbounded."""
    (tmp_path / "limit.txt").write_bytes(b"[" * 100_000)
    with pytest.raises(UsageError, match=r"limit.txt:1: host pattern of 100000 characters"):
        read_limit_file(tmp_path / "limit.txt")


def test_anchors_and_aliases_as_inventories_use_them_still_work(tmp_path: Path) -> None:
    from gpupoolctl.inventory import load_inventory

    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n"
        "  children:\n"
        "    sg:\n"
        "      vars: &common {site: singapore, ansible_user: ops, gpus: [0, 1, 2, 3]}\n"
        "      hosts: {a: , b: }\n"
        "    dxb:\n"
        "      vars:\n"
        "        <<: *common\n"
        "        site: dubai\n"
        "      hosts: {c: }\n"
    )
    loaded = load_inventory(inventory)
    assert loaded.hosts["c"].vars["site"] == "dubai"
    assert loaded.hosts["c"].vars["gpus"] == [0, 1, 2, 3]
    assert loaded.hosts["a"].vars["ansible_user"] == "ops"


def read_ssh_config(path: Path) -> Any:
    from gpupoolctl.remote.sshconfig import load_fabric_config

    return load_fabric_config(path)


def read_known_hosts(path: Path) -> Any:
    from gpupoolctl.remote.hostkeys import KnownHosts

    return KnownHosts(path)


SSH_CONFIG = b"Host sg-*\n  User ops\n  Port 2222\n  ProxyJump bastion\nMatch host x\n  User y\n"
KNOWN_HOSTS = (
    b"sg-dgx01 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
    b"@revoked * ssh-rsa AAAAB3NzaC1yc2EAAAADAQABAAABAQ\n"
)


@given(data=st.data())
@FUZZ
def test_ssh_config_reader(data: st.DataObject) -> None:
    check(read_ssh_config, "ssh_config", data.draw(mutations(SSH_CONFIG)))


@given(data=st.data())
@FUZZ
def test_known_hosts_reader(data: st.DataObject) -> None:
    check(read_known_hosts, "known_hosts", data.draw(mutations(KNOWN_HOSTS)))


def test_a_broken_default_ssh_config_is_one_line_naming_it(tmp_path, monkeypatch) -> None:
    from gpupoolctl.remote.sshconfig import load_fabric_config

    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh" / "config").write_bytes(b"Match exec\n")
    monkeypatch.setenv("HOME", str(tmp_path))
    with pytest.raises(SourceError, match=r"\.ssh/config: ssh config: Missing parameter"):
        load_fabric_config(None)


_FIXED = datetime(2026, 1, 1, tzinfo=UTC)


def _ledger_files(folder: Path) -> dict[str, bytes]:
    """A small real ledger: a journal, a snapshot and an archive."""
    from gpupoolctl.jobs.alloc import alloc as hold
    from gpupoolctl.ledger import Ledger
    from gpupoolctl.sched import JobRequest

    # A fixed clock: the files (their usage totals too) must be the same on every example,
    # or hypothesis sees its data generation change between runs.
    ledger = Ledger(folder / "l.jsonl", durable=False, actor="t@b", clock=lambda: _FIXED)
    slices = [{"id": "n1/gpu0", "host": "n1", "kind": "gpu", "memory_mib": 80000, "uuid": "U"}]
    ledger.refresh_slices(["n1"], slices)
    ledger.release(hold(ledger, JobRequest(profile="gpu"), owner="ann").value.id)
    ledger.compact()
    hold(ledger, JobRequest(profile="gpu"), owner="bob")
    return {p.name: p.read_bytes() for p in folder.iterdir() if p.is_file()}


@given(data=st.data(), damaged=st.sampled_from(["l.jsonl", "l.jsonl.snapshot"]))
@FUZZ
def test_ledger_files_damaged_anyhow_give_ledger_errors_only(
    data: st.DataObject, damaged: str
) -> None:
    """read, verify, history, repair and a write on a damaged journal or snapshot: a value
    or the ledger's own one-line errors (damage, refused writes), nothing else."""
    from gpupoolctl.jobs.alloc import alloc as hold
    from gpupoolctl.ledger import Ledger
    from gpupoolctl.sched import JobRequest

    with tempfile.TemporaryDirectory() as made, tempfile.TemporaryDirectory() as used:
        files = _ledger_files(Path(made))
        for name, content in files.items():
            (Path(used) / name).write_bytes(content)
        (Path(used) / "l.jsonl.archive").mkdir()
        for archive in (Path(made) / "l.jsonl.archive").iterdir():
            (Path(used) / "l.jsonl.archive" / archive.name).write_bytes(archive.read_bytes())
        (Path(used) / damaged).write_bytes(data.draw(mutations(files[damaged])))
        ledger = Ledger(Path(used) / "l.jsonl", durable=False, actor="t@b")
        steps = [
            ledger.read,
            ledger.verify,
            lambda: ledger.history(everything=True),
            ledger.repair,
            lambda: hold(ledger, JobRequest(profile="gpu"), owner="cy"),
        ]
        for step in steps:
            try:
                step()
            except GpupoolError as exc:
                assert "\n" not in str(exc), str(exc)


def read_scenario(path: Path) -> Any:
    from gpupoolctl.stress.scenario import load_scenario

    return load_scenario(path)


@given(data=st.data())
@FUZZ
def test_stress_scenario_reader(data: st.DataObject) -> None:
    seed = data.draw(st.sampled_from([(ROOT / "playbooks" / n).read_bytes() for n in SCENARIOS]))
    check(read_scenario, "scenario.yaml", data.draw(mutations(seed)))


SCENARIOS = ("stress-nightly.yaml", "stress-quick.yaml")
