"""A fake `amdsmi` (PyPI amdsmi 7.x API) backed by the "amd" section of a SimState.

gpupoolctl.sim.activate(state) binds this module and installs it as sys.modules["amdsmi"], so
the agent's amdsmi driver runs unchanged against it. Names, enums, exception classes and
return shapes follow amdsmi 7.0.2's amdsmi_interface.py / amdsmi_exception.py; the state
layout is documented in gpupoolctl.sim.amd_templates.

Rules enforced (from the partition research, section 4, via gpupoolctl.hw.amd_modes):
- a compute partition must pair with the current memory partition (MI300X: NPS4 only with
  CPX, SPX refused while NPS4 is set) -> AMDSMI_STATUS_SETTING_UNAVAILABLE (55);
- setting a memory partition changes every GPU in the xGMI hive and moves an incompatible
  compute partition along (NPS4 moves SPX to CPX), as amd-smi does;
- any partition change with processes running, or with SR-IOV VFs enabled, is refused with
  AMDSMI_STATUS_BUSY (30);
- a card in compute mode XPX shows as N logical GPUs (processor handles): CUs, VRAM and the
  BDF function number (= partition id) are per logical GPU, as on real hardware;
- with no AMD GPU (no "amd" section), amdsmi_init fails with AMDSMI_STATUS_DRIVER_NOT_LOADED.

Sim-only extras (not in the real amdsmi; names start with gpupool_ or sim_):
- `gpupool_sim_sysfs`: the PCI sysfs files for SR-IOV (sriov_totalvfs, sriov_numvfs) with the
  kernel's write semantics (ERANGE above total, EBUSY from one non-zero count to another,
  ENOENT when the PF driver has no sriov_configure). The agent reads sysfs through
  `read_text(path)` / `write_text(path, text)`: real files on a node, this object in the sim.
- `gpupool_sim_pci_root()`: the cards' VFs as a PCI sysfs tree written out as real files and
  links (virtfnN, driver, enable, iommu_group), and the root to read it under; the agent's
  sysfs reader (gpupoolctl.agent.sriov) runs on it unchanged. VF bindings come from
  state["amd"]["gpus"][i]["sriov"]["vfs"] (gpupoolctl.sim.amd_templates).
- `sim_add_process`, `sim_clear_processes`, `sim_bind_vf`, `sim_inject_fault`,
  `sim_clear_faults`.

An older amdsmi: with state["amd"]["process_handles"] true the process calls take amdsmi
6.0.x's shape (PyPI amdsmi 6.0.2 amdsmi_interface.py): amdsmi_get_gpu_process_list returns
process handles (ctypes.c_uint32, here the pid) and amdsmi_get_gpu_process_info(processor_handle,
process) exists to describe one; otherwise that function is absent, as in 6.1+.

Fault injection: state["amd"]["faults"] is a list of
    {"fn": "amdsmi_set_gpu_compute_partition",  # API function name, or "sysfs:sriov_numvfs"
     "gpu": 3 | null,                            # physical GPU index; null = any GPU
     "status": "AMDSMI_STATUS_AMDGPU_RESTART_ERR" | 54,   # raised as AmdSmiLibraryException
     "errno": "EIO",                             # for sysfs faults: raised as OSError
     "times": 1 | null}                          # fire this many times (null = always)
Each firing is recorded in the state (times counts down; the fault is dropped at 0).
"""

from __future__ import annotations

import ctypes
import errno as _errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from enum import IntEnum
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpupoolctl.hw import amd_modes, sharing
from gpupoolctl.hw.pci import is_vfio
from gpupoolctl.sim.statefile import StateFile

__version__ = "26.0.2+gpupoolctl.sim"

# amdsmi_status_t (amdsmi_wrapper.py)
AMDSMI_STATUS_SUCCESS = 0
AMDSMI_STATUS_INVAL = 1
AMDSMI_STATUS_NOT_SUPPORTED = 2
AMDSMI_STATUS_NOT_YET_IMPLEMENTED = 3
AMDSMI_STATUS_FAIL_LOAD_MODULE = 4
AMDSMI_STATUS_FAIL_LOAD_SYMBOL = 5
AMDSMI_STATUS_DRM_ERROR = 6
AMDSMI_STATUS_API_FAILED = 7
AMDSMI_STATUS_TIMEOUT = 8
AMDSMI_STATUS_RETRY = 9
AMDSMI_STATUS_NO_PERM = 10
AMDSMI_STATUS_INTERRUPT = 11
AMDSMI_STATUS_IO = 12
AMDSMI_STATUS_ADDRESS_FAULT = 13
AMDSMI_STATUS_FILE_ERROR = 14
AMDSMI_STATUS_OUT_OF_RESOURCES = 15
AMDSMI_STATUS_INTERNAL_EXCEPTION = 16
AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS = 17
AMDSMI_STATUS_INIT_ERROR = 18
AMDSMI_STATUS_REFCOUNT_OVERFLOW = 19
AMDSMI_STATUS_DIRECTORY_NOT_FOUND = 20
AMDSMI_STATUS_BUSY = 30
AMDSMI_STATUS_NOT_FOUND = 31
AMDSMI_STATUS_NOT_INIT = 32
AMDSMI_STATUS_NO_SLOT = 33
AMDSMI_STATUS_DRIVER_NOT_LOADED = 34
AMDSMI_STATUS_MORE_DATA = 39
AMDSMI_STATUS_NO_DATA = 40
AMDSMI_STATUS_INSUFFICIENT_SIZE = 41
AMDSMI_STATUS_UNEXPECTED_SIZE = 42
AMDSMI_STATUS_UNEXPECTED_DATA = 43
AMDSMI_STATUS_FILE_NOT_FOUND = 52
AMDSMI_STATUS_ARG_PTR_NULL = 53
AMDSMI_STATUS_AMDGPU_RESTART_ERR = 54
AMDSMI_STATUS_SETTING_UNAVAILABLE = 55
AMDSMI_STATUS_CORRUPTED_EEPROM = 56
AMDSMI_STATUS_MAP_ERROR = 4294967294
AMDSMI_STATUS_UNKNOWN_ERROR = 4294967295

