"""The small words and glyphs every view of a frame shares (text, terminal, page), so the
three say the same thing the same way."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpupoolctl.hw.units import gib_text

if TYPE_CHECKING:
    from gpupoolctl.board.frame import Frame, GpuCell, SliceCell

JOB_HEADERS = ("id", "owner", "team", "state", "age", "hosts", "slices")
QUEUE_HEADERS = ("id", "owner", "team", "priority", "waited", "wants", "why it waits")

SPARK = "▁▂▃▄▅▆▇█"
# A slice's state as one character: readable without colour (NO_COLOR, mail, CI logs).
STATE_MARKS = {
    "held": "#",
    "free": ".",
    "re-cutting": "~",
    "drained": "x",
    "lost": "!",
    "blocked": "?",
}


def sparkline(values: Sequence[float | None]) -> str:
    """One block per value (0..1); a space where nothing is known."""
    out = []
    for value in values:
        if value is None:
            out.append(" ")
        else:
            clamped = min(1.0, max(0.0, value))
            out.append(SPARK[min(len(SPARK) - 1, int(clamped * len(SPARK)))])
    return "".join(out)


def percent(value: float | None) -> str:
    return "-" if value is None else f"{round(value * 100)}%"


def gib(mib: int | None) -> str:
    return "-" if mib is None else gib_text(mib)


def age(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    return f"{s // 3600}h" if s < 172800 else f"{s // 86400}d"


def slice_text(cell: SliceCell) -> str:
    """ "2g.10gb j-2 ann", "whole free": what a slice is and who has it."""
    if cell.state == "held":
        who = f"{cell.job} {cell.owner}" if cell.job else str(cell.owner)
        return f"{cell.label} {who}"
    return f"{cell.label} {cell.state}"


def gpu_measures(gpu: GpuCell) -> str:
    """What the node's facts said of the card, when they were asked: memory in use,
    utilization, temperature."""
    parts = []
    if gpu.used_mib is not None:
        parts.append(f"used {gib(gpu.used_mib)} GiB")
    if gpu.utilization_pct is not None:
        parts.append(f"{gpu.utilization_pct:g}% busy")
    if gpu.temperature_c is not None:
        parts.append(f"{gpu.temperature_c:g}C")
    return ", ".join(parts)


def short_model(model: str) -> str:
    """ "NVIDIA H100 80GB HBM3" -> "H100 80GB HBM3": the vendor is in the card's colour."""
    for vendor in ("NVIDIA ", "AMD Instinct ", "AMD "):
        if model.startswith(vendor):
            return model[len(vendor) :]
    return model


def job_cells(frame: Frame, *, most_slices: int | None = None) -> list[list[str]]:
    """The running jobs as table cells, in JOB_HEADERS' order; `most_slices` shortens a
    long slice list to its first few and a count."""
    rows = []
    for job in frame.jobs:
        slices = list(job.slices)
        if most_slices is not None and len(slices) > most_slices:
            slices = [*slices[:most_slices], f"+{len(slices) - most_slices}"]
        rows.append([job.id, job.owner, job.team or "-", job.state, age(job.age_s),
                     ",".join(job.hosts) or "-", ",".join(slices) or "-"])  # fmt: skip
    return rows


def queue_cells(frame: Frame) -> list[list[str]]:
    """The queue head as table cells, in QUEUE_HEADERS' order."""
    return [
        [q.id, q.owner, q.team or "-", str(q.priority), age(q.waited_s), q.want, q.reason or "-"]
        for q in frame.queue
    ]
