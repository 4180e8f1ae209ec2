"""The amdsmi driver against API shapes of older amdsmi releases than the simulator's 7.x."""

from __future__ import annotations

import ctypes
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.agent.drivers import amdsmi as driver_module
from gpupoolctl.sim import amdsmi as fake
from gpupoolctl.sim.state import SimState

MIB = 1024 * 1024


@pytest.fixture
def amdsmi_6_0(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The simulator, with the process calls of amdsmi 6.0.x (py-interface of ROCm 6.0):
    amdsmi_get_gpu_process_list returns process handles (ctypes.c_uint32) and the details
    come from amdsmi_get_gpu_process_info(processor_handle, process_handle)."""
    fake.bind(SimState.reset("m1", "mi300x-8", tmp_path))
    fake.sim_add_process(2, pid=4711, name="train", vram_mb=3072)
    newer_list = fake.amdsmi_get_gpu_process_list

    def process_list(handle: Any) -> list[ctypes.c_uint32]:
        return [ctypes.c_uint32(int(p["pid"])) for p in newer_list(handle)]

    def process_info(handle: Any, process: Any) -> dict[str, Any]:
        if not isinstance(process, ctypes.c_uint32):
            raise fake.AmdSmiParameterException(process, ctypes.c_uint32)
        for entry in newer_list(handle):
            if entry["pid"] == process.value:
                return {k: v for k, v in entry.items() if k != "cu_occupancy"}
        raise fake.AmdSmiLibraryException(fake.AMDSMI_STATUS_NOT_FOUND)

    monkeypatch.setattr(fake, "amdsmi_get_gpu_process_list", process_list)
    monkeypatch.setattr(fake, "amdsmi_get_gpu_process_info", process_info, raising=False)
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    yield
    fake.bind(None)


def test_amdsmi_6_0_process_handles_are_read(amdsmi_6_0: None) -> None:
    driver = driver_module.open_driver()
    try:
        gpus = driver.gpus()
    finally:
        driver.close()
    assert gpus[2]["processes"] == [
        {
            "pid": 4711,
            "name": "train",
            "used_memory_mib": 3072,
            "gpu_instance_id": None,
            "compute_instance_id": None,
        }
    ]
    assert [g["processes"] for i, g in enumerate(gpus) if i != 2] == [[]] * 7


def test_simulator_plays_amdsmi_6_0_when_asked(tmp_path: Path) -> None:
    # The state knob the end-to-end tests use: the same shapes as the fixture above.
    state = SimState.reset("m1", "mi300x-8", tmp_path)
    fake.bind(state)
    try:
        fake.sim_add_process(1, pid=4712, name="serve", vram_mb=1024)
        fake.amdsmi_init()
        handle = fake.amdsmi_get_processor_handles()[1]
        assert [e["pid"] for e in fake.amdsmi_get_gpu_process_list(handle)] == [4712]
        assert not hasattr(fake, "amdsmi_get_gpu_process_info")  # as in amdsmi 6.1+
        with state.mutate() as data:
            data["amd"]["process_handles"] = True
        (listed,) = fake.amdsmi_get_gpu_process_list(handle)
        assert isinstance(listed, ctypes.c_uint32) and listed.value == 4712
        info = fake.amdsmi_get_gpu_process_info(handle, listed)
        assert info["pid"] == 4712 and info["name"] == "serve" and "cu_occupancy" not in info
        with pytest.raises(fake.AmdSmiParameterException):
            fake.amdsmi_get_gpu_process_info(handle, 4712)
        driver = driver_module.AmdSmiDriver(fake, fake.amdsmi_get_processor_handles())
        assert [p["pid"] for p in driver.gpus()[1]["processes"]] == [4712]
        assert driver.gpus()[1]["processes"][0]["used_memory_mib"] == 1024
    finally:
        fake.amdsmi_shut_down()
        fake.bind(None)