_STATUS_TEXT: dict[int, str] = {
    AMDSMI_STATUS_INVAL: "Invalid parameters",
    AMDSMI_STATUS_NOT_SUPPORTED: "Feature not supported",
    AMDSMI_STATUS_NOT_YET_IMPLEMENTED: "Feature not yet implemented",
    AMDSMI_STATUS_FAIL_LOAD_MODULE: "Fail to load lib",
    AMDSMI_STATUS_FAIL_LOAD_SYMBOL: "Fail to load symbol",
    AMDSMI_STATUS_DRM_ERROR: "Error when called libdrm",
    AMDSMI_STATUS_API_FAILED: "API call failed",
    AMDSMI_STATUS_TIMEOUT: "Timeout in API call",
    AMDSMI_STATUS_RETRY: "Retry operation",
    AMDSMI_STATUS_NO_PERM: "Permission Denied",
    AMDSMI_STATUS_INTERRUPT: "Interrupt ocurred during execution",
    AMDSMI_STATUS_IO: "I/O Error",
    AMDSMI_STATUS_FILE_ERROR: "Error opening file",
    AMDSMI_STATUS_OUT_OF_RESOURCES: "Not enough memory",
    AMDSMI_STATUS_INTERNAL_EXCEPTION: "Internal error",
    AMDSMI_STATUS_INPUT_OUT_OF_BOUNDS: "Out of bounds",
    AMDSMI_STATUS_INIT_ERROR: "Initialization error",
    AMDSMI_STATUS_BUSY: "Device busy",
    AMDSMI_STATUS_NOT_FOUND: "Device Not found",
    AMDSMI_STATUS_NOT_INIT: "Device not initialized",
    AMDSMI_STATUS_NO_SLOT: "No more free slot",
    AMDSMI_STATUS_DRIVER_NOT_LOADED: "Driver not loaded",
    AMDSMI_STATUS_NO_DATA: "No data was found for given input",
    AMDSMI_STATUS_FILE_NOT_FOUND: "File or directory not found",
    AMDSMI_STATUS_AMDGPU_RESTART_ERR: "AMDGPU restart failed, please check dmsg for errors",
    AMDSMI_STATUS_SETTING_UNAVAILABLE: "Setting is not available",
}
_STATUS_NAMES: dict[str, int] = {
    name: value
    for name, value in globals().items()
    if name.startswith("AMDSMI_STATUS_") and isinstance(value, int)
}


# -- exceptions (amdsmi_exception.py) ----------------------------------------------------------


class AmdSmiException(Exception):
    """Base smi exception class"""


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        err_code = abs(err_code)
        super().__init__(err_code)
        self.err_code = err_code
        self.set_err_info()

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | {self.err_info}"

    def get_error_info(self, detailed: bool = True) -> str:
        return self.err_info if detailed else self.err_info.split(" - ")[0]

    def get_error_code(self) -> int:
        return self.err_code

    def set_err_info(self) -> None:
        name = next((n for n, v in _STATUS_NAMES.items() if v == self.err_code), None)
        if name is None or self.err_code not in _STATUS_TEXT:
            self.err_info = "AMDSMI_STATUS_UNKNOWN_ERROR - An unknown error occurred"
        else:
            self.err_info = f"{name} - {_STATUS_TEXT[self.err_code]}"


class AmdSmiRetryException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_RETRY)


class AmdSmiTimeoutException(AmdSmiLibraryException):
    def __init__(self) -> None:
        super().__init__(AMDSMI_STATUS_TIMEOUT)


class AmdSmiParameterException(AmdSmiException):
    def __init__(self, receivedValue: Any, expectedType: Any, msg: str | None = None) -> None:
        super().__init__(msg)
        self.err_code = None
        self.actualType = type(receivedValue)
        self.expectedType = expectedType
        self.err_msg = msg or (
            "Invalid parameter:\n"
            f"Actual type: {self.actualType}\n"
            f"Expected type: {self.expectedType}"
        )

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiKeyException(AmdSmiException):
    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key
        self.err_msg = "Key " + key + " is missing from dictionary"

    def __str__(self) -> str:
        return self.err_msg


class AmdSmiBdfFormatException(AmdSmiException):
    def __init__(self, bdf: Any) -> None:
        super().__init__()
        self.bdf = bdf

    def __str__(self) -> str:
        return f"Wrong BDF format: {self.bdf}."


# -- enums (amdsmi_interface.py) ---------------------------------------------------------------


class AmdSmiInitFlags(IntEnum):
    INIT_ALL_PROCESSORS = 0xFFFFFFFF
    INIT_AMD_CPUS = 1
    INIT_AMD_GPUS = 2
    INIT_AMD_APUS = 3
    INIT_NON_AMD_CPUS = 4
    INIT_NON_AMD_GPUS = 8


class AmdSmiComputePartitionType(IntEnum):
    SPX = 1
    DPX = 2
    TPX = 3
    QPX = 4
    CPX = 5
    INVALID = 0


class AmdSmiAcceleratorPartitionType(IntEnum):
    SPX = 1
    DPX = 2
    TPX = 3
    QPX = 4
    CPX = 5
    INVALID = 0


class AmdSmiMemoryPartitionType(IntEnum):
    NPS1 = 1
    NPS2 = 2
    NPS4 = 4
    NPS8 = 8
    UNKNOWN = 0


class AmdSmiLinkType(IntEnum):
    AMDSMI_LINK_TYPE_INTERNAL = 0
    AMDSMI_LINK_TYPE_XGMI = 2
    AMDSMI_LINK_TYPE_PCIE = 1
    AMDSMI_LINK_TYPE_NOT_APPLICABLE = 3
    AMDSMI_LINK_TYPE_UNKNOWN = 4


class AmdSmiMemoryType(IntEnum):
    VRAM = 0
    VIS_VRAM = 1
    GTT = 2


class AmdSmiProcessorType(IntEnum):
    UNKNOWN = 0
    AMDSMI_PROCESSOR_TYPE_AMD_GPU = 1
    AMDSMI_PROCESSOR_TYPE_AMD_CPU = 2
    AMDSMI_PROCESSOR_TYPE_NON_AMD_GPU = 3
    AMDSMI_PROCESSOR_TYPE_NON_AMD_CPU = 4


class AmdSmiVirtualizationMode(IntEnum):
    UNKNOWN = 0
    BAREMETAL = 1
    HOST = 2
    GUEST = 3
    PASSTHROUGH = 4


class AmdSmiVramType(IntEnum):
    UNKNOWN = 0
    HBM = 1
    HBM2 = 2
    HBM2E = 3
    HBM3 = 4
    DDR2 = 10
    DDR3 = 11
    DDR4 = 12
    GDDR1 = 17
    GDDR2 = 18
    GDDR3 = 19
    GDDR4 = 20
    GDDR5 = 21
    GDDR6 = 22
    GDDR7 = 23


AMDSMI_LINK_TYPE_INTERNAL = 0
AMDSMI_LINK_TYPE_PCIE = 1
AMDSMI_LINK_TYPE_XGMI = 2
AMDSMI_LINK_TYPE_NOT_APPLICABLE = 3
AMDSMI_LINK_TYPE_UNKNOWN = 4


class ProcessorHandle:
    """Stands in for amdsmi_wrapper.amdsmi_processor_handle (a ctypes c_void_p)."""

    __slots__ = ("gpu", "partition", "value")

    def __init__(self, gpu: int, partition: int) -> None:
        self.gpu = gpu
        self.partition = partition
        self.value = 0x5A000000 + gpu * 0x100 + partition  # like c_void_p.value

    def __repr__(self) -> str:
        return f"c_void_p({self.value})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ProcessorHandle) and other.value == self.value

    def __hash__(self) -> int:
        return hash(self.value)


amdsmi_processor_handle = ProcessorHandle

