"""The AMD half of the `smi` fallback: parse `amd-smi ... --json` when amdsmi is not importable.

Commands (each one exec; all the facts of the node in six):
    amd-smi list --json       uuid per GPU
    amd-smi static --json     asic (name, ids, CUs, gfx), bus (bdf), numa, vram, partition, driver
    amd-smi metric --json     usage (gfx_activity), mem_usage (total_vram, used_vram)
    amd-smi partition --json  current_partition, memory_partition (caps); ROCm >= 6.3, optional
    amd-smi topology --json   link_type between GPUs; optional
    amd-smi process --json    process_list per GPU; optional
    amd-smi bad-pages --json  retired / pending / unreservable pages; bare metal only, optional

Health (hw.model.GpuHealth) comes from `metric`'s `ecc` and `temperature` sections, from
`bad-pages`, and from the kernel log (kmsg: amdgpu resets and ring timeouts), as the amdsmi
driver reads it. What a release or platform does not report (a VM guest has no ECC and no
bad pages) is listed as unknown, never taken for fine.

amd-smi changed its JSON across releases: static and metric are a bare list up to ROCm 6.2 and
{"gpu_data": [...]} later; numbers are {"value": n, "unit": "MB"} objects, or "N/A"; topology
is per-GPU "links" now and per-field {"gpu_N": ...} maps before; the compute partition is
"compute_partition" or "accelerator_partition"; the ECC totals are
`total_uncorrectable_count`/`total_deferred_count` (ROCm >= 6.1), `total_uncorrectable`
(early 2024) or `uncorrectable` (ROCm 6.0), or an error string. The parsers accept all of
them, take text and are pure, so tests feed them recorded shapes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

from gpupoolctl.agent.drivers import kmsg
from gpupoolctl.agent.drivers.amdsmi import HostSysfs, Sysfs, read_sriov
from gpupoolctl.agent.drivers.base import Driver, DriverUnavailable
from gpupoolctl.hw import amd_modes
from gpupoolctl.hw.model import bandwidth_class
from gpupoolctl.hw.pci import bus_id

Runner = Callable[[list[str]], str]

_TIMEOUT_S = 60.0
# What amd-smi prints when it finds no usable AMD GPU: an absent stack, not a broken one.
_ABSENT_MARKERS = (
    "driver not initialized",
    "unable to detect any gpu",
    "amdgpu not found",
    "no gpus",
)
_UNITS_TO_MIB = {"B": 1 / 2**20, "KB": 1 / 1024, "KIB": 1 / 1024, "MB": 1, "MIB": 1,
                 "GB": 1024, "GIB": 1024, "TB": 2**20, "TIB": 2**20}  # fmt: skip
_GPU_LIST_KEYS = ("gpu_data", "gpu_list")
# metric's `ecc` keys across releases, newest first.
_ECC_UNCORRECTABLE_KEYS = ("total_uncorrectable_count", "total_uncorrectable", "uncorrectable")
_ECC_DEFERRED_KEYS = ("total_deferred_count", "total_deferred", "deferred")
# Instinct cards report the hotspot (junction) only, Radeon cards the edge too.
_TEMPERATURE_KEYS = ("hotspot", "hotspot_temperature", "junction", "edge", "edge_temperature")
_NO_BAD_PAGES = "no bad pages"


class SmiParseError(ValueError):
    """amd-smi said something that is not the JSON shape we expected; names both."""


class SmiCommandError(RuntimeError):
    """amd-smi exited non-zero or could not run."""


# -- small readers -----------------------------------------------------------------------------


def _document(text: str, command: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    # Some releases print warnings before the JSON: start at the first bracket.
    starts = [i for i in (text.find("["), text.find("{")) if i >= 0]
    if starts:
        try:
            return json.loads(text[min(starts) :])
        except ValueError:
            pass
    head = text.strip()[:80]
    raise SmiParseError(f"amd-smi {command} --json: expected JSON, got {head!r}")


def _gpu_entries(document: Any, command: str) -> list[dict[str, Any]]:
    if isinstance(document, dict):
        for key in _GPU_LIST_KEYS:
            if isinstance(document.get(key), list):
                document = document[key]
                break
    if not isinstance(document, list) or not all(isinstance(e, dict) for e in document):
        raise SmiParseError(
            f"amd-smi {command} --json: expected a list of per-GPU objects, or an object with "
            f"'gpu_data', got {type(document).__name__}"
        )
    return document


def _gpu_id(entry: dict[str, Any], command: str, key: str = "gpu") -> int:
    value = entry.get(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    raise SmiParseError(
        f"amd-smi {command} --json: entry without an integer {key!r}: {entry!r:.80}"
    )


def _value(raw: Any) -> float | None:
    """A number from 5300, {"value": 5300, "unit": ...} or "5300 GB/s"; None for N/A."""
    if isinstance(raw, dict):
        raw = raw.get("value")
    if isinstance(raw, bool):
        return None
    if isinstance(raw, int | float):
        return float(raw)
    if isinstance(raw, str):
        match = re.match(r"\s*(-?\d+(?:\.\d+)?)", raw)
        return float(match.group(1)) if match else None
    return None


def _unit(raw: Any) -> str | None:
    if isinstance(raw, dict) and isinstance(raw.get("unit"), str):
        return raw["unit"]
    if isinstance(raw, str):
        match = re.match(r"\s*-?\d+(?:\.\d+)?\s*([A-Za-z]+)", raw)
        return match.group(1) if match else None
    return None


def _mib(raw: Any, default_unit: str = "MB") -> int | None:
    """Memory in MiB. amd-smi's "MB" are MiB (the library divides bytes by 1024*1024)."""
    number = _value(raw)
    if number is None:
        return None
    factor = _UNITS_TO_MIB.get((_unit(raw) or default_unit).upper())
    return None if factor is None else int(number * factor)


