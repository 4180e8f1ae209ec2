"""A workload's own report of how a job spent its time: `$GPUPOOL_JOB_DIR/report.json`.

The train workload writes one JSON object there when it ends (write()):

    {"v": 1, "workload": "train", "samples": int, "steps": int, "compute_s": float,
     "comm_s": float, "comm_links": {link class: seconds}, "bound_by": link class | null}

The agent's poll hands it back with the status of a job that has ended (read(): bounded, a
malformed one is left out with a note), and the admin side keeps only its known numeric
fields (summary(): no user text reaches the ledger). Stdlib only: it ships in the agent.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

REPORT_FILE = "report.json"
MAX_REPORT_BYTES = 16 * 1024
LINK_CLASSES = ("nvlink", "xgmi", "pcie", "nic", "wan")
_COUNTS = ("samples", "steps")
_SECONDS = ("compute_s", "comm_s")


def write(env: Mapping[str, str], report: Mapping[str, Any]) -> None:
    """Leave `report` in the job's folder ($GPUPOOL_JOB_DIR), atomically (temp file, fsync,
    rename); nothing when the job has no folder (run by hand). A failed write loses only
    the report, never the job."""
    import contextlib

    from gpupoolctl.agent.jobs.paths import write_json

    folder = env.get("GPUPOOL_JOB_DIR")
    if not folder:
        return
    with contextlib.suppress(OSError):
        write_json(Path(folder) / REPORT_FILE, dict(report))


def read(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(the report, None), (None, None) when there is none, or (None, why it was ignored)."""
    path = folder / REPORT_FILE
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        return None, f"report.json ignored: {exc.strerror or exc}"
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(MAX_REPORT_BYTES + 1)
    if len(data) > MAX_REPORT_BYTES:
        return None, f"report.json ignored: over {MAX_REPORT_BYTES} bytes"
    try:
        value = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        return None, "report.json ignored: not JSON"
    if not isinstance(value, dict) or value.get("v") != 1:
        return None, 'report.json ignored: not a {"v": 1, ...} object'
    if summary(value) is None:
        return None, "report.json ignored: no samples, steps, compute_s or comm_s number"
    return value, None


def _number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def summary(report: Any) -> dict[str, Any] | None:
    """The report's known numeric fields, checked: counts, seconds, seconds per known link
    class, and bound_by when it is a known link class. None when nothing usable is left."""
    if not isinstance(report, Mapping):
        return None
    out: dict[str, Any] = {}
    for key in _COUNTS:
        if _number(report.get(key)) and float(report[key]).is_integer():
            out[key] = int(report[key])
    for key in _SECONDS:
        if _number(report.get(key)):
            out[key] = float(report[key])
    if not out:
        return None
    links = report.get("comm_links")
    if isinstance(links, Mapping):
        out["comm_links"] = {
            k: float(links[k]) for k in LINK_CLASSES if k in links and _number(links[k])
        }
    bound = report.get("bound_by")
    out["bound_by"] = bound if bound in LINK_CLASSES else None
    return out


def merge(reports: Sequence[Any]) -> dict[str, Any] | None:
    """One job's summary from its nodes' reports (each node of a train job reports the
    job-wide figures node 0 decided): the first usable one, by node order."""
    for report in reports:
        usable = summary(report)
        if usable is not None:
            return usable
    return None
