"""The amdsmi driver, run unchanged against the simulated amdsmi (the real code path)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupoolctl.agent.drivers import amdsmi as driver_module
from gpupoolctl.agent.drivers.base import DriverUnavailable
from gpupoolctl.hw.model import is_direct_link
from gpupoolctl.sim import amdsmi as fake
from gpupoolctl.sim.state import STATE_VERSION, SimState

GIB = 1024  # MiB


def make_state(tmp_path: Path, template: str = "mi300x-8", host: str = "m1") -> SimState:
    return SimState.reset(host, template, tmp_path)


@pytest.fixture
def install(monkeypatch: pytest.MonkeyPatch) -> Iterator[object]:
    """Install the fake as `amdsmi`, bound to a given state (what sim.activate does)."""

    def _install(state: SimState) -> SimState:
        fake.bind(state)
        monkeypatch.setitem(sys.modules, "amdsmi", fake)
        return state

    yield _install
    fake.bind(None)


def open_and_read(state: SimState | None = None) -> tuple[list[dict], list[list[str]], str | None]:
    driver = driver_module.open_driver()
    try:
        return driver.gpus(), driver.link_matrix(), driver.version()
    finally:
        driver.close()


def set_all_cards(mode: fake.AmdSmiComputePartitionType) -> None:
    fake.amdsmi_init()
    for card in range(8):
        handle = next(h for h in fake.amdsmi_get_processor_handles() if h.gpu == card)
        fake.amdsmi_set_gpu_compute_partition(handle, mode)
    fake.amdsmi_shut_down()


def test_import_amdsmi_inside_the_package_gets_the_top_level_module(install, tmp_path) -> None:
    install(make_state(tmp_path))
    assert driver_module._import_amdsmi() is fake


def test_mi300x_node_facts(install, tmp_path) -> None:
    install(make_state(tmp_path))
    driver = driver_module.open_driver()
    assert (driver.name, driver.vendor) == ("amdsmi", "amd")
    gpus, matrix, version = open_and_read()
    assert len(gpus) == 8
    assert [g["index"] for g in gpus] == list(range(8))
    for gpu in gpus:
        assert gpu["vendor"] == "amd" and gpu["driver"] == "amdsmi"
        assert gpu["model"] == "AMD Instinct MI300X"
        assert round(gpu["memory_total_mib"] / GIB) == 192
        assert gpu["memory_used_mib"] < 1024
        assert gpu["bandwidth_gbps"] >= 5000 and gpu["bandwidth_class"] == "ultra"
        assert gpu["compute_units"] == 304 and gpu["gfx_target"] == "gfx942"
        assert gpu["compute_capability"] is None and gpu["mig"] is None
        assert gpu["pci_device_id"] == "0x74A11002"
        assert gpu["partition"] == {
            "compute": "SPX",
            "memory": "NPS1",
            "memory_caps": ["NPS1", "NPS2", "NPS4"],
        }
        assert gpu["sriov"] is None  # bare metal
        assert gpu["processes"] == [] and gpu["utilization_pct"] == 0
    assert len({g["uuid"] for g in gpus}) == 8
    assert len({g["pci_bus_id"] for g in gpus}) == 8
    assert [g["numa_node"] for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert all(matrix[i][i] == "X" for i in range(8))
    assert all(matrix[i][j] == "XGMI" for i in range(8) for j in range(8) if i != j)
    assert all(is_direct_link(matrix[0][j]) for j in range(1, 8))
    assert version == "6.10.5"


def test_after_switching_to_cpx_the_driver_sees_64_partitions(install, tmp_path) -> None:
    install(make_state(tmp_path))
    set_all_cards(fake.AmdSmiComputePartitionType.CPX)
    gpus, matrix, _ = open_and_read()
    assert len(gpus) == 64
    assert {g["partition"]["compute"] for g in gpus} == {"CPX"}
    assert {g["partition"]["memory"] for g in gpus} == {"NPS1"}
    assert {g["compute_units"] for g in gpus} == {38}
    assert {round(g["memory_total_mib"] / GIB) for g in gpus} == {24}
    assert [g["pci_bus_id"] for g in gpus[:8]] == [f"0000:05:00.{p}" for p in range(8)]
    assert len({g["uuid"] for g in gpus}) == 64
    assert all(level == "XGMI" for row in matrix for level in row if level != "X")


def test_nps4_through_the_fake_shows_cpx_nps4_everywhere(install, tmp_path) -> None:
    install(make_state(tmp_path))
    fake.amdsmi_init()
    fake.amdsmi_set_gpu_memory_partition(
        fake.amdsmi_get_processor_handles()[0], fake.AmdSmiMemoryPartitionType.NPS4
    )
    fake.amdsmi_shut_down()
    gpus, _, _ = open_and_read()
    assert len(gpus) == 64
    assert {(g["partition"]["compute"], g["partition"]["memory"]) for g in gpus} == {
        ("CPX", "NPS4")
    }


def test_processes_and_usage(install, tmp_path) -> None:
    install(make_state(tmp_path))
    fake.sim_add_process(5, pid=31337, name="vllm", vram_mb=80 * GIB, gfx=64)
    gpus, _, _ = open_and_read()
    busy = gpus[5]
    assert busy["processes"] == [
        {
            "pid": 31337,
            "name": "vllm",
            "used_memory_mib": 80 * GIB,
            "gpu_instance_id": None,
            "compute_instance_id": None,
        }
    ]
    assert busy["memory_used_mib"] == 283 + 80 * GIB
    assert busy["utilization_pct"] == 64
    assert all(g["processes"] == [] for i, g in enumerate(gpus) if i != 5)


def test_sriov_comes_from_sysfs(install, tmp_path) -> None:
    install(make_state(tmp_path, "mi300x-8-sriov"))
    fake.gpupool_sim_sysfs.write_text("/sys/bus/pci/devices/0000:26:00.0/sriov_numvfs", "1")
    gpus, _, _ = open_and_read()
    assert gpus[0]["sriov"] == {"total_vfs": 8, "num_vfs": 0}
    assert gpus[1]["sriov"] == {"total_vfs": 8, "num_vfs": 1}


def test_partitions_report_their_cards_sriov(install, tmp_path) -> None:
    install(make_state(tmp_path, "mi300x-8-sriov"))
    fake.amdsmi_init()
    fake.amdsmi_set_gpu_memory_partition(
        fake.amdsmi_get_processor_handles()[0], fake.AmdSmiMemoryPartitionType.NPS4
    )
    fake.amdsmi_shut_down()
    fake.gpupool_sim_sysfs.write_text("/sys/bus/pci/devices/0000:05:00.0/sriov_numvfs", "8")
    gpus, _, _ = open_and_read()
    assert {g["sriov"]["num_vfs"] for g in gpus[:8]} == {8}
    assert {g["sriov"]["num_vfs"] for g in gpus[8:]} == {0}


def test_pcie_pairs_use_numa_locality(install, tmp_path) -> None:
    state = make_state(tmp_path)
    with state.mutate() as data:
        for gpu in data["amd"]["gpus"]:
            gpu["hive"] = None if gpu["index"] in (2, 6) else gpu["hive"]
    install(state)
    _, matrix, _ = open_and_read()
    assert matrix[0][1] == "XGMI"
    assert matrix[2][3] == "NODE"  # both on NUMA node 0, PCIe only
    assert matrix[2][6] == "SYS"  # across sockets


def test_a_failing_field_becomes_none_and_the_rest_stands(install, tmp_path) -> None:
    install(make_state(tmp_path))
    fake.sim_inject_fault("amdsmi_get_gpu_asic_info", "AMDSMI_STATUS_NOT_SUPPORTED", gpu=2)
    fake.sim_inject_fault("amdsmi_get_gpu_vram_usage", "AMDSMI_STATUS_DRM_ERROR", gpu=2)
    fake.sim_inject_fault("amdsmi_get_gpu_compute_partition", "AMDSMI_STATUS_NOT_SUPPORTED")
    fake.sim_inject_fault("amdsmi_topo_get_link_type", "AMDSMI_STATUS_API_FAILED", gpu=7)
    gpus, matrix, _ = open_and_read()
    broken = gpus[2]
    assert broken["model"] is None and broken["compute_units"] is None
    assert broken["pci_device_id"] is None and broken["gfx_target"] is None
    assert broken["memory_total_mib"] is None and broken["memory_used_mib"] is None
    assert broken["uuid"] and broken["pci_bus_id"] == "0000:46:00.0"
    assert gpus[3]["model"] == "AMD Instinct MI300X"
    assert all(g["partition"]["compute"] is None for g in gpus)
    assert all(g["partition"]["memory"] == "NPS1" for g in gpus)
    assert matrix[7][0] == "SYS" and matrix[0][7] == "SYS"  # unknown link: assume the worst
    assert matrix[0][1] == "XGMI"


def test_no_amd_gpus_is_silently_absent(install, tmp_path) -> None:
    state = SimState(tmp_path / "n.json", {"version": STATE_VERSION, "host": "n"})
    state._write()
    install(state)
    with pytest.raises(DriverUnavailable) as excinfo:
        driver_module.open_driver()
    assert str(excinfo.value) == ""


def test_no_gpus_in_the_section_is_silently_absent(install, tmp_path) -> None:
    state = make_state(tmp_path)
    with state.mutate() as data:
        data["amd"]["gpus"] = []
    install(state)
    with pytest.raises(DriverUnavailable) as excinfo:
        driver_module.open_driver()
    assert str(excinfo.value) == ""


def test_a_broken_stack_says_why(install, tmp_path) -> None:
    install(make_state(tmp_path))
    fake.sim_inject_fault("amdsmi_init", "AMDSMI_STATUS_NO_PERM")
    with pytest.raises(DriverUnavailable, match="amdsmi_init failed: AMDSMI_STATUS_NO_PERM"):
        driver_module.open_driver()


def test_handles_failing_after_init_is_reported(install, tmp_path) -> None:
    install(make_state(tmp_path))
    fake.sim_inject_fault("amdsmi_get_processor_handles", "AMDSMI_STATUS_DRM_ERROR")
    with pytest.raises(DriverUnavailable, match="amdsmi_get_processor_handles failed"):
        driver_module.open_driver()


def test_amdsmi_not_installed_is_silently_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", None)  # import amdsmi -> ImportError
    with pytest.raises(DriverUnavailable) as excinfo:
        driver_module.open_driver()
    assert str(excinfo.value) == ""


def test_package_without_rocm_is_absent_and_keeps_stdout_clean(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # What amdsmi 7.0.2 does without libamd_smi.so: print() to stdout, then KeyError.
    package = tmp_path / "amdsmi"
    package.mkdir()
    (package / "__init__.py").write_text(
        textwrap.dedent(
            """
            import os
            print("Could not load libamd_smi.so")
            os.write(1, b"C-level noise\\n")
            _libraries = {}
            _libraries['libamd_smi.so'].amdsmi_free_name_value_pairs
            """
        )
    )
    monkeypatch.delitem(sys.modules, "amdsmi", raising=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(DriverUnavailable) as excinfo:
        driver_module.open_driver()
    assert str(excinfo.value) == ""
    out, err = capfd.readouterr()
    assert out == ""
    assert "libamd_smi" in err and "C-level noise" in err
    sys.modules.pop("amdsmi", None)


@pytest.mark.parametrize("template", ["mi300x-8", "mi300x-8-sriov"])
def test_facts_change_nothing(install, tmp_path, template) -> None:
    state = install(make_state(tmp_path, template))
    before = state.path.read_bytes()
    open_and_read()
    assert state.path.read_bytes() == before