def _int(raw: Any) -> int | None:
    number = _value(raw)
    return None if number is None else int(number)


def _text(raw: Any) -> str | None:
    if raw is None:
        return None
    text = str(raw).strip()
    return None if text in ("", "N/A") else text


def _mode(raw: Any) -> str | None:
    text = _text(raw)
    return text.rstrip("*").upper() if text else None


# -- parsers (pure) ----------------------------------------------------------------------------


def parse_list(text: str) -> dict[int, dict[str, Any]]:
    """`amd-smi list --json` -> {gpu: {"bdf", "uuid"}}."""
    out = {}
    for entry in _gpu_entries(_document(text, "list"), "list"):
        out[_gpu_id(entry, "list")] = {
            "bdf": _text(entry.get("bdf")),
            "uuid": _text(entry.get("uuid")),
        }
    return out


def parse_static(text: str) -> dict[int, dict[str, Any]]:
    """`amd-smi static --json` -> {gpu: identity, numa, vram, partition, driver}."""
    out = {}
    for entry in _gpu_entries(_document(text, "static"), "static"):
        asic = entry.get("asic") if isinstance(entry.get("asic"), dict) else {}
        bus = entry.get("bus") if isinstance(entry.get("bus"), dict) else {}
        vram = entry.get("vram") if isinstance(entry.get("vram"), dict) else {}
        numa = entry.get("numa") if isinstance(entry.get("numa"), dict) else {}
        part = entry.get("partition") if isinstance(entry.get("partition"), dict) else {}
        driver = entry.get("driver") if isinstance(entry.get("driver"), dict) else {}
        out[_gpu_id(entry, "static")] = {
            "model": _text(asic.get("market_name")),
            "vendor_id": _text(asic.get("vendor_id")),
            "device_id": _text(asic.get("device_id")),
            "compute_units": _int(asic.get("num_compute_units")),
            "gfx_target": _text(asic.get("target_graphics_version")),
            "bdf": _text(bus.get("bdf")),
            "numa_node": _int(numa.get("node")),
            "vram_total_mib": _mib(vram.get("size")),
            "bandwidth_gbps": _value(vram.get("max_bandwidth")),
            "compute": _mode(part.get("accelerator_partition", part.get("compute_partition"))),
            "memory": _mode(part.get("memory_partition")),
            "driver_version": _text(driver.get("version")),
        }
    return out


