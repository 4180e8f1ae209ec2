"""The NVIDIA half of the `smi` fallback: parse nvidia-smi when pynvml is missing.

Four local runs: `--query-gpu` (an explicit field list, csv, no header, no units),
`--query-compute-apps`, `topo -m`, and a second `--query-gpu` for health (HEALTH_FIELDS). The
health query is separate because nvidia-smi refuses a whole query when it does not know one
of its fields, and the health fields are the ones older releases lack (the clock reasons were
`clocks_throttle_reasons.*` before they became `clocks_event_reasons.*`; the remapped-row
fields arrived with Ampere): a refused field is renamed or dropped and the query asked again,
so an old nvidia-smi costs the signals it cannot give, never the facts. XIDs are not in
nvidia-smi: they come from the kernel log (kmsg), as in the nvml driver.

The parsers are pure functions of the text, so tests feed them captured output. nvidia-smi
cannot report memory bus width or SM count; those come from the hw catalog by PCI device id
(None for a card the catalog does not know). MIG instances are not parsed here (instances
stay empty); the nvml driver reports them.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import time
from collections.abc import Callable
from typing import Any

from gpupoolctl.agent.drivers import kmsg
from gpupoolctl.agent.drivers.base import DriverUnavailable
from gpupoolctl.agent.drivers.nvml import THROTTLE_BITS
from gpupoolctl.hw import catalog
from gpupoolctl.hw.model import bandwidth_class
from gpupoolctl.hw.pci import bus_id

QUERY_FIELDS: tuple[str, ...] = (
    "index",
    "uuid",
    "name",
    "pci.bus_id",
    "pci.device_id",
    "memory.total",
    "memory.used",
    "utilization.gpu",
    "compute_cap",
    "mig.mode.current",
    "mig.mode.pending",
    "clocks.max.memory",
    "driver_version",
)
APP_FIELDS: tuple[str, ...] = ("gpu_uuid", "pid", "process_name", "used_memory")
# Health, in a query of its own (see the module docstring). Values: counts, "Yes"/"No", the
# clock reasons as a hex bitmask ("0x0000000000000004"), or "[N/A]"/"[Not Supported]".
HEALTH_FIELDS: tuple[str, ...] = (
    "index",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.correctable",
    "remapped_rows.uncorrectable",
    "remapped_rows.pending",
    "remapped_rows.failure",
    "clocks_event_reasons.active",
    "temperature.gpu",
)
# Older names of health fields, tried when nvidia-smi refuses the newer one.
HEALTH_RENAMED = {"clocks_event_reasons.active": "clocks_throttle_reasons.active"}
# Fields every nvidia-smi of the last decade knows: asked when a refusal names no field.
HEALTH_MINIMAL: tuple[str, ...] = (
    "index",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "temperature.gpu",
)
_REFUSED = re.compile(r'Field "(?P<field>[^"]*)" is not a valid field to query', re.IGNORECASE)
_LOST = re.compile(
    r"device handle for GPU\s*(?:\d+\s*:\s*)?(?P<bus>[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:"
    r"[0-9A-Fa-f]{2}(?:\.\d)?)\s*:\s*GPU is lost",
    re.IGNORECASE,
)
_HEALTH_TRIES = 6  # a rename and a few drops; each refusal comes back at once
_MISSING = {"n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", ""}
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_TOPO_WORD = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|SOC)$")
_TIMEOUT_S = 30


class SmiParseError(ValueError):
    """nvidia-smi printed something other than what the parser expected."""


def _value(raw: str) -> str | None:
    text = raw.strip()
    return None if text.lower() in _MISSING else text


def _int(raw: str | None) -> int | None:
    if raw is None:
        return None
    try:
        return int(float(raw))
    except ValueError:
        return None


def _csv_rows(text: str, fields: tuple[str, ...], what: str) -> list[dict[str, str | None]]:
    rows = []
    lines = [line for line in text.splitlines() if line.strip()]
    for number, cells in enumerate(csv.reader(lines, skipinitialspace=True), start=1):
        if len(cells) != len(fields):
            raise SmiParseError(
                f"{what}: line {number}: expected {len(fields)} comma-separated fields "
                f"({', '.join(fields)}), got {len(cells)}: {lines[number - 1]!r}"
            )
        rows.append({field: _value(cell) for field, cell in zip(fields, cells, strict=True)})
    return rows


def parse_query_gpu(text: str) -> list[dict[str, str | None]]:
    """Rows of `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits`."""
    rows = _csv_rows(text, QUERY_FIELDS, "nvidia-smi --query-gpu")
    for number, row in enumerate(rows, start=1):
        for required in ("index", "uuid", "pci.bus_id"):
            if row[required] is None:
                raise SmiParseError(
                    f"nvidia-smi --query-gpu: line {number}: expected a value for {required}"
                )
        if _int(row["index"]) is None:
            raise SmiParseError(
                f"nvidia-smi --query-gpu: line {number}: expected an integer index, "
                f"got {row['index']!r}"
            )
    return rows


def parse_compute_apps(text: str) -> list[dict[str, Any]]:
    """Rows of `nvidia-smi --query-compute-apps=<APP_FIELDS> --format=csv,noheader,nounits`."""
    if "no running" in text.lower():
        return []
    out = []
    for row in _csv_rows(text, APP_FIELDS, "nvidia-smi --query-compute-apps"):
        pid = _int(row["pid"])
        if pid is None:
            raise SmiParseError(
                f"nvidia-smi --query-compute-apps: expected an integer pid, got {row['pid']!r}"
            )
        out.append(
            {
                "gpu_uuid": row["gpu_uuid"],
                "pid": pid,
                "name": row["process_name"],
                "used_memory_mib": _int(row["used_memory"]),
            }
        )
    return out


def parse_topo(text: str) -> tuple[list[list[str]], dict[int, int | None]]:
    """`nvidia-smi topo -m`: the GPU-by-GPU matrix and each GPU's NUMA affinity."""
    lines = [_ANSI.sub("", line).rstrip("\n") for line in text.splitlines()]
    header_at = next((i for i, line in enumerate(lines) if "\tGPU0" in line), None)
    if header_at is None:
        raise SmiParseError("nvidia-smi topo -m: expected a header row starting with GPU0")
    header = [cell.strip() for cell in lines[header_at].split("\t")]
    gpu_cols = [i for i, cell in enumerate(header) if re.fullmatch(r"GPU\d+", cell)]
    numa_col = header.index("NUMA Affinity") if "NUMA Affinity" in header else None
    matrix: list[list[str]] = []
    numa: dict[int, int | None] = {}
    for line in lines[header_at + 1 :]:
        cells = [cell.strip() for cell in line.split("\t")]
        if not re.fullmatch(r"GPU\d+", cells[0]):
            if matrix:
                break  # NIC rows and the legend follow the GPU rows
            continue
        if len(cells) <= max(gpu_cols):
            raise SmiParseError(
                f"nvidia-smi topo -m: expected {len(gpu_cols)} GPU columns in {line!r}"
            )
        row = [cells[i] for i in gpu_cols]
        for word in row:
            if not _TOPO_WORD.match(word):
                raise SmiParseError(f"nvidia-smi topo -m: unexpected link level {word!r}")
        matrix.append(row)
        affinity = cells[numa_col] if numa_col is not None and numa_col < len(cells) else ""
        numa[len(matrix) - 1] = _int(affinity.split("-")[0].split(",")[0]) if affinity else None
    if len(matrix) != len(gpu_cols):
        raise SmiParseError(
            f"nvidia-smi topo -m: expected {len(gpu_cols)} GPU rows, got {len(matrix)}"
        )
    return matrix, numa


