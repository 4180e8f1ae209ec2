"""`export k8s -f LAYOUTS`: a layouts file's labels as mig-parted configs under their own
names, on the bundled sim pool's real facts, beside the current-state configs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.errors import SourceError
from gpupoolctl.export.k8s import ALL_DISABLED, check_config_label, k8s_export
from gpupoolctl.export.migparted import MIG_PARTED_FIELDS, layouts_for_mig_parted
from gpupoolctl.inventory import load_inventory
from gpupoolctl.partition import assert_host, load_spec, parse_spec, plan_host
from gpupoolctl.partition.coverage import HostRead
from gpupoolctl.remote import run_agent
from gpupoolctl.remote.target import target_from_vars

ROOT = Path(__file__).resolve().parents[2]
LAYOUTS = ROOT / "playbooks" / "layouts.yaml"
MIG_HOSTS = ["sg-dgx01", "sg-dgx02", "sg-a100-01", "dxb-a100-01"]


@pytest.fixture(scope="module")
def read(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[HostRead]]:
    """Every host of inventories/sim.yaml, read on a fresh sim state."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("GPUPOOL_SIM_DIR", str(tmp_path_factory.mktemp("sim")))
        inventory = load_inventory(ROOT / "inventories" / "sim.yaml")
        hosts = list(inventory.hosts.values())
        results = run_agent(
            [target_from_vars(h.name, h.vars) for h in hosts], {"verb": "facts", "args": {}}
        )
        assert all(r.ok for r in results), [r.error for r in results]
        yield [HostRead(h.name, h.groups, r.data) for h, r in zip(hosts, results, strict=True)]


def known(read: list[HostRead]) -> list[tuple[str, list[str]]]:
    return [(h.name, list(h.groups)) for h in read]


def facts(read: list[HostRead]) -> dict[str, Any]:
    return {h.name: h.facts for h in read}


def written(read: list[HostRead], path: Path = LAYOUTS) -> Any:
    return layouts_for_mig_parted(load_spec(path), read, known(read), "sim.yaml")


def test_every_label_is_written_under_its_own_name_in_mig_parteds_fields(read) -> None:
    layouts = written(read)
    assert layouts.errors == []
    assert list(layouts.configs) == ["training", "inference", "mixed"]
    for entries in layouts.configs.values():
        for entry in entries:
            assert set(entry) <= set(MIG_PARTED_FIELDS), entry
            assert "devices" in entry and "mig-enabled" in entry
    # mixed's `hosts: [a100], devices: all` became the A100 cards' device id.
    a100 = [e for e in layouts.configs["mixed"] if e.get("mig-devices", {}).get("4g.20gb")]
    assert a100 == [
        {
            "device-filter": "0x20F110DE",
            "devices": "all",
            "mig-enabled": True,
            "mig-devices": {"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1},
        }
    ]
    said = "\n".join(layouts.warnings)
    assert "mixed: placements 3g.40gb@4 are written as counts" in said
    assert "inference: AMD partitions and SR-IOV VFs (" in said


def test_the_written_configs_ask_each_node_for_what_the_file_asks(read) -> None:
    """What mig-manager would apply on a node is the MIG layout `partition apply` makes."""
    layouts = written(read)
    spec = load_spec(LAYOUTS)
    export = k8s_export(facts(read), pool="sim", layouts=layouts.configs)
    config = parse_spec(export.config_text(), source="config.yaml")
    for host in (h for h in read if h.name in MIG_HOSTS):
        for label in spec.labels:
            ours = plan_host(spec, label, host.name, host.groups, host.facts)
            theirs = plan_host(config, label, host.name, [], host.facts)
            assert theirs.errors == []
            assert [(g.index, g.desired) for g in theirs.gpus] == [
                (g.index, g.desired) for g in ours.gpus
            ], (label, host.name)


def test_nodes_get_the_label_that_holds_else_their_current_config(read) -> None:
    current = k8s_export(facts(read), pool="sim")
    layouts = written(read)
    export = k8s_export(facts(read), pool="sim", layouts=layouts.configs)
    assert export.layouts == ["training", "inference", "mixed"]
    assert {ALL_DISABLED, *layouts.configs} <= set(export.configs)
    by_host = {n.host: n.mig_config for n in export.nodes}
    assert by_host["sg-dgx01"] == "training"  # MIG off everywhere: training holds
    before = {n.host: n.mig_config for n in current.nodes}
    for host in ("sg-dgx02", "sg-a100-01", "dxb-a100-01"):  # no label holds: as before
        assert by_host[host] == before[host] and by_host[host] in export.configs
    assert by_host["dxb-mi300x-01"] is None and by_host["dxb-l40s-01"] is None
    config = parse_spec(export.config_text(), source="config.yaml")
    for host in read:
        if by_host[host.name] is not None:
            assert assert_host(config, by_host[host.name], host.name, [], host.facts) == []


def test_without_a_file_the_export_is_the_current_state_alone(read) -> None:
    export = k8s_export(facts(read), pool="sim")
    assert export.layouts == [] and len(export.configs) == 3
    assert all(name == ALL_DISABLED or name.startswith("gpupoolctl-") for name in export.configs)


def test_a_host_selection_other_nodes_cards_would_match_is_refused(read, tmp_path) -> None:
    path = tmp_path / "one.yaml"
    path.write_text(
        "version: v1\nmig-configs:\n  sg-a100:\n"
        "    - hosts: [sg-a100-01]\n      devices: all\n"
        "      mig-enabled: true\n      mig-devices: {1g.5gb: 7}\n"
    )
    layouts = written(read, path)
    assert layouts.errors == [
        f"{path}:4: sg-a100: this entry's hosts: cannot be written for mig-parted, which has "
        "no host selection: dxb-a100-01 (not in hosts: sg-a100-01) have GPUs that its "
        "devices: and device id(s) 0x20F110DE select too, and mig-manager would change them "
        "as well"
    ]
    # For both A100 nodes it means the same everywhere read, so it can be written.
    path.write_text(path.read_text().replace("[sg-a100-01]", "[a100]"))
    assert written(read, path).errors == []


def test_a_label_that_does_not_plan_or_reaches_nothing_is_refused(read, tmp_path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "version: v1\nmig-configs:\n  small:\n"
        "    - hosts: [l40s]\n      devices: all\n"
        "      mig-enabled: true\n      mig-devices: {1g.10gb: 7}\n"
        "  big:\n    - devices: all\n      mig-enabled: true\n"
        "      mig-devices: {7g.80gb: 1}\n"
    )
    errors = written(read, path).errors
    assert any("small: this entry asks mig-enabled: true" in e for e in errors)
    assert any(e.startswith(f"{path}:11: sg-a100-01 GPU 0") for e in errors)  # no 7g.80gb


def test_amd_only_labels_are_left_out_and_said(read, tmp_path) -> None:
    path = tmp_path / "amd.yaml"
    path.write_text(
        "version: v1\nmig-configs:\n  cpx:\n"
        "    - hosts: [mi300x]\n      devices: all\n"
        "      compute-partition: CPX\n      memory-partition: NPS4\n"
    )
    layouts = written(read, path)
    assert layouts.errors == [] and layouts.configs == {}
    assert "cpx: no MIG entry for the hosts read: not written" in layouts.warnings


@pytest.mark.parametrize("label", ["day shift", "-x", "x" * 64, ""])
def test_labels_that_cannot_be_label_values_are_refused(label: str) -> None:
    with pytest.raises(SourceError, match="cannot name a config for mig-manager"):
        check_config_label(label, "layouts.yaml")
    check_config_label("inference", "layouts.yaml")
