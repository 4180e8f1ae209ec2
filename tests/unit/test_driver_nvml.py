"""The nvml driver against the fake pynvml, checked against independent expectations."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.agent.drivers import nvml as nvml_driver
from gpupoolctl.agent.drivers.base import DriverUnavailable
from gpupoolctl.hw import catalog
from gpupoolctl.sim import nvidia_templates
from gpupoolctl.sim import pynvml as fake
from gpupoolctl.sim.state import SimState

ROOT = Path(__file__).resolve().parents[2]


def make_state(tmp_path: Path, template: str, host: str = "n1") -> SimState:
    return SimState.reset(host, template, tmp_path)


@pytest.fixture
def use_fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    yield
    fake.bind(None)


def collect(state: SimState) -> tuple[list[dict[str, Any]], list[list[str]], Any]:
    fake.bind(state)
    fake.reset_calls()
    driver = nvml_driver.open_driver()
    try:
        return driver.gpus(), driver.link_matrix(), driver
    finally:
        driver.close()


def test_dgx_h100(tmp_path: Path, use_fake: None) -> None:
    gpus, matrix, driver = collect(make_state(tmp_path, "dgx-h100"))
    assert len(gpus) == 8 and driver.warnings == []
    for i, gpu in enumerate(gpus):
        assert gpu["index"] == i and gpu["vendor"] == "nvidia" and gpu["driver"] == "nvml"
        assert gpu["model"] == "NVIDIA H100 80GB HBM3"
        assert gpu["pci_device_id"] == "0x233010DE"
        assert gpu["uuid"] == nvidia_templates.gpu_uuid("n1", i)
        assert gpu["memory_total_mib"] == 81559 and gpu["memory_used_mib"] == 0
        assert gpu["compute_units"] == 132 and gpu["compute_capability"] == "9.0"
        assert 3300 < gpu["bandwidth_gbps"] < 3400 and gpu["bandwidth_class"] == "ultra"
        assert gpu["numa_node"] == (0 if i < 4 else 1)
        runtime_profiles = gpu["mig"].pop("profiles")
        assert gpu["mig"] == {
            "capable": True,
            "mode": "disabled",
            "pending": "disabled",
            "instances": [],
        }
        # The driver's own table (read at run time) matches the catalog for this card.
        geometry = catalog.nvidia_model("H100-SXM5-80GB").mig
        assert geometry is not None
        assert {(p["id"], tuple(p["placements"]), p["size"]) for p in runtime_profiles} == {
            (p.id, p.placement_starts, p.placement_size) for p in geometry.profiles
        }
        assert gpu["processes"] == [] and gpu["utilization_pct"] == 0
    assert [g["pci_bus_id"] for g in gpus][:2] == ["0000:18:00.0", "0000:2a:00.0"]
    assert len({g["uuid"] for g in gpus}) == 8
    for i in range(8):
        for j in range(8):
            assert matrix[i][j] == ("X" if i == j else "NV18")
    # 8 GPUs x 18 links dominate; health adds 7 per GPU and 3 for the XID event set.
    assert sum(fake.CALLS.values()) < 520


def test_dgx_h100_mig_instances(tmp_path: Path, use_fake: None) -> None:
    gpus, _, _ = collect(make_state(tmp_path, "dgx-h100-mig"))
    assert [g["mig"]["mode"] for g in gpus] == ["disabled"] * 6 + ["enabled"] * 2
    six = gpus[6]["mig"]["instances"]
    assert [
        (gi["profile"], gi["profile_id"], gi["placement_start"], gi["placement_size"]) for gi in six
    ] == [("1g.10gb", 19, s, 1) for s in range(7)]
    assert all(gi["memory_mib"] == 9984 and gi["sm_count"] == 16 for gi in six)
    seven = gpus[7]["mig"]["instances"]
    assert [
        (gi["profile"], gi["placement_start"], gi["placement_size"], gi["sm_count"]) for gi in seven
    ] == [("3g.40gb", 0, 4, 60), ("3g.40gb", 4, 4, 60)]
    cis = [ci for gi in six + seven for ci in gi["compute_instances"]]
    assert len(cis) == 9
    assert all(ci["uuid"] and ci["uuid"].startswith("MIG-") for ci in cis)
    assert len({ci["uuid"] for ci in cis}) == 9
    assert [ci["profile"] for ci in seven[0]["compute_instances"]] == ["3g.40gb"]
    assert gpus[6]["utilization_pct"] is None  # not attributed under MIG


def test_a100_pcie_topology_and_mig(tmp_path: Path, use_fake: None) -> None:
    gpus, matrix, _ = collect(make_state(tmp_path, "a100-pcie-4"))
    assert matrix == [
        ["X", "PXB", "SYS", "SYS"],
        ["PXB", "X", "SYS", "SYS"],
        ["SYS", "SYS", "X", "PXB"],
        ["SYS", "SYS", "PXB", "X"],
    ]
    assert all(g["bandwidth_class"] == "high" and g["compute_units"] == 108 for g in gpus)
    assert round(gpus[0]["bandwidth_gbps"]) == 1555
    layout = [
        (gi["profile"], gi["placement_start"], gi["placement_size"])
        for gi in gpus[3]["mig"]["instances"]
    ]
    assert layout == [("2g.10gb", 0, 2), ("2g.10gb", 2, 2), ("3g.20gb", 4, 4)]
    assert [g["mig"]["mode"] for g in gpus] == ["disabled"] * 3 + ["enabled"]


def test_l40s(tmp_path: Path, use_fake: None) -> None:
    gpus, matrix, driver = collect(make_state(tmp_path, "l40s-4"))
    assert all(
        g["mig"] == {"capable": False, "mode": "n/a", "pending": None, "instances": []}
        for g in gpus
    )
    assert all(g["bandwidth_class"] == "standard" and g["compute_units"] == 142 for g in gpus)
    assert round(gpus[0]["bandwidth_gbps"]) == 864
    assert matrix[0][1] == "PIX" and matrix[0][2] == "NODE"
    assert driver.warnings == []


def test_processes_on_mig_devices(tmp_path: Path, use_fake: None) -> None:
    state = make_state(tmp_path, "dgx-h100-mig")
    fake.sim_add_process(
        state,
        7,
        pid=900,
        used_memory_mib=4096,
        name="trainer",
        gpu_instance_id=2,
        compute_instance_id=0,
    )
    fake.sim_add_process(state, 0, pid=901, used_memory_mib=512)
    gpus, _, _ = collect(state)
    assert gpus[7]["processes"] == [
        {
            "pid": 900,
            "name": "trainer",
            "used_memory_mib": 4096,
            "gpu_instance_id": 2,
            "compute_instance_id": 0,
        }
    ]
    assert gpus[0]["processes"][0]["gpu_instance_id"] is None
    assert gpus[0]["memory_used_mib"] == 512


def test_one_broken_field_does_not_sink_the_node(tmp_path: Path, use_fake: None) -> None:
    state = make_state(tmp_path, "dgx-h100")
    state.data["nvidia"]["gpus"][2]["unsupported"] = [
        "nvmlDeviceGetMemoryBusWidth",
        "nvmlDeviceGetNumGpuCores",
        "nvmlDeviceGetMemoryAffinity",
    ]
    state._write()
    gpus, _, driver = collect(state)
    assert gpus[2]["bandwidth_gbps"] is None and gpus[2]["bandwidth_class"] is None
    assert gpus[2]["compute_units"] is None and gpus[2]["numa_node"] is None
    assert gpus[2]["uuid"].startswith("GPU-") and gpus[3]["bandwidth_class"] == "ultra"
    assert driver.warnings == []  # NotSupported is normal, not a warning


def test_absent_stack_is_silent(tmp_path: Path, use_fake: None) -> None:
    fake.bind(SimState(tmp_path / "amd.json", {"version": 1, "host": "a", "template": "x"}))
    with pytest.raises(DriverUnavailable) as info:
        nvml_driver.open_driver()
    assert str(info.value) == ""


def test_broken_stack_says_why(tmp_path: Path, use_fake: None) -> None:
    state = make_state(tmp_path, "l40s-4")
    fake.sim_add_fault(state, "init", error="LibRmVersionMismatch")
    fake.bind(state)
    with pytest.raises(DriverUnavailable, match="nvmlInit failed"):
        nvml_driver.open_driver()


def test_no_pynvml_is_silent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    with pytest.raises(DriverUnavailable) as info:
        nvml_driver.open_driver()
    assert str(info.value) == ""


# Where the node's pynvml and libnvidia-ml are of different ages: the fake plays an older
# binding (constants patched down to those nvidia-ml-py 11.515.75 defines) or an older
# library (C symbols marked missing in the state).
OLD_GI_PROFILE_COUNT = 0x8
OLD_NVLINK_MAX_LINKS = 12


def mark_missing(state: SimState, *symbols: str) -> None:
    with state.mutate() as data:
        data["nvidia"]["missing"] = list(symbols)


def test_library_without_v3_process_call_still_gives_facts(tmp_path: Path, use_fake: None) -> None:
    # nvidia-ml-py 13 turns FunctionNotFound of the unversioned call into
    # NVMLLibraryMismatchError, which is not an NVMLError; it names _v2 as the way out.
    state = SimState.reset("n1", "l40s-4", tmp_path)
    fake.sim_add_process(state, 1, pid=321, used_memory_mib=2048, name="train")
    mark_missing(state, "nvmlDeviceGetComputeRunningProcesses_v3")
    gpus, _, _ = collect(state)
    assert len(gpus) == 4
    assert [p["pid"] for p in gpus[1]["processes"]] == [321]
    assert gpus[1]["processes"][0]["used_memory_mib"] == 2048
    assert gpus[0]["processes"] == []


def test_library_with_no_process_call_is_a_warning(tmp_path: Path, use_fake: None) -> None:
    state = SimState.reset("n1", "l40s-4", tmp_path)
    fake.sim_add_process(state, 1, pid=321)
    mark_missing(
        state,
        "nvmlDeviceGetComputeRunningProcesses_v3",
        "nvmlDeviceGetComputeRunningProcesses_v2",
    )
    gpus, _, driver = collect(state)
    assert [g["processes"] for g in gpus] == [[], [], [], []]
    assert gpus[1]["uuid"].startswith("GPU-") and gpus[1]["memory_total_mib"] > 0
    assert any("RunningProcesses" in w for w in driver.warnings)


def test_binding_without_the_mismatch_wrapper_falls_back_too(
    tmp_path: Path, use_fake: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A binding whose unversioned lister calls _v3 directly lets FunctionNotFound through
    # (an NVMLError) instead of NVMLLibraryMismatchError; _v2 is the way out all the same.
    state = SimState.reset("n1", "l40s-4", tmp_path)
    fake.sim_add_process(state, 2, pid=654)
    mark_missing(state, "nvmlDeviceGetComputeRunningProcesses_v3")
    monkeypatch.setattr(
        fake, "nvmlDeviceGetComputeRunningProcesses", fake.nvmlDeviceGetComputeRunningProcesses_v3
    )
    gpus, _, driver = collect(state)
    assert [p["pid"] for p in gpus[2]["processes"]] == [654]
    assert driver.warnings == []


def test_older_binding_still_sees_every_mig_profile(
    tmp_path: Path, use_fake: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = SimState.reset("n1", "dgx-h100", tmp_path)
    # GPU 0 holds a 1g.20gb (profile id 15, NVML index 0x9 = 1_SLICE_REV2).
    fake.bind(state)
    fake.nvmlInit()
    h = fake.nvmlDeviceGetHandleByIndex(0)
    fake.nvmlDeviceSetMigMode(h, fake.NVML_DEVICE_MIG_ENABLE)
    where = ctypes.byref(fake.c_nvmlGpuInstancePlacement_t(0, 2))
    gi = fake.nvmlDeviceCreateGpuInstanceWithPlacement(h, 15, where)
    fake.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    fake.nvmlShutdown()

    monkeypatch.setattr(fake, "NVML_GPU_INSTANCE_PROFILE_COUNT", OLD_GI_PROFILE_COUNT)
    gpus, _, driver = collect(state)
    assert [(gi["profile"], gi["profile_id"]) for gi in gpus[0]["mig"]["instances"]] == [
        ("1g.20gb", 15)
    ]
    assert gpus[0]["mig"]["instances"][0]["compute_instances"][0]["uuid"].startswith("MIG-")
    for gpu in gpus[:2]:  # MIG on (v2 table) and MIG off (v1 table)
        assert 15 in {p["id"] for p in gpu["mig"]["profiles"]}
        assert len(gpu["mig"]["profiles"]) == 7
    assert driver.warnings == []


def test_older_binding_still_counts_every_nvlink(
    tmp_path: Path, use_fake: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fake, "NVML_NVLINK_MAX_LINKS", OLD_NVLINK_MAX_LINKS)
    _, matrix, driver = collect(SimState.reset("n1", "dgx-h100", tmp_path))
    assert matrix[0][1] == "NV18" and matrix[7][3] == "NV18"
    assert driver.warnings == []


@pytest.mark.parametrize("template", sorted(nvidia_templates.TEMPLATES))
def test_facts_change_nothing(tmp_path: Path, use_fake: None, template: str) -> None:
    state = make_state(tmp_path, template)
    before = state.path.read_bytes()
    collect(state)
    # An event set (nvmlEventSetCreate/Wait/Free, for XIDs) is the library's, not the card's.
    changing = [
        n
        for n in fake.CALLS
        if any(w in n for w in ("Set", "Create", "Destroy")) and not n.startswith("nvmlEventSet")
    ]
    assert changing == [] and state.path.read_bytes() == before


def _have_amd_side() -> bool:
    return (ROOT / "gpupoolctl/sim/amdsmi.py").exists() and (
        ROOT / "gpupoolctl/agent/drivers/amdsmi.py"
    ).exists()


@pytest.mark.skipif(not _have_amd_side(), reason="needs the AMD fake and driver modules")
@pytest.mark.parametrize("template", ["dgx-h100", "l40s-4"])
def test_agent_facts_end_to_end(tmp_path: Path, template: str) -> None:
    request = {
        "v": 1,
        "verb": "facts",
        "host": "n1",
        "sim": {"template": template, "state_dir": str(tmp_path)},
    }
    out = subprocess.run(
        [sys.executable, "-m", "gpupoolctl.agent.main"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        check=True,
    )
    answer = json.loads(out.stdout)
    assert answer["ok"], answer
    facts = answer["data"]
    assert facts["sim"] is True and facts["drivers"].get("nvidia") == "nvml"
    nvidia = [g for g in facts["gpus"] if g["vendor"] == "nvidia"]
    assert len(nvidia) == (8 if template == "dgx-h100" else 4)
    assert facts["topology"]["gpus"][: len(nvidia)] == [g["uuid"] for g in nvidia]
