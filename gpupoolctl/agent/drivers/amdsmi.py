"""The `amdsmi` driver: AMD GPU facts through the amdsmi Python package (ROCm).

`import amdsmi` is absolute, so inside this package it finds the top-level `amdsmi` (the real
one, or the simulated one that gpupoolctl.sim.activate installs in sys.modules), never this
module. Only the public amdsmi 7.x API is used, so the driver runs unchanged on both; where
an older release answers in another shape (6.0's process handles), that shape is read too.

One entry per logical GPU (processor handle): a card in CPX mode shows as eight. Every field
is read on its own; a failing read becomes None and never takes the node's facts down.

SR-IOV is not in amdsmi: it is read from PCI sysfs (/sys/bus/pci/devices/<PF>/sriov_totalvfs
and sriov_numvfs) through `sysfs_for(module)`. On a simulated node the fake amdsmi carries a
sim-only `gpupool_sim_sysfs` object with the same paths and kernel semantics; anywhere else
the real files are read.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Any, Protocol, TypeVar

from gpupoolctl.agent.drivers import kmsg
from gpupoolctl.agent.drivers.base import Driver, DriverUnavailable
from gpupoolctl.hw import amd_modes
from gpupoolctl.hw.model import bandwidth_class
from gpupoolctl.hw.pci import bus_id

T = TypeVar("T")

_AMD_VENDOR_ID = 0x1002
_MIB = 1024 * 1024
# amdsmi_init statuses that mean "no AMD GPU stack here" rather than "broken stack".
_ABSENT_STATUSES = frozenset(
    {
        4,  # AMDSMI_STATUS_FAIL_LOAD_MODULE: libamd_smi cannot load rocm-smi
        18,  # AMDSMI_STATUS_INIT_ERROR
        31,  # AMDSMI_STATUS_NOT_FOUND: no device
        32,  # AMDSMI_STATUS_NOT_INIT: what rsmi_init's failure maps to
        34,  # AMDSMI_STATUS_DRIVER_NOT_LOADED: amdgpu not loaded
    }
)
_ALL_ONES = (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)  # uint32/uint64 "not available"
_LINK_PCIE = 1
_LINK_XGMI = 2
_NOT_SUPPORTED = 2  # AMDSMI_STATUS_NOT_SUPPORTED
_NO_DATA = 40  # AMDSMI_STATUS_NO_DATA: an event read that found nothing pending
_PAGE_PENDING = 1  # AmdSmiMemoryPageStatus.PENDING
# Driver events health watches (AmdSmiEvtNotificationType names).
HEALTH_EVENTS = ("THERMAL_THROTTLE", "GPU_PRE_RESET", "GPU_POST_RESET", "RING_HANG")


class Sysfs(Protocol):
    def read_text(self, path: str) -> str: ...

    def write_text(self, path: str, text: str) -> None: ...


class HostSysfs:
    """The node's real sysfs."""

    def read_text(self, path: str) -> str:
        with open(path, encoding="ascii") as handle:
            return handle.read()

    def write_text(self, path: str, text: str) -> None:
        with open(path, "w", encoding="ascii") as handle:
            handle.write(text)


def sysfs_for(module: Any) -> Sysfs:
    """The sysfs to use next to this amdsmi module: the sim's own, or the host's."""
    simulated = getattr(module, "gpupool_sim_sysfs", None)
    return simulated if simulated is not None else HostSysfs()


def physical_bdf(bdf: str) -> str:
    """The PCI physical function of a logical GPU: partitions differ only in the function."""
    return bdf[:-1] + "0" if len(bdf) >= 2 and bdf[-2] == "." else bdf