def _mode(raw: str | None) -> str | None:
    if raw is None:
        return None
    return "enabled" if raw.strip().lower() == "enabled" else "disabled"


def build_gpus(
    rows: list[dict[str, str | None]],
    apps: list[dict[str, Any]],
    numa: dict[int, int | None] | None = None,
) -> list[dict[str, Any]]:
    """Gpu facts dicts (hw.model.Gpu) from parsed nvidia-smi output."""
    gpus = []
    for position, row in enumerate(rows):
        device_id = (row["pci.device_id"] or "").upper().replace("0X", "0x")
        model = catalog.find_nvidia_model(device_id or None, row["name"])
        clock = _int(row["clocks.max.memory"])
        bandwidth = None
        if model is not None and clock:
            bandwidth = round(model.memory_bus_width_bits / 8 * clock * 2 / 1000, 1)
        current = _mode(row["mig.mode.current"])
        mig: dict[str, Any] = {
            "capable": current is not None,
            "mode": current or "n/a",
            "pending": _mode(row["mig.mode.pending"]),
            "instances": [],
        }
        gpus.append(
            {
                "index": _int(row["index"]),
                "vendor": "nvidia",
                "model": row["name"] or "unknown",
                "uuid": row["uuid"],
                "pci_bus_id": bus_id(row["pci.bus_id"]),
                "pci_device_id": device_id,
                "numa_node": (numa or {}).get(position),
                "memory_total_mib": _int(row["memory.total"]) or 0,
                "memory_used_mib": _int(row["memory.used"]) or 0,
                "bandwidth_gbps": bandwidth,
                "bandwidth_class": bandwidth_class(bandwidth),
                "compute_units": model.sm_count if model is not None else None,
                "compute_capability": row["compute_cap"],
                "gfx_target": None,
                "utilization_pct": _int(row["utilization.gpu"]),
                "mig": mig,
                "partition": None,
                "sriov": None,
                "processes": [
                    {
                        "pid": app["pid"],
                        "name": app["name"],
                        "used_memory_mib": app["used_memory_mib"],
                        "gpu_instance_id": None,
                        "compute_instance_id": None,
                    }
                    for app in apps
                    if app["gpu_uuid"] == row["uuid"]
                ],
                "driver": "smi",
            }
        )
    return gpus