# Code that reaches for amdsmi.amdsmi_wrapper constants finds the same names here.
amdsmi_wrapper = SimpleNamespace(
    amdsmi_processor_handle=ProcessorHandle,
    **_STATUS_NAMES,
    AMDSMI_LINK_TYPE_INTERNAL=AMDSMI_LINK_TYPE_INTERNAL,
    AMDSMI_LINK_TYPE_PCIE=AMDSMI_LINK_TYPE_PCIE,
    AMDSMI_LINK_TYPE_XGMI=AMDSMI_LINK_TYPE_XGMI,
    AMDSMI_LINK_TYPE_NOT_APPLICABLE=AMDSMI_LINK_TYPE_NOT_APPLICABLE,
    AMDSMI_LINK_TYPE_UNKNOWN=AMDSMI_LINK_TYPE_UNKNOWN,
)


# -- binding and plumbing ----------------------------------------------------------------------

_state: StateFile | None = None
_initialized = False
_MIB = 1024 * 1024


def bind(state: StateFile | None) -> None:
    """Back the fake with this node's state (gpupoolctl.sim.activate calls it)."""
    global _state, _initialized
    _state = state
    _initialized = False


def _section() -> dict[str, Any] | None:
    return _state.section("amd") if _state is not None else None


def _gpus() -> list[dict[str, Any]]:
    section = _section()
    return list(section.get("gpus", [])) if section else []


def _product(gpu: dict[str, Any]) -> amd_modes.AmdProduct:
    return amd_modes.product(str(gpu["product"]))


def _partitions(gpu: dict[str, Any]) -> int:
    return _product(gpu).partitions(str(gpu["compute_partition"]))


def _status_code(value: Any) -> int:
    if isinstance(value, int):
        return value
    return _STATUS_NAMES.get(str(value), AMDSMI_STATUS_UNKNOWN_ERROR)


def _matching_fault(fn: str, gpu: int | None) -> int | None:
    section = _section() or {}
    for position, fault in enumerate(section.get("faults", [])):
        if fault.get("fn") != fn:
            continue
        if fault.get("gpu") is not None and gpu is not None and fault["gpu"] != gpu:
            continue
        return position
    return None


def _fire_fault(fn: str, gpu: int | None) -> dict[str, Any] | None:
    """Consume one firing of a matching fault (persisted); return it, or None."""
    if _state is None or _matching_fault(fn, gpu) is None:
        return None
    with _state.mutate() as data:
        section = data.get("amd") or {}
        faults = section.get("faults", [])
        position = _matching_fault(fn, gpu)
        if position is None:
            return None
        fault = dict(faults[position])
        times = fault.get("times")
        if times is not None:
            if times <= 1:
                faults.pop(position)
            else:
                faults[position]["times"] = times - 1
        return fault


def _check_fault(fn: str, gpu: int | None) -> None:
    fault = _fire_fault(fn, gpu)
    if fault is not None:
        raise AmdSmiLibraryException(_status_code(fault.get("status", AMDSMI_STATUS_API_FAILED)))


def _require_init() -> None:
    if not _initialized:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_INIT)


def _resolve(handle: Any) -> tuple[dict[str, Any], int]:
    if not isinstance(handle, ProcessorHandle):
        raise AmdSmiParameterException(handle, ProcessorHandle)
    _require_init()
    gpus = _gpus()
    # A handle from before a partition change may name a logical GPU that no longer exists.
    if handle.gpu >= len(gpus) or handle.partition >= _partitions(gpus[handle.gpu]):
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_FOUND)
    return gpus[handle.gpu], handle.partition


def _enter(fn: str, handle: Any) -> tuple[dict[str, Any], int]:
    gpu, partition = _resolve(handle)
    _check_fault(fn, int(gpu["index"]))
    return gpu, partition


def _parse_bdf(bdf: str) -> tuple[int, int, int, int] | None:
    match = re.fullmatch(r"([0-9a-fA-F]{4}):([0-9a-fA-F]{2}):([0-1][0-9a-fA-F])\.([0-7])", bdf)
    if match is None:
        match = re.fullmatch(r"()([0-9a-fA-F]{2}):([0-1][0-9a-fA-F])\.([0-7])", bdf)
        if match is None:
            return None
    domain, bus, device, function = (int(x, 16) if x else 0 for x in match.groups())
    return domain, bus, device, function


def _logical_bdf(gpu: dict[str, Any], partition: int) -> str:
    # Partitions of one card share its bus/device; amdsmi reports the partition id as function.
    return str(gpu["bdf"])[:-1] + format(partition, "x")


def _uuid(gpu: dict[str, Any], partition: int) -> str:
    unique = str(gpu.get("unique_id", "0" * 12)).ljust(12, "0")
    return f"{partition:02x}ff{int(gpu['device_id']):04x}-0000-1000-80{unique[:2]}-{unique[:12]}"


# -- library and discovery ---------------------------------------------------------------------


def amdsmi_init(flag: AmdSmiInitFlags = AmdSmiInitFlags.INIT_AMD_GPUS) -> None:
    global _initialized
    if not isinstance(flag, AmdSmiInitFlags):
        raise AmdSmiParameterException(flag, AmdSmiInitFlags)
    if _state is not None:
        _state.refresh()
    if _section() is None:
        # No AMD GPU on this node: rocm-smi finds no amdgpu driver, amdsmi_init fails.
        raise AmdSmiLibraryException(AMDSMI_STATUS_DRIVER_NOT_LOADED)
    _check_fault("amdsmi_init", None)
    _initialized = True


def amdsmi_shut_down() -> None:
    global _initialized
    _initialized = False


def amdsmi_get_lib_version() -> dict[str, Any]:
    major, minor, release = ((_section() or {}).get("lib_version") or [26, 0, 2])[:3]
    return {"major": major, "minor": minor, "release": release, "build": "sim"}


def amdsmi_get_processor_handles() -> list[ProcessorHandle]:
    _require_init()
    _check_fault("amdsmi_get_processor_handles", None)
    return [
        ProcessorHandle(int(gpu["index"]), partition)
        for gpu in _gpus()
        for partition in range(_partitions(gpu))
    ]


def amdsmi_get_processor_type(processor_handle: ProcessorHandle) -> dict[str, str]:
    _enter("amdsmi_get_processor_type", processor_handle)
    return {"processor_type": AmdSmiProcessorType.AMDSMI_PROCESSOR_TYPE_AMD_GPU.name}


def amdsmi_get_processor_handle_from_bdf(bdf: str) -> ProcessorHandle:
    _require_init()
    parsed = _parse_bdf(str(bdf))
    if parsed is None:
        raise AmdSmiBdfFormatException(bdf)
    for handle in amdsmi_get_processor_handles():
        gpu, partition = _resolve(handle)
        if _parse_bdf(_logical_bdf(gpu, partition)) == parsed:
            return handle
    raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_FOUND)


def amdsmi_get_gpu_device_bdf(processor_handle: ProcessorHandle) -> str:
    gpu, partition = _enter("amdsmi_get_gpu_device_bdf", processor_handle)
    return _logical_bdf(gpu, partition)


