"""The fake pynvml: real API shapes and the MIG rules it enforces."""

from __future__ import annotations

import ctypes
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.sim import nvidia_templates
from gpupoolctl.sim import pynvml as nv
from gpupoolctl.sim.state import SimState


def make_state(tmp_path: Path, template: str, host: str = "n1") -> SimState:
    return SimState.reset(host, template, tmp_path)


@pytest.fixture
def bound() -> Iterator[None]:
    yield
    nv.bind(None)


def start(tmp_path: Path, template: str) -> SimState:
    state = make_state(tmp_path, template)
    nv.bind(state)
    nv.nvmlInit()
    return state


def enable_mig(index: int) -> object:
    handle = nv.nvmlDeviceGetHandleByIndex(index)
    assert nv.nvmlDeviceSetMigMode(handle, nv.NVML_DEVICE_MIG_ENABLE) == nv.NVML_SUCCESS
    return handle


def placement(start_slot: int, size: int) -> object:
    return ctypes.byref(nv.c_nvmlGpuInstancePlacement_t(start_slot, size))


def test_error_classes_mirror_pynvml() -> None:
    err = nv.NVMLError(nv.NVML_ERROR_IN_USE)
    assert type(err) is nv.NVMLError_InUse and err.value == 19
    assert isinstance(nv.NVMLError_InsufficientResources(), nv.NVMLError)
    assert nv.NVMLError_InsufficientResources().value == 23
    for name in (
        "NotSupported",
        "NotFound",
        "InvalidArgument",
        "DriverNotLoaded",
        "NoPermission",
        "LibraryNotFound",
        "GpuIsLost",
        "ResetRequired",
    ):
        assert issubclass(getattr(nv, "NVMLError_" + name), nv.NVMLError)
    real = pytest.importorskip("pynvml")
    if real is not nv:
        fake_names = {n for n in dir(nv) if n.startswith("NVMLError_")}
        real_names = {n for n in dir(real) if n.startswith("NVMLError_")}
        assert real_names <= fake_names


def test_struct_fields_match_the_real_module() -> None:
    real = sys.modules.get("pynvml") or pytest.importorskip("pynvml")
    if real is nv:
        pytest.skip("fake installed as pynvml")
    for name in (
        "c_nvmlGpuInstanceProfileInfo_v2_t",
        "c_nvmlGpuInstanceInfo_t",
        "nvmlPciInfo_t",
        "c_nvmlMemory_t",
        "c_nvmlComputeInstanceInfo_t",
        "c_nvmlGpuInstancePlacement_t",
        "c_nvmlComputeInstanceProfileInfo_v2_t",
        "c_nvmlUtilization_t",
    ):
        ours = [f[0] for f in getattr(nv, name)._fields_]
        theirs = [f[0] for f in getattr(real, name)._fields_]
        assert ours == theirs, name
    for name in (
        "NVML_GPU_INSTANCE_PROFILE_COUNT",
        "NVML_COMPUTE_INSTANCE_PROFILE_COUNT",
        "NVML_TOPOLOGY_MULTIPLE",
        "NVML_ERROR_INSUFFICIENT_RESOURCES",
        "NVML_CLOCK_MEM",
    ):
        assert getattr(nv, name) == getattr(real, name), name


def test_older_library_and_the_version_mismatch_error(tmp_path: Path, bound: None) -> None:
    # nvidia-ml-py 13: the unversioned process lister turns FunctionNotFound (no _v3 symbol in
    # an older libnvidia-ml) into NVMLLibraryMismatchError, which is not an NVMLError.
    assert not issubclass(nv.NVMLLibraryMismatchError, nv.NVMLError)
    state = start(tmp_path, "l40s-4")
    nv.sim_add_process(state, 0, pid=55)
    with state.mutate() as data:
        data["nvidia"]["missing"] = ["nvmlDeviceGetComputeRunningProcesses_v3"]
    h = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(nv.NVMLError_FunctionNotFound):
        nv.nvmlDeviceGetComputeRunningProcesses_v3(h)
    with pytest.raises(nv.NVMLLibraryMismatchError, match="_v2"):
        nv.nvmlDeviceGetComputeRunningProcesses(h)
    assert [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses_v2(h)] == [55]
    real = sys.modules.get("pynvml") or pytest.importorskip("pynvml")
    if real is not nv and hasattr(real, "NVMLLibraryMismatchError"):
        assert not issubclass(real.NVMLLibraryMismatchError, real.NVMLError)
        assert hasattr(real, "nvmlDeviceGetComputeRunningProcesses_v2")


