"""sim_nics: a simulated node's NICs written in the inventory instead of its template's.

The parser's answers and one-line refusals, a hypothesis property (whatever the value, a
NIC list or NicSpecError), the inventory and the target it reaches, and the node side: the
state file's network, the facts, and the train workload's bandwidth follow it, and taking
the var out gives the template's NICs back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from gpupoolctl.agent import main as agent_main
from gpupoolctl.agent.workloads import train
from gpupoolctl.errors import InventoryError
from gpupoolctl.hw.nics import KINDS, MAX_GBPS, MAX_NICS, NicSpecError, parse_nics
from gpupoolctl.inventory import load_inventory
from gpupoolctl.remote.fanout import host_request
from gpupoolctl.remote.target import target_from_vars
from gpupoolctl.sim import templates
from gpupoolctl.sim.state import SimState

IB = {"name": "ib0", "kind": "infiniband", "speed_gbps": 400}


def test_a_list_becomes_the_facts_shape():
    nics = parse_nics(
        [
            IB,
            {
                "name": "eth0",
                "kind": "Ethernet",
                "speed_gbps": 25.0,
                "state": "down",
                "numa_node": 1,
            },
        ]
    )
    assert nics == [
        {
            "name": "ib0",
            "kind": "infiniband",
            "speed_gbps": 400.0,
            "state": "up",
            "numa_node": None,
        },
        {"name": "eth0", "kind": "ethernet", "speed_gbps": 25.0, "state": "down", "numa_node": 1},
    ]
    assert parse_nics([]) == []


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"name": "ib0"}, "sim_nics must be a list of {name, kind, speed_gbps}, got dict"),
        ([IB] * (MAX_NICS + 1), f"more than {MAX_NICS}"),
        (["ib0"], "sim_nics[0] must be a mapping"),
        ([{**IB, "gbps": 1}], "sim_nics[0]: unknown key(s) 'gbps'"),
        ([{"name": "ib0", "kind": "roce"}], "sim_nics[0]: missing speed_gbps"),
        ([{**IB, "name": ""}], "sim_nics[0]: name must be a port name"),
        ([{**IB, "name": "ib 0"}], "must not contain spaces"),
        ([IB, IB], "sim_nics[1]: 'ib0' is already given in sim_nics[0]"),
        ([{**IB, "kind": "omnipath"}], "kind must be one of ethernet, infiniband, roce"),
        ([{**IB, "speed_gbps": "400G"}], "speed_gbps must be a number of Gb/s, got '400G'"),
        ([{**IB, "speed_gbps": True}], "speed_gbps must be a number"),
        ([{**IB, "speed_gbps": 0}], "more than 0"),
        ([{**IB, "speed_gbps": math.inf}], "more than 0"),
        ([{**IB, "speed_gbps": MAX_GBPS * 2}], "at most"),
        ([{**IB, "state": "dormant"}], "state must be one of up, down"),
        ([{**IB, "numa_node": -1}], "numa_node must be a whole number >= 0"),
        ([{**IB, "numa_node": 1.5}], "numa_node must be a whole number >= 0"),
    ],
)
def test_bad_values_are_one_line_saying_what(value, says):
    with pytest.raises(NicSpecError) as caught:
        parse_nics(value)
    assert says in str(caught.value)
    assert "\n" not in str(caught.value)


_entry = st.fixed_dictionaries(
    {
        "name": st.text(st.characters(whitelist_categories=("Ll", "Nd")), min_size=1, max_size=8),
        "kind": st.sampled_from(KINDS),
        "speed_gbps": st.floats(min_value=0.001, max_value=MAX_GBPS),
    },
    optional={"state": st.sampled_from(["up", "down"]), "numa_node": st.integers(0, 7)},
)
_junk = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(st.lists(_entry, max_size=6, unique_by=lambda e: e["name"]))
def test_valid_lists_keep_every_nic_as_written(entries):
    nics = parse_nics(entries)
    assert [n["name"] for n in nics] == [e["name"] for e in entries]
    for nic, entry in zip(nics, entries, strict=True):
        assert nic["speed_gbps"] == float(entry["speed_gbps"])
        assert nic["state"] == entry.get("state", "up")
        assert nic["numa_node"] == entry.get("numa_node")


@given(_junk)
@example([{"\n": None}])  # what hypothesis found: a key with a newline split the error
def test_any_value_is_a_nic_list_or_one_clear_error(value):
    try:
        nics = parse_nics(value)
    except NicSpecError as exc:
        assert str(exc).startswith("sim_nics") and len(str(exc).splitlines()) == 1
    else:
        assert all(n["kind"] in KINDS and n["speed_gbps"] > 0 for n in nics)


# -- the inventory and the target ---------------------------------------------------------


def _inventory(tmp_path: Path, nics_yaml: str) -> Path:
    path = tmp_path / "fleet.yaml"
    path.write_text(
        "all:\n"
        "  vars:\n"
        "    transport: local\n"
        "  children:\n"
        "    a100:\n"
        "      vars:\n"
        f"        sim_nics: {nics_yaml}\n"
        "      hosts:\n"
        "        n1: {sim: a100-pcie-4}\n"
        "        n2: {sim: a100-pcie-4, sim_nics: []}\n"
    )
    return path


def test_the_inventory_var_reaches_the_agent_request(tmp_path):
    inventory = load_inventory(
        _inventory(tmp_path, "[{name: ib0, kind: infiniband, speed_gbps: 400}]")
    )
    n1 = target_from_vars("n1", inventory.hosts["n1"].vars)
    n2 = target_from_vars("n2", inventory.hosts["n2"].vars)
    assert n1.sim is not None and [n["speed_gbps"] for n in n1.sim.nics] == [400.0]
    assert n2.sim is not None and n2.sim.nics == ()  # the host's own value wins: no NICs
    request = host_request(n1, {"verb": "facts"})
    assert request["sim"]["nics"][0]["name"] == "ib0"
    plain = target_from_vars("n3", {"transport": "local", "sim": "l40s-4"})
    assert "nics" not in host_request(plain, {"verb": "facts"})["sim"]


def test_a_real_host_ignores_it(tmp_path):
    target = target_from_vars("gpu1", {"sim_nics": [IB]})
    assert target.sim is None


def test_a_bad_var_names_the_file_and_the_group_line(tmp_path):
    path = _inventory(tmp_path, "[{name: ib0, kind: infiniband, speed_gbps: fast}]")
    with pytest.raises(InventoryError) as caught:
        load_inventory(path)
    text = str(caught.value)
    assert text.startswith(f"{path}:5: host 'n1': sim_nics[0]: speed_gbps must be a number")


def test_a_bad_var_from_elsewhere_fails_that_host(tmp_path):
    target = target_from_vars("n1", {"sim": "l40s-4", "sim_nics": "fast"})
    assert target.invalid is not None
    assert target.invalid.startswith("host 'n1': sim_nics must be a list")


# -- the node side --------------------------------------------------------------------------


def _facts(tmp_path: Path, nics: list | None) -> dict:
    sim = {"template": "a100-pcie-4", "state_dir": str(tmp_path)}
    if nics is not None:
        sim["nics"] = nics
    answer = agent_main.handle({"v": 1, "verb": "facts", "host": "n1", "sim": sim})
    assert answer["ok"], answer
    return answer["data"]


def test_the_node_takes_the_nics_and_gives_the_templates_back(tmp_path):
    template = templates.build("a100-pcie-4", "n1")["network"]["nics"]
    assert [n["name"] for n in _facts(tmp_path, None)["network"]["nics"]] == [
        n["name"] for n in template
    ]
    faster = [{**IB, "name": f"ib{i}"} for i in range(4)]
    assert [n["speed_gbps"] for n in _facts(tmp_path, faster)["network"]["nics"]] == [400.0] * 4
    state = json.loads(SimState.path_for("n1", tmp_path).read_text())
    # The train workload reads the same state file: its NIC bandwidth follows.
    assert train.nic_bandwidth(state) == (4 * 400 / 8, None)
    assert _facts(tmp_path, None)["network"]["nics"] == template
    state = json.loads(SimState.path_for("n1", tmp_path).read_text())
    assert train.nic_bandwidth(state) == (2 * 100 / 8, None)


def test_the_node_keeps_its_other_state(tmp_path):
    _facts(tmp_path, None)
    path = SimState.path_for("n1", tmp_path)
    state = json.loads(path.read_text())
    state["marker"] = "kept"
    path.write_text(json.dumps(state))
    _facts(tmp_path, [IB])
    assert json.loads(path.read_text())["marker"] == "kept"


def test_the_node_refuses_a_bad_list_in_one_line(tmp_path):
    sim = {"template": "a100-pcie-4", "state_dir": str(tmp_path), "nics": [{"name": "x"}]}
    answer = agent_main.handle({"v": 1, "verb": "facts", "host": "n1", "sim": sim})
    assert not answer["ok"]
    assert answer["error"]["type"] == "BadRequest"
    assert "sim_nics[0]: missing kind, speed_gbps" in answer["error"]["message"]
