"""export slurm: type names, formats, order, and counts against the sim pool's ledger."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import UsageError
from gpupoolctl.export.slurm import (
    SliceKind,
    is_legal_type,
    model_short_name,
    slurm_config,
    slurm_type_id,
    type_names,
)
from gpupoolctl.ledger import Ledger

H100 = "NVIDIA H100 80GB HBM3"
A100_PCIE = "NVIDIA A100-PCIE-40GB"
A100_SXM = "NVIDIA A100-SXM4-80GB"


def gpu(host: str, index: int, model: str = H100, vendor: str = "nvidia") -> dict[str, Any]:
    return {"id": f"{host}/gpu{index}", "host": host, "gpu": index, "kind": "gpu", "profile": None,
            "model": model, "vendor": vendor}  # fmt: skip


def mig(host: str, index: int, profile: str, start: int, model: str = H100) -> dict[str, Any]:
    return {"id": f"{host}/gpu{index}/mig-{profile}@{start}", "host": host, "gpu": index,
            "kind": "mig", "profile": profile, "model": model, "vendor": "nvidia"}  # fmt: skip


# -- Slurm's type id ------------------------------------------------------------------------


def test_type_id_matches_slurmd() -> None:
    # slurmd 22.05 logged "type:h100_1g.10gb(3237909240)" for this name.
    assert slurm_type_id("h100_1g.10gb") == 3237909240
    assert slurm_type_id("") == 0
    assert slurm_type_id("a") == ord("a")
    assert slurm_type_id("ab") == ord("a") + (ord("b") << 8)


def test_names_with_one_slurm_id_are_told_apart() -> None:
    # Bytes 0 and 4 are both added unshifted: swapping them keeps Slurm's id.
    first, second = "aa1xb", "ba1xa"
    assert slurm_type_id(first) == slurm_type_id(second)
    names = type_names([SliceKind(first, "", "gpu", ""), SliceKind(second, "", "gpu", "")])
    assert len({slurm_type_id(n) for n in names.values()}) == 2
    assert sorted(names.values()) == ["aa1xb", "ba1xa-2"]


# -- names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "vendor", "expected"),
    [
        (H100, "nvidia", "h100"),
        (A100_PCIE, "nvidia", "a100"),
        ("AMD Instinct MI300X", "amd", "mi300x"),
        ("NVIDIA L40S", "nvidia", "l40s"),
        ("NVIDIA RTX A6000", "nvidia", "rtx-a6000"),
        ("Tesla V100-SXM2-16GB", "nvidia", "v100"),
        (None, "amd", "amd"),
        ("", None, "gpu"),
        ("4090 (ES)", None, "gpu-4090"),
    ],
)
def test_model_short_names(model: str | None, vendor: str | None, expected: str) -> None:
    assert model_short_name(model, vendor) == expected


def test_two_models_sharing_a_short_name_use_long_names() -> None:
    config = slurm_config([gpu("n1", 0, A100_PCIE), gpu("n2", 0, A100_SXM)])
    assert config.node("n1").counts() == {"a100-pcie-40gb": 1}
    assert config.node("n2").counts() == {"a100-sxm4-80gb": 1}


def test_one_mig_profile_on_two_models_is_two_types() -> None:
    config = slurm_config([mig("n1", 0, "1g.10gb", 0), mig("n2", 0, "1g.10gb", 0, A100_SXM)])
    assert set(config.types) == {"h100_1g.10gb", "a100_1g.10gb"}


def test_partition_and_vf_types() -> None:
    slices = [
        {"id": "m/gpu0", "host": "m", "kind": "partition", "profile": "CPX/NPS4",
         "model": "AMD Instinct MI300X", "vendor": "amd"},
        {"id": "l/gpu0/vf0", "host": "l", "kind": "vf", "profile": "vf/4",
         "model": "NVIDIA L40S", "vendor": "nvidia"},
    ]  # fmt: skip
    config = slurm_config(slices)
    assert config.node("m").counts() == {"mi300x_cpx.nps4": 1}
    assert config.node("l").counts() == {"l40s_vf.4": 1}


@pytest.mark.parametrize(
    "name",
    ["", "1g.10gb", "H100", "h100 x", "a:b", "a,b", "a=b", "x(S:0)", "gpu_no_consume", "a" * 64],
)
def test_illegal_types(name: str) -> None:
    assert not is_legal_type(name)


# -- formats --------------------------------------------------------------------------------


def test_formats_with_placeholder_files() -> None:
    slices = [mig("n1", 1, "1g.10gb", 0), gpu("n1", 0), mig("n1", 1, "1g.10gb", 1)]
    config = slurm_config(slices, placeholder_dir="/var/lib/gpupool/dev/", cpus=8)
    assert config.slurm_conf() == (
        "GresTypes=gpu\nNodeName=n1 CPUs=8 Gres=gpu:h100:1,gpu:h100_1g.10gb:2\n"
    )
    assert config.gres_conf() == (
        "AutoDetect=off\n"
        "NodeName=n1 Name=gpu Type=h100 Count=1 File=/var/lib/gpupool/dev/n1/gpu0\n"
        "NodeName=n1 Name=gpu Type=h100_1g.10gb Count=2 File=/var/lib/gpupool/dev/n1/gpu[1-2]\n"
    )
    assert config.device_files() == [f"/var/lib/gpupool/dev/n1/gpu{k}" for k in range(3)]
    assert config.warnings == ()
    assert config.text().startswith("# slurm.conf")
    assert "\n# gres.conf" in config.text()


def test_count_only_says_why_slurmd_will_refuse() -> None:
    config = slurm_config([gpu("n1", 0), gpu("n1", 1)], real_memory_mib=1024)
    assert config.node_lines() == "NodeName=n1 RealMemory=1024 Gres=gpu:h100:2\n"
    assert config.gres_conf() == "AutoDetect=off\nNodeName=n1 Name=gpu Type=h100 Count=2\n"
    assert config.device_files() == []
    assert "File=" in config.warnings[0]


def test_empty_pool() -> None:
    config = slurm_config([])
    assert config.node_lines() == ""
    assert config.gres_conf() == "AutoDetect=off\n"
    assert config.warnings == ()


@pytest.mark.parametrize(
    ("slices", "options", "message"),
    [
        ([gpu("bad host", 0)], {}, "cannot be a Slurm NodeName"),
        ([gpu("n[1-2]", 0)], {}, "cannot be a Slurm NodeName"),
        ([{**gpu("n1", 0), "kind": "tpu"}], {}, "unknown kind 'tpu'"),
        ([gpu("n1", 0)], {"placeholder_dir": "relative/dev"}, "absolute path"),
        ([gpu("n1", 0)], {"placeholder_dir": "/dev/gpu[0]"}, "absolute path"),
        ([gpu("n1", 0)], {"cpus": 0}, "CPUs must be at least 1"),
    ],
)
def test_bad_input_is_a_usage_error(
    slices: list[dict[str, Any]], options: dict[str, Any], message: str
) -> None:
    with pytest.raises(UsageError, match=re.escape(message)):
        slurm_config(slices, **options)


# -- the bundled sim pool -------------------------------------------------------------------


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpupoolctl.cli.main", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def sim_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A private HOME where `gpupoolctl pool` has recorded the bundled sim pool's slices."""
    folder = tmp_path_factory.mktemp("sim-pool")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(folder / "home"), "GPUPOOL_SIM_DIR": str(folder / "sim")})
    done = _cli(env, "-q", "pool")
    assert done.returncode == 0, done.stderr
    return env


