"""A fake `pynvml` (nvidia-ml-py 13.x) backed by the "nvidia" section of a SimState.

`gpupoolctl.sim.activate(state)` installs this module as sys.modules["pynvml"], so the agent's
nvml driver runs unchanged against it. It keeps the real module's names, argument conventions
(ctypes arrays and byref counts), return shapes (ctypes structs with the same fields, str from
GetName/GetUUID, friendly objects for processes), constants and NVMLError_* classes. Handles are
real ctypes pointers of the real handle types whose address encodes (kind, gpu, gi, ci); they
are never dereferenced.

State section (per node, written by gpupoolctl.sim.nvidia_templates):
  {"driver_version": str, "nvml_version": str, "cuda_driver_version": int,
   "driver_loaded": bool (default true),
   "gpus": [{"index", "name", "uuid", "serial", "catalog" (hw catalog key),
             "pci": {"bus_id", "device_id", "subsystem_id"},
             "pcie": {"host_bridge", "switches": [top..bottom]}, "numa_node",
             "memory_total_mib", "memory_reserved_mib", "utilization": {"gpu", "memory"},
             "compute_capability": [major, minor], "cuda_cores", "memory_bus_width",
             "max_clocks": {"graphics", "sm", "mem", "video"} (MHz),
             "nvlinks": [{"remote_bus_id", "remote_type": "gpu"|"switch", "active"}],
             "nvlink_version",
             "mig": null | {"current", "pending", "reset_required"?, "next_uuid",
                            "gpu_instances": [{"id", "profile_id", "start", "size",
                                               "compute_instances": [{"id", "profile_id",
                                                                      "start", "size",
                                                                      "uuid"}]}]},
             "processes": [{"pid", "name", "used_memory_mib", "gpu_instance_id",
                            "compute_instance_id"}],
             "unsupported": [pynvml function names that raise NotSupported on this GPU],
             "lost": bool (every call on this GPU raises GpuIsLost)}],
   "missing": [C symbols this libnvidia-ml lacks (an older driver): calling them raises
               FunctionNotFound, which the unversioned process listers turn into
               NVMLLibraryMismatchError as nvidia-ml-py 13 does],
   "faults": [{"op", "gpu"?, "nth", "times", "error", "seen"}]}

Fault ops: "init", "set_mig_mode", "create_gpu_instance", "destroy_gpu_instance",
"create_compute_instance", "destroy_compute_instance". A fault fires on the nth matching call
(counted in "seen", persisted) and then on the next times-1 calls (times -1: forever); error
is an NVMLError_* suffix ("InsufficientResources") or an NVML_ERROR_* code.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import string
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from ctypes import (
    POINTER,
    Structure,
    c_char,
    c_uint,
    c_ulonglong,
    c_void_p,
)
from typing import Any, NoReturn, TypeVar

from gpupoolctl.hw import catalog
from gpupoolctl.sim.statefile import StateFile

# --- constants (values as in nvidia-ml-py 13.615.71) -------------------------------------------

NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_NVLINK_MAX_LINKS = 36
NVML_CLOCK_GRAPHICS = 0
NVML_CLOCK_SM = 1
NVML_CLOCK_MEM = 2
NVML_CLOCK_VIDEO = 3
NVML_CLOCK_COUNT = 4

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_ALREADY_INITIALIZED = 5
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_INSUFFICIENT_SIZE = 7
NVML_ERROR_INSUFFICIENT_POWER = 8
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_IRQ_ISSUE = 11
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_CORRUPTED_INFOROM = 14
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_RESET_REQUIRED = 16
NVML_ERROR_OPERATING_SYSTEM = 17
NVML_ERROR_LIB_RM_VERSION_MISMATCH = 18
NVML_ERROR_IN_USE = 19
NVML_ERROR_MEMORY = 20
NVML_ERROR_NO_DATA = 21
NVML_ERROR_VGPU_ECC_NOT_SUPPORTED = 22
NVML_ERROR_INSUFFICIENT_RESOURCES = 23
NVML_ERROR_FREQ_NOT_SUPPORTED = 24
NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 25
NVML_ERROR_DEPRECATED = 26
NVML_ERROR_NOT_READY = 27
NVML_ERROR_GPU_NOT_FOUND = 28
NVML_ERROR_INVALID_STATE = 29
NVML_ERROR_RESET_TYPE_NOT_SUPPORTED = 30
NVML_ERROR_UNKNOWN = 999

NVML_TOPOLOGY_INTERNAL = 0
NVML_TOPOLOGY_SINGLE = 10
NVML_TOPOLOGY_MULTIPLE = 20
NVML_TOPOLOGY_HOSTBRIDGE = 30
NVML_TOPOLOGY_NODE = 40
NVML_TOPOLOGY_CPU = NVML_TOPOLOGY_NODE
NVML_TOPOLOGY_SYSTEM = 50

NVML_P2P_CAPS_INDEX_READ = (0,)  # sic: the real module has a trailing comma here
NVML_P2P_CAPS_INDEX_WRITE = 1
NVML_P2P_CAPS_INDEX_NVLINK = 2
NVML_P2P_CAPS_INDEX_ATOMICS = 3
NVML_P2P_CAPS_INDEX_PROP = 4
NVML_P2P_CAPS_INDEX_PCI = 4
NVML_P2P_CAPS_INDEX_UNKNOWN = 5
NVML_P2P_STATUS_OK = 0
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED = 1
NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED = NVML_P2P_STATUS_CHIPSET_NOT_SUPPORED
NVML_P2P_STATUS_GPU_NOT_SUPPORTED = 2
NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED = 3
NVML_P2P_STATUS_DISABLED_BY_REGKEY = 4
NVML_P2P_STATUS_NOT_SUPPORTED = 5
NVML_P2P_STATUS_UNKNOWN = 6

NVML_NVLINK_DEVICE_TYPE_GPU = 0x00
NVML_NVLINK_DEVICE_TYPE_IBMNPU = 0x01
NVML_NVLINK_DEVICE_TYPE_SWITCH = 0x02
NVML_NVLINK_DEVICE_TYPE_UNKNOWN = 0xFF

NVML_AFFINITY_SCOPE_NODE = 0
NVML_AFFINITY_SCOPE_SOCKET = 1

NVML_DEVICE_NAME_V2_BUFFER_SIZE = 96
NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE = 32
NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE = 16
NVML_DEVICE_UUID_V2_BUFFER_SIZE = 96

NVML_VALUE_NOT_AVAILABLE_ulonglong = c_ulonglong(-1)
NVML_VALUE_NOT_AVAILABLE_uint = c_uint(-1)

NVML_GPU_INSTANCE_ID_ANY = 0xFFFFFFFF
NVML_COMPUTE_INSTANCE_ID_ANY = 0xFFFFFFFF

NVML_DEVICE_MIG_DISABLE = 0x0
NVML_DEVICE_MIG_ENABLE = 0x1

NVML_GPU_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_GPU_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_GPU_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_GPU_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_GPU_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_GPU_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_GPU_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1 = 0x8
NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 0x9
NVML_GPU_INSTANCE_PROFILE_1_SLICE_GFX = 0xA
NVML_GPU_INSTANCE_PROFILE_2_SLICE_GFX = 0xB
NVML_GPU_INSTANCE_PROFILE_4_SLICE_GFX = 0xC
NVML_GPU_INSTANCE_PROFILE_1_SLICE_NO_ME = 0xD
NVML_GPU_INSTANCE_PROFILE_2_SLICE_NO_ME = 0xE
NVML_GPU_INSTANCE_PROFILE_1_SLICE_ALL_ME = 0xF
NVML_GPU_INSTANCE_PROFILE_2_SLICE_ALL_ME = 0x10
NVML_GPU_INSTANCE_PROFILE_3_SLICE_GFX = 0x11
NVML_GPU_INSTANCE_PROFILE_COUNT = 0x12

NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE = 0x0
NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE = 0x1
NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE = 0x2
NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE = 0x3
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE = 0x4
NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE = 0x5
NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE = 0x6
NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1 = 0x7
NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE_NVL = 0x8
NVML_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED = 0x0
NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT = 0x1

# The library's own enum bounds, apart from the module's constants above: an older binding
# (nvidia-ml-py 11.515 has GPU_INSTANCE_PROFILE_COUNT 0x8) can face a newer libnvidia-ml, which
# answers INVALID_ARGUMENT only past its own last profile (nvml.h).
_LIB_GPU_INSTANCE_PROFILE_COUNT = 0x12
_LIB_COMPUTE_INSTANCE_PROFILE_COUNT = 0x9

nvmlMemory_v2 = 0x02000028
nvmlGpuInstanceProfileInfo_v2 = 0x02000098
nvmlComputeInstanceProfileInfo_v2 = 0x02000088

_MIB = 1024 * 1024

# --- errors: same hierarchy and naming as the real module --------------------------------------


class NVMLLibraryMismatchError(Exception):
    """As in nvidia-ml-py 13: deliberately not an NVMLError."""


class NVMLError(Exception):
    _valClassMapping: dict[int, type[NVMLError]] = {}  # noqa: RUF012 (mirrors pynvml)
    _errcode_to_string: dict[int, str] = {  # noqa: RUF012
        NVML_ERROR_UNINITIALIZED: "Uninitialized",
        NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
        NVML_ERROR_NOT_SUPPORTED: "Not Supported",
        NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
        NVML_ERROR_ALREADY_INITIALIZED: "Already Initialized",
        NVML_ERROR_NOT_FOUND: "Not Found",
        NVML_ERROR_INSUFFICIENT_SIZE: "Insufficient Size",
        NVML_ERROR_INSUFFICIENT_POWER: "Insufficient External Power",
        NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
        NVML_ERROR_TIMEOUT: "Timeout",
        NVML_ERROR_IRQ_ISSUE: "Interrupt Request Issue",
        NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
        NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found",
        NVML_ERROR_CORRUPTED_INFOROM: "Corrupted infoROM",
        NVML_ERROR_GPU_IS_LOST: "GPU is lost",
        NVML_ERROR_RESET_REQUIRED: "GPU requires restart",
        NVML_ERROR_OPERATING_SYSTEM: "The operating system has blocked the request.",
        NVML_ERROR_LIB_RM_VERSION_MISMATCH: "RM has detected an NVML/RM version mismatch.",
        NVML_ERROR_IN_USE: "In use by another client",
        NVML_ERROR_MEMORY: "Insufficient Memory",
        NVML_ERROR_INSUFFICIENT_RESOURCES: "Insufficient resources",
        NVML_ERROR_UNKNOWN: "Unknown Error",
    }
    value: int

    def __new__(cls, value: int) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._valClassMapping.get(value, cls)
        obj = Exception.__new__(cls)
        obj.value = value
        return obj

    def __str__(self) -> str:
        return NVMLError._errcode_to_string.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return self.value == getattr(other, "value", None)

    __hash__ = None  # type: ignore[assignment]  # as in pynvml, which defines __eq__ only


def nvmlExceptionClass(nvmlErrorCode: int) -> type[NVMLError]:
    if nvmlErrorCode not in NVMLError._valClassMapping:
        raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
    return NVMLError._valClassMapping[nvmlErrorCode]


def _extractNVMLErrorsAsClasses() -> None:
    # Same recipe as pynvml: NVML_ERROR_IN_USE -> NVMLError_InUse, registered by value.
    module = sys.modules[__name__]
    for err_name in [n for n in dir(module) if n.startswith("NVML_ERROR_")]:
        suffix = string.capwords(err_name.replace("NVML_ERROR_", ""), "_").replace("_", "")
        value = getattr(module, err_name)

        def gen_new(val: int) -> Callable[..., NVMLError]:
            def new(typ: type[NVMLError], *args: Any) -> NVMLError:
                return NVMLError.__new__(typ, val)

            return new

        cls = type("NVMLError_" + suffix, (NVMLError,), {"__new__": gen_new(value)})
        cls.__module__ = __name__
        setattr(module, cls.__name__, cls)
        NVMLError._valClassMapping[value] = cls


_extractNVMLErrorsAsClasses()


def _fail(code: int) -> NoReturn:
    raise NVMLError(code)


def throwOnVersionMismatch(func: Callable[..., Any]) -> Callable[..., Any]:
    """nvidia-ml-py 13's decorator on the unversioned process listers: FunctionNotFound from
    an older libnvidia-ml becomes NVMLLibraryMismatchError."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except NVMLError as exc:
            if exc.value != NVML_ERROR_FUNCTION_NOT_FOUND:
                raise
            raise NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML "
                "lib version. Either use matching pyNVML and NVML lib versions or use a "
                "versioned function such as " + func.__name__ + "_v2"
            ) from None

    return wrapper


