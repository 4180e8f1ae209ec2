"""A frame of the pool as one self-contained HTML page (`pool --html FILE`): no external CSS,
script, font or image, so it can be mailed or served as a status page as it is. Every
value from the ledger is escaped."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from gpupoolctl.board.formats import (
    JOB_HEADERS,
    QUEUE_HEADERS,
    gib,
    gpu_measures,
    job_cells,
    percent,
    queue_cells,
    short_model,
    slice_text,
)
from gpupoolctl.board.frame import Frame, GpuCell, NodeRow

_STYLE = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.3em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
h3{font-size:1em;margin:.8em 0 .2em}.muted{color:#666}
table{border-collapse:collapse}td,th{padding:2px 8px;text-align:left;vertical-align:top}
th{border-bottom:1px solid #aaa}.num{text-align:right}
.gpu{display:flex;gap:6px;align-items:center;margin:2px 0 2px 1em;flex-wrap:wrap}
.gpu .name{width:19em;font-family:monospace}
.s{border:1px solid #888;border-radius:3px;padding:0 5px;font-family:monospace;font-size:12px}
.held{background:#f4b183}.free{background:#c9e7c1}.re-cutting{background:#ffe699}
.drained{background:#d0d0d0}.failed,.lost{background:#f08080}.blocked{background:#ffd966}
.busy{background:#fbe5d6}.partly-held{background:#fff2cc}
.state{font-size:12px;padding:0 4px;border-radius:3px}.warning{color:#a00;font-weight:bold}
"""


def frame_page(frame: Frame, *, title: str = "gpupoolctl pool") -> str:
    t = frame.totals
    held = t.held_mib / t.memory_mib if t.memory_mib else None
    down = f" ({t.down_text()})" if t.down else ""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>",
        f"<h1>{escape(title)}</h1>",
        f'<p class="muted">as of {escape(frame.now)}, ledger record {frame.seq}</p>',
        "<p>"
        + escape(
            f"{t.nodes} nodes, {t.gpus} GPUs{down}, {t.slices} slices: {t.held} held, "
            f"{t.free} free; {gib(t.held_mib)} of {gib(t.memory_mib)} GiB held "
            f"({percent(held)}); {t.running} running, {t.queued} queued"
        )
        + "</p>",
        "<p>GPU memory held, last hour: " + _spark_svg(frame.utilization) + "</p>",
    ]
    parts += [f'<p class="warning">warning: {escape(w)}</p>' for w in frame.warnings]
    for site, nodes in frame.sites:
        parts.append(f'<section class="site"><h2>{escape(site)}</h2>')
        parts += [_node(node) for node in nodes]
        parts.append("</section>")
    parts.append("<h2>Running jobs</h2>")
    parts.append(_table(JOB_HEADERS, job_cells(frame)))
    parts.append("<h2>Queue</h2>")
    parts.append(_table(QUEUE_HEADERS, queue_cells(frame)))
    parts.append("<h2>Recent events</h2>")
    parts.append(_table(["time", "kind", "what"], [[e.ts, e.kind, e.text] for e in frame.events]))
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _node(node: NodeRow) -> str:
    status = node.state if node.reason is None else f"{node.state}: {node.reason}"
    out = [
        f'<div class="node" data-host="{escape(node.host)}"><h3>{escape(node.host)} '
        f'<span class="state {escape(node.state)}">{escape(status)}</span></h3>'
    ]
    out += [_gpu(gpu) for gpu in node.gpus]
    out.append("</div>")
    return "\n".join(out)


def _gpu(gpu: GpuCell) -> str:
    name = f"gpu{gpu.index}" if gpu.index is not None else gpu.key.rsplit("/", 1)[-1]
    label = f"{name} {short_model(gpu.model)} {gib(gpu.memory_mib)} GiB"
    state = gpu.state if gpu.reason is None else f"{gpu.state}: {gpu.reason}"
    chips = "".join(
        f'<span class="s {escape(s.state)}" title="{escape(s.id)}">{escape(slice_text(s))}</span>'
        for s in gpu.slices
    )
    measures = gpu_measures(gpu)
    extra = f'<span class="muted">{escape(measures)}</span>' if measures else ""
    css = escape(gpu.state.replace(" ", "-"))
    return (
        f'<div class="gpu" data-gpu="{escape(gpu.key)}" data-state="{escape(gpu.state)}">'
        f'<span class="name">{escape(label)}</span>'
        f'<span class="state {css}">{escape(state)}</span>{chips}{extra}</div>'
    )


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    if not rows:
        return '<p class="muted">none</p>'
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>" + "".join(f"<td>{escape(str(cell))}</td>" for cell in row) + "</tr>" for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _spark_svg(values: Sequence[float | None], width: int = 240, height: int = 28) -> str:
    known = [(i, v) for i, v in enumerate(values) if v is not None]
    if not known:
        return '<span class="muted">nothing known yet</span>'
    step = width / max(1, len(values) - 1)
    points = " ".join(f"{i * step:.1f},{height - v * (height - 2) - 1:.1f}" for i, v in known)
    now = percent(known[-1][1])
    return (
        f'<svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" '
        f'aria-label="GPU memory held over the last hour, {now} now">'
        f'<rect width="{width}" height="{height}" fill="#f4f4f4"/>'
        f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" points="{points}"/>'
        f"</svg> {escape(now)} now"
    )