def test_library_profile_bound_is_not_the_binding_constant(
    tmp_path: Path, bound: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An older binding's smaller constant does not shrink what the library answers.
    start(tmp_path, "dgx-h100")
    monkeypatch.setattr(nv, "NVML_GPU_INSTANCE_PROFILE_COUNT", 0x8)
    h = nv.nvmlDeviceGetHandleByIndex(0)
    info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, nv.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2, 1)
    assert info.id == 15
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(h, 0x12, 1)


def test_uninitialised_and_absent(tmp_path: Path, bound: None) -> None:
    nv.bind(make_state(tmp_path, "l40s-4"))
    with pytest.raises(nv.NVMLError_Uninitialized):
        nv.nvmlDeviceGetCount()
    amd_only = SimState(tmp_path / "amd.json", {"version": 1, "host": "a", "template": "x"})
    nv.bind(amd_only)
    with pytest.raises(nv.NVMLError_LibraryNotFound):
        nv.nvmlInit()
    no_driver = make_state(tmp_path, "l40s-4", host="n2")
    no_driver.data["nvidia"]["driver_loaded"] = False
    nv.bind(no_driver)
    with pytest.raises(nv.NVMLError_DriverNotLoaded):
        nv.nvmlInit()


def test_return_shapes(tmp_path: Path, bound: None) -> None:
    start(tmp_path, "dgx-h100-mig")
    h = nv.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(h, nv.c_nvmlDevice_t)
    assert nv.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert nv.nvmlDeviceGetUUID(h).startswith("GPU-")
    pci = nv.nvmlDeviceGetPciInfo(h)
    assert pci.busId == b"00000000:18:00.0" and pci.pciDeviceId == 0x233010DE
    memory = nv.nvmlDeviceGetMemoryInfo(h)
    assert memory.total == 81559 * 1024 * 1024 and memory.used + memory.free == memory.total
    assert nv.nvmlDeviceGetMigMode(h) == [0, 0]
    assert nv.nvmlDeviceGetCudaComputeCapability(h) == (9, 0)
    assert nv.nvmlDeviceIsMigDeviceHandle(h).value == 0
    by_uuid = nv.nvmlDeviceGetHandleByUUID(nv.nvmlDeviceGetUUID(h))
    assert nv.nvmlDeviceGetIndex(by_uuid) == 0
    assert nv.nvmlDeviceGetIndex(nv.nvmlDeviceGetHandleByPciBusId("0000:18:00.0")) == 0
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetNumaNodeId(h)  # x86 server: the GPU is not a NUMA node
    assert list(nv.nvmlDeviceGetMemoryAffinity(h, 1, nv.NVML_AFFINITY_SCOPE_NODE)) == [1]


def test_placements_and_profile_info(tmp_path: Path, bound: None) -> None:
    start(tmp_path, "a100-pcie-4")
    h = nv.nvmlDeviceGetHandleByIndex(0)  # MIG disabled
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(h, nv.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    info = nv.nvmlDeviceGetGpuInstanceProfileInfo(h, nv.NVML_GPU_INSTANCE_PROFILE_1_SLICE, 1)
    assert (info.id, info.memorySizeMB, info.instanceCount) == (19, 4864, 7)
    count = ctypes.c_uint(0)
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(h, 14, None, ctypes.byref(count))
    assert count.value == 3
    array = (nv.c_nvmlGpuInstancePlacement_t * count.value)()
    nv.nvmlDeviceGetGpuInstancePossiblePlacements(h, 14, array, ctypes.byref(count))
    assert [(p.start, p.size) for p in array] == [(0, 2), (2, 2), (4, 2)]
    small = ctypes.c_uint(1)
    with pytest.raises(nv.NVMLError_InsufficientSize):
        nv.nvmlDeviceGetGpuInstancePossiblePlacements(h, 14, array, ctypes.byref(small))
    enable_mig(0)
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(h, nv.NVML_GPU_INSTANCE_PROFILE_COUNT)
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(h, nv.NVML_GPU_INSTANCE_PROFILE_8_SLICE)


def test_overlap_is_insufficient_resources(tmp_path: Path, bound: None) -> None:
    start(tmp_path, "dgx-h100")
    h = enable_mig(0)
    gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, placement(0, 4))
    assert nv.nvmlGpuInstanceGetInfo(gi).placement.start == 0
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, 14, placement(2, 2))
    with pytest.raises(nv.NVMLError_InvalidArgument):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, 14, placement(6, 2))  # not a 2g start
    assert nv.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 19) == 3  # slots 4, 5, 6
    assert nv.nvmlDeviceGetGpuInstanceRemainingCapacity(h, 0) == 0


