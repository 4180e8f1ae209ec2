"""End to end through the real CLI on the bundled simulated pool (local transport)."""

from __future__ import annotations

import csv
import io
import itertools
import json
import re
from pathlib import Path

import yaml

from gpupoolctl import __version__

BUNDLED = Path(__file__).resolve().parents[2] / "gpupoolctl" / "data" / "sim.yaml"
EXPECTED_GPUS = {  # from the bundled pool's description: host -> (vendor, count, model word)
    "sg-dgx01": ("nvidia", 8, "H100"),
    "sg-dgx02": ("nvidia", 8, "H100"),
    "sg-a100-01": ("nvidia", 4, "A100"),
    "dxb-a100-01": ("nvidia", 4, "A100"),
    "dxb-mi300x-01": ("amd", 8, "MI300X"),
    "dxb-l40s-01": ("nvidia", 4, "L40S"),
}


def test_version(cli):
    run = cli("--version")
    assert run.code == 0
    assert run.stdout.strip() == f"gpupoolctl {__version__}"


def test_bundled_inventory_copy_is_identical():
    # inventories/sim.yaml is the browsable copy of the package data; they must not drift.
    copy = Path(__file__).resolve().parents[2] / "inventories" / "sim.yaml"
    assert copy.read_text() == BUNDLED.read_text()


def test_inventory_json_on_bundled_pool(cli):
    run = cli("inventory", "-o", "json")
    assert run.code == 0, run.stderr
    assert "bundled simulated pool" in run.stderr
    doc = run.json()
    assert doc["summary"] == {"ok": 6, "failed": 0, "unreachable": 0, "timed-out": 0}
    by_name = {h["name"]: h for h in doc["hosts"]}
    assert set(by_name) == set(EXPECTED_GPUS)
    for name, (vendor, count, word) in EXPECTED_GPUS.items():
        gpus = by_name[name]["facts"]["gpus"]
        assert len(gpus) == count, name
        assert {g["vendor"] for g in gpus} == {vendor}
        assert all(word in g["model"] for g in gpus), [g["model"] for g in gpus]
        assert len({g["uuid"] for g in gpus}) == count
        assert by_name[name]["facts"]["sim"] is True
    # UUIDs are unique across the pool, not only within a node.
    all_uuids = [g["uuid"] for h in doc["hosts"] for g in h["facts"]["gpus"]]
    assert len(all_uuids) == len(set(all_uuids))


def test_inventory_shows_partition_state_and_classes(cli):
    doc = cli("inventory", "-o", "json").json()
    facts = {h["name"]: h["facts"] for h in doc["hosts"]}
    l40s = facts["dxb-l40s-01"]["gpus"]
    assert all(g["mig"] is None or g["mig"]["capable"] is False for g in l40s)
    assert {g["bandwidth_class"] for g in l40s} == {"standard"}
    h100 = facts["sg-dgx01"]["gpus"]
    assert {g["bandwidth_class"] for g in h100} == {"ultra"}
    assert all(g["mig"]["capable"] and g["mig"]["mode"] == "disabled" for g in h100)
    mig_gpus = [g for g in facts["sg-dgx02"]["gpus"] if g["mig"]["mode"] == "enabled"]
    assert mig_gpus, "the dgx-h100-mig template has MIG-enabled GPUs"
    for gpu in mig_gpus:
        spans = sorted(
            (i["placement_start"], i["placement_start"] + i["placement_size"])
            for i in gpu["mig"]["instances"]
        )
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in itertools.pairwise(spans))
    mi300 = facts["dxb-mi300x-01"]["gpus"]
    assert all(g["partition"]["compute"] == "SPX" for g in mi300)
    assert all(g["gfx_target"] == "gfx942" for g in mi300)


def test_topology_matrix(cli):
    doc = cli("inventory", "-o", "json").json()
    facts = {h["name"]: h["facts"] for h in doc["hosts"]}
    dgx = facts["sg-dgx01"]["topology"]["matrix"]
    assert len(dgx) == 8
    for i, row in enumerate(dgx):
        for j, level in enumerate(row):
            expected_direct = i != j
            assert level.startswith("NV") if expected_direct else level == "X", (i, j, level)
    amd = facts["dxb-mi300x-01"]["topology"]["matrix"]
    assert all(
        level == "XGMI" for i, row in enumerate(amd) for j, level in enumerate(row) if i != j
    )
    l40s = facts["dxb-l40s-01"]["topology"]["matrix"]
    assert not any(level.startswith("NV") for row in l40s for level in row)

    table = cli("inventory", "--topology", "-l", "sg-dgx01")
    assert table.code == 0, table.stderr
    assert "sg-dgx01 links" in table.stdout
    assert re.search(r"\bNV\d+\b", table.stdout)


def test_table_output_is_plain_when_piped(cli):
    run = cli("inventory")
    assert run.code == 0, run.stderr
    assert "\x1b[" not in run.stdout
    lines = run.stdout.strip().splitlines()
    assert lines[0].split()[:3] == ["HOST", "GPU", "VENDOR"]
    assert len(lines) == 1 + sum(count for _, count, _ in EXPECTED_GPUS.values())


def test_csv_and_yaml_agree_with_json(cli):
    doc = cli("inventory", "-o", "json").json()
    rows = list(csv.DictReader(io.StringIO(cli("inventory", "-o", "csv").stdout)))
    assert len(rows) == sum(len(h["facts"]["gpus"]) for h in doc["hosts"])
    first = doc["hosts"][0]["facts"]["gpus"][0]
    match = next(r for r in rows if r["uuid"] == first["uuid"])
    assert int(match["memory_total_mib"]) == first["memory_total_mib"]
    assert yaml.safe_load(cli("inventory", "-o", "yaml").stdout)["summary"] == doc["summary"]