def amdsmi_get_gpu_bdf_id(processor_handle: ProcessorHandle) -> int:
    gpu, partition = _enter("amdsmi_get_gpu_bdf_id", processor_handle)
    domain, bus, device, function = _parse_bdf(_logical_bdf(gpu, partition)) or (0, 0, 0, 0)
    return (domain << 32) | (partition << 28) | (bus << 8) | (device << 3) | function


def amdsmi_get_gpu_device_uuid(processor_handle: ProcessorHandle) -> str:
    gpu, partition = _enter("amdsmi_get_gpu_device_uuid", processor_handle)
    return _uuid(gpu, partition)


def amdsmi_get_gpu_enumeration_info(processor_handle: ProcessorHandle) -> dict[str, Any]:
    gpu, partition = _enter("amdsmi_get_gpu_enumeration_info", processor_handle)
    position = amdsmi_get_processor_handles().index(processor_handle)
    return {
        "drm_render": 128 + position,
        "drm_card": 1 + position,
        "hsa_id": 2 + position,  # HSA agent 0 and 1 are the CPU sockets
        "hip_id": position,
        "hip_uuid": "GPU-" + _uuid(gpu, partition).replace("-", "")[:16],
    }


def amdsmi_get_gpu_kfd_info(processor_handle: ProcessorHandle) -> dict[str, Any]:
    _, partition = _enter("amdsmi_get_gpu_kfd_info", processor_handle)
    position = amdsmi_get_processor_handles().index(processor_handle)
    return {"kfd_id": 0x1000 + position, "node_id": 2 + position, "current_partition_id": partition}


def amdsmi_get_gpu_driver_info(processor_handle: ProcessorHandle) -> dict[str, str]:
    _enter("amdsmi_get_gpu_driver_info", processor_handle)
    version = str((_section() or {}).get("driver_version", "N/A"))
    return {"driver_name": "amdgpu", "driver_version": version, "driver_date": "2015/01/01 00:00"}


def amdsmi_get_gpu_virtualization_mode(
    processor_handle: ProcessorHandle,
) -> dict[str, AmdSmiVirtualizationMode]:
    gpu, _ = _enter("amdsmi_get_gpu_virtualization_mode", processor_handle)
    name = str(gpu.get("virtualization", "BAREMETAL"))
    return {"mode": AmdSmiVirtualizationMode[name]}


# -- static hardware information ---------------------------------------------------------------


def amdsmi_get_gpu_asic_info(processor_handle: ProcessorHandle) -> dict[str, Any]:
    gpu, _ = _enter("amdsmi_get_gpu_asic_info", processor_handle)
    return {
        "market_name": str(gpu["market_name"]),
        "vendor_id": hex(int(gpu["vendor_id"])),
        "vendor_name": "Advanced Micro Devices Inc. [AMD/ATI]",
        "subvendor_id": "0x" + format(int(gpu["subvendor_id"]), "04x"),
        "device_id": hex(int(gpu["device_id"])),
        "rev_id": "0x" + format(int(gpu.get("rev_id", 0)), "02x"),
        "asic_serial": str(gpu["asic_serial"]),
        "oam_id": int(gpu.get("oam_id", 0)),
        "num_compute_units": int(gpu["num_compute_units"]) // _partitions(gpu),
        "target_graphics_version": str(gpu["gfx_target"]),
        "subsystem_id": "0x" + format(int(gpu["subsystem_id"]), "04x"),
    }


def amdsmi_get_gpu_id(processor_handle: ProcessorHandle) -> int:
    gpu, _ = _enter("amdsmi_get_gpu_id", processor_handle)
    return int(gpu["device_id"])


def amdsmi_get_gpu_vendor_name(processor_handle: ProcessorHandle) -> str:
    _enter("amdsmi_get_gpu_vendor_name", processor_handle)
    return "Advanced Micro Devices Inc. [AMD/ATI]"


def amdsmi_get_gpu_subsystem_id(processor_handle: ProcessorHandle) -> str:
    gpu, _ = _enter("amdsmi_get_gpu_subsystem_id", processor_handle)
    return "0x" + format(int(gpu["subsystem_id"]), "04x")


def amdsmi_get_gpu_xcd_counter(processor_handle: ProcessorHandle) -> int:
    gpu, _ = _enter("amdsmi_get_gpu_xcd_counter", processor_handle)
    return int(gpu["xcds"]) // _partitions(gpu)


def amdsmi_get_gpu_board_info(processor_handle: ProcessorHandle) -> dict[str, str]:
    gpu, _ = _enter("amdsmi_get_gpu_board_info", processor_handle)
    return {
        "model_number": "102-G30211-00",
        "product_serial": str(gpu["asic_serial"])[2:14],
        "fru_id": "N/A",
        "product_name": str(gpu["market_name"]),
        "manufacturer_name": "AMD",
    }


def _vram_type(name: str) -> AmdSmiVramType:
    # amdsmi 7.0 has no HBM3E member; its library reports HBM3E parts as HBM3.
    return AmdSmiVramType.__members__.get(
        name.removesuffix("E") if name == "HBM3E" else name, AmdSmiVramType.UNKNOWN
    )


def amdsmi_get_gpu_vram_info(processor_handle: ProcessorHandle) -> dict[str, Any]:
    gpu, _ = _enter("amdsmi_get_gpu_vram_info", processor_handle)
    vram = gpu["vram"]
    return {
        "vram_type": int(_vram_type(str(vram["type"]))),
        "vram_vendor": str(vram.get("vendor", "")),
        "vram_size": int(vram["size_mb"]) // _partitions(gpu),  # MB, per logical GPU
        "vram_bit_width": int(vram.get("bit_width", 0)),
        "vram_max_bandwidth": int(vram.get("max_bandwidth_gbps", 0)),  # GB/s
    }


# -- usage -------------------------------------------------------------------------------------


def _processes(gpu: dict[str, Any], partition: int) -> list[dict[str, Any]]:
    return [p for p in gpu.get("processes", []) if int(p.get("partition", 0)) == partition]


def _vram_mb(gpu: dict[str, Any], partition: int) -> tuple[int, int]:
    count = _partitions(gpu)
    total = int(gpu["vram"]["size_mb"]) // count
    used = int(gpu["vram"].get("used_mb", 0)) // count
    used += sum(int(p.get("vram_mb", 0)) for p in _processes(gpu, partition))
    return total, min(used, total)


def amdsmi_get_gpu_vram_usage(processor_handle: ProcessorHandle) -> dict[str, int]:
    gpu, partition = _enter("amdsmi_get_gpu_vram_usage", processor_handle)
    total, used = _vram_mb(gpu, partition)
    return {"vram_total": total, "vram_used": used}  # MB


def _memory_type(mem_type: Any) -> AmdSmiMemoryType:
    if not isinstance(mem_type, AmdSmiMemoryType):
        raise AmdSmiParameterException(mem_type, AmdSmiMemoryType)
    return mem_type