def parse_metric(text: str) -> dict[int, dict[str, Any]]:
    """`amd-smi metric --json` -> {gpu: {"total_mib", "used_mib", "gfx_activity",
    "ecc_uncorrectable", "ecc_deferred", "temperature_c"}}; None for what it does not say."""
    out = {}
    for entry in _gpu_entries(_document(text, "metric"), "metric"):
        usage = entry.get("usage") if isinstance(entry.get("usage"), dict) else {}
        memory = entry.get("mem_usage") if isinstance(entry.get("mem_usage"), dict) else {}
        ecc = entry.get("ecc") if isinstance(entry.get("ecc"), dict) else {}
        heat = entry.get("temperature") if isinstance(entry.get("temperature"), dict) else {}
        out[_gpu_id(entry, "metric")] = {
            "total_mib": _mib(memory.get("total_vram")),
            "used_mib": _mib(memory.get("used_vram")),
            "gfx_activity": _int(usage.get("gfx_activity")),
            "ecc_uncorrectable": _first_count(ecc, _ECC_UNCORRECTABLE_KEYS),
            "ecc_deferred": _first_count(ecc, _ECC_DEFERRED_KEYS),
            "temperature_c": _first_count(heat, _TEMPERATURE_KEYS),
        }
    return out


def _first_count(section: dict[str, Any], keys: tuple[str, ...]) -> int | None:
    """The first of `keys` with a number: 0, {"value": 0, "unit": ...}, "41 C"; "N/A" is
    none."""
    for key in keys:
        number = _int(section.get(key))
        if number is not None:
            return number
    return None


def parse_bad_pages(text: str) -> dict[int, dict[str, int | None]]:
    """`amd-smi bad-pages --json` -> {gpu: {"bad_pages", "bad_pages_pending"}}.

    Per GPU `retired`, `pending` and (newer) `un_res`: one page object, a list of them, "No
    bad pages found." or "N/A". Retired and unreservable pages are bad pages (as the amdsmi
    driver counts them); None where amd-smi could not read them."""
    out: dict[int, dict[str, int | None]] = {}
    for entry in _gpu_entries(_document(text, "bad-pages"), "bad-pages"):
        retired = _page_count(entry.get("retired"))
        unreservable = _page_count(entry.get("un_res")) if "un_res" in entry else 0
        bad = None if retired is None or unreservable is None else retired + unreservable
        out[_gpu_id(entry, "bad-pages")] = {
            "bad_pages": bad,
            "bad_pages_pending": _page_count(entry.get("pending")),
        }
    return out


def _page_count(raw: Any) -> int | None:
    if isinstance(raw, list):
        return sum(1 for page in raw if isinstance(page, dict))
    if isinstance(raw, dict):
        return 1
    if isinstance(raw, str) and raw.strip().lower().startswith(_NO_BAD_PAGES):
        return 0
    return None  # "N/A", absent, or a shape we do not know


def parse_partition(text: str) -> dict[int, dict[str, Any]]:
    """`amd-smi partition --json` -> {gpu: {"compute", "memory", "memory_caps"}}."""
    document = _document(text, "partition")
    if not isinstance(document, dict):
        raise SmiParseError(
            "amd-smi partition --json: expected an object with 'current_partition' and "
            f"'memory_partition', got {type(document).__name__}"
        )
    out: dict[int, dict[str, Any]] = {}
    for row in _rows(document, "current_partition"):
        gpu = _gpu_id(row, "partition", "gpu_id")
        slot = out.setdefault(gpu, {"compute": None, "memory": None, "memory_caps": []})
        slot["compute"] = _mode(row.get("accelerator_type"))
        slot["memory"] = _mode(row.get("memory"))
    for row in _rows(document, "memory_partition"):
        gpu = _gpu_id(row, "partition", "gpu_id")
        slot = out.setdefault(gpu, {"compute": None, "memory": None, "memory_caps": []})
        caps = _text(row.get("memory_partition_caps")) or ""
        slot["memory_caps"] = [c.strip() for c in caps.split(",") if c.strip()]
        slot["memory"] = _mode(row.get("current_memory_partition")) or slot["memory"]
    return out


def _rows(document: dict[str, Any], key: str) -> list[dict[str, Any]]:
    rows = document.get(key, [])
    if not isinstance(rows, list):
        raise SmiParseError(f"amd-smi partition --json: {key!r} must be a list")
    # The profile tables leave gpu_id blank on continuation rows: skip them.
    return [r for r in rows if isinstance(r, dict) and r.get("gpu_id") not in ("", None)]


