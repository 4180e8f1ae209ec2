"""The agent's NICs from sysfs (agent/network.py), on sysfs trees built in a tmp folder; and a
simulated node's NICs through the real agent path (agent.main.handle -> facts)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpupoolctl.agent import main as agent_main
from gpupoolctl.agent import network
from gpupoolctl.sim import deactivate
from gpupoolctl.sim.templates import build


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def netdev(
    root: Path,
    name: str,
    *,
    speed: str | None = None,
    operstate: str = "up",
    numa: str | None = "0",
    physical: bool = True,
    rdma: str | None = None,
) -> None:
    base = root / "sys" / "class" / "net" / name
    base.mkdir(parents=True)
    if speed is not None:
        write(base / "speed", speed)
    write(base / "operstate", operstate)
    if physical:
        device = root / "sys" / "devices" / "pci" / name
        device.mkdir(parents=True)
        if numa is not None:
            write(device / "numa_node", numa)
        if rdma:
            (device / "infiniband" / rdma).mkdir(parents=True)
        os.symlink(device, base / "device")


def rdma_device(
    root: Path,
    name: str,
    ports: dict[str, tuple[str, str, str]],  # port -> (rate, state, link_layer)
    *,
    numa: str = "1",
    netdevs: tuple[str, ...] = (),
) -> None:
    base = root / "sys" / "class" / "infiniband" / name
    device = root / "sys" / "devices" / "pci" / f"rdma-{name}"
    device.mkdir(parents=True)
    write(device / "numa_node", numa)
    for dev in netdevs:
        (device / "net" / dev).mkdir(parents=True)
    base.mkdir(parents=True)
    os.symlink(device, base / "device")
    for port, (rate, state, layer) in ports.items():
        where = base / "ports" / port
        write(where / "rate", rate)
        write(where / "state", state)
        write(where / "link_layer", layer)


def by_name(root: Path) -> dict[str, dict]:
    found, warnings = network.read_network(str(root))
    assert warnings == []
    return {nic["name"]: nic for nic in found["nics"]}


def test_ethernet_speed_state_numa_and_virtual_interfaces_left_out(tmp_path):
    netdev(tmp_path, "eno1", speed="10000")
    netdev(tmp_path, "ens2f0", speed="100000", numa="1")
    netdev(tmp_path, "ens2f1", speed="-1", operstate="down")  # link down: -1
    netdev(tmp_path, "ens3", speed=None, operstate="down")  # down: reading speed fails
    netdev(tmp_path, "enp9", speed="25000", numa="-1", operstate="unknown")
    netdev(tmp_path, "lo", speed=None, operstate="unknown", physical=False)
    netdev(tmp_path, "docker0", speed="10000", physical=False)
    netdev(tmp_path, "veth12ab", speed="10000")  # virtual by name, whatever it links to
    netdev(tmp_path, "br-4f2a", speed="10000")
    netdev(tmp_path, "virbr0", speed="10000")
    netdev(tmp_path, "bond0", speed="20000", physical=False)  # no device: virtual
    nics = by_name(tmp_path)
    assert sorted(nics) == ["eno1", "enp9", "ens2f0", "ens2f1", "ens3"]
    assert nics["eno1"] == {
        "name": "eno1",
        "kind": "ethernet",
        "speed_gbps": 10.0,
        "state": "up",
        "numa_node": 0,
    }
    assert nics["ens2f0"]["speed_gbps"] == 100.0 and nics["ens2f0"]["numa_node"] == 1
    assert nics["ens2f1"]["speed_gbps"] is None and nics["ens2f1"]["state"] == "down"
    assert nics["ens3"]["speed_gbps"] is None and nics["ens3"]["state"] == "down"
    assert nics["enp9"]["numa_node"] is None and nics["enp9"]["state"] is None


def test_infiniband_and_roce_ports_and_their_netdevs_listed_once(tmp_path):
    rdma_device(tmp_path, "mlx5_0", {"1": ("400 Gb/sec (4X NDR)", "4: ACTIVE", "InfiniBand")})
    rdma_device(
        tmp_path,
        "mlx5_1",
        {"1": ("200 Gb/sec (2X HDR)", "1: DOWN", "InfiniBand")},  # down: no speed
        netdevs=("ib1",),
    )
    rdma_device(
        tmp_path,
        "mlx5_2",
        {"1": ("100 Gb/sec (4X EDR)", "4: ACTIVE", "Ethernet")},
        numa="0",
        netdevs=("ens5f0",),
    )
    rdma_device(
        tmp_path,
        "mlx4_0",
        {
            "1": ("56 Gb/sec (4X FDR)", "4: ACTIVE", "InfiniBand"),
            "2": ("10 Gb/sec (4X SDR)", "2: INIT", "InfiniBand"),  # no subnet manager yet
        },
    )
    # The RoCE port's Ethernet side and the IPoIB netdev are those ports again.
    netdev(tmp_path, "ens5f0", speed="100000", rdma="mlx5_2")
    netdev(tmp_path, "ib1", speed=None, rdma="mlx5_1")
    netdev(tmp_path, "eno1", speed="1000")
    nics = by_name(tmp_path)
    assert sorted(nics) == ["eno1", "mlx4_0/1", "mlx4_0/2", "mlx5_0", "mlx5_1", "mlx5_2"]
    assert nics["mlx5_0"] == {
        "name": "mlx5_0",
        "kind": "infiniband",
        "speed_gbps": 400.0,
        "state": "up",
        "numa_node": 1,
    }
    assert nics["mlx5_1"]["state"] == "down" and nics["mlx5_1"]["speed_gbps"] is None
    assert nics["mlx5_2"]["kind"] == "roce" and nics["mlx5_2"]["speed_gbps"] == 100.0
    assert nics["mlx5_2"]["numa_node"] == 0
    assert nics["mlx4_0/1"]["speed_gbps"] == 56.0
    assert nics["mlx4_0/2"]["state"] == "down" and nics["mlx4_0/2"]["speed_gbps"] is None
    assert nics["eno1"]["speed_gbps"] == 1.0


def test_no_sysfs_at_all_is_no_nics(tmp_path):
    assert network.read_network(str(tmp_path)) == ({"nics": []}, [])


@pytest.mark.parametrize(
    ("text", "gbps"),
    [
        ("400 Gb/sec (4X NDR)", 400.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("100 Gb/sec (2X HDR)", 100.0),
        ("", None),
        (None, None),
        ("fast", None),
    ],
)
def test_rate_text(text, gbps):
    assert network.parse_rate(text) == gbps


@pytest.mark.parametrize(
    ("text", "gbps"),
    [("25000", 25.0), ("-1", None), ("0", None), (None, None), ("4294967295x", None)],
)
def test_speed_text(text, gbps):
    assert network.parse_speed(text) == gbps


def test_bounded_number_of_interfaces_is_said(tmp_path, monkeypatch):
    monkeypatch.setattr(network, "MAX_INTERFACES", 3)
    for i in range(5):
        netdev(tmp_path, f"eth{i}", speed="1000")
    found, warnings = network.read_network(str(tmp_path))
    assert len(found["nics"]) == 3
    assert warnings == ["network: more than 3 network interfaces; only 3 looked at"]


def test_sim_node_reports_its_template_nics_not_this_machines(tmp_path):
    try:
        answer = agent_main.handle(
            {
                "v": 1,
                "verb": "facts",
                "host": "sg-dgx01",
                "sim": {"template": "dgx-h100", "state_dir": str(tmp_path)},
            }
        )
    finally:
        deactivate()
    assert answer["ok"], answer
    nics = answer["data"]["network"]["nics"]
    compute = [n for n in nics if n["kind"] == "infiniband"]
    assert len(compute) == 8 and {n["speed_gbps"] for n in compute} == {400.0}
    assert {n["numa_node"] for n in compute} == {0, 1}
    # The same list the state file holds (what sim workloads read).
    state = json.loads((tmp_path / "sg-dgx01.json").read_text())
    assert state["network"]["nics"] == nics
    assert state["network"] == build("dgx-h100", "sg-dgx01")["network"]


def test_a_state_file_from_before_nics_gets_its_templates(tmp_path):
    from gpupoolctl.sim import SimState

    state = SimState.open("n1", "a100-pcie-4", tmp_path)
    with state.mutate() as data:
        del data["network"]
        data["nvidia"]["driver_version"] = "1.2.3"  # what else it holds stays as it is
    again = SimState.open("n1", "a100-pcie-4", tmp_path)
    assert again.data["nvidia"]["driver_version"] == "1.2.3"
    assert [n["speed_gbps"] for n in again.data["network"]["nics"]] == [100.0, 100.0, 10.0]
    on_disk = json.loads((tmp_path / "n1.json").read_text())
    assert on_disk["network"] == again.data["network"]


@pytest.mark.parametrize(
    "template", ["dgx-h100", "dgx-h100-mig", "a100-pcie-4", "l40s-4", "mi300x-8", "mi300x-8-sriov"]
)
def test_every_template_has_nics_in_the_facts_shape(template):
    nics = build(template, "h")["network"]["nics"]
    assert nics
    for nic in nics:
        assert set(nic) == {"name", "kind", "speed_gbps", "state", "numa_node"}
        assert nic["kind"] in ("ethernet", "infiniband", "roce")
        assert isinstance(nic["speed_gbps"], float) and nic["speed_gbps"] > 0
        assert nic["state"] == "up"
    assert len({n["name"] for n in nics}) == len(nics)