@pytest.fixture(scope="module")
def sim_slices(sim_env: dict[str, str]) -> list[dict[str, Any]]:
    ledger = Ledger(Path(sim_env["HOME"]) / ".local" / "state" / "gpupoolctl" / "ledger.jsonl")
    return list(ledger.read().state.slices.values())


def test_cli_prints_the_library_export(
    sim_env: dict[str, str], sim_slices: list[dict[str, Any]]
) -> None:
    expected = slurm_config(sim_slices, placeholder_dir="/d")
    done = _cli(sim_env, "export", "slurm", "--only", "gres.conf", "--placeholder-dir", "/d")
    assert (done.returncode, done.stdout) == (0, expected.gres_conf()), done.stderr
    done = _cli(sim_env, "export", "slurm")
    assert (done.returncode, done.stdout) == (0, slurm_config(sim_slices).text())
    assert "File=" in done.stderr  # the count-only warning
    done = _cli(sim_env, "export", "slurm", "--only", "nodes")
    assert done.returncode == 2
    assert "give slurm.conf or gres.conf" in done.stderr


def test_sim_pool_counts_match_the_ledger(sim_slices: list[dict[str, Any]]) -> None:
    config = slurm_config(sim_slices)
    assert [n.name for n in config.nodes] == sorted({s["host"] for s in sim_slices})
    for node in config.nodes:
        mine = [s for s in sim_slices if s["host"] == node.name]
        assert sum(node.counts().values()) == len(mine)
        by_kind = Counter(SliceKind.of(s) for s in mine)
        assert {g.kind: g.count for g in node.groups} == dict(by_kind)
        assert sorted(i for g in node.groups for i in g.slice_ids) == sorted(s["id"] for s in mine)


