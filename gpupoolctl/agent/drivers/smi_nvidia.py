"""The NVIDIA half of the `smi` fallback: parse nvidia-smi when pynvml is missing.

Three local runs: `--query-gpu` (an explicit field list, csv, no header, no units),
`--query-compute-apps` and `topo -m`. The parsers are pure functions of the text, so tests feed
them captured output. nvidia-smi cannot report memory bus width or SM count; those come from
the hw catalog by PCI device id (None for a card the catalog does not know). MIG instances are
not parsed here (instances stay empty); the nvml driver reports them.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from typing import Any

from gpupoolctl.agent.drivers.base import DriverUnavailable
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


def open_driver() -> SmiNvidiaDriver:
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
    return SmiNvidiaDriver(build_gpus(rows, apps, numa), matrix, rows[0]["driver_version"])


def _pcie_unknown(size: int) -> list[list[str]]:
    # Without topo -m nothing closer than the system interconnect can be claimed.
    return [["X" if i == j else "SYS" for j in range(size)] for i in range(size)]