def amdsmi_get_gpu_memory_total(processor_handle: ProcessorHandle, mem_type: Any) -> int:
    gpu, partition = _enter("amdsmi_get_gpu_memory_total", processor_handle)
    if _memory_type(mem_type) is AmdSmiMemoryType.GTT:
        return int(gpu.get("gtt_mb", 0)) * _MIB
    return _vram_mb(gpu, partition)[0] * _MIB  # bytes


def amdsmi_get_gpu_memory_usage(processor_handle: ProcessorHandle, mem_type: Any) -> int:
    gpu, partition = _enter("amdsmi_get_gpu_memory_usage", processor_handle)
    if _memory_type(mem_type) is AmdSmiMemoryType.GTT:
        return 0
    return _vram_mb(gpu, partition)[1] * _MIB  # bytes


def amdsmi_get_gpu_activity(processor_handle: ProcessorHandle) -> dict[str, Any]:
    gpu, partition = _enter("amdsmi_get_gpu_activity", processor_handle)
    base = gpu.get("activity") or {}
    gfx = int(base.get("gfx", 0)) + sum(int(p.get("gfx", 0)) for p in _processes(gpu, partition))
    return {
        "gfx_activity": min(gfx, 100),
        "umc_activity": int(base.get("umc", 0)),
        "mm_activity": int(base.get("mm", 0)),
    }


def _process_dicts(gpu: dict[str, Any], partition: int) -> list[dict[str, Any]]:
    result = []
    for process in _processes(gpu, partition):
        vram = int(process.get("vram_mb", 0)) * _MIB
        result.append(
            {
                "name": str(process.get("name") or "N/A"),
                "pid": int(process["pid"]),
                "mem": vram,
                "engine_usage": {"gfx": 0, "enc": 0},
                "memory_usage": {"gtt_mem": 0, "cpu_mem": 0, "vram_mem": vram},
                "cu_occupancy": "N/A",
            }
        )
    return result


def _plays_6_0() -> bool:
    return bool((_section() or {}).get("process_handles"))


def amdsmi_get_gpu_process_list(processor_handle: ProcessorHandle) -> list[Any]:
    gpu, partition = _enter("amdsmi_get_gpu_process_list", processor_handle)
    listed = _process_dicts(gpu, partition)
    if _plays_6_0():
        return [ctypes.c_uint32(entry["pid"]) for entry in listed]
    return listed


def _amdsmi_get_gpu_process_info(
    processor_handle: ProcessorHandle, process: ctypes.c_uint32
) -> dict[str, Any]:
    """amdsmi 6.0.x only: one listed process's details (no cu_occupancy in 6.0)."""
    gpu, partition = _enter("amdsmi_get_gpu_process_info", processor_handle)
    if not isinstance(process, ctypes.c_uint32):
        raise AmdSmiParameterException(process, ctypes.c_uint32)
    for entry in _process_dicts(gpu, partition):
        if entry["pid"] == process.value:
            return {k: v for k, v in entry.items() if k != "cu_occupancy"}
    raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_FOUND)


def __getattr__(name: str) -> Any:
    # amdsmi_get_gpu_process_info exists only while the bound state plays amdsmi 6.0, so
    # `getattr(amdsmi, ..., None)` answers as the real 6.0 and 6.1+ modules do.
    if name == "amdsmi_get_gpu_process_info" and _plays_6_0():
        return _amdsmi_get_gpu_process_info
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- topology ----------------------------------------------------------------------------------


def _link(fn: str, src: Any, dst: Any) -> tuple[int, int, int]:
    """(type, hops, weight) between two logical GPUs; a fault on either end fails it."""
    a, pa = _enter(fn, src)
    b, pb = _enter(fn, dst)
    if a["index"] == b["index"]:
        if pa == pb:
            return AMDSMI_LINK_TYPE_INTERNAL, 0, 0
        return AMDSMI_LINK_TYPE_XGMI, 0, 13  # partitions of one card: on-package fabric
    if a.get("hive") and a.get("hive") == b.get("hive"):
        return AMDSMI_LINK_TYPE_XGMI, 1, 15
    same_numa = a.get("numa_node") == b.get("numa_node")
    return AMDSMI_LINK_TYPE_PCIE, 2 if same_numa else 3, 40 if same_numa else 72


def amdsmi_topo_get_link_type(
    processor_handle_src: ProcessorHandle, processor_handle_dst: ProcessorHandle
) -> dict[str, int]:
    kind, hops, _weight = _link(
        "amdsmi_topo_get_link_type", processor_handle_src, processor_handle_dst
    )
    return {"hops": hops, "type": kind}


def amdsmi_topo_get_link_weight(
    processor_handle_src: ProcessorHandle, processor_handle_dst: ProcessorHandle
) -> int:
    return _link("amdsmi_topo_get_link_weight", processor_handle_src, processor_handle_dst)[2]


def amdsmi_is_P2P_accessible(
    processor_handle_src: ProcessorHandle, processor_handle_dst: ProcessorHandle
) -> bool:
    _link("amdsmi_is_P2P_accessible", processor_handle_src, processor_handle_dst)
    return True


def amdsmi_topo_get_numa_node_number(processor_handle: ProcessorHandle) -> int:
    gpu, _ = _enter("amdsmi_topo_get_numa_node_number", processor_handle)
    node = gpu.get("numa_node")
    return 0xFFFFFFFF if node is None else int(node)


def amdsmi_get_gpu_topo_numa_affinity(processor_handle: ProcessorHandle) -> int:
    gpu, _ = _enter("amdsmi_get_gpu_topo_numa_affinity", processor_handle)
    node = gpu.get("numa_node")
    return -1 if node is None else int(node)


# -- partitions --------------------------------------------------------------------------------


def amdsmi_get_gpu_compute_partition(processor_handle: ProcessorHandle) -> str:
    gpu, _ = _enter("amdsmi_get_gpu_compute_partition", processor_handle)
    return str(gpu["compute_partition"])


def amdsmi_get_gpu_memory_partition(processor_handle: ProcessorHandle) -> str:
    gpu, _ = _enter("amdsmi_get_gpu_memory_partition", processor_handle)
    return str(gpu["memory_partition"])


def amdsmi_get_gpu_memory_partition_config(processor_handle: ProcessorHandle) -> dict[str, Any]:
    gpu, _ = _enter("amdsmi_get_gpu_memory_partition_config", processor_handle)
    return {
        "partition_caps": _product(gpu).memory_caps() or ["N/A"],
        "mp_mode": str(gpu["memory_partition"]),
        "num_numa_ranges": "N/A",
        "numa_range": "N/A",
    }


def _profile(product: amd_modes.AmdProduct, index: int, mode: str) -> dict[str, Any]:
    return {
        "profile_type": mode,
        "num_partitions": product.compute_modes[mode],
        "profile_index": index,
        "memory_caps": product.memory_modes_for(mode) or ["N/A"],
        "num_resources": 0,
        "resources": [],
    }


