"""The `nvml` driver: NVIDIA facts through pynvml (nvidia-ml-py).

The same code runs against the real pynvml and against gpupoolctl.sim.pynvml, so it uses only
the real module's API. Every field is read on its own: a field the card does not support is
None, and one failing field never costs the node its other facts.
"""

from __future__ import annotations

import contextlib
import ctypes
import time
from collections.abc import Callable
from typing import Any

from gpupoolctl.agent.drivers import kmsg, nvml_compat
from gpupoolctl.agent.drivers.base import DriverUnavailable
from gpupoolctl.hw.model import bandwidth_class
from gpupoolctl.hw.pci import bus_id

_MIB = 1024 * 1024
_NO_ID = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of a process outside MIG

# FP32 cores per SM by compute capability (as CUDA's helper_cuda.h _ConvertSMVer2Cores).
# NVML gives cores (nvmlDeviceGetNumGpuCores), not SMs; the full-GPU MIG profile's SM count
# is no substitute (98 of the A100's 108 SMs).
_CORES_PER_SM = {
    (7, 0): 64,
    (7, 2): 64,
    (7, 5): 64,
    (8, 0): 64,
    (8, 6): 128,
    (8, 7): 128,
    (8, 9): 128,
    (9, 0): 128,
    (10, 0): 128,
    (10, 3): 128,
    (12, 0): 128,
}

# Clock event (throttle) reason bits (nvml.h nvmlClocksEventReason*) -> the names health uses.
THROTTLE_BITS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "applications_clocks_setting"),
    (0x4, "sw_power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal_slowdown"),
    (0x40, "hw_thermal_slowdown"),
    (0x80, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
)
_XID_CRITICAL = 0x8  # nvmlEventTypeXidCriticalError
_MAX_EVENTS = 1024  # events drained per read, at most

# nvmlDeviceGetTopologyCommonAncestor level -> nvidia-smi topo -m word.
_TOPO_WORDS = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}


def open_driver() -> NvmlDriver:
    """Initialise NVML. DriverUnavailable("") when the stack is simply absent (no pynvml, no
    libnvidia-ml, no kernel driver, no GPU); with a message when it is present but broken."""
    try:
        import pynvml
    except ImportError:
        raise DriverUnavailable("") from None
    absent = {
        getattr(pynvml, "NVML_ERROR_LIBRARY_NOT_FOUND", 12),
        getattr(pynvml, "NVML_ERROR_DRIVER_NOT_LOADED", 9),
    }
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        if exc.value in absent:
            raise DriverUnavailable("") from None
        raise DriverUnavailable(f"nvmlInit failed: {exc}") from None
    try:
        count = int(pynvml.nvmlDeviceGetCount())
    except pynvml.NVMLError as exc:
        _shutdown(pynvml)
        raise DriverUnavailable(f"nvmlDeviceGetCount failed: {exc}") from None
    if count == 0:
        _shutdown(pynvml)
        raise DriverUnavailable("")
    return NvmlDriver(pynvml, count)


def _shutdown(nvml: Any) -> None:
    with contextlib.suppress(nvml.NVMLError):
        nvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _profile_name(raw: Any) -> str:
    return _text(raw).removeprefix("MIG ").strip()


