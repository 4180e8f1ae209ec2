"""The simulated amdsmi: API shapes and the partition / SR-IOV rules it enforces."""

from __future__ import annotations

import errno
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpupoolctl.sim import amdsmi as fake
from gpupoolctl.sim.state import STATE_VERSION, SimState

C = fake.AmdSmiComputePartitionType
M = fake.AmdSmiMemoryPartitionType


def make_state(tmp_path: Path, template: str = "mi300x-8", host: str = "m1") -> SimState:
    return SimState.reset(host, template, tmp_path)


@pytest.fixture
def state(tmp_path: Path) -> Iterator[SimState]:
    state = make_state(tmp_path)
    fake.bind(state)
    fake.amdsmi_init()
    yield state
    fake.amdsmi_shut_down()
    fake.bind(None)


@pytest.fixture
def sriov_state(tmp_path: Path) -> Iterator[SimState]:
    state = make_state(tmp_path, "mi300x-8-sriov", "v1")
    fake.bind(state)
    fake.amdsmi_init()
    yield state
    fake.amdsmi_shut_down()
    fake.bind(None)


def handles() -> list[fake.ProcessorHandle]:
    return fake.amdsmi_get_processor_handles()


def on_disk(state: SimState) -> dict:
    return json.loads(state.path.read_text())["amd"]


def status_of(excinfo: pytest.ExceptionInfo[fake.AmdSmiLibraryException]) -> int:
    return excinfo.value.get_error_code()


# -- library behaviour -------------------------------------------------------------------------


def test_calls_before_init_are_refused_like_the_library(tmp_path: Path) -> None:
    fake.bind(make_state(tmp_path))
    with pytest.raises(fake.AmdSmiLibraryException) as excinfo:
        fake.amdsmi_get_processor_handles()
    assert status_of(excinfo) == fake.AMDSMI_STATUS_NOT_INIT
    fake.bind(None)


def test_a_node_without_amd_gpus_fails_init_with_driver_not_loaded(tmp_path: Path) -> None:
    state = SimState(tmp_path / "n.json", {"version": STATE_VERSION, "host": "n", "nvidia": {}})
    state._write()
    fake.bind(state)
    with pytest.raises(fake.AmdSmiLibraryException) as excinfo:
        fake.amdsmi_init()
    assert status_of(excinfo) == fake.AMDSMI_STATUS_DRIVER_NOT_LOADED
    fake.bind(None)


def test_init_wants_the_flag_enum() -> None:
    with pytest.raises(fake.AmdSmiParameterException):
        fake.amdsmi_init(2)  # type: ignore[arg-type]


def test_exception_text_matches_the_real_format() -> None:
    exc = fake.AmdSmiLibraryException(-30)
    assert exc.err_code == 30
    assert str(exc) == "Error code:\n\t30 | AMDSMI_STATUS_BUSY - Device busy"
    assert exc.get_error_info(detailed=False) == "AMDSMI_STATUS_BUSY"


def test_static_shapes_of_an_mi300x(state: SimState) -> None:
    first = handles()[0]
    asic = fake.amdsmi_get_gpu_asic_info(first)
    assert asic["market_name"] == "AMD Instinct MI300X"
    assert asic["device_id"] == "0x74a1" and asic["vendor_id"] == "0x1002"
    assert asic["num_compute_units"] == 304 and asic["target_graphics_version"] == "gfx942"
    vram = fake.amdsmi_get_gpu_vram_info(first)
    assert vram["vram_size"] == 196592 and vram["vram_max_bandwidth"] == 5300
    assert vram["vram_type"] == fake.AmdSmiVramType.HBM3
    assert fake.amdsmi_get_gpu_device_bdf(first) == "0000:05:00.0"
    assert fake.amdsmi_get_gpu_memory_total(first, fake.AmdSmiMemoryType.VRAM) == 196592 << 20
    assert fake.amdsmi_get_gpu_virtualization_mode(first)["mode"] is (
        fake.AmdSmiVirtualizationMode.BAREMETAL
    )
    config = fake.amdsmi_get_gpu_memory_partition_config(first)
    assert config["partition_caps"] == ["NPS1", "NPS2", "NPS4"] and config["mp_mode"] == "NPS1"