def test_auto_placement_reproduces_the_3g_first_caveat(tmp_path: Path, bound: None) -> None:
    start(tmp_path, "a100-pcie-4")
    h = enable_mig(0)
    for profile in (19, 19, 14):
        nv.nvmlDeviceCreateGpuInstance(h, profile)
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstance(h, 9)
    h1 = enable_mig(1)
    for profile in (9, 19, 14, 19):
        nv.nvmlDeviceCreateGpuInstance(h1, profile)


def test_destroy_rules(tmp_path: Path, bound: None) -> None:
    state = start(tmp_path, "dgx-h100-mig")
    h = nv.nvmlDeviceGetHandleByIndex(7)
    gi = nv.nvmlDeviceGetGpuInstanceById(h, 1)
    with pytest.raises(nv.NVMLError_InUse):  # it still has its CI
        nv.nvmlGpuInstanceDestroy(gi)
    nv.sim_add_process(state, 7, pid=4242, gpu_instance_id=1, compute_instance_id=0)
    cis = (nv.c_nvmlComputeInstance_t * 1)()
    count = ctypes.c_uint()
    nv.nvmlGpuInstanceGetComputeInstances(gi, 2, cis, ctypes.byref(count))
    assert count.value == 1
    with pytest.raises(nv.NVMLError_InUse):  # a process runs on it
        nv.nvmlComputeInstanceDestroy(cis[0])
    gi2 = nv.nvmlDeviceGetGpuInstanceById(h, 2)
    nv.nvmlGpuInstanceGetComputeInstances(gi2, 2, cis, ctypes.byref(count))
    nv.nvmlComputeInstanceDestroy(cis[0])
    assert nv.nvmlGpuInstanceDestroy(gi2) == nv.NVML_SUCCESS
    with pytest.raises(nv.NVMLError_InUse):  # MIG cannot be turned off under GIs
        nv.nvmlDeviceSetMigMode(h, nv.NVML_DEVICE_MIG_DISABLE)
    procs = nv.nvmlDeviceGetComputeRunningProcesses(h)
    assert [(p.pid, p.gpuInstanceId, p.computeInstanceId) for p in procs] == [(4242, 1, 0)]


def test_busy_gpu_leaves_mig_mode_pending(tmp_path: Path, bound: None) -> None:
    state = start(tmp_path, "dgx-h100")
    nv.sim_add_process(state, 2, pid=777, used_memory_mib=2048)
    h = nv.nvmlDeviceGetHandleByIndex(2)
    assert nv.nvmlDeviceSetMigMode(h, 1) == nv.NVML_ERROR_IN_USE
    assert nv.nvmlDeviceGetMigMode(h) == [0, 1]
    assert nv.nvmlDeviceGetMemoryInfo(h).used == 2048 * 1024 * 1024
    assert nv.nvmlSystemGetProcessName(777) == "python3"


def test_l40s_has_no_mig(tmp_path: Path, bound: None) -> None:
    start(tmp_path, "l40s-4")
    h = nv.nvmlDeviceGetHandleByIndex(0)
    for call, args in (
        (nv.nvmlDeviceGetMigMode, ()),
        (nv.nvmlDeviceSetMigMode, (1,)),
        (nv.nvmlDeviceCreateGpuInstance, (19,)),
        (nv.nvmlDeviceGetGpuInstanceProfileInfo, (0,)),
        (nv.nvmlDeviceGetMaxMigDeviceCount, ()),
        (nv.nvmlDeviceGetNvLinkState, (0,)),
    ):
        with pytest.raises(nv.NVMLError_NotSupported):
            call(h, *args)


def test_fault_injection_nth_create(tmp_path: Path, bound: None) -> None:
    state = start(tmp_path, "dgx-h100")
    nv.sim_add_fault(state, "create_gpu_instance", gpu=3, nth=2, error="InsufficientResources")
    h = enable_mig(3)
    nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, placement(0, 1))
    with pytest.raises(nv.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, placement(1, 1))
    nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, placement(1, 1))  # fired once only
    saved = json.loads(state.path.read_text())
    assert saved["nvidia"]["faults"][0]["seen"] == 3
    assert len(saved["nvidia"]["gpus"][3]["mig"]["gpu_instances"]) == 2


def test_lost_gpu_and_unsupported_field(tmp_path: Path, bound: None) -> None:
    state = make_state(tmp_path, "dgx-h100")
    state.data["nvidia"]["gpus"][1]["lost"] = True
    state.data["nvidia"]["gpus"][2]["unsupported"] = ["nvmlDeviceGetMemoryBusWidth"]
    state._write()
    nv.bind(state)
    nv.nvmlInit()
    with pytest.raises(nv.NVMLError_GpuIsLost):
        nv.nvmlDeviceGetName(nv.nvmlDeviceGetHandleByIndex(1))
    with pytest.raises(nv.NVMLError_NotSupported):
        nv.nvmlDeviceGetMemoryBusWidth(nv.nvmlDeviceGetHandleByIndex(2))