# --- ctypes structures and handle types (same names and fields as pynvml) ----------------------


class struct_c_nvmlDevice_t(Structure):
    pass


class struct_c_nvmlGpuInstance_t(Structure):
    pass


class struct_c_nvmlComputeInstance_t(Structure):
    pass


c_nvmlDevice_t = POINTER(struct_c_nvmlDevice_t)
c_nvmlGpuInstance_t = POINTER(struct_c_nvmlGpuInstance_t)
c_nvmlComputeInstance_t = POINTER(struct_c_nvmlComputeInstance_t)


class nvmlPciInfo_t(Structure):
    _fields_ = [
        ("busIdLegacy", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_V2_SIZE),
        ("domain", c_uint),
        ("bus", c_uint),
        ("device", c_uint),
        ("pciDeviceId", c_uint),
        ("pciSubSystemId", c_uint),
        ("busId", c_char * NVML_DEVICE_PCI_BUS_ID_BUFFER_SIZE),
    ]


class c_nvmlMemory_t(Structure):
    _fields_ = [("total", c_ulonglong), ("free", c_ulonglong), ("used", c_ulonglong)]


class c_nvmlMemory_v2_t(Structure):
    _fields_ = [
        ("version", c_uint),
        ("total", c_ulonglong),
        ("reserved", c_ulonglong),
        ("free", c_ulonglong),
        ("used", c_ulonglong),
    ]


class c_nvmlUtilization_t(Structure):
    _fields_ = [("gpu", c_uint), ("memory", c_uint)]


class c_nvmlProcessInfo_v2_t(Structure):
    _fields_ = [
        ("pid", c_uint),
        ("usedGpuMemory", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    ]


c_nvmlProcessInfo_v3_t = c_nvmlProcessInfo_v2_t
c_nvmlProcessInfo_t = c_nvmlProcessInfo_v3_t


class c_nvmlGpuInstancePlacement_t(Structure):
    _fields_ = [("start", c_uint), ("size", c_uint)]


_GI_PROFILE_FIELDS = [
    ("id", c_uint),
    ("isP2pSupported", c_uint),
    ("sliceCount", c_uint),
    ("instanceCount", c_uint),
    ("multiprocessorCount", c_uint),
    ("copyEngineCount", c_uint),
    ("decoderCount", c_uint),
    ("encoderCount", c_uint),
    ("jpegCount", c_uint),
    ("ofaCount", c_uint),
    ("memorySizeMB", c_ulonglong),
]


class c_nvmlGpuInstanceProfileInfo_t(Structure):
    _fields_ = _GI_PROFILE_FIELDS


class c_nvmlGpuInstanceProfileInfo_v2_t(Structure):
    _fields_ = [
        ("version", c_uint),
        *_GI_PROFILE_FIELDS,
        ("name", c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE),
    ]

    def __init__(self) -> None:
        super().__init__(version=nvmlGpuInstanceProfileInfo_v2)


class c_nvmlGpuInstanceInfo_t(Structure):
    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("id", c_uint),
        ("profileId", c_uint),
        ("placement", c_nvmlGpuInstancePlacement_t),
    ]


class c_nvmlComputeInstancePlacement_t(Structure):
    _fields_ = [("start", c_uint), ("size", c_uint)]


_CI_PROFILE_FIELDS = [
    ("id", c_uint),
    ("sliceCount", c_uint),
    ("instanceCount", c_uint),
    ("multiprocessorCount", c_uint),
    ("sharedCopyEngineCount", c_uint),
    ("sharedDecoderCount", c_uint),
    ("sharedEncoderCount", c_uint),
    ("sharedJpegCount", c_uint),
    ("sharedOfaCount", c_uint),
]


class c_nvmlComputeInstanceProfileInfo_t(Structure):
    _fields_ = _CI_PROFILE_FIELDS


class c_nvmlComputeInstanceProfileInfo_v2_t(Structure):
    _fields_ = [
        ("version", c_uint),
        *_CI_PROFILE_FIELDS,
        ("name", c_char * NVML_DEVICE_NAME_V2_BUFFER_SIZE),
    ]

    def __init__(self) -> None:
        super().__init__(version=nvmlComputeInstanceProfileInfo_v2)


class c_nvmlComputeInstanceInfo_t(Structure):
    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("gpuInstance", c_nvmlGpuInstance_t),
        ("id", c_uint),
        ("profileId", c_uint),
        ("placement", c_nvmlComputeInstancePlacement_t),
    ]


class c_nvmlDeviceAttributes(Structure):
    _fields_ = [
        ("multiprocessorCount", c_uint),
        ("sharedCopyEngineCount", c_uint),
        ("sharedDecoderCount", c_uint),
        ("sharedEncoderCount", c_uint),
        ("sharedJpegCount", c_uint),
        ("sharedOfaCount", c_uint),
        ("gpuInstanceSliceCount", c_uint),
        ("computeInstanceSliceCount", c_uint),
        ("memorySizeMB", c_ulonglong),
    ]


class nvmlFriendlyObject:
    def __init__(self, dictionary: dict[str, Any]) -> None:
        for key, value in dictionary.items():
            setattr(self, key, value)

    def __str__(self) -> str:
        return str(self.__dict__)


def nvmlStructToFriendlyObject(struct: Structure) -> nvmlFriendlyObject:
    out = {}
    for field in struct._fields_:
        value = getattr(struct, field[0])
        out[field[0]] = value.decode() if isinstance(value, bytes) else value
    return nvmlFriendlyObject(out)


# --- binding, call accounting, handles ---------------------------------------------------------

_state: StateFile | None = None
_init_count = 0
CALLS: Counter[str] = Counter()  # calls per API function, for tests that count NVML traffic

_KIND_DEVICE, _KIND_MIG, _KIND_GI, _KIND_CI = 1, 2, 3, 4
_HANDLE_TAG = 0x5A << 56