def test_limit_patterns_and_node_sets(cli):
    def names(*args: str) -> list[str]:
        run = cli(*args, "inventory", "hosts", "-o", "json")
        assert run.code == 0, run.stderr
        return [h["name"] for h in run.json()["hosts"]]

    assert set(names("-l", "nvidia:!h100")) == {"sg-a100-01", "dxb-a100-01", "dxb-l40s-01"}
    assert set(names("-l", "singapore:&a100")) == {"sg-a100-01"}
    assert set(names("-l", "sg-dgx[01-02]")) == {"sg-dgx01", "sg-dgx02"}
    assert set(names("-l", "~.*mi300x.*")) == {"dxb-mi300x-01"}


def test_inventory_hosts_does_not_connect(cli, tmp_path):
    inventory = tmp_path / "far.ini"
    inventory.write_text("[gpus]\nfar-[01:03] ansible_host=192.0.2.1 ansible_password=hunter2\n")
    run = cli("-i", str(inventory), "inventory", "hosts", "-o", "json")
    assert run.code == 0, run.stderr
    hosts = run.json()["hosts"]
    assert [h["name"] for h in hosts] == ["far-01", "far-02", "far-03"]
    assert all(h["address"] == "192.0.2.1" for h in hosts)
    assert "hunter2" not in run.stdout


def test_no_match_is_exit_1_as_an_unknown_host(cli):
    run = cli("-l", "nosuchhost", "inventory", "hosts")
    assert run.code == 1  # DESIGN.md: no host selected by -i/-l is 1
    assert "no hosts matched" in run.stderr
    assert "Traceback" not in run.stderr


def test_bad_inventory_names_file_and_line(cli, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("all:\n  hosts:\n    a:\n  children: [oops\n")
    run = cli("-i", str(bad), "inventory", "hosts")
    assert run.code == 1
    assert re.search(rf"{re.escape(str(bad))}:\d+", run.stderr), run.stderr
    assert "Traceback" not in run.stderr
    missing = cli("-i", str(tmp_path / "absent.yaml"), "inventory")
    assert missing.code == 1  # a file that is not there, like --ledger FILE
    assert "does not exist" in missing.stderr


def test_one_broken_host_gives_exit_3_and_others_answer(cli, tmp_path):
    inventory = tmp_path / "mixed.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"transport": "local"},
                    "hosts": {
                        "good": {"sim": "l40s-4"},
                        "nopython": {"sim": "l40s-4", "python": str(tmp_path / "no-python3")},
                    },
                }
            }
        )
    )
    run = cli("-i", str(inventory), "inventory", "-o", "json")
    assert run.code == 3, run.stderr
    hosts = {h["name"]: h for h in run.json()["hosts"]}
    assert hosts["good"]["outcome"] == "ok"
    assert len(hosts["good"]["facts"]["gpus"]) == 4
    assert hosts["nopython"]["outcome"] == "failed"
    assert "python" in hosts["nopython"]["error"]


def test_sim_reset_restores_initial_state(cli):
    before = cli("-l", "sg-dgx02", "inventory", "-o", "json").json()
    state_file = cli.sim_dir / "sg-dgx02.json"
    assert state_file.exists()
    original = state_file.read_text()
    state_file.write_text(original.replace('"NVIDIA H100', '"NVIDIA X100'))
    changed = cli("-l", "sg-dgx02", "inventory", "-o", "json").json()
    assert changed != before
    reset = cli("-l", "sg-dgx02", "sim", "reset", "-o", "json")
    assert reset.code == 0, reset.stderr
    assert reset.json()["hosts"][0]["outcome"] == "ok"
    after = cli("-l", "sg-dgx02", "inventory", "-o", "json").json()
    strip = lambda d: [h["facts"]["gpus"] for h in d["hosts"]]  # noqa: E731
    assert strip(after) == strip(before)
    assert json.loads(state_file.read_text()) == json.loads(original)


def test_a_host_with_bad_vars_fails_alone(cli, tmp_path):
    inventory = tmp_path / "badvars.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {"transport": "local"},
                    "hosts": {"good": {"sim": "l40s-4"}, "bad": {"sim": "l40s-4", "port": "ssh"}},
                }
            }
        )
    )
    run = cli("-i", str(inventory), "inventory", "-o", "json")
    assert run.code == 3, run.stderr
    hosts = {h["name"]: h for h in run.json()["hosts"]}
    assert hosts["good"]["outcome"] == "ok"
    assert hosts["bad"]["outcome"] == "failed"
    assert "port must be a number" in hosts["bad"]["error"]


def test_secrets_nested_in_group_vars_are_hidden_too(cli, tmp_path):
    inventory = tmp_path / "far.yaml"
    inventory.write_text(
        "all:\n"
        "  vars:\n"
        "    vault: {db_password: hunter2, user: ops}\n"
        "    clients: [{api_key: s3cr3t}]\n"
        "  hosts:\n"
        "    far-01: {ansible_host: 192.0.2.1}\n"
    )
    run = cli("-i", str(inventory), "inventory", "hosts", "-o", "json")
    assert run.code == 0, run.stderr
    (host,) = run.json()["hosts"]
    assert host["vars"]["vault"] == {"db_password": "***", "user": "ops"}
    assert host["vars"]["clients"] == [{"api_key": "***"}]
    assert "hunter2" not in run.stdout and "s3cr3t" not in run.stdout
