"""The `partition` verb's busy check and profile lookup against older vendor libraries.

A node's pynvml, libnvidia-ml and amdsmi can each be older than the simulator's defaults; the
busy check must still see the running processes (or refuse when it cannot), never wave a busy
GPU through as idle.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from gpupoolctl.agent.drivers import amdsmi as amd_driver
from gpupoolctl.sim import amdsmi as fake_amd
from gpupoolctl.sim import pynvml as fake_nvml
from gpupoolctl.sim.state import SimState
from tests.unit.test_agent_partition import (
    ENABLE,
    Node,
    amd_ops,
    create,
    layout,
    node_layout,
)
from tests.unit.test_agent_partition import node as node  # the fixture

V2 = "nvmlDeviceGetComputeRunningProcesses_v2"
V3 = "nvmlDeviceGetComputeRunningProcesses_v3"


def mark_missing(state: SimState, *symbols: str) -> None:
    """An older libnvidia-ml: these C symbols are not in it."""
    with state.mutate() as data:
        data["nvidia"]["missing"] = list(symbols)


def play_amdsmi_6_0(state: SimState) -> None:
    with state.mutate() as data:
        data["amd"]["process_handles"] = True


# -- NVIDIA: a libnvidia-ml without the _v3 process calls --------------------------------------


def test_busy_gpu_is_seen_through_v2_on_an_older_library(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100")
    fake_nvml.sim_add_process(n.state, 0, pid=31337, name="train")
    mark_missing(n.state, V3)
    before = n.facts()
    refused = n.partition([(0, [ENABLE])])["gpus"][0]
    assert refused["ok"] is False and refused["applied"] == 0
    assert refused["error"] == "busy: pid 31337 (train) (use --force to act anyway)"
    assert node_layout(n.facts()) == node_layout(before)
    # An idle GPU of the same node is changed as usual.
    assert n.partition([(1, [ENABLE])])["gpus"][0]["ok"] is True
    assert layout(n.gpu(1))[0] == "enabled"


def test_no_process_call_at_all_is_refused_with_its_reason(node: Callable[[str], Node]) -> None:
    n = node("dgx-h100")
    mark_missing(n.state, V3, V2)
    refused = n.partition([(0, [ENABLE])])["gpus"][0]
    assert refused["ok"] is False and refused["applied"] == 0
    assert refused["error"].startswith(
        "busy: cannot list the GPU's compute processes: nvmlDeviceGetComputeRunningProcesses_v2 "
        "(libnvidia-ml has no _v3 of it): "
    )
    assert "--force" in refused["error"]
    assert layout(n.gpu(0))[0] == "disabled"


def _graphics(
    monkeypatch: pytest.MonkeyPatch, v3: Callable[[Any], Any], v2: Callable[[Any], Any] | None
) -> None:
    """Graphics listers as nvidia-ml-py 13 has them (the sim models compute processes only)."""

    def nvmlDeviceGetGraphicsRunningProcesses(handle: Any) -> Any:
        return v3(handle)

    wrapped = fake_nvml.throwOnVersionMismatch(nvmlDeviceGetGraphicsRunningProcesses)
    monkeypatch.setattr(fake_nvml, wrapped.__name__, wrapped, raising=False)
    if v2 is not None:
        monkeypatch.setattr(
            fake_nvml, "nvmlDeviceGetGraphicsRunningProcesses_v2", v2, raising=False
        )


def _no_symbol(handle: Any) -> Any:
    raise fake_nvml.NVMLError(fake_nvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def test_graphics_processes_are_read_through_v2_too(
    node: Callable[[str], Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    n = node("l40s-4")
    _graphics(monkeypatch, _no_symbol, lambda handle: [SimpleNamespace(pid=808)])
    refused = n.partition([(0, [ENABLE])])["gpus"][0]
    assert refused["applied"] == 0 and refused["error"].startswith("busy: pid 808")


def test_graphics_list_that_cannot_be_read_refuses(
    node: Callable[[str], Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    n = node("dgx-h100")
    _graphics(monkeypatch, _no_symbol, _no_symbol)
    refused = n.partition([(0, [ENABLE])])["gpus"][0]
    assert refused["applied"] == 0
    assert "cannot list the GPU's graphics processes" in refused["error"]
    assert layout(n.gpu(0))[0] == "disabled"


def test_graphics_list_not_supported_is_not_a_refusal(
    node: Callable[[str], Node], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A card without graphics engines has no graphics processes to list.
    def not_supported(handle: Any) -> Any:
        raise fake_nvml.NVMLError(fake_nvml.NVML_ERROR_NOT_SUPPORTED)

    n = node("dgx-h100")
    _graphics(monkeypatch, not_supported, None)
    assert n.partition([(0, [ENABLE])])["gpus"][0]["ok"] is True


# -- NVIDIA: a binding whose profile constants are older than the driver ------------------------


@pytest.mark.parametrize(
    ("constant", "count", "profile", "profile_id", "size"),
    [
        # nvidia-ml-py 11.515.75 has GPU_INSTANCE_PROFILE_COUNT 0x8; H100's 1g.20gb is 0x9.
        ("NVML_GPU_INSTANCE_PROFILE_COUNT", 0x8, "1g.20gb", 15, 2),
        # The simulated CI profiles stop at index 0x6, so a binding that knows only 0x4 of
        # them stands in for an older one: 7g.80gb's full compute instance (0x4) lies past it.
        ("NVML_COMPUTE_INSTANCE_PROFILE_COUNT", 0x4, "7g.80gb", 0, 8),
    ],
)
def test_profile_past_the_bindings_count_is_found(
    node: Callable[[str], Node],
    monkeypatch: pytest.MonkeyPatch,
    constant: str,
    count: int,
    profile: str,
    profile_id: int,
    size: int,
) -> None:
    n = node("dgx-h100")
    monkeypatch.setattr(fake_nvml, constant, count)
    done = n.partition([(0, [ENABLE, create(profile, profile_id, 0, size)])])["gpus"][0]
    assert done["ok"] is True, done
    assert layout(n.gpu(0))[2] == ((profile, 0, size, (profile,)),)


# -- AMD: amdsmi 6.0 lists process handles ----------------------------------------------------


def test_amdsmi_6_0_busy_card_is_refused(node: Callable[[str], Node]) -> None:
    n = node("mi300x-8")
    play_amdsmi_6_0(n.state)
    fake_amd.bind(n.state)
    fake_amd.sim_add_process(3, pid=555, name="llama")
    before = n.facts()
    refused = n.partition([(3, amd_ops("NPS1", "CPX"))])["gpus"][0]
    assert refused["applied"] == 0 and refused["rolled_back"] is False
    assert refused["error"] == "busy: pid 555 (llama) (use --force to act anyway)"
    assert node_layout(n.facts()) == node_layout(before)


def test_amdsmi_6_0_busy_card_keeps_its_vfs(node: Callable[[str], Node]) -> None:
    # The kernel takes an sriov_numvfs write under a running job: only the check stops it.
    n = node("mi300x-8-sriov")
    play_amdsmi_6_0(n.state)
    fake_amd.bind(n.state)
    fake_amd.sim_add_process(0, pid=556, name="serve")
    refused = n.partition([(0, [{"op": "set_sriov_vfs", "count": 1}])])["gpus"][0]
    assert refused["applied"] == 0 and "busy: pid 556 (serve)" in refused["error"]
    assert n.gpu(0)["sriov"]["num_vfs"] == 0


def test_amdsmi_6_0_process_that_cannot_be_described_refuses(
    node: Callable[[str], Node],
) -> None:
    n = node("mi300x-8")
    play_amdsmi_6_0(n.state)
    fake_amd.bind(n.state)
    fake_amd.sim_add_process(2, pid=557)
    fake_amd.sim_inject_fault("amdsmi_get_gpu_process_info", "AMDSMI_STATUS_NO_PERM", gpu=2)
    refused = n.partition([(2, amd_ops("NPS1", "CPX"))])["gpus"][0]
    assert refused["applied"] == 0
    assert refused["error"].startswith(
        "busy: a process (handle 557) whose details cannot be read: AMDSMI_STATUS_NO_PERM"
    )
    assert n.gpu(2)["partition"]["compute"] == "SPX"


def test_amdsmi_process_list_that_fails_refuses(node: Callable[[str], Node]) -> None:
    n = node("mi300x-8")
    fake_amd.bind(n.state)
    fake_amd.sim_inject_fault("amdsmi_get_gpu_process_list", "AMDSMI_STATUS_IO", gpu=1)
    refused = n.partition([(1, amd_ops("NPS1", "CPX"))])["gpus"][0]
    assert refused["applied"] == 0
    assert refused["error"].startswith("busy: cannot list the card's processes: AMDSMI_STATUS_IO")


# -- the shared reader itself -------------------------------------------------------------------


def test_process_entries_reads_every_shape() -> None:
    handle = object()
    known = {7: {"pid": 7, "name": "a"}}

    def info(processor: Any, process: Any) -> dict[str, Any]:
        assert processor is handle
        if process.value not in known:
            raise RuntimeError("no such process")
        return known[process.value]

    dicts = SimpleNamespace(amdsmi_get_gpu_process_list=lambda h: [{"pid": 1, "name": "x"}])
    assert amd_driver.process_entries(dicts, handle) == [{"pid": 1, "name": "x"}]
    handles = SimpleNamespace(
        amdsmi_get_gpu_process_list=lambda h: [ctypes.c_uint32(7), ctypes.c_uint32(8)],
        amdsmi_get_gpu_process_info=info,
    )
    first, second = amd_driver.process_entries(handles, handle)
    assert first == {"pid": 7, "name": "a"}
    assert isinstance(second, amd_driver.UnreadableProcess)
    assert str(second) == "a process (handle 8) whose details cannot be read: no such process"
    no_info = SimpleNamespace(amdsmi_get_gpu_process_list=lambda h: [ctypes.c_uint32(9)])
    (only,) = amd_driver.process_entries(no_info, handle)
    assert isinstance(only, amd_driver.UnreadableProcess)
    assert "no amdsmi_get_gpu_process_info" in only.reason
    with pytest.raises(AttributeError):
        amd_driver.process_entries(SimpleNamespace(), handle)