def test_uuids_and_bdfs_are_unique_and_stable_per_host(tmp_path: Path) -> None:
    def identities(host: str) -> list[tuple[str, str]]:
        fake.bind(make_state(tmp_path / host, host=host))
        fake.amdsmi_init()
        ids = [
            (fake.amdsmi_get_gpu_device_uuid(h), fake.amdsmi_get_gpu_device_bdf(h))
            for h in handles()
        ]
        fake.bind(None)
        return ids

    first, again, other = identities("a"), identities("a"), identities("b")
    assert first == again
    assert len({u for u, _ in first}) == 8 and len({b for _, b in first}) == 8
    assert not {u for u, _ in first} & {u for u, _ in other}


def test_all_pairs_are_one_xgmi_hop_and_numa_is_split_in_two(state: SimState) -> None:
    hs = handles()
    for a in hs:
        for b in hs:
            if a != b:
                assert fake.amdsmi_topo_get_link_type(a, b) == {
                    "hops": 1,
                    "type": fake.AMDSMI_LINK_TYPE_XGMI,
                }
    assert [fake.amdsmi_topo_get_numa_node_number(h) for h in hs] == [0] * 4 + [1] * 4


# -- partition rules ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("mode", "count", "cus", "vram"),
    [("SPX", 8, 304, 196592), ("DPX", 16, 152, 98296), ("CPX", 64, 38, 24574)],
)
def test_compute_mode_sets_the_logical_gpu_count(
    state: SimState, mode: str, count: int, cus: int, vram: int
) -> None:
    if mode == "DPX":
        fake.amdsmi_set_gpu_memory_partition(handles()[0], M.NPS2)  # SPX+NPS2 is not allowed
        assert fake.amdsmi_get_gpu_compute_partition(handles()[0]) == "DPX"
    else:
        for gpu in range(8):
            card = next(h for h in handles() if h.gpu == gpu)
            fake.amdsmi_set_gpu_compute_partition(card, C[mode])
    hs = handles()
    assert len(hs) == count
    assert {fake.amdsmi_get_gpu_asic_info(h)["num_compute_units"] for h in hs} == {cus}
    assert {fake.amdsmi_get_gpu_vram_usage(h)["vram_total"] for h in hs} == {vram}
    assert {fake.amdsmi_get_gpu_xcd_counter(h) for h in hs} == {64 // count}  # XCDs per logical GPU


def test_cpx_partitions_get_their_own_bdf_function_and_uuid(state: SimState) -> None:
    fake.amdsmi_set_gpu_compute_partition(handles()[0], C.CPX)
    card0 = [h for h in handles() if h.gpu == 0]
    assert [fake.amdsmi_get_gpu_device_bdf(h) for h in card0] == [
        f"0000:05:00.{p}" for p in range(8)
    ]
    assert len({fake.amdsmi_get_gpu_device_uuid(h) for h in card0}) == 8
    assert fake.amdsmi_topo_get_link_type(card0[0], card0[1])["type"] == fake.AMDSMI_LINK_TYPE_XGMI
    assert fake.amdsmi_get_gpu_kfd_info(card0[3])["current_partition_id"] == 3


def test_nps4_requires_cpx_so_setting_it_moves_the_whole_hive_to_cpx(state: SimState) -> None:
    fake.amdsmi_set_gpu_memory_partition(handles()[0], M.NPS4)
    disk = on_disk(state)
    assert {(g["compute_partition"], g["memory_partition"]) for g in disk["gpus"]} == {
        ("CPX", "NPS4")
    }
    assert len(handles()) == 64


def test_spx_is_refused_while_nps4_is_set(state: SimState) -> None:
    fake.amdsmi_set_gpu_memory_partition(handles()[0], M.NPS4)
    with pytest.raises(fake.AmdSmiLibraryException) as excinfo:
        fake.amdsmi_set_gpu_compute_partition(handles()[0], C.SPX)
    assert status_of(excinfo) == fake.AMDSMI_STATUS_SETTING_UNAVAILABLE
    assert on_disk(state)["gpus"][0]["compute_partition"] == "CPX"


def test_revert_order_nps1_then_spx_works(state: SimState) -> None:
    fake.amdsmi_set_gpu_memory_partition(handles()[0], M.NPS4)
    fake.amdsmi_set_gpu_memory_partition(handles()[0], M.NPS1)
    assert fake.amdsmi_get_gpu_compute_partition(handles()[0]) == "CPX"
    fake.amdsmi_set_gpu_compute_partition(handles()[0], C.SPX)
    assert len(handles()) == 8 * 1 + 7 * 7  # card 0 back to SPX, the other seven still CPX


def test_modes_the_card_does_not_have_are_unavailable(state: SimState) -> None:
    for call in (
        lambda: fake.amdsmi_set_gpu_compute_partition(handles()[0], C.TPX),
        lambda: fake.amdsmi_set_gpu_memory_partition(handles()[0], M.NPS8),
    ):
        with pytest.raises(fake.AmdSmiLibraryException) as excinfo:
            call()
        assert status_of(excinfo) == fake.AMDSMI_STATUS_SETTING_UNAVAILABLE


def test_partition_change_with_processes_running_is_busy(state: SimState) -> None:
    fake.sim_add_process(3, pid=4242, name="train.py", vram_mb=1024)
    target = next(h for h in handles() if h.gpu == 3)
    with pytest.raises(fake.AmdSmiLibraryException) as excinfo:
        fake.amdsmi_set_gpu_compute_partition(target, C.CPX)
    assert status_of(excinfo) == fake.AMDSMI_STATUS_BUSY
    # A memory partition change reloads the driver for the whole hive: busy anywhere refuses.
    with pytest.raises(fake.AmdSmiLibraryException) as excinfo:
        fake.amdsmi_set_gpu_memory_partition(handles()[0], M.NPS4)
    assert status_of(excinfo) == fake.AMDSMI_STATUS_BUSY
    assert {g["compute_partition"] for g in on_disk(state)["gpus"]} == {"SPX"}
    # Other cards' compute partitions are independent of card 3's processes.
    fake.amdsmi_set_gpu_compute_partition(handles()[0], C.CPX)


def test_processes_show_in_usage_and_process_list(state: SimState) -> None:
    fake.sim_add_process(1, pid=77, name="llm", vram_mb=65536, gfx=90)
    card1 = handles()[1]
    assert fake.amdsmi_get_gpu_vram_usage(card1) == {"vram_total": 196592, "vram_used": 65819}
    assert fake.amdsmi_get_gpu_activity(card1)["gfx_activity"] == 90
    (listed,) = fake.amdsmi_get_gpu_process_list(card1)
    assert listed["pid"] == 77 and listed["memory_usage"]["vram_mem"] == 65536 << 20


def test_stale_handles_are_not_found_after_leaving_cpx(state: SimState) -> None:
    fake.amdsmi_set_gpu_compute_partition(handles()[0], C.CPX)
    stale = [h for h in handles() if h.gpu == 0][5]
    fake.amdsmi_set_gpu_compute_partition(handles()[0], C.SPX)
    with pytest.raises(fake.AmdSmiLibraryException) as excinfo:
        fake.amdsmi_get_gpu_device_bdf(stale)
    assert status_of(excinfo) == fake.AMDSMI_STATUS_NOT_FOUND


def test_accelerator_profiles_follow_the_catalog(state: SimState) -> None:
    config = fake.amdsmi_get_gpu_accelerator_partition_profile_config(handles()[0])
    assert [p["profile_type"] for p in config["profiles"]] == ["SPX", "DPX", "QPX", "CPX"]
    assert config["profiles"][3]["memory_caps"] == ["NPS1", "NPS4"]
    fake.amdsmi_set_gpu_accelerator_partition_profile(handles()[0], 3)
    profile = fake.amdsmi_get_gpu_accelerator_partition_profile(handles()[0])
    assert profile["partition_profile"]["profile_type"] == "CPX"
    assert profile["partition_profile"]["num_partitions"] == 8


# -- fault injection ---------------------------------------------------------------------------


def test_injected_fault_fires_the_given_times_and_is_recorded(state: SimState) -> None:
    fake.sim_inject_fault(
        "amdsmi_set_gpu_compute_partition", "AMDSMI_STATUS_AMDGPU_RESTART_ERR", gpu=0, times=1
    )
    assert on_disk(state)["faults"][0]["fn"] == "amdsmi_set_gpu_compute_partition"
    with pytest.raises(fake.AmdSmiLibraryException) as excinfo:
        fake.amdsmi_set_gpu_compute_partition(handles()[0], C.CPX)
    assert status_of(excinfo) == fake.AMDSMI_STATUS_AMDGPU_RESTART_ERR
    assert on_disk(state)["faults"] == []
    assert on_disk(state)["gpus"][0]["compute_partition"] == "SPX"
    fake.amdsmi_set_gpu_compute_partition(handles()[0], C.CPX)  # second try succeeds


def test_fault_on_one_gpu_leaves_the_others_alone(state: SimState) -> None:
    fake.sim_inject_fault("amdsmi_get_gpu_asic_info", fake.AMDSMI_STATUS_NOT_SUPPORTED, gpu=2)
    hs = handles()
    with pytest.raises(fake.AmdSmiLibraryException):
        fake.amdsmi_get_gpu_asic_info(hs[2])
    assert fake.amdsmi_get_gpu_asic_info(hs[3])["market_name"] == "AMD Instinct MI300X"
    with pytest.raises(fake.AmdSmiLibraryException):  # times=None: every time
        fake.amdsmi_get_gpu_asic_info(hs[2])


# -- SR-IOV through the sim-only sysfs ---------------------------------------------------------

SYSFS = fake.gpupool_sim_sysfs


def vf_path(bdf: str = "0000:05:00.0", name: str = "sriov_numvfs") -> str:
    return f"/sys/bus/pci/devices/{bdf}/{name}"


def test_bare_metal_cards_have_no_sriov_files(state: SimState) -> None:
    with pytest.raises(FileNotFoundError):
        SYSFS.read_text(vf_path(name="sriov_totalvfs"))


def test_vf_counts_change_only_through_zero(sriov_state: SimState) -> None:
    assert SYSFS.read_text(vf_path(name="sriov_totalvfs")) == "8\n"
    SYSFS.write_text(vf_path(), "1")
    assert SYSFS.read_text(vf_path()) == "1\n"
    SYSFS.write_text(vf_path(), "1")  # same value: no-op
    SYSFS.write_text(vf_path(), "0")
    assert SYSFS.read_text(vf_path()) == "0\n"


def test_vf_rules(sriov_state: SimState) -> None:
    SYSFS.write_text(vf_path(), "1")
    with pytest.raises(OSError) as excinfo:
        SYSFS.write_text(vf_path(), "8")  # non-zero to another non-zero
    assert excinfo.value.errno == errno.EBUSY
    with pytest.raises(OSError) as excinfo:
        SYSFS.write_text(vf_path(), "9")  # above sriov_totalvfs
    assert excinfo.value.errno == errno.ERANGE
    # VFs handed out: no partition change under them.
    with pytest.raises(fake.AmdSmiLibraryException) as busy:
        fake.amdsmi_set_gpu_compute_partition(handles()[0], C.CPX)
    assert status_of(busy) == fake.AMDSMI_STATUS_BUSY
    SYSFS.write_text(vf_path(), "0")
    # 8 VFs only in CPX+NPS4 (GIM release notes); then it works.
    with pytest.raises(OSError) as excinfo:
        SYSFS.write_text(vf_path(), "8")
    assert excinfo.value.errno == errno.EINVAL
    fake.amdsmi_set_gpu_memory_partition(handles()[0], M.NPS4)
    SYSFS.write_text(vf_path(), "8")
    assert on_disk(sriov_state)["gpus"][0]["sriov"]["num_vfs"] == 8


def test_amdgpu_as_pf_driver_cannot_enable_vfs(tmp_path: Path) -> None:
    state = make_state(tmp_path, "mi300x-8-sriov")
    with state.mutate() as data:
        data["amd"]["gpus"][0]["sriov"]["pf_driver"] = "amdgpu"
    fake.bind(state)
    with pytest.raises(OSError) as excinfo:
        SYSFS.write_text(vf_path(), "1")
    assert excinfo.value.errno == errno.ENOENT
    with pytest.raises(PermissionError):
        SYSFS.write_text(vf_path(name="sriov_totalvfs"), "1")
    fake.bind(None)


def test_sysfs_write_fault(sriov_state: SimState) -> None:
    fake.sim_inject_fault("sysfs:sriov_numvfs", gpu=0, times=1, errno_name="EIO")
    with pytest.raises(OSError) as excinfo:
        SYSFS.write_text(vf_path(), "1")
    assert excinfo.value.errno == errno.EIO
    SYSFS.write_text(vf_path(), "1")