def amdsmi_get_gpu_accelerator_partition_profile(
    processor_handle: ProcessorHandle,
) -> dict[str, Any]:
    gpu, partition = _enter("amdsmi_get_gpu_accelerator_partition_profile", processor_handle)
    product = _product(gpu)
    modes = list(product.compute_modes)
    current = str(gpu["compute_partition"])
    profile = _profile(product, modes.index(current), current)
    profile["resources"] = "N/A"
    return {"partition_id": [partition], "partition_profile": profile}


def amdsmi_get_gpu_accelerator_partition_profile_config(
    processor_handle: ProcessorHandle,
) -> dict[str, Any]:
    gpu, _ = _enter("amdsmi_get_gpu_accelerator_partition_profile_config", processor_handle)
    product = _product(gpu)
    modes = list(product.compute_modes)
    return {
        "num_profiles": len(modes),
        "num_resource_profiles": 0,
        "resource_profiles": [],
        "default_profile_index": modes.index(product.default[0]),
        "profiles": [_profile(product, i, mode) for i, mode in enumerate(modes)],
    }


def _busy(gpu: dict[str, Any]) -> bool:
    # Running processes, or VFs handed to guests: the driver reload would pull the rug.
    sriov = gpu.get("sriov") or {}
    return bool(gpu.get("processes")) or int(sriov.get("num_vfs", 0)) > 0


def _set_compute(handle: Any, mode: str, fn: str) -> None:
    assert _state is not None  # _resolve already required a bound, initialised state
    index = int(_resolve(handle)[0]["index"])
    _check_fault(fn, index)
    with _state.mutate() as data:
        gpu = data["amd"]["gpus"][index]
        product = _product(gpu)
        if mode == gpu["compute_partition"]:
            return
        if mode not in product.compute_modes or not product.is_allowed(
            mode, str(gpu["memory_partition"])
        ):
            raise AmdSmiLibraryException(AMDSMI_STATUS_SETTING_UNAVAILABLE)
        if _busy(gpu):
            raise AmdSmiLibraryException(AMDSMI_STATUS_BUSY)
        gpu["compute_partition"] = mode


def amdsmi_set_gpu_compute_partition(
    processor_handle: ProcessorHandle, compute_partition: AmdSmiComputePartitionType
) -> None:
    if not isinstance(processor_handle, ProcessorHandle):
        raise AmdSmiParameterException(processor_handle, ProcessorHandle)
    if not isinstance(compute_partition, AmdSmiComputePartitionType):
        raise AmdSmiParameterException(compute_partition, AmdSmiComputePartitionType)
    if compute_partition is AmdSmiComputePartitionType.INVALID:
        raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
    _set_compute(processor_handle, compute_partition.name, "amdsmi_set_gpu_compute_partition")


def amdsmi_set_gpu_accelerator_partition_profile(
    processor_handle: ProcessorHandle, profile_index: int
) -> None:
    if not isinstance(profile_index, int):
        raise AmdSmiParameterException(profile_index, int)
    gpu, _ = _resolve(processor_handle)
    modes = list(_product(gpu).compute_modes)
    if not 0 <= profile_index < len(modes):
        raise AmdSmiLibraryException(AMDSMI_STATUS_INVAL)
    _set_compute(
        processor_handle, modes[profile_index], "amdsmi_set_gpu_accelerator_partition_profile"
    )


def amdsmi_set_gpu_memory_partition(
    processor_handle: ProcessorHandle, memory_partition: AmdSmiMemoryPartitionType
) -> None:
    if not isinstance(processor_handle, ProcessorHandle):
        raise AmdSmiParameterException(processor_handle, ProcessorHandle)
    if not isinstance(memory_partition, AmdSmiMemoryPartitionType):
        raise AmdSmiParameterException(memory_partition, AmdSmiMemoryPartitionType)
    index = int(_resolve(processor_handle)[0]["index"])
    assert _state is not None  # _resolve required a bound, initialised state
    _check_fault("amdsmi_set_gpu_memory_partition", index)
    mode = memory_partition.name
    with _state.mutate() as data:
        gpus = data["amd"]["gpus"]
        hive = gpus[index].get("hive")
        # The driver reloads for the whole hive, so every card in it moves together.
        members = [g for g in gpus if g is gpus[index] or (hive and g.get("hive") == hive)]
        if all(g["memory_partition"] == mode for g in members):
            return
        targets = []
        for gpu in members:
            product = _product(gpu)
            target = None
            if mode in product.memory_modes:
                target = product.compute_for_memory(str(gpu["compute_partition"]), mode)
            if target is None:
                raise AmdSmiLibraryException(AMDSMI_STATUS_SETTING_UNAVAILABLE)
            targets.append(target)
        if any(_busy(g) for g in members):
            raise AmdSmiLibraryException(AMDSMI_STATUS_BUSY)
        for gpu, target in zip(members, targets, strict=True):
            gpu["memory_partition"] = mode
            gpu["compute_partition"] = target


amdsmi_set_gpu_memory_partition_mode = amdsmi_set_gpu_memory_partition


# -- sim-only: sysfs for SR-IOV ----------------------------------------------------------------

_SYSFS_PATH = re.compile(
    r"/sys/bus/pci/devices/([0-9a-fA-F]{4}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])/"
    r"(sriov_totalvfs|sriov_numvfs)"
)


def _os_error(code: int, path: str) -> OSError:
    return OSError(code, _errno.errorcode.get(code, "error"), path)


class SimSysfs:
    """Sim-only (not in the real amdsmi): the SR-IOV sysfs files of the simulated cards.

    Same paths and the same errors as the kernel's drivers/pci/iov.c, so code that writes
    /sys/bus/pci/devices/<PF>/sriov_numvfs behaves identically against the sim.
    """

    def _lookup(self, path: str) -> tuple[int, str]:
        match = _SYSFS_PATH.fullmatch(path)
        if match is not None:
            bdf, name = match.group(1).lower(), match.group(2)
            for gpu in _gpus():
                if str(gpu["bdf"]).lower() == bdf and gpu.get("sriov"):
                    return int(gpu["index"]), name
        raise FileNotFoundError(_errno.ENOENT, "No such file or directory", path)

    def read_text(self, path: str) -> str:
        if _state is not None:
            _state.refresh()
        index, name = self._lookup(path)
        sriov = _gpus()[index]["sriov"]
        return f"{int(sriov['total_vfs' if name == 'sriov_totalvfs' else 'num_vfs'])}\n"

    def write_text(self, path: str, text: str) -> None:
        if _state is not None:
            _state.refresh()
        index, name = self._lookup(path)
        if name == "sriov_totalvfs":
            raise PermissionError(_errno.EACCES, "Permission denied", path)
        fault = _fire_fault("sysfs:sriov_numvfs", index)
        if fault is not None:
            raise _os_error(getattr(_errno, str(fault.get("errno", "EIO")), _errno.EIO), path)
        try:
            wanted = int(text.strip())
        except ValueError:
            raise _os_error(_errno.EINVAL, path) from None
        assert _state is not None  # _lookup found a GPU, so a state is bound
        with _state.mutate() as data:
            _store_numvfs(data["amd"]["gpus"][index], wanted, path)


