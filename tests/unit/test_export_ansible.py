"""The Ansible export: ansible-inventory --list JSON plus gpupool_ vars that never override
the inventory's own."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from gpupoolctl.export.ansible import (
    FACT_PREFIX,
    ansible_export,
    ledger_slices,
    node_facts,
)
from gpupoolctl.inventory import load_inventory
from gpupoolctl.ledger.state import State

ROOT = Path(__file__).resolve().parents[2]
NOW = "2025-06-01T12:00:00.000Z"


# The vars the export adds (gpupoolctl.export.ansible); other gpupool_ vars are the
# inventory's own (gpupool_site_links, gpupool_rendezvous_addr) and come back as they are.
EXPORTED = {f"gpupool_{name}" for name in ("gpus", "vendor", "model", "islands", "mig", "slices")}


def gpu(index: int, model: str = "NVIDIA H100 80GB HBM3", mig: str = "disabled") -> dict:
    return {"index": index, "vendor": "nvidia", "model": model, "mig": {"mode": mig}}


def facts(gpus: list[dict[str, Any]], matrix: list[list[str]] | None = None) -> dict[str, Any]:
    return {"gpus": gpus, "topology": {"matrix": matrix or []}}


NV2 = [["X", "NV18"], ["NV18", "X"]]
PCIE2 = [["X", "PHB"], ["PHB", "X"]]


def without_gpupool(document: dict[str, Any]) -> dict[str, Any]:
    clean = copy.deepcopy(document)
    hostvars = clean["_meta"]["hostvars"]
    for host in list(hostvars):
        hostvars[host] = {k: v for k, v in hostvars[host].items() if k not in EXPORTED}
        if not hostvars[host]:
            del hostvars[host]
    return clean


def test_node_facts() -> None:
    found = node_facts(facts([gpu(0), gpu(1, mig="enabled")], NV2))
    assert found == {
        "gpupool_gpus": 2,
        "gpupool_vendor": "nvidia",
        "gpupool_model": "NVIDIA H100 80GB HBM3",
        "gpupool_mig": True,
        "gpupool_islands": 1,
    }
    mixed = node_facts(facts([gpu(0, "A"), gpu(1, "B"), gpu(2, "A")]))
    assert mixed["gpupool_model"] == "A, B"
    assert "gpupool_islands" not in mixed  # no link matrix: unknown, not guessed
    assert node_facts(facts([gpu(0), gpu(1)], PCIE2))["gpupool_islands"] == 2
    assert node_facts({"gpus": []}) == {"gpupool_gpus": 0}
    assert all(key.startswith(FACT_PREFIX) for key in found)


def test_ledger_slices_per_host_with_their_state() -> None:
    state = State()
    slices = [
        {"id": "h1/gpu1", "host": "h1", "kind": "gpu", "profile": None, "gpu": 1, "memory_mib": 8},
        {"id": "h1/gpu0", "host": "h1", "kind": "gpu", "profile": None, "gpu": 0, "memory_mib": 8},
        {"id": "h2/gpu0", "host": "h2", "kind": "gpu", "profile": None, "gpu": 0, "memory_mib": 8},
    ]
    state.apply(
        {
            "seq": 1,
            "ts": NOW,
            "actor": "t",
            "op": "slices",
            "data": {"hosts": ["h1", "h2"], "slices": slices},
        }
    )
    state.apply(
        {"seq": 2, "ts": NOW, "actor": "t", "op": "alloc",
         "data": {"id": "a-2", "owner": "al", "slices": ["h1/gpu1"], "expires": None}}
    )  # fmt: skip
    by_host = ledger_slices(state, NOW)
    assert [s["id"] for s in by_host["h1"]] == ["h1/gpu0", "h1/gpu1"]  # GPU order
    assert [s["state"] for s in by_host["h1"]] == ["free", "held"]
    assert set(by_host["h1"][0]) == {"id", "kind", "profile", "gpu", "memory_mib", "state"}
    assert by_host["h2"][0]["state"] == "free"


def test_groups_hosts_and_user_vars_are_the_inventorys() -> None:
    inventory = load_inventory(ROOT / "inventories" / "sim.yaml")
    export = ansible_export(
        inventory,
        facts_by_host={"sg-dgx01": facts([gpu(0)]), "not-in-inventory": facts([gpu(0)])},
        slices_by_host={"dxb-l40s-01": [{"id": "dxb-l40s-01/gpu0"}]},
    )
    assert without_gpupool(export.document) == inventory.to_ansible_list()
    hostvars = export.document["_meta"]["hostvars"]
    assert hostvars["sg-dgx01"]["gpupool_gpus"] == 1
    assert hostvars["sg-dgx01"]["site"] == "singapore"  # the user's vars are all there
    assert hostvars["dxb-l40s-01"]["gpupool_slices"] == [{"id": "dxb-l40s-01/gpu0"}]
    assert "gpupool_gpus" not in hostvars["dxb-l40s-01"]  # not read: not claimed
    assert "not-in-inventory" not in hostvars
    assert export.warnings == []


def test_the_inventorys_own_gpupool_vars_win(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"h1": {"gpupool_gpus": 99}, "h2": None}}}))
    inventory = load_inventory(path)
    export = ansible_export(inventory, facts_by_host={"h1": facts([gpu(0)]), "h2": facts([])})
    hostvars = export.document["_meta"]["hostvars"]
    assert hostvars["h1"]["gpupool_gpus"] == 99
    assert hostvars["h1"]["gpupool_model"] == "NVIDIA H100 80GB HBM3"  # the others are added
    assert hostvars["h2"] == {"gpupool_gpus": 0}  # a host without vars gets an entry
    assert export.warnings == [
        "h1: the inventory sets gpupool_gpus; kept its value, not gpupoolctl's"
    ]


def test_host_vars_for_the_script_protocol(tmp_path: Path) -> None:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump({"all": {"hosts": {"h1": {"x": 1}, "h2": None}}}))
    export = ansible_export(load_inventory(path))
    assert export.host_vars("h1") == {"x": 1}
    assert export.host_vars("h2") == {}  # known, without vars
    assert export.host_vars("h3") is None