def _run(args: list[str]) -> str:
    try:
        done = subprocess.run(args, capture_output=True, text=True, timeout=_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise DriverUnavailable("") from None
    except subprocess.TimeoutExpired:
        raise DriverUnavailable(f"{' '.join(args[:2])} timed out after {_TIMEOUT_S}s") from None
    if done.returncode != 0:
        message = (done.stdout + done.stderr).strip()
        lowered = message.lower()
        # No driver loaded or no GPU: the stack is absent, not broken.
        if "couldn't communicate with the nvidia driver" in lowered or "no devices" in lowered:
            raise DriverUnavailable("")
        raise DriverUnavailable(f"{' '.join(args[:2])} exited {done.returncode}: {message}")
    return done.stdout


# (exit status, stdout, stderr); exit status None when it could not run or timed out.
StatusRunner = Callable[[list[str]], tuple[int | None, str, str]]


def status_runner(smi: str, budget_s: float = _TIMEOUT_S) -> StatusRunner:
    """Runs `smi <args>` and never raises; all the runs together stay within budget_s."""
    deadline = time.monotonic() + budget_s

    def run(args: list[str]) -> tuple[int | None, str, str]:
        left = deadline - time.monotonic()
        if left <= 0:
            return None, "", f"no time left of the {budget_s:g}s health budget"
        try:
            done = subprocess.run(
                [smi, *args], capture_output=True, text=True, timeout=left, check=False
            )
        except subprocess.TimeoutExpired:
            return None, "", f"timed out after {budget_s:g}s"
        except OSError as exc:
            return None, "", str(exc)
        return done.returncode, done.stdout, done.stderr

    return run


# -- health ------------------------------------------------------------------------------------


def query_health(run: StatusRunner) -> tuple[list[str], str, str] | str:
    """Ask nvidia-smi for HEALTH_FIELDS, renaming or dropping the fields it refuses.

    Returns (the fields asked, stdout, stderr) of the query it answered, or why none was."""
    fields = list(HEALTH_FIELDS)
    tried_minimal = False
    for _ in range(_HEALTH_TRIES):
        status, out, err = run([f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"])
        if status is None:
            return f"nvidia-smi --query-gpu: {err or 'did not run'}"
        refused = _REFUSED.search(out + "\n" + err)
        if refused is None and (status == 0 or out.strip()):
            # A non-zero status with rows: some GPU could not be read ("GPU is lost"); the
            # rows of the others stand, and that GPU has none.
            return fields, out, err
        field = refused.group("field") if refused else None
        if field in fields and field != "index":
            renamed = HEALTH_RENAMED.get(field)
            if renamed and renamed not in fields:
                fields[fields.index(field)] = renamed
            else:
                fields.remove(field)
            if len(fields) > 1:
                continue
        elif refused is not None and not tried_minimal:
            tried_minimal = True  # a refusal we cannot pin on one field: the oldest fields
            fields = list(HEALTH_MINIMAL)
            continue
        message = " ".join((out + " " + err).split())[:160]
        return f"nvidia-smi --query-gpu exited {status}: {message or 'no output'}"
    return f"nvidia-smi refused the health fields {_HEALTH_TRIES} times"


def parse_health(
    text: str, fields: list[str] | tuple[str, ...]
) -> dict[int, dict[str, str | None]]:
    """Rows of the health query by GPU index, keyed by HEALTH_FIELDS names (an older name
    asked instead stands under the newer one). Lines nvidia-smi prints about a GPU it cannot
    reach ("Unable to determine the device handle ...") are not rows."""
    canonical = {old: new for new, old in HEALTH_RENAMED.items()}
    names = tuple(canonical.get(field, field) for field in fields)
    lines = [line for line in text.splitlines() if line.strip() and not _is_message(line)]
    out: dict[int, dict[str, str | None]] = {}
    for row in _csv_rows("\n".join(lines), names, "nvidia-smi --query-gpu (health)"):
        index = _int(row.get("index"))
        if index is None:
            raise SmiParseError(
                f"nvidia-smi --query-gpu (health): expected an integer index, got {row['index']!r}"
            )
        out[index] = row
    return out


def _is_message(line: str) -> bool:
    lowered = line.lower()
    return "unable to determine" in lowered or "gpu is lost" in lowered


def lost_buses(text: str) -> set[str]:
    """The PCI bus ids nvidia-smi says are lost ("... GPU is lost. Reboot the system ...")."""
    return {bus_id(match.group("bus")) for match in _LOST.finditer(text)}


def _yes_no(raw: str | None) -> bool | None:
    text = (raw or "").strip().lower()
    return True if text == "yes" else False if text == "no" else None


def throttle_names(raw: str | None) -> list[str] | None:
    """ "0x0000000000000024" -> ["sw_power_cap", "sw_thermal_slowdown"] (the nvml driver's
    names); None when it is not a bitmask."""
    text = (raw or "").strip()
    try:
        mask = int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None
    return [name for bit, name in THROTTLE_BITS if mask & bit]


def _signals(row: dict[str, str | None] | None) -> dict[str, Any]:
    row = row or {}
    pending = _yes_no(row.get("remapped_rows.pending"))
    failure = _yes_no(row.get("remapped_rows.failure"))
    rows = None
    if pending is not None and failure is not None:
        rows = {
            "correctable": _int(row.get("remapped_rows.correctable")),
            "uncorrectable": _int(row.get("remapped_rows.uncorrectable")),
            "pending": pending,
            "failed": failure,
        }
    return {
        "ecc_uncorrected_volatile": _int(row.get("ecc.errors.uncorrected.volatile.total")),
        "remapped_rows": rows,
        "retired_pages_pending": _yes_no(row.get("retired_pages.pending")),
        "throttle_reasons": throttle_names(row.get("clocks_event_reasons.active")),
        "temperature_c": _int(row.get("temperature.gpu")),
    }


def build_health(
    gpus: list[dict[str, Any]],
    rows: dict[int, dict[str, str | None]] | None,
    fields: list[str] | tuple[str, ...] = HEALTH_FIELDS,
    why: str | None = None,
    records: list[kmsg.Record] | None = None,
    lost: set[str] | None = None,
) -> None:
    """Fill gpu["health"] (hw.model.GpuHealth) from parsed health rows (None: the query
    failed, `why`) and the kernel log records (None: not readable). A signal not read is None
    and listed in "unknown", with a note saying why."""
    canonical = {old: new for new, old in HEALTH_RENAMED.items()}
    asked = {canonical.get(field, field) for field in fields}
    buses = [g.get("pci_bus_id") if isinstance(g.get("pci_bus_id"), str) else None for g in gpus]
    logged = kmsg.xid_events(records, buses) if records is not None else {}
    for position, gpu in enumerate(gpus):
        row = None if rows is None else rows.get(gpu["index"])
        health = _gpu_health(row, asked, why)
        if gpu.get("pci_bus_id") and gpu["pci_bus_id"] in (lost or set()):
            health["lost"] = True
            health["unknown"] = [name for name in health["unknown"] if name != "lost"]
            health["notes"] = [n for n in health["notes"] if not n.startswith("lost:")]
        if records is not None:
            health["xids"] = logged.get(position, [])
        else:
            health["unknown"].append("xids")
            health["notes"].append("xids: kernel log not readable; nvidia-smi cannot report them")
        gpu["health"] = health


def _gpu_health(
    row: dict[str, str | None] | None, asked: set[str], why: str | None
) -> dict[str, Any]:
    health: dict[str, Any] = {"unknown": [], "lost": None, **_signals(row), "xids": None}
    notes: list[str] = []
    health["notes"] = notes
    no_row = why or "nvidia-smi printed no health row for this GPU"

    def unknown(name: str, *needed: str) -> None:
        if row is None:
            reason = no_row
        elif not all(field in asked for field in needed):
            reason = "this nvidia-smi does not know the field"
        else:
            reason = "nvidia-smi: N/A or not supported"
        health["unknown"].append(name)
        notes.append(f"{name}: {reason}")

    if row is not None and any(v is not None for k, v in row.items() if k != "index"):
        health["lost"] = False  # nvidia-smi read something of it
    else:
        unknown("lost", "index")
    if health["ecc_uncorrected_volatile"] is None:
        unknown("ecc_uncorrected_volatile", "ecc.errors.uncorrected.volatile.total")
    # Ampere and later remap rows, older cards retire pages: a card has one of the two.
    if health["remapped_rows"] is None and health["retired_pages_pending"] is None:
        unknown("remapped_rows", "remapped_rows.pending", "remapped_rows.failure")
        unknown("retired_pages_pending", "retired_pages.pending")
    if health["throttle_reasons"] is None:
        unknown("throttle_reasons", "clocks_event_reasons.active")
    if health["temperature_c"] is None:
        unknown("temperature_c", "temperature.gpu")
    return health


def read_health(
    gpus: list[dict[str, Any]],
    run: StatusRunner,
    kernel_log: Callable[[], list[kmsg.Record] | None] | None = None,
) -> None:
    """The health query and the kernel log, into gpu["health"]; never raises for a failed
    query: every signal it would have given is unknown then."""
    answer = query_health(run)
    rows: dict[int, dict[str, str | None]] | None = None
    fields: list[str] | tuple[str, ...] = HEALTH_FIELDS
    why = None
    lost: set[str] = set()
    if isinstance(answer, str):
        why = answer
    else:
        fields, out, err = answer
        lost = lost_buses(out + "\n" + err)
        try:
            rows = parse_health(out, fields)
        except SmiParseError as exc:
            why = str(exc)
    records = (kernel_log or kmsg.read_kernel_log)()
    build_health(gpus, rows, fields, why, records, lost)


class SmiNvidiaDriver:
    name = "smi"
    vendor = "nvidia"

    def __init__(self, gpus: list[dict[str, Any]], matrix: list[list[str]], version: str | None):
        self._gpus = gpus
        self._matrix = matrix
        self._version = version

    def gpus(self) -> list[dict[str, Any]]:
        return self._gpus

    def link_matrix(self) -> list[list[str]]:
        return self._matrix

    def version(self) -> str | None:
        return self._version

    def close(self) -> None:
        pass


def open_driver(
    health_run: StatusRunner | None = None,
    kernel_log: Callable[[], list[kmsg.Record] | None] | None = None,
) -> SmiNvidiaDriver:
    """The nvidia-smi driver; `health_run` and `kernel_log` stand in for the health query's
    runs and the kernel log reader in tests."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        raise DriverUnavailable("")
    fmt = "--format=csv,noheader,nounits"
    try:
        rows = parse_query_gpu(_run([smi, f"--query-gpu={','.join(QUERY_FIELDS)}", fmt]))
        if not rows:
            raise DriverUnavailable("")
        apps = parse_compute_apps(_run([smi, f"--query-compute-apps={','.join(APP_FIELDS)}", fmt]))
        try:
            matrix, numa = parse_topo(_run([smi, "topo", "-m"]))
        except (SmiParseError, DriverUnavailable):
            matrix, numa = _pcie_unknown(len(rows)), {}
    except SmiParseError as exc:
        raise DriverUnavailable(str(exc)) from None
    if len(matrix) != len(rows):
        matrix = _pcie_unknown(len(rows))
    gpus = build_gpus(rows, apps, numa)
    read_health(gpus, health_run or status_runner(smi), kernel_log)
    return SmiNvidiaDriver(gpus, matrix, rows[0]["driver_version"])


def _pcie_unknown(size: int) -> list[list[str]]:
    # Without topo -m nothing closer than the system interconnect can be claimed.
    return [["X" if i == j else "SYS" for j in range(size)] for i in range(size)]