def test_mutations_persist_across_rebind(tmp_path: Path, bound: None) -> None:
    state = start(tmp_path, "dgx-h100")
    h = enable_mig(5)
    gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, placement(4, 4))
    ci = nv.nvmlGpuInstanceCreateComputeInstance(gi, nv.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE)
    nv.nvmlShutdown()
    reloaded = SimState.load(state.path)
    nv.bind(reloaded)
    nv.nvmlInit()
    h = nv.nvmlDeviceGetHandleByIndex(5)
    assert nv.nvmlDeviceGetMigMode(h) == [1, 1]
    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert nv.nvmlDeviceGetUUID(mig).startswith("MIG-")
    assert nv.nvmlDeviceGetGpuInstanceId(mig) == nv.nvmlGpuInstanceGetInfo(gi).id
    assert nv.nvmlDeviceGetComputeInstanceId(mig) == nv.nvmlComputeInstanceGetInfo(ci).id
    assert nv.nvmlDeviceIsMigDeviceHandle(mig).value == 1
    parent = nv.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
    assert nv.nvmlDeviceGetIndex(parent) == 5
    assert nv.nvmlDeviceGetMemoryInfo(mig).total == 40448 * 1024 * 1024
    with pytest.raises(nv.NVMLError_NotFound):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(h, 1)


def test_topology(tmp_path: Path, bound: None) -> None:
    start(tmp_path, "a100-pcie-4")
    g = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(4)]
    assert nv.nvmlDeviceGetTopologyCommonAncestor(g[0], g[1]) == nv.NVML_TOPOLOGY_MULTIPLE
    assert nv.nvmlDeviceGetTopologyCommonAncestor(g[1], g[2]) == nv.NVML_TOPOLOGY_SYSTEM
    assert nv.nvmlDeviceGetP2PStatus(g[0], g[1], nv.NVML_P2P_CAPS_INDEX_NVLINK) != 0
    assert nv.nvmlDeviceGetP2PStatus(g[0], g[1], 0) == nv.NVML_P2P_STATUS_OK
    assert len(nv.nvmlDeviceGetTopologyNearestGpus(g[0], nv.NVML_TOPOLOGY_MULTIPLE)) == 1


# --- property: random create/destroy sequences keep the rules ----------------------------------

_OPS = st.lists(
    st.tuples(
        st.sampled_from(["create", "create_at", "destroy"]),
        st.sampled_from([19, 20, 15, 14, 9, 5, 0]),
        st.integers(min_value=0, max_value=7),
    ),
    max_size=25,
)


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_OPS)
def test_random_mig_sequences_never_overlap(
    tmp_path: Path, ops: list[tuple[str, int, int]]
) -> None:
    gpu = nvidia_templates.dgx_h100("prop")["nvidia"]["gpus"][0]
    gpu["mig"]["current"] = gpu["mig"]["pending"] = 1
    geometry = nv.sim_geometry(gpu)
    assert geometry is not None
    for op, profile_id, arg in ops:
        profile = geometry.by_id(profile_id)
        before = nv.sim_remaining_capacity(gpu, profile_id)
        try:
            if op == "destroy":
                instances = gpu["mig"]["gpu_instances"]
                if instances:
                    nv.sim_destroy_gpu_instance(gpu, instances[arg % len(instances)]["id"])
                continue
            start_at = arg if op == "create_at" else None
            nv.sim_create_gpu_instance(gpu, profile_id, start_at)
            assert before > 0, "created although remaining capacity was 0"
        except nv.NVMLError_InsufficientResources:
            assert op == "create_at" or before == 0
        except nv.NVMLError_InvalidArgument:
            assert op == "create_at" and arg not in profile.placement_starts
        slots: list[int] = []
        for gi in gpu["mig"]["gpu_instances"]:
            slots.extend(range(gi["start"], gi["start"] + gi["size"]))
        assert len(slots) == len(set(slots)), "overlapping placements"
        assert max(slots, default=0) < geometry.memory_slots
        compute = sum(
            geometry.by_id(g["profile_id"]).compute_slices for g in gpu["mig"]["gpu_instances"]
        )
        assert compute <= geometry.compute_slices
        for candidate in geometry.profiles:
            remaining = nv.sim_remaining_capacity(gpu, candidate.id)
            trial = json.loads(json.dumps(gpu))
            created = 0
            while True:
                try:
                    nv.sim_create_gpu_instance(trial, candidate.id)
                except nv.NVMLError_InsufficientResources:
                    break
                created += 1
            assert created == remaining, candidate.name