def read_sriov(sysfs: Sysfs, bdf: str) -> dict[str, int] | None:
    """{"total_vfs", "num_vfs"} of the card at `bdf`, or None when it has no SR-IOV."""
    base = f"/sys/bus/pci/devices/{physical_bdf(bdf)}"
    try:
        total = int(sysfs.read_text(f"{base}/sriov_totalvfs").strip())
        current = int(sysfs.read_text(f"{base}/sriov_numvfs").strip())
    except (OSError, ValueError):
        return None
    return {"total_vfs": total, "num_vfs": current}


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Keep library chatter off stdout, which carries the agent's one JSON answer.

    The amdsmi wrapper print()s when libamd_smi.so is missing, and the C library has printed
    notices to fd 1 in some releases; both go to stderr while this is active.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        os.dup2(2, 1)
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _import_amdsmi() -> ModuleType:
    try:
        with _stdout_to_stderr():
            import amdsmi
    except ImportError:
        raise DriverUnavailable("") from None
    except KeyError as exc:
        # amdsmi_wrapper indexes its library table after failing to load libamd_smi.so: the
        # Python package is installed but ROCm is not, which is an absent stack, not a broken one.
        if "libamd_smi" in str(exc):
            raise DriverUnavailable("") from None
        raise DriverUnavailable(f"amdsmi import failed: {exc!r}") from exc
    except Exception as exc:
        raise DriverUnavailable(f"amdsmi import failed: {exc!r}") from exc
    return amdsmi


def _describe(exc: BaseException) -> str:
    info = getattr(exc, "get_error_info", None)
    if callable(info):
        with contextlib.suppress(Exception):
            return str(info())
    return str(exc).replace("\n", " ").strip() or type(exc).__name__


def open_driver() -> Driver:
    """The amdsmi driver, or DriverUnavailable("") when no AMD GPU stack is present."""
    amdsmi = _import_amdsmi()
    try:
        with _stdout_to_stderr():
            amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
    except Exception as exc:
        if getattr(exc, "err_code", None) in _ABSENT_STATUSES:
            raise DriverUnavailable("") from None
        raise DriverUnavailable(f"amdsmi_init failed: {_describe(exc)}") from exc
    try:
        handles = list(amdsmi.amdsmi_get_processor_handles())
    except Exception as exc:
        _shut_down(amdsmi)
        raise DriverUnavailable(f"amdsmi_get_processor_handles failed: {_describe(exc)}") from exc
    if not handles:
        _shut_down(amdsmi)
        raise DriverUnavailable("")
    return AmdSmiDriver(amdsmi, handles)


def _shut_down(amdsmi: Any) -> None:
    with contextlib.suppress(Exception):
        amdsmi.amdsmi_shut_down()