def _store_numvfs(gpu: dict[str, Any], wanted: int, path: str) -> None:
    """sriov_numvfs_store(): the kernel's checks, in the kernel's order."""
    sriov = gpu["sriov"]
    if wanted < 0 or wanted > int(sriov["total_vfs"]):
        raise _os_error(_errno.ERANGE, path)
    if wanted == int(sriov["num_vfs"]):
        return
    if sriov.get("pf_driver") != "gim":  # amdgpu has no sriov_configure callback
        raise _os_error(_errno.ENOENT, path)
    if wanted and int(sriov["num_vfs"]):
        raise _os_error(_errno.EBUSY, path)  # "N VFs already enabled. Disable before ..."
    if wanted:
        offered = _product(gpu).vf_counts(
            str(gpu["compute_partition"]), str(gpu["memory_partition"])
        )
        if wanted not in offered:
            raise _os_error(_errno.EINVAL, path)  # GIM's sriov_configure refuses the count
    sriov["num_vfs"] = wanted
    # The old VF devices are gone, whoever held them; new ones come up unbound.
    sriov.pop("vfs", None)


gpupool_sim_sysfs = SimSysfs()


def vf_bdf(pf_bdf: str, vf: int) -> str:
    """Where the sim puts VF `vf` of a card: device 2 onwards of the PF's bus (the real offset
    and stride come from the card's SR-IOV capability; these are the sim's own)."""
    return f"{pf_bdf[:8]}{2 + vf // 8:02x}.{vf % 8}"


def _pci_tree() -> tuple[dict[str, str], dict[str, str]]:
    """(files, links) of the simulated cards' PCI sysfs, relative to the root."""
    files: dict[str, str] = {}
    links: dict[str, str] = {}
    for gpu in _gpus():
        sriov = gpu.get("sriov")
        if not sriov:
            continue
        pf = str(gpu["bdf"]).lower()
        base = f"sys/bus/pci/devices/{pf}"
        files[f"{base}/sriov_totalvfs"] = f"{int(sriov['total_vfs'])}\n"
        files[f"{base}/sriov_numvfs"] = f"{int(sriov['num_vfs'])}\n"
        bindings = sriov.get("vfs") or {}
        for n in range(int(sriov["num_vfs"])):
            vf = vf_bdf(pf, n)
            here = f"sys/bus/pci/devices/{vf}"
            links[f"{base}/virtfn{n}"] = f"../{vf}"
            links[f"{here}/physfn"] = f"../{pf}"
            group = 100 + 16 * int(gpu["index"]) + n
            links[f"{here}/iommu_group"] = f"../../../../kernel/iommu_groups/{group}"
            files[f"sys/kernel/iommu_groups/{group}/type"] = "DMA\n"
            binding = bindings.get(str(n)) or {}
            driver = binding.get("driver")
            # The kernel's enable count: a host driver enables the device when it binds,
            # vfio-pci only while a user (a VM) has it open.
            enabled = bool(driver) and (bool(binding.get("open")) or not is_vfio(str(driver)))
            files[f"{here}/enable"] = "1\n" if enabled else "0\n"
            if driver:
                links[f"{here}/driver"] = f"../../drivers/{driver}"
                files[f"sys/bus/pci/drivers/{driver}/uevent"] = f"DRIVER={driver}\n"
    return files, links


def gpupool_sim_pci_root() -> str:
    """Sim-only: write the cards' VFs out as a PCI sysfs tree; the root to read it under.

    Trees are named by their content, so an unchanged state is not written again and a
    reader never sees a half-written tree; older ones are removed."""
    if _state is None:
        raise RuntimeError("gpupoolctl.sim.amdsmi is not bound to a state (call bind())")
    _state.refresh()
    files, links = _pci_tree()
    digest = hashlib.sha256(json.dumps([files, links], sort_keys=True).encode()).hexdigest()
    home = _state.path.with_name(_state.path.name + ".pci")
    sharing.make_dirs(home)
    tree = home / digest[:16]
    if not tree.is_dir():
        _write_tree(home, tree, files, links)
    for other in home.iterdir():
        if other != tree and not other.name.startswith("."):
            shutil.rmtree(other, ignore_errors=True)
    return str(tree)


def _write_tree(home: Path, tree: Path, files: dict[str, str], links: dict[str, str]) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=".tmp-", dir=home))
    try:
        os.chmod(scratch, sharing.dir_mode(home))  # in a shared folder, other users' agents read it
        for relative, text in files.items():
            (scratch / relative).parent.mkdir(parents=True, exist_ok=True)
            (scratch / relative).write_text(text, encoding="ascii")
        for relative, target in links.items():
            (scratch / relative).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(target, scratch / relative)
        os.rename(scratch, tree)
    except OSError:
        shutil.rmtree(scratch, ignore_errors=True)
        if not tree.is_dir():  # not another agent's identical tree winning the rename
            raise


# -- sim-only: test and scenario helpers -------------------------------------------------------


def _mutate_section() -> Any:
    if _state is None:
        raise RuntimeError("gpupoolctl.sim.amdsmi is not bound to a state (call bind())")
    return _state.mutate()


def sim_add_process(
    gpu: int, pid: int, name: str = "python3", vram_mb: int = 0, partition: int = 0, gfx: int = 0
) -> None:
    """Sim-only: a process running on logical GPU (card `gpu`, `partition`)."""
    with _mutate_section() as data:
        data["amd"]["gpus"][gpu].setdefault("processes", []).append(
            {"pid": pid, "name": name, "vram_mb": vram_mb, "partition": partition, "gfx": gfx}
        )


def sim_bind_vf(gpu: int, vf: int, driver: str | None = "vfio-pci", in_use: bool = False) -> None:
    """Sim-only: bind VF `vf` of card `gpu` to `driver` (None: unbind); `in_use`: a user, a
    VM's qemu, has it open through vfio. Enabling or removing VFs drops every binding."""
    with _mutate_section() as data:
        sriov = data["amd"]["gpus"][gpu].get("sriov") or {}
        if not 0 <= vf < int(sriov.get("num_vfs", 0)):
            raise ValueError(f"card {gpu} has no VF {vf}")
        bindings = sriov.setdefault("vfs", {})
        if driver is None:
            bindings.pop(str(vf), None)
        else:
            bindings[str(vf)] = {"driver": driver, "open": in_use}


def sim_clear_processes(gpu: int | None = None) -> None:
    """Sim-only: end all processes (on one card, or everywhere)."""
    with _mutate_section() as data:
        for entry in data["amd"]["gpus"]:
            if gpu is None or entry["index"] == gpu:
                entry["processes"] = []


def sim_inject_fault(
    fn: str,
    status: str | int | None = None,
    gpu: int | None = None,
    times: int | None = None,
    errno_name: str | None = None,
) -> None:
    """Sim-only: make `fn` fail (see the module docstring for the stored format)."""
    fault: dict[str, Any] = {"fn": fn, "gpu": gpu, "times": times}
    if status is not None:
        fault["status"] = status
    if errno_name is not None:
        fault["errno"] = errno_name
    with _mutate_section() as data:
        data["amd"].setdefault("faults", []).append(fault)