def parse_topology(text: str) -> dict[tuple[int, int], str]:
    """`amd-smi topology --json` -> {(gpu, peer): "XGMI" | "PCIE" | "SELF" | ...}."""
    links: dict[tuple[int, int], str] = {}
    for entry in _gpu_entries(_document(text, "topology"), "topology"):
        gpu = _gpu_id(entry, "topology")
        if isinstance(entry.get("links"), list):  # ROCm >= 6.2: one object per peer
            for link in entry["links"]:
                if isinstance(link, dict):
                    kind = _text(link.get("link_type"))
                    if kind:
                        links[(gpu, _gpu_id(link, "topology"))] = kind.upper()
        elif isinstance(entry.get("link_type"), dict):  # before: {"gpu_N": "XGMI", ...}
            for key, kind in entry["link_type"].items():
                match = re.fullmatch(r"gpu_(\d+)", str(key))
                if match and _text(kind):
                    links[(gpu, int(match.group(1)))] = str(kind).upper()
        else:
            raise SmiParseError(
                f"amd-smi topology --json: GPU {gpu} has neither 'links' nor 'link_type'"
            )
    return links


def parse_process(text: str) -> dict[int, list[dict[str, Any]]]:
    """`amd-smi process --json` -> {gpu: [Process]}; idle GPUs say so in a string."""
    out: dict[int, list[dict[str, Any]]] = {}
    for entry in _gpu_entries(_document(text, "process"), "process"):
        processes = out.setdefault(_gpu_id(entry, "process"), [])
        for item in entry.get("process_list") or []:
            info = item.get("process_info") if isinstance(item, dict) else None
            if not isinstance(info, dict) or _int(info.get("pid")) is None:
                continue  # "No running processes detected"
            usage = info.get("memory_usage") if isinstance(info.get("memory_usage"), dict) else {}
            vram = _mib(usage.get("vram_mem"), "B")
            if vram is None:
                vram = _mib(info.get("mem_usage", info.get("mem")), "B")
            processes.append(
                {
                    "pid": _int(info.get("pid")),
                    "name": _text(info.get("name")),
                    "used_memory_mib": vram,
                    "gpu_instance_id": None,
                    "compute_instance_id": None,
                }
            )
    return out


# -- assembling facts --------------------------------------------------------------------------


def _pci_device_id(device: str | None, vendor: str | None) -> str | None:
    try:
        device_id = int(device, 16) if device else None
        vendor_id = int(vendor, 16) if vendor else 0x1002
    except ValueError:
        return None
    return None if device_id is None else f"0x{(device_id << 16) | vendor_id:08X}"


def build_gpus(
    static: dict[int, dict[str, Any]],
    listing: dict[int, dict[str, Any]] | None = None,
    metric: dict[int, dict[str, Any]] | None = None,
    partition: dict[int, dict[str, Any]] | None = None,
    processes: dict[int, list[dict[str, Any]]] | None = None,
    sysfs: Sysfs | None = None,
) -> list[dict[str, Any]]:
    """Gpu facts (hw/model.py) in amd-smi's GPU order; any missing piece becomes None."""
    gpus = []
    for gpu_id in sorted(static):
        info = static[gpu_id]
        listed = (listing or {}).get(gpu_id, {})
        metrics = (metric or {}).get(gpu_id, {})
        bdf = info.get("bdf") or listed.get("bdf")
        bdf = bus_id(bdf) if bdf else bdf
        bandwidth = info.get("bandwidth_gbps") or None
        if bandwidth is None:  # older releases report no max_bandwidth: use the datasheet
            product = amd_modes.find_product(info.get("model"), info.get("device_id"))
            bandwidth = product.bandwidth_gbps if product else None
        gpus.append(
            {
                "index": gpu_id,
                "vendor": "amd",
                "model": info.get("model"),
                "uuid": listed.get("uuid"),
                "pci_bus_id": bdf,
                "pci_device_id": _pci_device_id(info.get("device_id"), info.get("vendor_id")),
                "numa_node": info.get("numa_node"),
                "memory_total_mib": metrics.get("total_mib") or info.get("vram_total_mib"),
                "memory_used_mib": metrics.get("used_mib"),
                "bandwidth_gbps": bandwidth,
                "bandwidth_class": bandwidth_class(bandwidth),
                "compute_units": info.get("compute_units"),
                "compute_capability": None,
                "gfx_target": info.get("gfx_target"),
                "utilization_pct": metrics.get("gfx_activity"),
                "mig": None,
                "partition": _partition(info, (partition or {}).get(gpu_id)),
                "sriov": read_sriov(sysfs, bdf) if sysfs is not None and bdf else None,
                "processes": (processes or {}).get(gpu_id, []),
                "driver": "smi",
            }
        )
    return gpus