def _number(value: Any) -> int | None:
    """amdsmi reports "N/A" (or all-ones) for what it cannot read."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return None if value in _ALL_ONES or value < 0 else int(value)


def _hex_id(value: Any) -> int | None:
    if isinstance(value, int):
        return value
    try:
        return int(str(value), 16)
    except ValueError:
        return None


@dataclass(frozen=True)
class UnreadableProcess:
    """A process amdsmi listed but would not describe: it exists, so the GPU is not idle."""

    handle: Any  # what the list gave (amdsmi 6.0: amdsmi_process_handle_t, a ctypes.c_uint32)
    reason: str

    def __str__(self) -> str:
        value = getattr(self.handle, "value", self.handle)
        return f"a process (handle {value}) whose details cannot be read: {self.reason}"


def process_entries(amdsmi: Any, handle: Any) -> list[dict[str, Any] | UnreadableProcess]:
    """The processes on one logical GPU, each as amdsmi 6.1+ describes it (a dict).

    amdsmi 6.1+ lists dicts; 6.0 lists process handles (ctypes.c_uint32) whose details come
    from amdsmi_get_gpu_process_info(processor_handle, process) (PyPI amdsmi 6.0.2
    amdsmi_interface.py). Raises what amdsmi_get_gpu_process_list raises (AttributeError where
    the module has none): the caller decides what not knowing means."""
    out: list[dict[str, Any] | UnreadableProcess] = []
    for entry in amdsmi.amdsmi_get_gpu_process_list(handle) or []:
        if isinstance(entry, dict):
            out.append(entry)
            continue
        describe = getattr(amdsmi, "amdsmi_get_gpu_process_info", None)
        if describe is None:
            out.append(UnreadableProcess(entry, "this amdsmi has no amdsmi_get_gpu_process_info"))
            continue
        try:
            info = describe(handle, entry)
        except Exception as exc:  # amdsmi raises its own exception family
            out.append(UnreadableProcess(entry, _describe(exc)))
            continue
        if isinstance(info, dict):
            out.append(info)
        else:
            out.append(UnreadableProcess(entry, f"amdsmi answered {type(info).__name__}"))
    return out


class AmdSmiDriver:
    name = "amdsmi"
    vendor = "amd"

    def __init__(self, amdsmi: Any, handles: list[Any]) -> None:
        self._lib = amdsmi
        self._handles = handles
        self._sysfs = sysfs_for(amdsmi)
        self._numa: dict[int, int | None] = {}

    def _try(self, fn: Callable[..., T], *args: Any) -> T | None:
        try:
            return fn(*args)
        except Exception:  # one unreadable field must not cost the node its facts
            return None

    def _call(self, name: str, *args: Any) -> Any:
        fn = getattr(self._lib, name, None)
        return None if fn is None else self._try(fn, *args)

    def gpus(self) -> list[dict[str, Any]]:
        gpus = [self._gpu(index, handle) for index, handle in enumerate(self._handles)]
        self._add_events(gpus)
        return gpus

    def _gpu(self, index: int, handle: Any) -> dict[str, Any]:
        asic = self._call("amdsmi_get_gpu_asic_info", handle) or {}
        bdf = self._call("amdsmi_get_gpu_device_bdf", handle)
        bdf = bus_id(bdf) if isinstance(bdf, str) else bdf
        bandwidth = self._bandwidth(handle, asic)
        usage = self._call("amdsmi_get_gpu_vram_usage", handle) or {}
        activity = self._call("amdsmi_get_gpu_activity", handle) or {}
        return {
            "index": index,
            "vendor": "amd",
            "model": asic.get("market_name") if asic.get("market_name") != "N/A" else None,
            "uuid": self._call("amdsmi_get_gpu_device_uuid", handle),
            "pci_bus_id": bdf,
            "pci_device_id": _pci_device_id(asic),
            "numa_node": self._numa_node(index, handle),
            "memory_total_mib": _number(usage.get("vram_total")),
            "memory_used_mib": _number(usage.get("vram_used")),
            "bandwidth_gbps": bandwidth,
            "bandwidth_class": bandwidth_class(bandwidth),
            "compute_units": _number(asic.get("num_compute_units")),
            "compute_capability": None,
            "gfx_target": _gfx(asic.get("target_graphics_version")),
            "utilization_pct": _number(activity.get("gfx_activity")),
            "mig": None,
            "partition": self._partition(handle),
            "sriov": read_sriov(self._sysfs, bdf) if isinstance(bdf, str) else None,
            "processes": self._processes(handle),
            "driver": self.name,
            "health": self._health(handle),
        }

    # -- health ---------------------------------------------------------------------------

    def _probe(self, name: str, *args: Any) -> tuple[Any, str | None]:
        """(value, None), or (None, why not). ECC, bad pages and RAS are not supported in
        a VM guest (amdsmi docs)."""
        fn = getattr(self._lib, name, None)
        if fn is None:
            return None, f"this amdsmi has no {name}"
        try:
            return fn(*args), None
        except Exception as exc:  # amdsmi raises its own exception family
            if getattr(exc, "err_code", None) == _NOT_SUPPORTED:
                return None, "not supported"
            return None, _describe(exc)

    def _health(self, handle: Any) -> dict[str, Any]:
        """The logical GPU's health signals (hw.model.GpuHealth); events by _add_events."""
        lib = self._lib
        unknown: list[str] = []
        notes: list[str] = []

        def failed(names: tuple[str, ...], why: str) -> None:
            unknown.extend(names)
            notes.extend(f"{name}: {why}" for name in names)

        ecc, why = self._probe("amdsmi_get_gpu_total_ecc_count", handle)
        if why or not isinstance(ecc, dict):
            failed(("ecc_uncorrectable", "ecc_deferred"), why or "unexpected answer")
            ecc = None
        pages, why = self._probe("amdsmi_get_gpu_bad_page_info", handle)
        if why or not isinstance(pages, list):
            failed(("bad_pages", "bad_pages_pending"), why or "unexpected answer")
            pages = None
        temperature, why = None, "this amdsmi has no temperature enums"
        kinds = getattr(lib, "AmdSmiTemperatureType", None)
        metrics = getattr(lib, "AmdSmiTemperatureMetric", None)
        if kinds is not None and metrics is not None:
            # Instinct cards report hotspot (junction) only; Radeon cards the edge too.
            for sensor in ("HOTSPOT", "EDGE"):
                if hasattr(kinds, sensor):
                    temperature, why = self._probe(
                        "amdsmi_get_temp_metric", handle, getattr(kinds, sensor), metrics.CURRENT
                    )
                    if why is None:
                        break
        if why:
            failed(("temperature_c",), why)
        return {
            "unknown": unknown,
            "lost": None,  # amdsmi has no "GPU is lost" answer
            "ecc_uncorrectable": None if ecc is None else _number(ecc.get("uncorrectable_count")),
            "ecc_deferred": None if ecc is None else _number(ecc.get("deferred_count")),
            "bad_pages": None
            if pages is None
            else sum(1 for p in pages if _page_status(p) != _PAGE_PENDING),
            "bad_pages_pending": None
            if pages is None
            else sum(1 for p in pages if _page_status(p) == _PAGE_PENDING),
            "events": None,
            "temperature_c": _number(temperature),
            "notes": notes,
        }

    def _add_events(self, gpus: list[dict[str, Any]]) -> None:
        """Driver events per GPU: those pending on an event reader (read without waiting)
        and the amdgpu reset / ring timeout lines of the kernel log. A reader only gets what
        happens after it is made, so without the kernel log "events" is unknown unless one
        arrived."""
        reader = getattr(self._lib, "gpupool_sim_kernel_log", None)  # the sim's stand-in
        records = reader() if callable(reader) else kmsg.read_kernel_log()
        bus_ids = [g.get("pci_bus_id") if isinstance(g.get("pci_bus_id"), str) else None
                   for g in gpus]  # fmt: skip
        logged = kmsg.amd_events(records, bus_ids) if records is not None else {}
        for position, (gpu, handle) in enumerate(zip(gpus, self._handles, strict=True)):
            health = gpu.get("health")
            if health is None:
                continue
            pending, why = self._pending_events(handle)
            events = sorted(set(logged.get(position, []) + (pending or [])))
            if records is not None or pending:
                health["events"] = events
            else:
                health["unknown"].append("events")
                detail = f"; event reader: {why}" if why else ""
                health["notes"].append(
                    f"events: kernel log not readable; an event reader shows only what happens "
                    f"during the read{detail}"
                )

    def _pending_events(self, handle: Any) -> tuple[list[str] | None, str | None]:
        lib = self._lib
        kinds = getattr(lib, "AmdSmiEvtNotificationType", None)
        make = getattr(lib, "AmdSmiEventReader", None)
        if kinds is None or make is None:
            return None, "this amdsmi has no event reader"
        wanted = [getattr(kinds, name) for name in HEALTH_EVENTS if hasattr(kinds, name)]
        try:
            reader = make(handle, wanted)
        except Exception as exc:
            return None, _describe(exc)
        try:
            found = reader.read(0)  # 0 ms: what is pending now, never a wait
        except Exception as exc:
            if getattr(exc, "err_code", None) == _NO_DATA:
                return [], None
            return None, _describe(exc)
        finally:
            with contextlib.suppress(Exception):
                reader.stop()
        return [str(e.get("event")) for e in found or [] if isinstance(e, dict)], None

    def _numa_node(self, index: int, handle: Any) -> int | None:
        if index not in self._numa:
            node = self._call("amdsmi_topo_get_numa_node_number", handle)
            self._numa[index] = _number(node)
        return self._numa[index]

    def _bandwidth(self, handle: Any, asic: dict[str, Any]) -> float | None:
        info = self._call("amdsmi_get_gpu_vram_info", handle) or {}
        reported = _number(info.get("vram_max_bandwidth"))
        if reported:
            return float(reported)
        # Older firmware reports N/A: fall back to the datasheet figure of a known product.
        product = amd_modes.find_product(asic.get("market_name"), asic.get("device_id"))
        return product.bandwidth_gbps if product else None

    def _partition(self, handle: Any) -> dict[str, Any] | None:
        compute = self._call("amdsmi_get_gpu_compute_partition", handle)
        memory = self._call("amdsmi_get_gpu_memory_partition", handle)
        config = self._call("amdsmi_get_gpu_memory_partition_config", handle) or {}
        caps = config.get("partition_caps")
        caps = [str(c) for c in caps if c != "N/A"] if isinstance(caps, list) else []
        compute = compute if compute not in ("", "N/A") else None
        memory = memory if memory not in ("", "N/A") else None
        if compute is None and memory is None and not caps:
            return None  # a card without partitioning (MI210, Radeon)
        return {"compute": compute, "memory": memory, "memory_caps": caps}

    def _processes(self, handle: Any) -> list[dict[str, Any]]:
        listed = self._try(process_entries, self._lib, handle) or []
        processes = []
        for entry in listed:
            if not isinstance(entry, dict) or _number(entry.get("pid")) is None:
                continue  # facts list what can be described; partitioning refuses the rest
            usage = entry.get("memory_usage") or {}
            vram = _number(usage.get("vram_mem"))
            if vram is None:
                vram = _number(entry.get("mem"))
            name = entry.get("name")
            processes.append(
                {
                    "pid": int(entry["pid"]),
                    "name": None if name in (None, "", "N/A") else str(name),
                    "used_memory_mib": None if vram is None else vram // _MIB,
                    "gpu_instance_id": None,
                    "compute_instance_id": None,
                }
            )
        return processes

    def link_matrix(self) -> list[list[str]]:
        size = len(self._handles)
        matrix = [["X"] * size for _ in range(size)]
        for i in range(size):
            for j in range(i + 1, size):
                level = self._level(i, j)
                matrix[i][j] = matrix[j][i] = level
        return matrix

    def _level(self, i: int, j: int) -> str:
        link = self._call("amdsmi_topo_get_link_type", self._handles[i], self._handles[j])
        kind = link.get("type") if isinstance(link, dict) else None
        if kind == _LINK_XGMI:
            return "XGMI"
        if kind == _LINK_PCIE:
            # PCIe hop counts do not map onto nvidia-smi's bridge levels; NUMA locality does.
            a = self._numa_node(i, self._handles[i])
            b = self._numa_node(j, self._handles[j])
            return "NODE" if a is not None and a == b else "SYS"
        return "SYS"

    def version(self) -> str | None:
        info = self._call("amdsmi_get_gpu_driver_info", self._handles[0]) or {}
        driver = info.get("driver_version")
        if driver and driver != "N/A":
            return str(driver)
        lib = self._call("amdsmi_get_lib_version") or {}
        if "major" in lib:
            return f"amdsmi {lib['major']}.{lib.get('minor', 0)}.{lib.get('release', 0)}"
        return None

    def close(self) -> None:
        _shut_down(self._lib)


def _page_status(page: Any) -> int | None:
    status = page.get("status") if isinstance(page, dict) else None
    try:
        return int(status) if status is not None else None
    except (TypeError, ValueError):
        return None


def _pci_device_id(asic: dict[str, Any]) -> str | None:
    """The PCI id as "0x74A11002" (device << 16 | vendor), like mig-parted device-filters."""
    device = _hex_id(asic.get("device_id"))
    vendor = _hex_id(asic.get("vendor_id"))
    if device is None:
        return None
    return f"0x{(device << 16) | (vendor if vendor is not None else _AMD_VENDOR_ID):08X}"


def _gfx(value: Any) -> str | None:
    text = str(value) if value is not None else ""
    return text if text.startswith("gfx") and text != "gfxN/A" else None