def sim_clear_faults() -> None:
    with _mutate_section() as data:
        data["amd"]["faults"] = []


# -- health: ECC, bad pages, temperature, driver events ----------------------------------------
#
# Per card, state["amd"]["gpus"][i]["health"] (absent: a healthy card), written by
# gpupoolctl.sim.faults: {"ecc_correctable", "ecc_uncorrectable", "ecc_deferred": int,
# "bad_pages": int (retired), "bad_pages_pending": int, "temperature_c": int,
# "events": ["RING_HANG", "GPU_PRE_RESET", ...], "delivered": int (events already read)}.
# The logical GPUs (partitions) of a card share its health.


class AmdSmiTemperatureType(IntEnum):
    EDGE = 0
    HOTSPOT = 1
    JUNCTION = 1
    VRAM = 2
    HBM_0 = 3
    HBM_1 = 4
    HBM_2 = 5
    HBM_3 = 6
    PLX = 7


class AmdSmiTemperatureMetric(IntEnum):
    CURRENT = 0
    MAX = 1
    MIN = 2
    MAX_HYST = 3
    MIN_HYST = 4
    CRITICAL = 5
    CRITICAL_HYST = 6
    EMERGENCY = 7
    EMERGENCY_HYST = 8
    CRIT_MIN = 9
    CRIT_MIN_HYST = 10
    OFFSET = 11
    LOWEST = 12
    HIGHEST = 13


class AmdSmiEvtNotificationType(IntEnum):
    NONE = 0
    VMFAULT = 1
    THERMAL_THROTTLE = 2
    GPU_PRE_RESET = 3
    GPU_POST_RESET = 4
    RING_HANG = 5


class AmdSmiMemoryPageStatus(IntEnum):
    RESERVED = 0
    PENDING = 1
    UNRESERVABLE = 2


_SIM_IDLE_HOTSPOT_C = 41


def _card_health(gpu: dict[str, Any]) -> dict[str, Any]:
    value = gpu.get("health")
    return value if isinstance(value, dict) else {}


def amdsmi_get_gpu_total_ecc_count(processor_handle: ProcessorHandle) -> dict[str, int]:
    gpu, _ = _enter("amdsmi_get_gpu_total_ecc_count", processor_handle)
    health = _card_health(gpu)
    return {
        "correctable_count": int(health.get("ecc_correctable", 0)),
        "uncorrectable_count": int(health.get("ecc_uncorrectable", 0)),
        "deferred_count": int(health.get("ecc_deferred", 0)),
    }


def amdsmi_get_gpu_bad_page_info(processor_handle: ProcessorHandle) -> list[dict[str, Any]]:
    """As amdsmi's _format_bad_page_info: one record per page, status an
    AmdSmiMemoryPageStatus value."""
    gpu, _ = _enter("amdsmi_get_gpu_bad_page_info", processor_handle)
    health = _card_health(gpu)
    statuses = [AmdSmiMemoryPageStatus.RESERVED] * int(health.get("bad_pages", 0)) + [
        AmdSmiMemoryPageStatus.PENDING
    ] * int(health.get("bad_pages_pending", 0))
    return [
        {"value": i, "page_address": 0x7F000000 + i * 0x1000, "page_size": 4096, "status": s}
        for i, s in enumerate(statuses)
    ]


def amdsmi_get_temp_metric(
    processor_handle: ProcessorHandle,
    sensor_type: AmdSmiTemperatureType,
    metric: AmdSmiTemperatureMetric,
) -> int:
    if not isinstance(sensor_type, AmdSmiTemperatureType):
        raise AmdSmiParameterException(sensor_type, AmdSmiTemperatureType)
    if not isinstance(metric, AmdSmiTemperatureMetric):
        raise AmdSmiParameterException(metric, AmdSmiTemperatureMetric)
    gpu, _ = _enter("amdsmi_get_temp_metric", processor_handle)
    # Instinct cards have no edge sensor; the hotspot (junction) is what they report.
    if sensor_type != AmdSmiTemperatureType.HOTSPOT or metric != AmdSmiTemperatureMetric.CURRENT:
        raise AmdSmiLibraryException(AMDSMI_STATUS_NOT_SUPPORTED)
    return int(_card_health(gpu).get("temperature_c", _SIM_IDLE_HOTSPOT_C + int(gpu["index"])))


class AmdSmiEventReader:
    """As amdsmi's: register for event types on one GPU, read(timeout_ms) what is pending.

    The sim's driver events not yet read by any reader are what this one gets (they stand
    for the events raised while the agent runs); none pending: AMDSMI_STATUS_NO_DATA, the
    status the library answers when the timeout passes with nothing."""

    def __init__(
        self, processor_handle: ProcessorHandle, event_types: list[AmdSmiEvtNotificationType]
    ) -> None:
        if not isinstance(processor_handle, ProcessorHandle):
            raise AmdSmiParameterException(processor_handle, ProcessorHandle)
        for event_type in event_types:
            if not isinstance(event_type, AmdSmiEvtNotificationType):
                raise AmdSmiParameterException(event_type, AmdSmiEvtNotificationType)
        self.processor_handle = processor_handle
        self._types = {AmdSmiEvtNotificationType(t).name for t in event_types}
        _enter("amdsmi_init_gpu_event_notification", processor_handle)

    def read(self, timestamp: int, num_elem: int = 10) -> list[dict[str, Any]]:
        gpu, _ = _resolve(self.processor_handle)
        events = list(_card_health(gpu).get("events") or [])
        delivered = int(_card_health(gpu).get("delivered", 0))
        fresh = [e for e in events[delivered:] if e in self._types][: int(num_elem)]
        if not fresh or _state is None:
            raise AmdSmiLibraryException(AMDSMI_STATUS_NO_DATA)
        with _state.mutate() as data:
            data["amd"]["gpus"][int(gpu["index"])].setdefault("health", {})["delivered"] = len(
                events
            )
        return [
            {"processor_handle": self.processor_handle, "event": e, "message": f"sim {e}"}
            for e in fresh
        ]

    def stop(self) -> None:
        return None

    def __enter__(self) -> AmdSmiEventReader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def gpupool_sim_kernel_log() -> list[tuple[float | None, str]]:
    """Sim-only: the amdgpu lines of the node's kernel log for its driver events (the
    agent reads /dev/kmsg on a real node)."""
    out: list[tuple[float | None, str]] = []
    for gpu in _gpus():
        for event in _card_health(gpu).get("events") or []:
            bdf = str(gpu["bdf"])
            if event == "RING_HANG":
                out.append((None, f"amdgpu {bdf}: amdgpu: ring gfx_0.0.0 timeout, sim"))
            elif event == "GPU_PRE_RESET":
                out.append((None, f"amdgpu {bdf}: amdgpu: GPU reset begin!"))
    return out
