"""A frame of the pool (gpupoolctl.board) as plain text: `top --once`, `top` on a pipe, cron
mail and CI logs. Nothing here needs a terminal or colour: every state is a word or a mark."""

from __future__ import annotations

from collections.abc import Sequence

from gpupoolctl.board.formats import (
    JOB_HEADERS,
    QUEUE_HEADERS,
    STATE_MARKS,
    age,
    gib,
    gpu_measures,
    job_cells,
    percent,
    queue_cells,
    short_model,
    slice_text,
    sparkline,
)
from gpupoolctl.board.frame import Frame, GpuCell, NodeRow
from gpupoolctl.cli.render import plain_table

NARROW = 100  # columns below which a GPU is one line of marks instead of its slices in words


def header_lines(frame: Frame) -> list[str]:
    t = frame.totals
    held = t.held_mib / t.memory_mib if t.memory_mib else None
    when = frame.now.replace("T", " ").rsplit(".", 1)[0] + " UTC"
    first = f"gpupoolctl top  {when}  ledger seq {frame.seq}"
    if frame.filter:
        first += f"  filter: {frame.filter} ({frame.hidden_nodes} node(s) hidden)"
    if frame.facts_age_s is not None:
        first += f"  facts {age(frame.facts_age_s)} old"
    down = f" ({t.down_text()})" if t.down else ""
    second = (
        f"{t.nodes} nodes, {t.gpus} GPUs{down}, {t.slices} slices: {t.held} held, "
        f"{t.free} free; {gib(t.held_mib)} of {gib(t.memory_mib)} GiB held ({percent(held)}); "
        f"{t.running} running, {t.queued} queued"
    )
    now = next((v for v in reversed(frame.utilization) if v is not None), None)
    spark = sparkline(frame.utilization)
    third = f"last hour  {spark}  {percent(now)} of GPU memory held now"
    return [first, second, third]


def node_lines(node: NodeRow, width: int) -> list[str]:
    status = node.state if node.reason is None else f"{node.state}: {node.reason}"
    lines = [f"  {node.host}  {status}"]
    for gpu in node.gpus:
        lines.append(gpu_line(gpu, width))
    return lines


def gpu_line(gpu: GpuCell, width: int) -> str:
    name = f"gpu{gpu.index}" if gpu.index is not None else gpu.key.rsplit("/", 1)[-1]
    state = gpu.state if gpu.reason is None else f"{gpu.state} ({gpu.reason})"
    head = f"    {name:<6}{short_model(gpu.model)[:22]:<23}{gib(gpu.memory_mib):>6} GiB  {state}"
    if width < NARROW:
        marks = "".join(STATE_MARKS.get(s.state, "?") for s in gpu.slices)
        body = f"  [{marks}]"
    else:
        body = "  " + " ".join(f"[{slice_text(s)}]" for s in gpu.slices)
    measures = gpu_measures(gpu)
    return head + body + (f"  {measures}" if measures else "")


def frame_text(frame: Frame, width: int = 120, *, events: int = 15) -> str:
    """The whole frame: header, every node per site, jobs, queue head, recent events."""
    lines = header_lines(frame)
    for site, nodes in frame.sites:
        lines += ["", site]
        for node in nodes:
            lines += node_lines(node, width)
    if not frame.sites:
        lines += ["", "no nodes" + (" match the filter" if frame.filter else " in the ledger yet")]
    if width < NARROW:
        lines += ["", "slices: # held  . free  ~ re-cutting  x drained  ! lost  ? blocked"]
    lines += ["", f"RUNNING ({len(frame.jobs)})"]
    lines += _table(JOB_HEADERS, job_cells(frame, most_slices=2), "llllrll")
    lines += ["", f"QUEUE ({frame.totals.queued}, head)"]
    lines += _table(QUEUE_HEADERS, queue_cells(frame), "lllrrll")
    lines += ["", "EVENTS (newest last)"]
    shown = frame.events[-events:]
    lines += [f"  {e.ts[11:19]}  {e.kind:<8} {e.text}" for e in shown] or ["  none yet"]
    for warning in frame.warnings:
        lines.append(f"warning: {warning}")
    return "\n".join(lines) + "\n"


def _table(names: Sequence[str], rows: list[list[str]], align: str) -> list[str]:
    if not rows:
        return ["  none"]
    headers = [name.upper() for name in names]
    aligns = ["right" if a == "r" else "left" for a in align]
    text = plain_table(headers, rows, aligns)
    if text is None:  # a name outside printable ASCII: tabulate measures it right
        from tabulate import tabulate

        text = tabulate(
            rows, headers=headers, tablefmt="plain", colalign=aligns, disable_numparse=True
        )
    return ["  " + line for line in text.splitlines()]