class NvmlDriver:
    name = "nvml"
    vendor = "nvidia"

    def __init__(self, nvml: Any, count: int) -> None:
        self._nvml = nvml
        self._mismatch = nvml_compat.mismatch_errors(nvml)
        self.warnings: list[str] = []  # per-field failures other than "not supported"
        self._handles: list[tuple[int, Any]] = []
        for index in range(count):
            handle = self._get(f"GPU {index}", nvml.nvmlDeviceGetHandleByIndex, index)
            if handle is not None:
                self._handles.append((index, handle))
        self._bus_ids: list[str | None] = []
        self._gpus: list[dict[str, Any]] | None = None
        self._mig_cache: dict[int, list[tuple[Any, int | None, int | None]]] = {}
        # Run-time MIG profile tables, read once per (PCI device id, NVML struct version).
        self._profile_cache: dict[tuple[str, int], list[dict[str, Any]]] = {}

    # --- plumbing -------------------------------------------------------------------------

    def _get(self, what: str, fn: Any, *args: Any) -> Any:
        """Call one NVML function; None when it fails. Unsupported or absent values are normal;
        other failures are kept as warnings."""
        try:
            return fn(*args)
        except self._nvml.NVMLError as exc:
            self._failed(what, fn, exc)
            return None
        except self._mismatch as exc:
            self.warnings.append(f"{what}: {getattr(fn, '__name__', fn)}: {exc}")
            return None

    def _failed(self, what: str, fn: Any, exc: Any) -> None:
        nvml = self._nvml
        quiet = (
            nvml.NVML_ERROR_NOT_SUPPORTED,
            nvml.NVML_ERROR_NOT_FOUND,
            nvml.NVML_ERROR_INVALID_ARGUMENT,
            nvml.NVML_ERROR_NO_PERMISSION,
        )
        if exc.value not in quiet:
            self.warnings.append(f"{what}: {getattr(fn, '__name__', fn)}: {exc}")

    def _reporter(self, what: str, fn: Any) -> Callable[[Any], None]:
        """A `failed` callback for nvml_compat's profile scans: warn as _get does."""
        return lambda exc: self._failed(what, fn, exc)

    # --- Driver protocol ------------------------------------------------------------------

    def version(self) -> str | None:
        value = self._get("driver", self._nvml.nvmlSystemGetDriverVersion)
        return None if value is None else _text(value)

    def close(self) -> None:
        _shutdown(self._nvml)

    def gpus(self) -> list[dict[str, Any]]:
        if self._gpus is None:
            self._gpus = [self._gpu(index, handle) for index, handle in self._handles]
            _share_profile_names(self._gpus)
            self._bus_ids = [g["pci_bus_id"] or None for g in self._gpus]
            self._add_xids(self._gpus)
        return self._gpus

    def link_matrix(self) -> list[list[str]]:
        self.gpus()
        handles = [h for _, h in self._handles]
        size = len(handles)
        nvlinks = self._nvlink_counts()
        matrix = [["X"] * size for _ in range(size)]
        for i in range(size):
            for j in range(i + 1, size):
                if nvlinks[i][j]:
                    word = f"NV{nvlinks[i][j]}"
                else:
                    level = self._get(
                        "topology",
                        self._nvml.nvmlDeviceGetTopologyCommonAncestor,
                        handles[i],
                        handles[j],
                    )
                    word = _TOPO_WORDS.get(level, "SYS") if level is not None else "SYS"
                matrix[i][j] = matrix[j][i] = word
        return matrix

    # --- one GPU --------------------------------------------------------------------------

    def _gpu(self, index: int, h: Any) -> dict[str, Any]:
        nvml = self._nvml
        where = f"GPU {index}"
        pci = self._get(where, nvml.nvmlDeviceGetPciInfo, h)
        memory = self._get(where, nvml.nvmlDeviceGetMemoryInfo, h)
        cc = self._get(where, nvml.nvmlDeviceGetCudaComputeCapability, h)
        util = self._get(where, nvml.nvmlDeviceGetUtilizationRates, h)
        bandwidth = self._bandwidth(where, h)
        mig = self._mig(where, h, f"0x{pci.pciDeviceId:08X}" if pci is not None else str(index))
        return {
            "index": index,
            "vendor": "nvidia",
            "model": _text(self._get(where, nvml.nvmlDeviceGetName, h) or "unknown"),
            "uuid": _text(self._get(where, nvml.nvmlDeviceGetUUID, h) or ""),
            "pci_bus_id": bus_id(_text(pci.busId)) if pci is not None else "",
            "pci_device_id": f"0x{pci.pciDeviceId:08X}" if pci is not None else "",
            "numa_node": self._numa(where, h),
            "memory_total_mib": int(memory.total // _MIB) if memory is not None else 0,
            "memory_used_mib": int(memory.used // _MIB) if memory is not None else 0,
            "bandwidth_gbps": bandwidth,
            "bandwidth_class": bandwidth_class(bandwidth),
            "compute_units": self._sm_count(where, h, cc),
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc is not None else None,
            "gfx_target": None,
            "utilization_pct": int(util.gpu) if util is not None else None,
            "mig": mig,
            "partition": None,
            "sriov": None,
            "processes": self._processes(where, h, mig),
            "driver": self.name,
            "health": self._health(where, h, mig),
        }

    def _bandwidth(self, where: str, h: Any) -> float | None:
        width = self._get(where, self._nvml.nvmlDeviceGetMemoryBusWidth, h)
        clock = self._get(where, self._nvml.nvmlDeviceGetMaxClockInfo, h, self._nvml.NVML_CLOCK_MEM)
        if not width or not clock:
            return None
        # Double data rate: bytes per transfer * MHz * 2 -> MB/s; /1000 -> GB/s.
        return round(width / 8 * clock * 2 / 1000, 1)

    def _sm_count(self, where: str, h: Any, cc: tuple[int, int] | None) -> int | None:
        per_sm = _CORES_PER_SM.get((int(cc[0]), int(cc[1]))) if cc is not None else None
        if per_sm is None:
            return None
        cores = self._get(where, self._nvml.nvmlDeviceGetNumGpuCores, h)
        return int(cores) // per_sm if cores else None

    def _numa(self, where: str, h: Any) -> int | None:
        # The CPU-side NUMA node closest to the GPU (nvidia-smi topo's "NUMA Affinity").
        # nvmlDeviceGetNumaNodeId is a different thing: the GPU's own memory node on GH200.
        nvml = self._nvml
        scope = getattr(nvml, "NVML_AFFINITY_SCOPE_NODE", 0)
        mask = self._get(where, nvml.nvmlDeviceGetMemoryAffinity, h, 1, scope)
        if mask is None:
            return None
        for word_index, word in enumerate(mask):
            if word:
                return word_index * 64 + (int(word) & -int(word)).bit_length() - 1
        return None

    # --- health ---------------------------------------------------------------------------

    def _probe(self, where: str, name: str, *args: Any) -> tuple[Any, str | None]:
        """(value, None), or (None, why not): "not supported", "lost", or the error."""
        nvml = self._nvml
        fn = getattr(nvml, name, None)
        if fn is None:
            return None, f"this pynvml has no {name}"
        try:
            return fn(*args), None
        except nvml.NVMLError as exc:
            if exc.value == getattr(nvml, "NVML_ERROR_GPU_IS_LOST", 15):
                return None, "lost"
            if exc.value in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
                return None, "not supported"
            if exc.value == nvml.NVML_ERROR_NO_PERMISSION:
                return None, "no permission"
            self.warnings.append(f"{where}: {name}: {exc}")
            return None, str(exc)
        except self._mismatch as exc:
            return None, str(exc)

    def _health(self, where: str, h: Any, mig: dict[str, Any]) -> dict[str, Any]:
        """The GPU's health signals (hw.model.GpuHealth); XIDs are added by _add_xids."""
        nvml = self._nvml
        unknown: list[str] = []
        notes: list[str] = []
        lost = False

        def failed(name: str, why: str) -> None:
            nonlocal lost
            lost = lost or why == "lost"
            unknown.append(name)
            notes.append(f"{name}: {why}")

        ecc, why = self._probe(
            where,
            "nvmlDeviceGetTotalEccErrors",
            h,
            getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
            getattr(nvml, "NVML_VOLATILE_ECC", 0),
        )
        if why:
            failed("ecc_uncorrected_volatile", "no ECC, or ECC off" if why == "not supported"
                   else why)  # fmt: skip
        # Ampere and later remap rows, older cards retire pages: a card has one of the two.
        rows, why_rows = self._probe(where, "nvmlDeviceGetRemappedRows", h)
        pages, why_pages = self._probe(where, "nvmlDeviceGetRetiredPagesPendingStatus", h)
        with_instances = mig.get("mode") == "enabled" and bool(mig.get("instances"))
        if why_rows and with_instances and why_rows == "not supported":
            failed("remapped_rows", "not readable while MIG instances exist")
        elif why_rows and why_pages:
            failed("remapped_rows", why_rows)
            failed("retired_pages_pending", why_pages)
        elif why_rows and why_rows != "not supported":
            failed("remapped_rows", why_rows)
        elif why_pages and why_pages != "not supported":
            failed("retired_pages_pending", why_pages)
        temperature, why = self._probe(
            where, "nvmlDeviceGetTemperature", h, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
        )
        if why:
            failed("temperature_c", why)
        reasons, why = self._probe(where, "nvmlDeviceGetCurrentClocksEventReasons", h)
        if why and why.startswith("this pynvml has no"):
            reasons, why = self._probe(where, "nvmlDeviceGetCurrentClocksThrottleReasons", h)
        if why:
            failed("throttle_reasons", why)
        health: dict[str, Any] = {
            "unknown": unknown,
            "lost": lost,
            "ecc_uncorrected_volatile": None if ecc is None else int(ecc),
            "remapped_rows": None
            if rows is None
            else {
                "correctable": int(rows[0]),
                "uncorrectable": int(rows[1]),
                "pending": bool(rows[2]),
                "failed": bool(rows[3]),
            },
            "retired_pages_pending": None
            if pages is None
            else int(pages) == getattr(nvml, "NVML_FEATURE_ENABLED", 1),
            "xids": None,
            "throttle_reasons": None
            if reasons is None
            else [name for bit, name in THROTTLE_BITS if int(reasons) & bit],
            "temperature_c": None if temperature is None else int(temperature),
            "notes": notes,
        }
        return health

    def _add_xids(self, gpus: list[dict[str, Any]]) -> None:
        """Critical XIDs per GPU, from NVML events and the kernel log; "xids" is unknown on a
        GPU where neither could be read."""
        registered, events = self._nvml_xid_events()
        reader = getattr(self._nvml, "gpupool_sim_kernel_log", None)  # the sim's stand-in
        records = reader() if callable(reader) else kmsg.read_kernel_log()
        logged = kmsg.xid_events(records, self._bus_ids) if records is not None else {}
        for position, gpu in enumerate(gpus):
            health = gpu.get("health")
            if health is None:
                continue
            found = {(e["xid"], e.get("at")): e for e in logged.get(position, [])}
            for event in events.get(position, []):
                # The same XID in both: the log's line, which has the time it happened.
                if not any(xid == event["xid"] for xid, _ in found):
                    found[(event["xid"], event.get("at"))] = event
            if records is not None or events.get(position):
                health["xids"] = sorted(found.values(), key=lambda e: (e.get("at") or 0, e["xid"]))
            else:
                health["unknown"].append("xids")
                why = "kernel log not readable"
                if position not in registered:
                    why += ", no NVML XID events on this GPU"
                else:
                    why += "; NVML events show only what happens during the read"
                health["notes"].append(f"xids: {why}")

    def _nvml_xid_events(self) -> tuple[set[int], dict[int, list[dict[str, Any]]]]:
        """XID events pending on an event set registered now, read without waiting.

        An event set only receives events that happen after it is registered, so a one-shot
        agent sees the XIDs raised during its own read, nearly never an earlier one: the
        kernel log (kmsg) is where the history is. Returns the positions of the GPUs that
        could be registered and the events per position."""
        nvml = self._nvml
        create = getattr(nvml, "nvmlEventSetCreate", None)
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or getattr(nvml, "nvmlEventSetWait", None)
        if create is None or wait is None:
            return set(), {}
        try:
            event_set = create()
        except nvml.NVMLError:
            return set(), {}
        registered: set[int] = set()
        events: dict[int, list[dict[str, Any]]] = {}
        by_address = {_address(h): position for position, (_, h) in enumerate(self._handles)}
        try:
            kind = getattr(nvml, "nvmlEventTypeXidCriticalError", _XID_CRITICAL)
            for position, (_, h) in enumerate(self._handles):
                try:
                    nvml.nvmlDeviceRegisterEvents(h, kind, event_set)
                except nvml.NVMLError:
                    continue  # NOT_SUPPORTED (some cards, vGPU) or the GPU is lost
                registered.add(position)
            for _ in range(_MAX_EVENTS if registered else 0):
                try:
                    data = wait(event_set, 0)  # 0 ms: never block; TIMEOUT when none pending
                except nvml.NVMLError:
                    break
                if not int(data.eventType) & kind:
                    continue
                position = by_address.get(_address(data.device))
                if position is not None:
                    events.setdefault(position, []).append(
                        {"xid": int(data.eventData), "at": time.time(), "source": "nvml-event"}
                    )
        finally:
            free = getattr(nvml, "nvmlEventSetFree", None)
            if free is not None:
                with contextlib.suppress(nvml.NVMLError):
                    free(event_set)
        return registered, events

    # --- MIG ------------------------------------------------------------------------------

    def _mig(self, where: str, h: Any, model_key: str) -> dict[str, Any]:
        nvml = self._nvml
        modes = self._get(where, nvml.nvmlDeviceGetMigMode, h)
        if modes is None:
            return {"capable": False, "mode": "n/a", "pending": None, "instances": []}
        current, pending = (int(m) for m in modes)
        enabled = current == nvml.NVML_DEVICE_MIG_ENABLE
        return {
            "capable": True,
            "mode": "enabled" if enabled else "disabled",
            "pending": "enabled" if pending == nvml.NVML_DEVICE_MIG_ENABLE else "disabled",
            "instances": self._gpu_instances(where, h) if enabled else [],
            "profiles": self._mig_profiles(where, h, model_key, enabled),
        }

    def _mig_profiles(
        self, where: str, h: Any, model_key: str, enabled: bool
    ) -> list[dict[str, Any]]:
        """The GPU instance profiles this driver offers on this card, with their placements.

        On real hardware these win over the catalog (ids, sizes and placements vary by device
        and driver). Version 1 of the profile query works with MIG off but carries no name;
        version 2 has the name but needs MIG on (nvml.h). Names missing here are filled in by
        _share_profile_names.
        """
        nvml = self._nvml
        version = 2 if enabled else 1
        key = (model_key, version)
        if key in self._profile_cache:
            return [dict(p, placements=list(p["placements"])) for p in self._profile_cache[key]]
        out = []
        for info in nvml_compat.gpu_instance_profiles(
            nvml, h, version, failed=self._reporter(where, nvml.nvmlDeviceGetGpuInstanceProfileInfo)
        ):
            starts, size = self._placements(where, h, int(info.id))
            raw_name = getattr(info, "name", None)
            out.append(
                {
                    "name": _profile_name(raw_name) if raw_name else None,
                    "id": int(info.id),
                    "slices": int(info.sliceCount),
                    "memory_mib": int(info.memorySizeMB),
                    "sm_count": int(info.multiprocessorCount),
                    "max_instances": int(info.instanceCount),
                    "placements": starts,
                    "size": size,
                }
            )
        self._profile_cache[key] = out
        return [dict(p, placements=list(p["placements"])) for p in out]

    def _placements(self, where: str, h: Any, profile_id: int) -> tuple[list[int], int | None]:
        nvml = self._nvml
        # One call with room to spare: the most placements known is 8 slots (12 on RTX PRO).
        array = (nvml.c_nvmlGpuInstancePlacement_t * 32)()
        count = ctypes.c_uint(32)
        done = self._get(
            where,
            nvml.nvmlDeviceGetGpuInstancePossiblePlacements,
            h,
            profile_id,
            array,
            ctypes.byref(count),
        )
        if done is None:
            return [], None
        placements = [array[i] for i in range(count.value)]
        sizes = {int(p.size) for p in placements}
        return [int(p.start) for p in placements], (sizes.pop() if len(sizes) == 1 else None)

    def _gpu_instances(self, where: str, h: Any) -> list[dict[str, Any]]:
        nvml = self._nvml
        uuids = self._mig_uuids(where, h)
        out: list[dict[str, Any]] = []
        ci_profiles: dict[int, list[Any]] = {}  # GI profile id -> its CI profile infos
        for info in nvml_compat.gpu_instance_profiles(
            nvml, h, failed=self._reporter(where, nvml.nvmlDeviceGetGpuInstanceProfileInfo)
        ):
            array = (nvml.c_nvmlGpuInstance_t * info.instanceCount)()
            count = ctypes.c_uint(0)
            done = self._get(
                where, nvml.nvmlDeviceGetGpuInstances, h, info.id, array, ctypes.byref(count)
            )
            if done is None:
                continue
            for slot in range(count.value):
                gi = array[slot]
                gi_info = self._get(where, nvml.nvmlGpuInstanceGetInfo, gi)
                if gi_info is None:
                    continue
                if info.id not in ci_profiles:
                    ci_profiles[info.id] = self._ci_profiles(where, gi)
                out.append(
                    {
                        "gi_id": int(gi_info.id),
                        "profile": _profile_name(info.name),
                        "profile_id": int(info.id),
                        "placement_start": int(gi_info.placement.start),
                        "placement_size": int(gi_info.placement.size),
                        "memory_mib": int(info.memorySizeMB),
                        "sm_count": int(info.multiprocessorCount),
                        "compute_instances": self._compute_instances(
                            where, gi, int(gi_info.id), ci_profiles[info.id], uuids
                        ),
                    }
                )
        out.sort(key=lambda gi: (gi["placement_start"], gi["gi_id"]))
        return out

    def _ci_profiles(self, where: str, gi: Any) -> list[Any]:
        nvml = self._nvml
        return nvml_compat.compute_instance_profiles(
            nvml,
            gi,
            failed=self._reporter(where, nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo),
        )

    def _compute_instances(
        self,
        where: str,
        gi: Any,
        gi_id: int,
        profiles: list[Any],
        uuids: dict[tuple[int, int], str],
    ) -> list[dict[str, Any]]:
        nvml = self._nvml
        out = []
        for info in profiles:
            array = (nvml.c_nvmlComputeInstance_t * info.instanceCount)()
            count = ctypes.c_uint(0)
            done = self._get(
                where,
                nvml.nvmlGpuInstanceGetComputeInstances,
                gi,
                info.id,
                array,
                ctypes.byref(count),
            )
            if done is None:
                continue
            for slot in range(count.value):
                ci_info = self._get(where, nvml.nvmlComputeInstanceGetInfo, array[slot])
                if ci_info is None:
                    continue
                ci_id = int(ci_info.id)
                out.append(
                    {
                        "ci_id": ci_id,
                        "profile": _profile_name(info.name),
                        "uuid": uuids.get((gi_id, ci_id)),
                    }
                )
        out.sort(key=lambda ci: ci["ci_id"])
        return out

    def _mig_uuids(self, where: str, h: Any) -> dict[tuple[int, int], str]:
        """(gi id, ci id) -> MIG-... uuid, from the MIG device handles."""
        nvml = self._nvml
        out: dict[tuple[int, int], str] = {}
        for mig, gi_id, ci_id in self._mig_handles(where, h):
            uuid = self._get(where, nvml.nvmlDeviceGetUUID, mig)
            if gi_id is not None and ci_id is not None and uuid:
                out[(int(gi_id), int(ci_id))] = _text(uuid)
        return out

    def _mig_handles(self, where: str, h: Any) -> list[tuple[Any, int | None, int | None]]:
        """The GPU's MIG device handles with their (gi id, ci id), read once per GPU."""
        nvml = self._nvml
        key = id(h)  # handles live as long as the driver, so their ids are stable
        if key in self._mig_cache:
            return self._mig_cache[key]
        total = self._get(where, nvml.nvmlDeviceGetMaxMigDeviceCount, h) or 0
        handles = []
        for index in range(int(total)):
            # NOT_FOUND for unused indices; the populated ones are not necessarily first.
            mig = self._get(where, nvml.nvmlDeviceGetMigDeviceHandleByIndex, h, index)
            if mig is not None:
                gi_id = self._get(where, nvml.nvmlDeviceGetGpuInstanceId, mig)
                ci_id = self._get(where, nvml.nvmlDeviceGetComputeInstanceId, mig)
                handles.append((mig, gi_id, ci_id))
        self._mig_cache[key] = handles
        return handles

    # --- processes ------------------------------------------------------------------------

    def _processes(self, where: str, h: Any, mig: dict[str, Any]) -> list[dict[str, Any]]:
        nvml = self._nvml
        found: dict[tuple[int, int | None, int | None], dict[str, Any]] = {}
        sources: list[tuple[Any, int | None, int | None]] = [(h, None, None)]
        if mig.get("mode") == "enabled":
            # Whether the parent handle lists MIG processes depends on driver and privileges;
            # asking each MIG device as well is cheap and always attributes them.
            sources.extend(self._mig_handles(where, h))
        for handle, gi_hint, ci_hint in sources:
            for proc in self._running(where, handle):
                gi = _instance_id(getattr(proc, "gpuInstanceId", _NO_ID), gi_hint)
                ci = _instance_id(getattr(proc, "computeInstanceId", _NO_ID), ci_hint)
                used = getattr(proc, "usedGpuMemory", None)
                found[(int(proc.pid), gi, ci)] = {
                    "pid": int(proc.pid),
                    "name": None,
                    "used_memory_mib": None if used is None else int(used) // _MIB,
                    "gpu_instance_id": gi,
                    "compute_instance_id": ci,
                }
        # A pid the parent listed without ids and a MIG device listed with ids is one process.
        attributed = {pid for pid, gi, _ in found if gi is not None}
        for key in [k for k in found if k[1] is None and k[0] in attributed]:
            del found[key]
        for proc in found.values():
            name = self._get(where, nvml.nvmlSystemGetProcessName, proc["pid"])
            proc["name"] = _text(name) if name else None
        return sorted(found.values(), key=lambda p: (p["pid"], p["gpu_instance_id"] or 0))

    def _running(self, where: str, handle: Any) -> list[Any]:
        """Compute processes on one handle, through _v2 where libnvidia-ml has no _v3."""
        try:
            return nvml_compat.running_processes(self._nvml, nvml_compat.COMPUTE_PROCESSES, handle)
        except nvml_compat.ListerFailed as failed:
            if isinstance(failed.error, self._nvml.NVMLError):
                self._failed(where, failed.function, failed.error)
            else:
                self.warnings.append(f"{where}: {failed}")
            return []

    # --- links ----------------------------------------------------------------------------

    def _nvlink_counts(self) -> list[list[int]]:
        """Active NVLinks between each pair. Links into an NVSwitch count for every pair of
        GPUs on the fabric (min of the two), which is how nvidia-smi shows NV18 on a DGX."""
        nvml = self._nvml
        size = len(self._handles)
        bus_index = {bus: i for i, bus in enumerate(self._bus_ids) if bus}
        direct = [[0] * size for _ in range(size)]
        switched = [0] * size
        for i, (_, h) in enumerate(self._handles):
            for link in range(max(nvml.NVML_NVLINK_MAX_LINKS, nvml_compat.KNOWN_NVLINKS)):
                try:
                    state = nvml.nvmlDeviceGetNvLinkState(h, link)
                except nvml.NVMLError:
                    break  # NOT_SUPPORTED (no NVLink) or INVALID_ARGUMENT (past the last link)
                if state != nvml.NVML_FEATURE_ENABLED:
                    continue
                remote = self._get(f"GPU {i}", nvml.nvmlDeviceGetNvLinkRemotePciInfo, h, link)
                if remote is None:
                    continue
                peer = bus_index.get(bus_id(_text(remote.busId)))
                if peer is None:
                    switched[i] += 1  # not one of our GPUs: an NVSwitch
                elif peer != i:
                    direct[i][peer] += 1
        counts = [[0] * size for _ in range(size)]
        for i in range(size):
            for j in range(size):
                if i != j:
                    counts[i][j] = max(direct[i][j], direct[j][i]) + min(switched[i], switched[j])
        return counts


def _share_profile_names(gpus: list[dict[str, Any]]) -> None:
    """Name the profiles read without MIG (NVML gives no name then): from a GPU of the same
    model read with MIG on, else from the catalog by id. `name_source` says which."""
    from gpupoolctl.hw import catalog

    names: dict[tuple[str, int], str] = {}
    for gpu in gpus:
        for profile in (gpu.get("mig") or {}).get("profiles") or []:
            if profile["name"]:
                profile["name_source"] = "driver"
                names[(gpu["pci_device_id"], profile["id"])] = profile["name"]
    for gpu in gpus:
        profiles = [p for p in (gpu.get("mig") or {}).get("profiles") or [] if not p["name"]]
        if not profiles:
            continue
        try:
            model = catalog.find_nvidia_model(gpu["pci_device_id"] or None, gpu["model"])
        except catalog.CatalogError:
            model = None
        geometry = model.mig if model is not None else None
        for profile in profiles:
            shared = names.get((gpu["pci_device_id"], profile["id"]))
            known = geometry.by_id(profile["id"]) if geometry is not None else None
            if shared:
                profile.update(name=shared, name_source="driver")
            elif known is not None:
                profile.update(name=known.name, name_source="catalog")
            else:
                profile["name_source"] = None


def _address(handle: Any) -> int | None:
    try:
        return ctypes.cast(handle, ctypes.c_void_p).value
    except (TypeError, ctypes.ArgumentError):
        return None


def _instance_id(raw: Any, hint: int | None) -> int | None:
    if raw is None or int(raw) == _NO_ID:
        return hint
    return int(raw)