def build_health(
    gpus: list[dict[str, Any]],
    metric: dict[int, dict[str, Any]] | None,
    bad_pages: dict[int, dict[str, int | None]] | None,
    records: list[kmsg.Record] | None,
    why_metric: str = "amd-smi metric --json failed",
    why_bad_pages: str = "amd-smi bad-pages --json failed (absent in a VM guest)",
) -> None:
    """Fill gpu["health"] (hw.model.GpuHealth): ECC and temperature from `metric`, bad pages
    from `bad-pages` (None: the command failed), resets and ring hangs from the kernel log
    records (None: not readable). Every signal not read is None and listed in "unknown"."""
    buses = [g.get("pci_bus_id") if isinstance(g.get("pci_bus_id"), str) else None for g in gpus]
    logged = kmsg.amd_events(records, buses) if records is not None else {}
    for position, gpu in enumerate(gpus):
        metrics = None if metric is None else metric.get(gpu["index"])
        pages = None if bad_pages is None else bad_pages.get(gpu["index"])
        health: dict[str, Any] = {
            "unknown": [],
            "lost": None,  # amd-smi has no "GPU is lost" answer (as amdsmi)
            "ecc_uncorrectable": (metrics or {}).get("ecc_uncorrectable"),
            "ecc_deferred": (metrics or {}).get("ecc_deferred"),
            "bad_pages": (pages or {}).get("bad_pages"),
            "bad_pages_pending": (pages or {}).get("bad_pages_pending"),
            "events": None,
            "temperature_c": (metrics or {}).get("temperature_c"),
            "notes": [],
        }
        for name, source, why in (
            ("ecc_uncorrectable", metrics, why_metric),
            ("ecc_deferred", metrics, why_metric),
            ("temperature_c", metrics, why_metric),
            ("bad_pages", pages, why_bad_pages),
            ("bad_pages_pending", pages, why_bad_pages),
        ):
            if health[name] is None:
                health["unknown"].append(name)
                reason = why if source is None else "amd-smi: N/A or not reported"
                health["notes"].append(f"{name}: {reason}")
        if records is not None:
            health["events"] = sorted(set(logged.get(position, [])))
        else:
            health["unknown"].append("events")
            health["notes"].append("events: kernel log not readable")
        gpu["health"] = health


def _partition(info: dict[str, Any], current: dict[str, Any] | None) -> dict[str, Any] | None:
    current = current or {}
    compute = current.get("compute") or info.get("compute")
    memory = current.get("memory") or info.get("memory")
    caps = [c for c in current.get("memory_caps", []) if c != "N/A"]
    if compute is None and memory is None and not caps:
        return None
    return {"compute": compute, "memory": memory, "memory_caps": caps}


def build_matrix(gpus: list[dict[str, Any]], links: dict[tuple[int, int], str]) -> list[list[str]]:
    """Link levels in nvidia-smi vocabulary: xGMI is direct; PCIe by NUMA locality."""
    size = len(gpus)
    matrix = [["X"] * size for _ in range(size)]
    for i, a in enumerate(gpus):
        for j, b in enumerate(gpus):
            if i == j:
                continue
            kind = links.get((a["index"], b["index"])) or links.get((b["index"], a["index"]))
            if kind == "XGMI":
                matrix[i][j] = "XGMI"
            elif kind == "PCIE" and a["numa_node"] is not None and a["numa_node"] == b["numa_node"]:
                matrix[i][j] = "NODE"
            else:
                matrix[i][j] = "SYS"
    return matrix