def test_sim_pool_export(sim_slices: list[dict[str, Any]]) -> None:
    config = slurm_config(sim_slices)
    assert config.node("sg-dgx01").gres_spec() == "gpu:h100:8"
    assert config.node("dxb-mi300x-01").gres_spec() == "gpu:mi300x:8"
    assert config.node("dxb-l40s-01").gres_spec() == "gpu:l40s:4"
    # Whole cards first, then MIG types by name.
    assert config.node("sg-dgx02").gres_spec() == "gpu:h100:6,gpu:h100_1g.10gb:7,gpu:h100_3g.40gb:2"
    a100 = config.node("sg-a100-01").gres_spec()
    assert a100 == "gpu:a100:3,gpu:a100_2g.10gb:2,gpu:a100_3g.20gb:1"
    line = re.compile(r"NodeName=[a-z0-9-]+ Gres=(gpu:[a-z][a-z0-9._-]*:[1-9][0-9]*,?)+")
    assert all(line.fullmatch(text) for text in config.node_lines().splitlines())


def test_sim_pool_export_is_deterministic(sim_slices: list[dict[str, Any]]) -> None:
    expected = slurm_config(sim_slices, placeholder_dir="/d").text()
    shuffled = list(sim_slices)
    random.Random(7).shuffle(shuffled)
    assert slurm_config(shuffled, placeholder_dir="/d").text() == expected


# -- properties -----------------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=30)
_kinds = st.builds(
    SliceKind,
    model=st.one_of(_text, st.sampled_from([H100, A100_PCIE, A100_SXM, "AMD Instinct MI300X"])),
    vendor=st.sampled_from(["nvidia", "amd", ""]),
    kind=st.sampled_from(["gpu", "mig", "partition", "vf"]),
    profile=st.one_of(_text, st.sampled_from(["1g.10gb", "3g.40gb", "CPX/NPS4", "vf/4"])),
).map(lambda k: k if k.kind != "gpu" else SliceKind(k.model, k.vendor, "gpu", ""))


@settings(max_examples=300, deadline=None)
@given(st.lists(_kinds, max_size=25))
def test_every_type_is_legal_and_distinct(kinds: list[SliceKind]) -> None:
    names = type_names(kinds)
    assert set(names) == set(kinds)
    assert all(is_legal_type(name) for name in names.values()), names
    assert len(set(names.values())) == len(names)  # distinct slices never share a type
    assert len({slurm_type_id(n) for n in names.values()}) == len(names)  # nor Slurm's id
    assert type_names(reversed(kinds)) == names  # input order does not matter


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["n1", "n2", "n3"]), _kinds), max_size=30))
def test_counts_and_files_cover_every_slice(entries: list[tuple[str, SliceKind]]) -> None:
    slices = [
        {"id": f"{host}/s{k}", "host": host, "kind": kind.kind, "profile": kind.profile,
         "model": kind.model, "vendor": kind.vendor}
        for k, (host, kind) in enumerate(entries)
    ]  # fmt: skip
    config = slurm_config(slices, placeholder_dir="/dev/pool")
    assert sum(g.count for n in config.nodes for g in n.groups) == len(slices)
    files = config.device_files()
    assert len(files) == len(set(files)) == len(slices)
    for node in config.nodes:
        counts = dict(
            (item.split(":")[1], int(item.split(":")[2])) for item in node.gres_spec().split(",")
        )
        assert counts == node.counts()


def test_drained_cards_are_left_out_and_drained_hosts_get_down_nodes() -> None:
    slices = [gpu("n1", 0), gpu("n1", 1), gpu("n2", 0), mig("n3", 0, "1g.10gb", 0)]
    drains = {
        "n1/gpu1": {"reason": "health: XID 79", "source": "health"},
        "n2": {"reason": 'PSU "swap" # soon', "source": "admin"},
        "n3/gpu0": {"reason": "ECC", "source": "health"},
    }
    config = slurm_config(slices, drains=drains)
    assert config.node("n1").counts() == {"h100": 1}
    assert config.node("n2").counts() == {"h100": 1}  # a drained host keeps its GRES line
    assert config.node("n3").groups == ()
    conf = config.slurm_conf()
    assert "NodeName=n3\n" in conf  # nothing to offer: no empty Gres=
    assert "DownNodes=n2 State=DRAIN Reason=\"gpupoolctl: PSU 'swap' soon\"\n" in conf
    assert conf.count("DownNodes") == 1
    assert "n1 Name=gpu Type=h100 Count=1" in config.gres_conf()
    assert slurm_config(slices).node("n1").counts() == {"h100": 2}  # no drains: all of them