def bind(state: StateFile | None) -> None:
    """Attach the fake to a node's state (sim.activate calls this) and reset the library."""
    global _state, _init_count
    _state = state
    _init_count = 0


def reset_calls() -> None:
    CALLS.clear()


def _encode(kind: int, gpu: int, gi: int = 0, ci: int = 0) -> int:
    return _HANDLE_TAG | kind << 48 | gpu << 32 | gi << 16 | ci


def _handle(ptr_type: Any, kind: int, gpu: int, gi: int = 0, ci: int = 0) -> Any:
    return ctypes.cast(c_void_p(_encode(kind, gpu, gi, ci)), ptr_type)


def _decode(handle: Any) -> tuple[int, int, int, int]:
    try:
        address = handle if isinstance(handle, int) else ctypes.cast(handle, c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    if not address or address & (0xFF << 56) != _HANDLE_TAG:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return (
        (address >> 48) & 0xFF,
        (address >> 32) & 0xFFFF,
        (address >> 16) & 0xFFFF,
        address & 0xFFFF,
    )


def _ctypes_target(ref: Any) -> Any:
    """The ctypes object behind byref(x), pointer(x) or x itself."""
    if ref is None:
        return None
    if hasattr(ref, "_obj"):  # byref() result
        return ref._obj
    if hasattr(ref, "contents"):
        return ref.contents
    return ref


F = TypeVar("F", bound=Callable[..., Any])


def _api(fn: F) -> F:
    """Count the call, require nvmlInit, and apply per-GPU faults ("lost", "unsupported")."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        CALLS[fn.__name__] += 1
        if _init_count <= 0:
            _fail(NVML_ERROR_UNINITIALIZED)
        if fn.__name__ in (_section().get("missing") or ()):
            _fail(NVML_ERROR_FUNCTION_NOT_FOUND)  # the symbol is not in this libnvidia-ml
        if args and isinstance(args[0], ctypes._Pointer):
            gpu = _gpu_entry(_decode(args[0])[1])
            if gpu.get("lost"):
                _fail(NVML_ERROR_GPU_IS_LOST)
            if fn.__name__ in (gpu.get("unsupported") or ()):
                _fail(NVML_ERROR_NOT_SUPPORTED)
        return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


def _section() -> dict[str, Any]:
    if _state is None:
        _fail(NVML_ERROR_LIBRARY_NOT_FOUND)
    section = _state.section("nvidia")
    if section is None:
        _fail(NVML_ERROR_LIBRARY_NOT_FOUND)
    return section


def _gpus() -> list[dict[str, Any]]:
    return list(_section().get("gpus") or [])


def _gpu_entry(index: int) -> dict[str, Any]:
    gpus = _gpus()
    if not 0 <= index < len(gpus):
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return gpus[index]


@contextlib.contextmanager
def _mutate() -> Iterator[dict[str, Any]]:
    """The nvidia section, reloaded under the state lock and saved when the block ends."""
    if _state is None:
        _fail(NVML_ERROR_LIBRARY_NOT_FOUND)
    with _state.mutate() as data:
        section = data.get("nvidia")
        if not isinstance(section, dict):
            _fail(NVML_ERROR_LIBRARY_NOT_FOUND)
        yield section


def _error_code(error: Any) -> int:
    if isinstance(error, int):
        return error
    cls = getattr(sys.modules[__name__], "NVMLError_" + str(error), None)
    if cls is None:
        return NVML_ERROR_UNKNOWN
    return int(cls.__new__(cls).value)


def _due_fault(section: dict[str, Any], op: str, gpu: int | None) -> NVMLError | None:
    """Count this call against matching faults; the error to raise if one fires now."""
    due = None
    for fault in section.get("faults") or []:
        if fault.get("op") != op:
            continue
        if fault.get("gpu") is not None and gpu is not None and int(fault["gpu"]) != gpu:
            continue
        fault["seen"] = int(fault.get("seen", 0)) + 1
        nth = int(fault.get("nth", 1))
        times = int(fault.get("times", 1))
        if due is None and fault["seen"] >= nth and (times < 0 or fault["seen"] < nth + times):
            due = NVMLError(_error_code(fault.get("error", "Unknown")))
    return due


def _fault_gate(op: str, gpu: int | None) -> None:
    """Raise an injected fault for this operation. The call counts are saved first, in their
    own write, because a failing mutation saves nothing."""
    if not _section().get("faults"):
        return
    with _mutate() as section:
        due = _due_fault(section, op, gpu)
    if due is not None:
        raise due


# --- pure MIG rules over a GPU's state dict (also used by nvidia_templates) --------------------


def sim_geometry(gpu: dict[str, Any]) -> catalog.MigGeometry | None:
    """The GPU's MIG geometry from the hw catalog; None when the card cannot do MIG."""
    key = gpu.get("catalog")
    if not key or gpu.get("mig") is None:
        return None
    return catalog.nvidia_model(str(key)).mig


def _require_mig(gpu: dict[str, Any], enabled: bool = True) -> catalog.MigGeometry:
    geometry = sim_geometry(gpu)
    if geometry is None:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    if enabled and gpu["mig"].get("current") != NVML_DEVICE_MIG_ENABLE:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    return geometry


def _used_slots(gpu: dict[str, Any]) -> set[int]:
    used: set[int] = set()
    for gi in gpu["mig"].get("gpu_instances") or []:
        used.update(range(gi["start"], gi["start"] + gi["size"]))
    return used


def _used_compute(gpu: dict[str, Any], geometry: catalog.MigGeometry) -> int:
    total = 0
    for gi in gpu["mig"].get("gpu_instances") or []:
        profile = geometry.by_id(gi["profile_id"])
        total += profile.compute_slices if profile else 0
    return total


def _free_starts(
    gpu: dict[str, Any], geometry: catalog.MigGeometry, profile: catalog.GpuInstanceProfile
) -> list[int]:
    used = _used_slots(gpu)
    return [
        start
        for start in profile.placement_starts
        if used.isdisjoint(range(start, start + profile.placement_size))
    ]


def sim_remaining_capacity(gpu: dict[str, Any], profile_id: int) -> int:
    """How many more GIs of this profile fit, given slots, compute slices and max instances."""
    geometry = _require_mig(gpu)
    profile = geometry.by_id(profile_id)
    if profile is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    existing = sum(1 for gi in gpu["mig"]["gpu_instances"] if gi["profile_id"] == profile_id)
    fit = 0
    end = -1
    for start in _free_starts(gpu, geometry, profile):  # equal sizes: greedy is optimal
        if start >= end:
            fit += 1
            end = start + profile.placement_size
    compute_left = geometry.compute_slices - _used_compute(gpu, geometry)
    return max(
        0, min(fit, profile.max_instances - existing, compute_left // profile.compute_slices)
    )


def sim_create_gpu_instance(
    gpu: dict[str, Any], profile_id: int, start: int | None = None, size: int | None = None
) -> dict[str, Any]:
    """Create a GI in the GPU dict, enforcing the placement rules; returns the new GI dict.

    Without a start the driver's choice is imitated: the highest free start. That reproduces
    the MIG guide's ordering caveat (19,19,14,9 fails with InsufficientResources while
    9,19,14,19 succeeds).
    """
    geometry = _require_mig(gpu)
    profile = geometry.by_id(profile_id)
    if profile is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    free = _free_starts(gpu, geometry, profile)
    if start is None:
        if not free:
            _fail(NVML_ERROR_INSUFFICIENT_RESOURCES)
        start = free[-1]
    elif start not in profile.placement_starts or size not in (None, profile.placement_size):
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    instances = gpu["mig"]["gpu_instances"]
    existing = sum(1 for gi in instances if gi["profile_id"] == profile_id)
    compute_left = geometry.compute_slices - _used_compute(gpu, geometry)
    if (
        start not in free
        or existing >= profile.max_instances
        or compute_left < profile.compute_slices
    ):
        _fail(NVML_ERROR_INSUFFICIENT_RESOURCES)
    taken = {gi["id"] for gi in instances}
    gi_id = next(i for i in range(1, len(taken) + 2) if i not in taken)
    gi = {
        "id": gi_id,
        "profile_id": profile_id,
        "start": start,
        "size": profile.placement_size,
        "compute_instances": [],
    }
    instances.append(gi)
    instances.sort(key=lambda item: item["id"])
    return gi


def _busy(gpu: dict[str, Any], gi_id: int, ci_id: int | None = None) -> bool:
    for proc in gpu.get("processes") or []:
        if proc.get("gpu_instance_id") == gi_id and (
            ci_id is None or proc.get("compute_instance_id") == ci_id
        ):
            return True
    return False


def _find_gi(gpu: dict[str, Any], gi_id: int) -> dict[str, Any]:
    mig = gpu.get("mig") or {}
    for gi in mig.get("gpu_instances") or []:
        if gi["id"] == gi_id:
            return gi
    _fail(NVML_ERROR_INVALID_ARGUMENT)


def _find_ci(gi: dict[str, Any], ci_id: int) -> dict[str, Any]:
    for ci in gi["compute_instances"]:
        if ci["id"] == ci_id:
            return ci
    _fail(NVML_ERROR_INVALID_ARGUMENT)


def sim_destroy_gpu_instance(gpu: dict[str, Any], gi_id: int) -> None:
    gi = _find_gi(gpu, gi_id)
    if gi["compute_instances"] or _busy(gpu, gi_id):
        _fail(NVML_ERROR_IN_USE)
    gpu["mig"]["gpu_instances"].remove(gi)


def _gi_profile(gpu: dict[str, Any], gi: dict[str, Any]) -> catalog.GpuInstanceProfile:
    geometry = _require_mig(gpu, enabled=False)
    profile = geometry.by_id(gi["profile_id"])
    if profile is None:
        _fail(NVML_ERROR_UNKNOWN)
    return profile


def _ci_profiles(gpu: dict[str, Any], gi: dict[str, Any]) -> list[catalog.ComputeInstanceProfile]:
    return catalog.compute_instance_profiles(_gi_profile(gpu, gi))


def _mig_uuid(gpu: dict[str, Any]) -> str:
    # Real MIG UUIDs are fresh on every creation; a per-GPU counter keeps them deterministic.
    mig = gpu["mig"]
    serial = int(mig.get("next_uuid", 0))
    mig["next_uuid"] = serial + 1
    digest = hashlib.sha1(f"{gpu['uuid']}/mig/{serial}".encode()).hexdigest()
    return f"MIG-{digest[:8]}-{digest[8:12]}-{digest[12:16]}-{digest[16:20]}-{digest[20:32]}"


def sim_create_compute_instance(
    gpu: dict[str, Any], gi_id: int, ci_profile_id: int, start: int | None = None
) -> dict[str, Any]:
    """Create a CI inside a GI; compute slices of the GI's CIs may not overlap."""
    _require_mig(gpu)
    gi = _find_gi(gpu, gi_id)
    profile = next((p for p in _ci_profiles(gpu, gi) if p.id == ci_profile_id), None)
    if profile is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    used: set[int] = set()
    for ci in gi["compute_instances"]:
        used.update(range(ci["start"], ci["start"] + ci["size"]))
    free = [
        s for s in profile.placement_starts if used.isdisjoint(range(s, s + profile.compute_slices))
    ]
    if start is None:
        if not free:
            _fail(NVML_ERROR_INSUFFICIENT_RESOURCES)
        start = free[0]
    elif start not in profile.placement_starts:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    if start not in free:
        _fail(NVML_ERROR_INSUFFICIENT_RESOURCES)
    taken = {ci["id"] for ci in gi["compute_instances"]}
    ci_id = next(i for i in range(len(taken) + 1) if i not in taken)
    ci = {
        "id": ci_id,
        "profile_id": profile.id,
        "start": start,
        "size": profile.compute_slices,
        "uuid": _mig_uuid(gpu),
    }
    gi["compute_instances"].append(ci)
    gi["compute_instances"].sort(key=lambda item: item["id"])
    return ci


def sim_destroy_compute_instance(gpu: dict[str, Any], gi_id: int, ci_id: int) -> None:
    gi = _find_gi(gpu, gi_id)
    ci = _find_ci(gi, ci_id)
    if _busy(gpu, gi_id, ci_id):
        _fail(NVML_ERROR_IN_USE)
    gi["compute_instances"].remove(ci)


def sim_add_process(
    state: StateFile,
    gpu: int,
    pid: int,
    used_memory_mib: int = 1024,
    name: str = "python3",
    gpu_instance_id: int | None = None,
    compute_instance_id: int | None = None,
) -> None:
    """Put a fake process on a GPU (or one MIG instance) so that it counts as busy."""
    with state.mutate() as data:
        data["nvidia"]["gpus"][gpu].setdefault("processes", []).append(
            {
                "pid": pid,
                "name": name,
                "used_memory_mib": used_memory_mib,
                "gpu_instance_id": gpu_instance_id,
                "compute_instance_id": compute_instance_id,
            }
        )


def sim_add_fault(
    state: StateFile,
    op: str,
    gpu: int | None = None,
    nth: int = 1,
    error: str | int = "InsufficientResources",
    times: int = 1,
) -> None:
    """Inject a fault: the nth `op` call (on `gpu`, or any) raises `error`, `times` times."""
    with state.mutate() as data:
        data["nvidia"].setdefault("faults", []).append(
            {"op": op, "gpu": gpu, "nth": nth, "error": error, "times": times, "seen": 0}
        )


# --- library ---


def nvmlInitWithFlags(flags: int) -> None:
    global _init_count
    CALLS["nvmlInitWithFlags"] += 1
    section = _section()  # no nvidia section: as if libnvidia-ml.so.1 were absent
    if section.get("driver_loaded") is False or not section.get("gpus"):
        _fail(NVML_ERROR_DRIVER_NOT_LOADED)
    if section.get("faults"):
        _fault_gate("init", None)
    elif _state is not None:
        _state.refresh()  # NVML reads live hardware: pick up other agents' changes
    _init_count += 1


def nvmlInit() -> None:
    nvmlInitWithFlags(0)


def nvmlShutdown() -> None:
    global _init_count
    CALLS["nvmlShutdown"] += 1
    if _init_count <= 0:
        _fail(NVML_ERROR_UNINITIALIZED)
    _init_count -= 1


def nvmlErrorString(result: int) -> str:
    return NVMLError._errcode_to_string.get(result, "Unknown Error")


@_api
def nvmlSystemGetDriverVersion() -> str:
    return str(_section().get("driver_version", "570.133.20"))


@_api
def nvmlSystemGetNVMLVersion() -> str:
    return str(_section().get("nvml_version", "12.570.133.20"))


@_api
def nvmlSystemGetCudaDriverVersion() -> int:
    return int(_section().get("cuda_driver_version", 12080))


nvmlSystemGetCudaDriverVersion_v2 = nvmlSystemGetCudaDriverVersion


@_api
def nvmlSystemGetProcessName(pid: int) -> str:
    for gpu in _gpus():
        for proc in gpu.get("processes") or []:
            if proc.get("pid") == pid:
                return str(proc.get("name") or "")
    _fail(NVML_ERROR_NOT_FOUND)


# --- devices ---


def _as_str(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _device(
    handle: Any,
) -> tuple[dict[str, Any], int, dict[str, Any] | None, dict[str, Any] | None]:
    """(gpu, kind, gi, ci) for a device or MIG-device handle."""
    kind, index, gi_id, ci_id = _decode(handle)
    gpu = _gpu_entry(index)
    if kind == _KIND_DEVICE:
        return gpu, kind, None, None
    if kind == _KIND_MIG:
        gi = _find_gi(gpu, gi_id)
        return gpu, kind, gi, _find_ci(gi, ci_id)
    _fail(NVML_ERROR_INVALID_ARGUMENT)


def _parent(handle: Any) -> dict[str, Any]:
    kind, index, _, _ = _decode(handle)
    if kind != _KIND_DEVICE:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return _gpu_entry(index)


@_api
def nvmlDeviceGetCount() -> int:
    return len(_gpus())


nvmlDeviceGetCount_v2 = nvmlDeviceGetCount


@_api
def nvmlDeviceGetHandleByIndex(index: int) -> Any:
    if not 0 <= int(index) < len(_gpus()):
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return _handle(c_nvmlDevice_t, _KIND_DEVICE, int(index))


@_api
def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> Any:
    wanted = _as_str(uuid)
    for gpu in _gpus():
        if gpu["uuid"] == wanted:
            return _handle(c_nvmlDevice_t, _KIND_DEVICE, gpu["index"])
        for gi in (gpu.get("mig") or {}).get("gpu_instances") or []:
            for ci in gi["compute_instances"]:
                if ci["uuid"] == wanted:
                    return _handle(c_nvmlDevice_t, _KIND_MIG, gpu["index"], gi["id"], ci["id"])
    _fail(NVML_ERROR_NOT_FOUND)


def _norm_bus_id(bus_id: str) -> str:
    # "0000:18:00.0" and "00000000:18:00.0" name the same device.
    parts = bus_id.lower().split(":")
    if len(parts) == 2:
        parts.insert(0, "0")
    return f"{int(parts[0], 16):08x}:{parts[1]}:{parts[2]}"


@_api
def nvmlDeviceGetHandleByPciBusId(pciBusId: str | bytes) -> Any:
    wanted = _norm_bus_id(_as_str(pciBusId))
    for gpu in _gpus():
        if _norm_bus_id(gpu["pci"]["bus_id"]) == wanted:
            return _handle(c_nvmlDevice_t, _KIND_DEVICE, gpu["index"])
    _fail(NVML_ERROR_NOT_FOUND)


@_api
def nvmlDeviceGetIndex(handle: Any) -> int:
    return int(_parent(handle)["index"])


@_api
def nvmlDeviceGetMinorNumber(handle: Any) -> int:
    return int(_parent(handle)["index"])


@_api
def nvmlDeviceGetName(handle: Any) -> str:
    gpu, kind, gi, _ = _device(handle)
    if kind == _KIND_MIG and gi is not None:
        return f"{gpu['name']} MIG {_gi_profile(gpu, gi).name}"
    return str(gpu["name"])


@_api
def nvmlDeviceGetUUID(handle: Any) -> str:
    gpu, _, _, ci = _device(handle)
    return str(ci["uuid"] if ci is not None else gpu["uuid"])


@_api
def nvmlDeviceGetSerial(handle: Any) -> str:
    return str(_parent(handle).get("serial", ""))


def _pci_struct(bus_id: str, device_id: int = 0, subsystem_id: int = 0) -> nvmlPciInfo_t:
    domain, bus, rest = bus_id.split(":")
    info = nvmlPciInfo_t()
    info.busId = bus_id.encode()
    info.busIdLegacy = (bus_id[4:] if len(domain) == 8 else bus_id).encode()[:15]
    info.domain = int(domain, 16)
    info.bus = int(bus, 16)
    info.device = int(rest.split(".")[0], 16)
    info.pciDeviceId = device_id
    info.pciSubSystemId = subsystem_id
    return info


@_api
def nvmlDeviceGetPciInfo(handle: Any) -> nvmlPciInfo_t:
    gpu = _device(handle)[0]
    pci = gpu["pci"]
    return _pci_struct(pci["bus_id"], int(pci["device_id"]), int(pci.get("subsystem_id", 0)))


nvmlDeviceGetPciInfo_v3 = nvmlDeviceGetPciInfo


def _processes(
    gpu: dict[str, Any], gi: dict[str, Any] | None, ci: dict[str, Any] | None
) -> list[dict[str, Any]]:
    procs = list(gpu.get("processes") or [])
    if gi is not None:
        procs = [p for p in procs if p.get("gpu_instance_id") == gi["id"]]
    if ci is not None:
        procs = [p for p in procs if p.get("compute_instance_id") in (None, ci["id"])]
    return procs


@_api
def nvmlDeviceGetMemoryInfo(handle: Any, version: int | None = None) -> Any:
    gpu, _, gi, ci = _device(handle)
    if gi is not None:
        total_mib = _gi_profile(gpu, gi).memory_mib
        reserved_mib = 0
    else:
        total_mib = int(gpu["memory_total_mib"])
        reserved_mib = int(gpu.get("memory_reserved_mib", 0))
    used_mib = sum(int(p.get("used_memory_mib") or 0) for p in _processes(gpu, gi, ci))
    if version:
        memory: Any = c_nvmlMemory_v2_t()
        memory.version = version
        memory.reserved = reserved_mib * _MIB
        memory.used = used_mib * _MIB
    else:
        memory = c_nvmlMemory_t()
        memory.used = (used_mib + reserved_mib) * _MIB  # v1 counts reserved memory as used
    memory.total = total_mib * _MIB
    memory.free = memory.total - (used_mib + reserved_mib) * _MIB
    return memory


@_api
def nvmlDeviceGetUtilizationRates(handle: Any) -> c_nvmlUtilization_t:
    gpu, kind, _, _ = _device(handle)
    # NVML does not attribute utilization once MIG is on (nvidia-smi shows N/A).
    if kind == _KIND_MIG or (gpu.get("mig") or {}).get("current") == NVML_DEVICE_MIG_ENABLE:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    util = gpu.get("utilization") or {}
    out = c_nvmlUtilization_t()
    out.gpu = int(util.get("gpu", 0))
    out.memory = int(util.get("memory", 0))
    return out


@_api
def nvmlDeviceGetCudaComputeCapability(handle: Any) -> tuple[int, int]:
    major, minor = _device(handle)[0]["compute_capability"]
    return (int(major), int(minor))


@_api
def nvmlDeviceGetNumGpuCores(handle: Any) -> int:
    return int(_parent(handle)["cuda_cores"])


@_api
def nvmlDeviceGetMemoryBusWidth(handle: Any) -> int:
    return int(_parent(handle)["memory_bus_width"])


_CLOCK_KEYS = {
    NVML_CLOCK_GRAPHICS: "graphics",
    NVML_CLOCK_SM: "sm",
    NVML_CLOCK_MEM: "mem",
    NVML_CLOCK_VIDEO: "video",
}


@_api
def nvmlDeviceGetMaxClockInfo(handle: Any, type: int) -> int:
    key = _CLOCK_KEYS.get(int(type))
    clocks = _parent(handle).get("max_clocks") or {}
    if key is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    if key not in clocks:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    return int(clocks[key])


nvmlDeviceGetClockInfo = nvmlDeviceGetMaxClockInfo  # an idle-free fake runs at its max clocks


@_api
def nvmlDeviceGetNumaNodeId(handle: Any) -> int:
    # Only on platforms where the GPU memory is itself a NUMA node (GH200); not x86 servers.
    node = _parent(handle).get("gpu_numa_node")
    if node is None:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    return int(node)


@_api
def nvmlDeviceGetMemoryAffinity(handle: Any, nodeSetSize: int, scope: int) -> Any:
    node = _parent(handle).get("numa_node")
    out = (c_ulonglong * int(nodeSetSize))()
    if node is None:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    word, bit = divmod(int(node), 64)
    if word < len(out):
        out[word] = 1 << bit
    return out


# --- topology ---


def _common_ancestor(a: dict[str, Any], b: dict[str, Any]) -> int:
    if a["index"] == b["index"]:
        return NVML_TOPOLOGY_INTERNAL
    pa, pb = a.get("pcie") or {}, b.get("pcie") or {}
    if pa.get("host_bridge") is not None and pa.get("host_bridge") == pb.get("host_bridge"):
        sa, sb = list(pa.get("switches") or []), list(pb.get("switches") or [])
        shared = 0
        while shared < min(len(sa), len(sb)) and sa[shared] == sb[shared]:
            shared += 1
        if shared:
            crossed = (len(sa) - shared) + (len(sb) - shared) + 1
            return NVML_TOPOLOGY_SINGLE if crossed == 1 else NVML_TOPOLOGY_MULTIPLE
        return NVML_TOPOLOGY_HOSTBRIDGE
    if a.get("numa_node") is not None and a.get("numa_node") == b.get("numa_node"):
        return NVML_TOPOLOGY_NODE
    return NVML_TOPOLOGY_SYSTEM


@_api
def nvmlDeviceGetTopologyCommonAncestor(device1: Any, device2: Any) -> int:
    return _common_ancestor(_parent(device1), _parent(device2))


@_api
def nvmlDeviceGetTopologyNearestGpus(device: Any, level: int) -> list[Any]:
    me = _parent(device)
    return [
        _handle(c_nvmlDevice_t, _KIND_DEVICE, gpu["index"])
        for gpu in _gpus()
        if gpu["index"] != me["index"] and _common_ancestor(me, gpu) <= int(level)
    ]


def _link(handle: Any, link: int) -> dict[str, Any]:
    links = _parent(handle).get("nvlinks") or []
    if not links:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    if not 0 <= int(link) < len(links):
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return links[int(link)]


@_api
def nvmlDeviceGetNvLinkState(device: Any, link: int) -> int:
    return (
        NVML_FEATURE_ENABLED if _link(device, link).get("active", True) else NVML_FEATURE_DISABLED
    )


@_api
def nvmlDeviceGetNvLinkVersion(device: Any, link: int) -> int:
    _link(device, link)
    return int(_parent(device).get("nvlink_version", 4))


@_api
def nvmlDeviceGetNvLinkRemotePciInfo(device: Any, link: int) -> nvmlPciInfo_t:
    return _pci_struct(str(_link(device, link)["remote_bus_id"]))


nvmlDeviceGetNvLinkRemotePciInfo_v2 = nvmlDeviceGetNvLinkRemotePciInfo


@_api
def nvmlDeviceGetNvLinkRemoteDeviceType(handle: Any, link: int) -> int:
    kind = _link(handle, link).get("remote_type", "gpu")
    return NVML_NVLINK_DEVICE_TYPE_SWITCH if kind == "switch" else NVML_NVLINK_DEVICE_TYPE_GPU


def _nvlinked(a: dict[str, Any], b: dict[str, Any]) -> bool:
    la = [x for x in a.get("nvlinks") or [] if x.get("active", True)]
    lb = [x for x in b.get("nvlinks") or [] if x.get("active", True)]
    direct = any(x["remote_bus_id"] == b["pci"]["bus_id"] for x in la)
    switched = any(x.get("remote_type") == "switch" for x in la) and any(
        x.get("remote_type") == "switch" for x in lb
    )
    return direct or switched


@_api
def nvmlDeviceGetP2PStatus(device1: Any, device2: Any, p2pIndex: Any) -> int:
    a, b = _parent(device1), _parent(device2)
    index = p2pIndex[0] if isinstance(p2pIndex, tuple) else int(p2pIndex)
    if index == NVML_P2P_CAPS_INDEX_NVLINK:
        return NVML_P2P_STATUS_OK if _nvlinked(a, b) else NVML_P2P_STATUS_NOT_SUPPORTED
    if _nvlinked(a, b) or _common_ancestor(a, b) <= NVML_TOPOLOGY_HOSTBRIDGE:
        return NVML_P2P_STATUS_OK
    return NVML_P2P_STATUS_CHIPSET_NOT_SUPPORTED


# --- processes ---


def _running_processes(handle: Any) -> list[nvmlFriendlyObject]:
    gpu, _, gi, ci = _device(handle)
    out = []
    for proc in _processes(gpu, gi, ci):
        used = proc.get("used_memory_mib")
        gi_id = proc.get("gpu_instance_id")
        ci_id = proc.get("compute_instance_id")
        out.append(
            nvmlFriendlyObject(
                {
                    "pid": int(proc["pid"]),
                    "usedGpuMemory": None if used is None else int(used) * _MIB,
                    "gpuInstanceId": NVML_GPU_INSTANCE_ID_ANY if gi_id is None else int(gi_id),
                    "computeInstanceId": (
                        NVML_COMPUTE_INSTANCE_ID_ANY if ci_id is None else int(ci_id)
                    ),
                }
            )
        )
    return out


@_api
def nvmlDeviceGetComputeRunningProcesses_v3(handle: Any) -> list[nvmlFriendlyObject]:
    return _running_processes(handle)


@_api
def nvmlDeviceGetComputeRunningProcesses_v2(handle: Any) -> list[nvmlFriendlyObject]:
    return _running_processes(handle)  # same struct as _v3 in nvidia-ml-py 13


@throwOnVersionMismatch
def nvmlDeviceGetComputeRunningProcesses(handle: Any) -> list[nvmlFriendlyObject]:
    return nvmlDeviceGetComputeRunningProcesses_v3(handle)


# --- MIG mode ---


@_api
def nvmlDeviceGetMigMode(device: Any) -> list[int]:
    gpu = _parent(device)
    _require_mig(gpu, enabled=False)
    return [int(gpu["mig"]["current"]), int(gpu["mig"]["pending"])]


@_api
def nvmlDeviceSetMigMode(device: Any, mode: int) -> int:
    """Returns the activation status: SUCCESS, or IN_USE / RESET_REQUIRED with the new mode
    left pending (processes still run, or an Ampere card that cannot be reset here)."""
    index = _parent(device)["index"]
    _require_mig(_gpu_entry(index), enabled=False)
    if int(mode) not in (NVML_DEVICE_MIG_DISABLE, NVML_DEVICE_MIG_ENABLE):
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    _fault_gate("set_mig_mode", index)
    with _mutate() as section:
        gpu = section["gpus"][index]
        _require_mig(gpu, enabled=False)
        mig = gpu["mig"]
        if int(mode) == NVML_DEVICE_MIG_DISABLE and mig.get("gpu_instances"):
            _fail(NVML_ERROR_IN_USE)
        mig["pending"] = int(mode)
        if gpu.get("processes"):
            return NVML_ERROR_IN_USE
        if mig.get("reset_required"):
            return NVML_ERROR_RESET_REQUIRED
        mig["current"] = int(mode)
        return NVML_SUCCESS


# --- GPU instances ---


def _fill_gi_profile(info: Any, profile: catalog.GpuInstanceProfile) -> Any:
    info.id = profile.id
    info.isP2pSupported = 0
    info.sliceCount = profile.compute_slices
    info.instanceCount = profile.max_instances
    info.multiprocessorCount = profile.sm_count
    info.copyEngineCount = 0  # engine counts are not in the catalog
    info.memorySizeMB = profile.memory_mib
    if hasattr(info, "name"):
        info.name = f"MIG {profile.name}".encode()
    return info


@_api
def nvmlDeviceGetGpuInstanceProfileInfo(device: Any, profile: int, version: int = 2) -> Any:
    """v2 (nvmlDeviceGetGpuInstanceProfileInfoV) is NOT_SUPPORTED while MIG is disabled, as
    nvml.h documents; v1 only needs a MIG-capable card."""
    if version not in (1, 2):
        _fail(NVML_ERROR_FUNCTION_NOT_FOUND)
    geometry = _require_mig(_parent(device), enabled=version == 2)
    if not 0 <= int(profile) < _LIB_GPU_INSTANCE_PROFILE_COUNT:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    found = geometry.by_index(int(profile))
    if found is None:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    info = c_nvmlGpuInstanceProfileInfo_v2_t() if version == 2 else c_nvmlGpuInstanceProfileInfo_t()
    return _fill_gi_profile(info, found)


nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo


@_api
def nvmlDeviceGetGpuInstanceProfileInfoById(device: Any, profileId: int) -> Any:
    geometry = _require_mig(_parent(device))
    found = geometry.by_id(int(profileId))
    if found is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return _fill_gi_profile(c_nvmlGpuInstanceProfileInfo_v2_t(), found)


nvmlDeviceGetGpuInstanceProfileInfoByIdV = nvmlDeviceGetGpuInstanceProfileInfoById


@_api
def nvmlDeviceGetGpuInstanceRemainingCapacity(device: Any, profileId: int) -> int:
    return sim_remaining_capacity(_parent(device), int(profileId))


def _fill_array(array: Any, count_ref: Any, handles: list[Any], check_size: bool) -> None:
    count = _ctypes_target(count_ref)
    if count is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    if array is None:  # size query
        count.value = len(handles)
        return
    capacity = len(array) if hasattr(array, "__len__") else len(handles)
    if (check_size and count.value < len(handles)) or capacity < len(handles):
        count.value = len(handles)
        _fail(NVML_ERROR_INSUFFICIENT_SIZE)
    element = type(array)._type_
    for i, item in enumerate(handles):
        array[i] = item if isinstance(item, Structure) else ctypes.cast(item, element)
    count.value = len(handles)


@_api
def nvmlDeviceGetGpuInstancePossiblePlacements(
    device: Any, profileId: int, placementsRef: Any, countRef: Any
) -> int:
    """All placements of the profile, regardless of what is in use (like -lgipp); works with
    MIG disabled. countRef holds the array size on input (0 with a NULL array: size query)."""
    geometry = _require_mig(_parent(device), enabled=False)
    profile = geometry.by_id(int(profileId))
    if profile is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    placements = [c_nvmlGpuInstancePlacement_t(s, n) for s, n in profile.placements()]
    _fill_array(placementsRef, countRef, placements, check_size=True)
    return NVML_SUCCESS


nvmlDeviceGetGpuInstancePossiblePlacements_v2 = nvmlDeviceGetGpuInstancePossiblePlacements


def _gi_handle(index: int, gi: dict[str, Any]) -> Any:
    return _handle(c_nvmlGpuInstance_t, _KIND_GI, index, gi["id"])


def _create_gi(device: Any, profile_id: int, placement: Any) -> Any:
    index = _parent(device)["index"]
    start = size = None
    if placement is not None:
        target = _ctypes_target(placement)
        start, size = int(target.start), int(target.size)
    _require_mig(_gpu_entry(index))
    _fault_gate("create_gpu_instance", index)
    with _mutate() as section:
        gpu = section["gpus"][index]
        gi = sim_create_gpu_instance(gpu, int(profile_id), start, size)
    return _gi_handle(index, gi)


@_api
def nvmlDeviceCreateGpuInstance(device: Any, profileId: int) -> Any:
    return _create_gi(device, profileId, None)


@_api
def nvmlDeviceCreateGpuInstanceWithPlacement(device: Any, profileId: int, placement: Any) -> Any:
    if placement is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return _create_gi(device, profileId, placement)


def _gi_of(handle: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    kind, index, gi_id, _ = _decode(handle)
    if kind != _KIND_GI:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    gpu = _gpu_entry(index)
    return gpu, _find_gi(gpu, gi_id)


@_api
def nvmlGpuInstanceDestroy(gpuInstance: Any) -> int:
    gpu, gi = _gi_of(gpuInstance)
    _fault_gate("destroy_gpu_instance", gpu["index"])
    with _mutate() as section:
        sim_destroy_gpu_instance(section["gpus"][gpu["index"]], gi["id"])
    return NVML_SUCCESS


@_api
def nvmlDeviceGetGpuInstances(
    device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
) -> int:
    gpu = _parent(device)
    geometry = _require_mig(gpu)
    if geometry.by_id(int(profileId)) is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    handles = [
        _gi_handle(gpu["index"], gi)
        for gi in gpu["mig"]["gpu_instances"]
        if gi["profile_id"] == int(profileId)
    ]
    _fill_array(gpuInstancesRef, countRef, handles, check_size=False)
    return NVML_SUCCESS


@_api
def nvmlDeviceGetGpuInstanceById(device: Any, gpuInstanceId: int) -> Any:
    gpu = _parent(device)
    _require_mig(gpu)
    for gi in gpu["mig"]["gpu_instances"]:
        if gi["id"] == int(gpuInstanceId):
            return _gi_handle(gpu["index"], gi)
    _fail(NVML_ERROR_NOT_FOUND)


@_api
def nvmlGpuInstanceGetInfo(gpuInstance: Any) -> c_nvmlGpuInstanceInfo_t:
    gpu, gi = _gi_of(gpuInstance)
    info = c_nvmlGpuInstanceInfo_t()
    info.device = _handle(c_nvmlDevice_t, _KIND_DEVICE, gpu["index"])
    info.id = gi["id"]
    info.profileId = gi["profile_id"]
    info.placement = c_nvmlGpuInstancePlacement_t(gi["start"], gi["size"])
    return info


# --- compute instances ---


@_api
def nvmlGpuInstanceGetComputeInstanceProfileInfo(
    device: Any, profile: int, engProfile: int, version: int = 2
) -> Any:
    gpu, gi = _gi_of(device)
    if version not in (1, 2):
        _fail(NVML_ERROR_FUNCTION_NOT_FOUND)
    if not 0 <= int(profile) < _LIB_COMPUTE_INSTANCE_PROFILE_COUNT or int(engProfile) != 0:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    found = next((p for p in _ci_profiles(gpu, gi) if p.index == int(profile)), None)
    if found is None:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    info: Any
    if version == 2:
        info = c_nvmlComputeInstanceProfileInfo_v2_t()
        info.name = f"MIG {found.name}".encode()
    else:
        info = c_nvmlComputeInstanceProfileInfo_t()
    info.id = found.id
    info.sliceCount = found.compute_slices
    info.instanceCount = found.max_instances
    info.multiprocessorCount = found.sm_count
    return info


nvmlGpuInstanceGetComputeInstanceProfileInfoV = nvmlGpuInstanceGetComputeInstanceProfileInfo


@_api
def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gpuInstance: Any, profileId: int) -> int:
    gpu, gi = _gi_of(gpuInstance)
    profile = next((p for p in _ci_profiles(gpu, gi) if p.id == int(profileId)), None)
    if profile is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    used: set[int] = set()
    for ci in gi["compute_instances"]:
        used.update(range(ci["start"], ci["start"] + ci["size"]))
    return sum(
        1 for s in profile.placement_starts if used.isdisjoint(range(s, s + profile.compute_slices))
    )


@_api
def nvmlGpuInstanceGetComputeInstancePossiblePlacements(
    gpuInstance: Any, profileId: int, placementsRef: Any, countRef: Any
) -> int:
    gpu, gi = _gi_of(gpuInstance)
    profile = next((p for p in _ci_profiles(gpu, gi) if p.id == int(profileId)), None)
    if profile is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    placements = [
        c_nvmlComputeInstancePlacement_t(s, profile.compute_slices)
        for s in profile.placement_starts
    ]
    _fill_array(placementsRef, countRef, placements, check_size=True)
    return NVML_SUCCESS


def _ci_handle(index: int, gi: dict[str, Any], ci: dict[str, Any]) -> Any:
    return _handle(c_nvmlComputeInstance_t, _KIND_CI, index, gi["id"], ci["id"])


def _create_ci(gpu_instance: Any, profile_id: int, start: int | None) -> Any:
    gpu, gi = _gi_of(gpu_instance)
    _fault_gate("create_compute_instance", gpu["index"])
    with _mutate() as section:
        ci = sim_create_compute_instance(
            section["gpus"][gpu["index"]], gi["id"], int(profile_id), start
        )
    return _ci_handle(gpu["index"], gi, ci)


@_api
def nvmlGpuInstanceCreateComputeInstance(gpuInstance: Any, profileId: int) -> Any:
    return _create_ci(gpuInstance, profileId, None)


@_api
def nvmlGpuInstanceCreateComputeInstanceWithPlacement(
    gpuInstance: Any, profileId: int, placement: Any
) -> Any:
    target = _ctypes_target(placement)
    if target is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return _create_ci(gpuInstance, profileId, int(target.start))


def _ci_of(handle: Any) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    kind, index, gi_id, ci_id = _decode(handle)
    if kind != _KIND_CI:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    gpu = _gpu_entry(index)
    gi = _find_gi(gpu, gi_id)
    return gpu, gi, _find_ci(gi, ci_id)


@_api
def nvmlComputeInstanceDestroy(computeInstance: Any) -> int:
    gpu, gi, ci = _ci_of(computeInstance)
    _fault_gate("destroy_compute_instance", gpu["index"])
    with _mutate() as section:
        sim_destroy_compute_instance(section["gpus"][gpu["index"]], gi["id"], ci["id"])
    return NVML_SUCCESS


@_api
def nvmlGpuInstanceGetComputeInstances(
    gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
) -> int:
    gpu, gi = _gi_of(gpuInstance)
    if not any(p.id == int(profileId) for p in _ci_profiles(gpu, gi)):
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    handles = [
        _ci_handle(gpu["index"], gi, ci)
        for ci in gi["compute_instances"]
        if ci["profile_id"] == int(profileId)
    ]
    _fill_array(computeInstancesRef, countRef, handles, check_size=False)
    return NVML_SUCCESS


@_api
def nvmlGpuInstanceGetComputeInstanceById(gpuInstance: Any, computeInstanceId: int) -> Any:
    gpu, gi = _gi_of(gpuInstance)
    for ci in gi["compute_instances"]:
        if ci["id"] == int(computeInstanceId):
            return _ci_handle(gpu["index"], gi, ci)
    _fail(NVML_ERROR_NOT_FOUND)


@_api
def nvmlComputeInstanceGetInfo(computeInstance: Any) -> c_nvmlComputeInstanceInfo_t:
    gpu, gi, ci = _ci_of(computeInstance)
    info = c_nvmlComputeInstanceInfo_t()
    info.device = _handle(c_nvmlDevice_t, _KIND_DEVICE, gpu["index"])
    info.gpuInstance = _gi_handle(gpu["index"], gi)
    info.id = ci["id"]
    info.profileId = ci["profile_id"]
    info.placement = c_nvmlComputeInstancePlacement_t(ci["start"], ci["size"])
    return info


nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo


# --- MIG devices ---


def _mig_devices(gpu: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    mig = gpu.get("mig") or {}
    if mig.get("current") != NVML_DEVICE_MIG_ENABLE:
        return []
    return [(gi, ci) for gi in mig.get("gpu_instances") or [] for ci in gi["compute_instances"]]


@_api
def nvmlDeviceIsMigDeviceHandle(device: Any) -> c_uint:
    return c_uint(1 if _decode(device)[0] == _KIND_MIG else 0)  # a c_uint, as in pynvml


@_api
def nvmlDeviceGetMaxMigDeviceCount(device: Any) -> int:
    gpu = _parent(device)
    geometry = _require_mig(gpu, enabled=False)
    return geometry.compute_slices


@_api
def nvmlDeviceGetMigDeviceHandleByIndex(device: Any, index: int) -> Any:
    gpu = _parent(device)
    geometry = _require_mig(gpu)
    if not 0 <= int(index) < geometry.compute_slices:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    devices = _mig_devices(gpu)
    if int(index) >= len(devices):
        _fail(NVML_ERROR_NOT_FOUND)
    gi, ci = devices[int(index)]
    return _handle(c_nvmlDevice_t, _KIND_MIG, gpu["index"], gi["id"], ci["id"])


@_api
def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(migDevice: Any) -> Any:
    kind, index, _, _ = _decode(migDevice)
    if kind != _KIND_MIG:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return _handle(c_nvmlDevice_t, _KIND_DEVICE, index)


@_api
def nvmlDeviceGetGpuInstanceId(device: Any) -> int:
    _, kind, gi, _ = _device(device)
    if kind != _KIND_MIG or gi is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return int(gi["id"])


@_api
def nvmlDeviceGetComputeInstanceId(device: Any) -> int:
    _, kind, _, ci = _device(device)
    if kind != _KIND_MIG or ci is None:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return int(ci["id"])


@_api
def nvmlDeviceGetAttributes(device: Any) -> c_nvmlDeviceAttributes:
    """MIG device handles only, as nvml.h documents."""
    gpu, kind, gi, ci = _device(device)
    if kind != _KIND_MIG or gi is None or ci is None:
        _fail(NVML_ERROR_NOT_SUPPORTED)
    gi_profile = _gi_profile(gpu, gi)
    ci_profile = next(p for p in _ci_profiles(gpu, gi) if p.id == ci["profile_id"])
    attrs = c_nvmlDeviceAttributes()
    attrs.multiprocessorCount = ci_profile.sm_count
    attrs.gpuInstanceSliceCount = gi_profile.compute_slices
    attrs.computeInstanceSliceCount = ci_profile.compute_slices
    attrs.memorySizeMB = gi_profile.memory_mib
    return attrs


nvmlDeviceGetAttributes_v2 = nvmlDeviceGetAttributes


# --- health: ECC, row remapping, page retirement, clocks, temperature, XID events ----------------
#
# Per GPU, state["nvidia"]["gpus"][i]["health"] (absent: a healthy card):
#   {"ecc_uncorrected_volatile": int, "ecc_corrected_volatile": int,
#    "remapped_rows": {"correctable", "uncorrectable", "pending", "failed"},
#    "retired_pages_pending": bool, "temperature_c": int, "clocks_event_reasons": int (mask),
#    "xids": [{"xid": int, "at": epoch seconds, "delivered": bool}]}
# gpupoolctl.sim.faults writes it (`gpupoolctl sim fault`); "lost" stays the GPU's own flag.

NVML_MEMORY_ERROR_TYPE_CORRECTED = 0
NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
NVML_MEMORY_ERROR_TYPE_COUNT = 2
NVML_VOLATILE_ECC = 0
NVML_AGGREGATE_ECC = 1
NVML_ECC_COUNTER_TYPE_COUNT = 2
NVML_TEMPERATURE_GPU = 0
NVML_TEMPERATURE_COUNT = 1

nvmlClocksEventReasonGpuIdle = 0x0000000000000001
nvmlClocksEventReasonApplicationsClocksSetting = 0x0000000000000002
nvmlClocksEventReasonSwPowerCap = 0x0000000000000004
nvmlClocksThrottleReasonHwSlowdown = 0x0000000000000008
nvmlClocksEventReasonSyncBoost = 0x0000000000000010
nvmlClocksEventReasonSwThermalSlowdown = 0x0000000000000020
nvmlClocksThrottleReasonHwThermalSlowdown = 0x0000000000000040
nvmlClocksThrottleReasonHwPowerBrakeSlowdown = 0x0000000000000080
nvmlClocksEventReasonDisplayClockSetting = 0x0000000000000100
nvmlClocksEventReasonNone = 0x0000000000000000
# The older names, kept by nvidia-ml-py as aliases.
nvmlClocksThrottleReasonGpuIdle = nvmlClocksEventReasonGpuIdle
nvmlClocksThrottleReasonApplicationsClocksSetting = nvmlClocksEventReasonApplicationsClocksSetting
nvmlClocksThrottleReasonSwPowerCap = nvmlClocksEventReasonSwPowerCap
nvmlClocksThrottleReasonSyncBoost = nvmlClocksEventReasonSyncBoost
nvmlClocksThrottleReasonSwThermalSlowdown = nvmlClocksEventReasonSwThermalSlowdown
nvmlClocksThrottleReasonDisplayClockSetting = nvmlClocksEventReasonDisplayClockSetting
nvmlClocksThrottleReasonNone = nvmlClocksEventReasonNone

nvmlEventTypeSingleBitEccError = 0x0000000000000001
nvmlEventTypeDoubleBitEccError = 0x0000000000000002
nvmlEventTypePState = 0x0000000000000004
nvmlEventTypeXidCriticalError = 0x0000000000000008
nvmlEventTypeClock = 0x0000000000000010
nvmlEventTypePowerSourceChange = 0x0000000000000080
nvmlEventMigConfigChange = 0x0000000000000100
nvmlEventTypeNone = 0x0000000000000000
nvmlEventTypeAll = (
    nvmlEventTypeNone
    | nvmlEventTypeSingleBitEccError
    | nvmlEventTypeDoubleBitEccError
    | nvmlEventTypePState
    | nvmlEventTypeClock
    | nvmlEventTypePowerSourceChange
    | nvmlEventTypeXidCriticalError
    | nvmlEventMigConfigChange
)

_SIM_IDLE_TEMPERATURE_C = 34


class struct_c_nvmlEventSet_t(Structure):
    pass


c_nvmlEventSet_t = POINTER(struct_c_nvmlEventSet_t)


class c_nvmlEventData_t(Structure):
    _fields_ = [
        ("device", c_nvmlDevice_t),
        ("eventType", c_ulonglong),
        ("eventData", c_ulonglong),
        ("gpuInstanceId", c_uint),
        ("computeInstanceId", c_uint),
    ]


# Event sets live in this process, as in libnvidia-ml: id -> {"gpus": {index: mask},
# "queue": [(gpu index, xid)]}.
_event_sets: dict[int, dict[str, Any]] = {}
_KIND_EVENT_SET = 5


def _health(gpu: dict[str, Any]) -> dict[str, Any]:
    value = gpu.get("health")
    return value if isinstance(value, dict) else {}


def _remapping_card(gpu: dict[str, Any]) -> bool:
    """Ampere and later remap rows; older cards retire pages (nvml.h)."""
    major = (gpu.get("compute_capability") or [0])[0]
    return int(major) >= 8


@_api
def nvmlDeviceGetTotalEccErrors(handle: Any, errorType: int, counterType: int) -> int:
    gpu = _parent(handle)
    if int(errorType) not in (0, 1) or int(counterType) not in (0, 1):
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    health = _health(gpu)
    kind = "uncorrected" if int(errorType) == NVML_MEMORY_ERROR_TYPE_UNCORRECTED else "corrected"
    volatile = int(health.get(f"ecc_{kind}_volatile", 0))
    # Aggregate counts survive driver reloads: never fewer than the volatile ones.
    if int(counterType) == NVML_AGGREGATE_ECC:
        return max(volatile, int(health.get(f"ecc_{kind}_aggregate", 0)))
    return volatile


@_api
def nvmlDeviceGetRemappedRows(device: Any) -> tuple[int, int, int, int]:
    """(correctable rows, uncorrectable rows, is pending, failure occurred), as pynvml returns.

    Not supported before Ampere, nor while MIG instances exist (nvml.h)."""
    gpu = _parent(device)
    if not _remapping_card(gpu):
        _fail(NVML_ERROR_NOT_SUPPORTED)
    mig = gpu.get("mig") or {}
    if mig.get("current") == NVML_DEVICE_MIG_ENABLE and mig.get("gpu_instances"):
        _fail(NVML_ERROR_NOT_SUPPORTED)
    rows = _health(gpu).get("remapped_rows") or {}
    return (
        int(rows.get("correctable", 0)),
        int(rows.get("uncorrectable", 0)),
        1 if rows.get("pending") else 0,
        1 if rows.get("failed") else 0,
    )


@_api
def nvmlDeviceGetRetiredPagesPendingStatus(device: Any) -> int:
    gpu = _parent(device)
    if _remapping_card(gpu):
        _fail(NVML_ERROR_NOT_SUPPORTED)  # replaced by row remapping from Ampere on
    pending = _health(gpu).get("retired_pages_pending")
    return NVML_FEATURE_ENABLED if pending else NVML_FEATURE_DISABLED


@_api
def nvmlDeviceGetTemperature(handle: Any, sensor: int) -> int:
    if int(sensor) != NVML_TEMPERATURE_GPU:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    gpu = _parent(handle)
    default = _SIM_IDLE_TEMPERATURE_C + int(gpu["index"]) % 4
    return int(_health(gpu).get("temperature_c", default))


@_api
def nvmlDeviceGetCurrentClocksEventReasons(handle: Any) -> int:
    gpu = _parent(handle)
    health = _health(gpu)
    if "clocks_event_reasons" in health:
        return int(health["clocks_event_reasons"])
    return nvmlClocksEventReasonGpuIdle if not gpu.get("processes") else 0


@_api
def nvmlDeviceGetCurrentClocksThrottleReasons(handle: Any) -> int:
    return int(nvmlDeviceGetCurrentClocksEventReasons(handle))


@_api
def nvmlDeviceGetSupportedEventTypes(handle: Any) -> int:
    _parent(handle)
    return nvmlEventTypeAll


def _event_set_id(eventSet: Any) -> int:
    kind, index, _, _ = _decode(eventSet)
    if kind != _KIND_EVENT_SET or index not in _event_sets:
        _fail(NVML_ERROR_INVALID_ARGUMENT)
    return index


def nvmlEventSetCreate() -> Any:
    CALLS["nvmlEventSetCreate"] += 1
    if _init_count <= 0:
        _fail(NVML_ERROR_UNINITIALIZED)
    number = max(_event_sets, default=0) + 1
    _event_sets[number] = {"gpus": {}, "queue": []}
    return _handle(c_nvmlEventSet_t, _KIND_EVENT_SET, number)


@_api
def nvmlDeviceRegisterEvents(handle: Any, eventTypes: int, eventSet: Any) -> None:
    """Register for events on one GPU. The sim's critical XIDs not yet delivered to any
    event set are queued here (and marked delivered): they stand for the events that occur
    while this agent runs. A real one-shot agent sees only what happens after it registers."""
    gpu = _parent(handle)
    number = _event_set_id(eventSet)
    index = int(gpu["index"])
    _event_sets[number]["gpus"][index] = int(eventTypes)
    if not int(eventTypes) & nvmlEventTypeXidCriticalError:
        return
    if not any(not x.get("delivered") for x in _health(gpu).get("xids") or []):
        return
    with _mutate() as section:
        fresh = section["gpus"][index].get("health") or {}
        for event in fresh.get("xids") or []:
            if not event.get("delivered"):
                event["delivered"] = True
                _event_sets[number]["queue"].append((index, int(event["xid"])))


@_api
def nvmlEventSetWait_v2(eventSet: Any, timeoutms: int) -> c_nvmlEventData_t:
    number = _event_set_id(eventSet)
    queue = _event_sets[number]["queue"]
    if not queue:
        _fail(NVML_ERROR_TIMEOUT)  # the sim never blocks: nothing else will happen
    index, xid = queue.pop(0)
    data = c_nvmlEventData_t()
    data.device = _handle(c_nvmlDevice_t, _KIND_DEVICE, index)
    data.eventType = nvmlEventTypeXidCriticalError
    data.eventData = xid
    data.gpuInstanceId = NVML_GPU_INSTANCE_ID_ANY
    data.computeInstanceId = NVML_COMPUTE_INSTANCE_ID_ANY
    return data


nvmlEventSetWait = nvmlEventSetWait_v2


def nvmlEventSetFree(eventSet: Any) -> None:
    CALLS["nvmlEventSetFree"] += 1
    _event_sets.pop(_event_set_id(eventSet), None)


def gpupool_sim_kernel_log() -> list[tuple[float | None, str]]:
    """Sim-only: the node's kernel log, as the lines the NVIDIA driver writes for XIDs:
    (time, text). The agent reads /dev/kmsg on a real node; this stands in for it."""
    out = []
    for gpu in _gpus():
        bus = str(gpu["pci"]["bus_id"])
        short = bus.rsplit(".", 1)[0]  # the driver names the device without its function
        for event in _health(gpu).get("xids") or []:
            out.append((event.get("at"), f"NVRM: Xid (PCI:{short}): {int(event['xid'])}, "
                        "pid='<unknown>', name=<unknown>, simulated fault"))  # fmt: skip
    return out