# -- running amd-smi ---------------------------------------------------------------------------


def _find_amd_smi() -> str | None:
    found = shutil.which("amd-smi")
    if found:
        return found
    rocm = os.environ.get("ROCM_PATH", "/opt/rocm")
    candidate = os.path.join(rocm, "bin", "amd-smi")
    return candidate if os.access(candidate, os.X_OK) else None


def subprocess_runner(executable: str) -> Runner:
    def run(args: list[str]) -> str:
        try:
            done = subprocess.run(
                [executable, *args],
                capture_output=True,
                text=True,
                timeout=_TIMEOUT_S,
                env={**os.environ, "LC_ALL": "C"},
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise SmiCommandError(f"amd-smi {' '.join(args)}: {exc}") from exc
        if done.returncode != 0:
            detail = (done.stderr or done.stdout).strip().splitlines()
            reason = detail[-1] if detail else f"exit status {done.returncode}"
            raise SmiCommandError(f"amd-smi {' '.join(args)}: {reason}")
        return done.stdout

    return run


def _optional(run: Runner, args: list[str], parse: Callable[[str], Any]) -> Any:
    """A command older releases lack costs a field, not the driver. Output we cannot parse
    still raises: silently empty facts would hide a format we do not understand."""
    try:
        text = run(args)
    except SmiCommandError:
        return None
    return parse(text)


def open_driver(
    run: Runner | None = None,
    sysfs: Sysfs | None = None,
    kernel_log: Callable[[], list[kmsg.Record] | None] | None = None,
) -> Driver:
    """The amd-smi driver, or DriverUnavailable("") when amd-smi or AMD GPUs are absent.
    `kernel_log` stands in for the kernel log reader (kmsg.read_kernel_log) in tests."""
    if run is None:
        executable = _find_amd_smi()
        if executable is None:
            raise DriverUnavailable("")
        run = subprocess_runner(executable)
    try:
        static = parse_static(run(["static", "--json"]))
    except SmiCommandError as exc:
        if any(marker in str(exc).lower() for marker in _ABSENT_MARKERS):
            raise DriverUnavailable("") from None
        raise DriverUnavailable(str(exc)) from exc
    except SmiParseError as exc:
        raise DriverUnavailable(str(exc)) from exc
    if not static:
        raise DriverUnavailable("")
    try:
        listing = _optional(run, ["list", "--json"], parse_list)
        metric = _optional(run, ["metric", "--json"], parse_metric)
        gpus = build_gpus(
            static,
            listing=listing,
            metric=metric,
            partition=_optional(run, ["partition", "--json"], parse_partition),
            processes=_optional(run, ["process", "--json"], parse_process),
            sysfs=sysfs if sysfs is not None else HostSysfs(),
        )
        links = _optional(run, ["topology", "--json"], parse_topology) or {}
    except SmiParseError as exc:
        raise DriverUnavailable(str(exc)) from exc
    # Bad pages are health only: output we cannot parse costs those two signals, not the node.
    why_pages = "amd-smi bad-pages --json failed (absent in a VM guest)"
    try:
        bad_pages = _optional(run, ["bad-pages", "--json"], parse_bad_pages)
    except SmiParseError as exc:
        bad_pages, why_pages = None, str(exc)
    records = (kernel_log or kmsg.read_kernel_log)()
    build_health(gpus, metric, bad_pages, records, why_bad_pages=why_pages)
    versions = [v.get("driver_version") for v in static.values() if v.get("driver_version")]
    return AmdSmiCliDriver(gpus, build_matrix(gpus, links), versions[0] if versions else None)


class AmdSmiCliDriver:
    name = "smi"
    vendor = "amd"

    def __init__(
        self, gpus: list[dict[str, Any]], matrix: list[list[str]], version: str | None
    ) -> None:
        self._gpus = gpus
        self._matrix = matrix
        self._version = version

    def gpus(self) -> list[dict[str, Any]]:
        return [dict(gpu) for gpu in self._gpus]

    def link_matrix(self) -> list[list[str]]:
        return [list(row) for row in self._matrix]

    def version(self) -> str | None:
        return self._version

    def close(self) -> None:
        return None
