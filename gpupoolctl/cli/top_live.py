"""`top` on a terminal: rich's Live on the alternate screen, keys read in cbreak mode.

Why rich and not Textual: rich is already a dependency and draws everything the view needs
(panels, styled text); the view has four panes and a handful of keys, for which a small
key reader is enough, and Textual would add a framework, its own event loop and ~100 ms
of start-up for it. The terminal is given back exactly as it was (alternate screen left,
termios attributes restored) however the view ends.
"""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpupoolctl.board.events import Event
from gpupoolctl.board.formats import (
    STATE_MARKS,
    age,
    gib,
    gpu_measures,
    short_model,
    slice_text,
)
from gpupoolctl.board.frame import Filter, Frame, GpuCell, JobRow, NodeRow, QueueRow
from gpupoolctl.cli.top_text import NARROW, header_lines
from gpupoolctl.errors import ExitCode

if TYPE_CHECKING:
    from rich.console import RenderableType

    from gpupoolctl.cli.top_source import FrameSource

PANES = ("nodes", "jobs", "queue", "events")
REBUILD_EVERY_S = 5.0  # ages and the clock move even when the ledger does not
SLICE_STYLES = {
    "held": "black on dark_orange",
    "free": "black on green",
    "re-cutting": "black on magenta",
    "drained": "white on grey37",
    "lost": "white on red",
    "blocked": "black on yellow",
}
GPU_STYLES = {
    "lost": "bold red",
    "failed": "bold red",
    "drained": "grey50",
    "blocked": "yellow",
    "re-cutting": "magenta",
    "busy": "dark_orange",
    "partly held": "yellow",
    "free": "green",
}
UP, DOWN, ESC, ENTER, TAB, BACKSPACE = "up", "down", "esc", "enter", "tab", "backspace"


# -- keys -----------------------------------------------------------------------------------


@contextmanager
def cbreak(fd: int) -> Iterator[None]:
    """Keys one at a time, no echo; the terminal's attributes restored on the way out."""
    saved = termios.tcgetattr(fd)
    try:
        tty.setcbreak(fd)
        yield
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def parse_keys(data: str) -> list[str]:
    """Raw terminal input -> key names: letters as themselves, arrows, esc, enter, tab."""
    keys: list[str] = []
    i = 0
    while i < len(data):
        char = data[i]
        if char == "\x1b":
            seq = data[i + 1 : i + 3]
            if seq in ("[A", "OA"):
                keys.append(UP)
                i += 3
                continue
            if seq in ("[B", "OB"):
                keys.append(DOWN)
                i += 3
                continue
            if seq[:1] in ("[", "O") and len(seq) == 2:
                i += 3  # another cursor or function key: ignored
                continue
            keys.append(ESC)
        elif char in ("\r", "\n"):
            keys.append(ENTER)
        elif char == "\t":
            keys.append(TAB)
        elif char in ("\x7f", "\x08"):
            keys.append(BACKSPACE)
        elif char == "\x03":
            raise KeyboardInterrupt
        else:
            keys.append(char)
        i += 1
    return keys


def read_keys(fd: int, timeout: float) -> list[str]:
    ready, _, _ = select.select([fd], [], [], max(0.0, timeout))
    if not ready:
        return []
    data = os.read(fd, 256)
    if not data:
        raise EOFError
    return parse_keys(data.decode("utf-8", "replace"))


# -- what the person is doing ---------------------------------------------------------------


@dataclass
class Ui:
    filter: Filter = field(default_factory=Filter)
    pane: int = 0
    selected: dict[str, int] = field(default_factory=lambda: dict.fromkeys(PANES, 0))
    typing: str | None = None  # the filter being typed after `/`
    message: str | None = None  # a bad filter, said in the footer
    detail: str | None = None  # what enter opened: "job:j-3" or "gpu:host/gpu0"
    # The panes' lines of the frame last drawn: keys redraw the same frame many times.
    _lines: dict[str, tuple[list[tuple[str, Any]], list[int]]] = field(default_factory=dict)
    _lines_of: Frame | None = None

    def lines_of(self, frame: Frame, pane: str) -> tuple[list[tuple[str, Any]], list[int]]:
        if frame is not self._lines_of:
            self._lines, self._lines_of = {}, frame
        if pane not in self._lines:
            self._lines[pane] = pane_lines(frame, pane)
        return self._lines[pane]

    def handle(self, key: str, frame: Frame) -> bool:
        """Apply one key; True when the view should end."""
        if self.typing is not None:
            self._type(key)
            return False
        if self.detail is not None:
            if key in (ESC, ENTER, "q"):
                self.detail = None
            return False
        if key == "q":
            return True
        if key == "/":
            self.typing, self.message = self.filter.text, None
        elif key == TAB:
            self.pane = (self.pane + 1) % len(PANES)
        elif key in (DOWN, "j"):
            self._move(frame, 1)
        elif key in (UP, "k"):
            self._move(frame, -1)
        elif key == ENTER:
            self.detail = self._chosen(frame)
        return False

    def _type(self, key: str) -> None:
        assert self.typing is not None
        if key == ESC:
            self.typing = None
        elif key == ENTER:
            try:
                self.filter = Filter.parse(self.typing)
                self.selected = dict.fromkeys(PANES, 0)
                self.message = None
            except ValueError as exc:
                self.message = str(exc)
            self.typing = None
        elif key == BACKSPACE:
            self.typing = self.typing[:-1]
        elif len(key) == 1 and key.isprintable():
            self.typing += key

    def _move(self, frame: Frame, step: int) -> None:
        pane = PANES[self.pane]
        count = len(self.lines_of(frame, pane)[1])
        self.selected[pane] = max(0, min(count - 1, self.selected[pane] + step))

    def _chosen(self, frame: Frame) -> str | None:
        pane = PANES[self.pane]
        found = items(frame, pane)
        if not found or pane == "events":
            return None
        index = min(self.selected[pane], len(found) - 1)
        return f"{'gpu' if pane == 'nodes' else 'job'}:{found[index]}"


def items(frame: Frame, pane: str) -> list[str]:
    """What can be selected in a pane, in its order: GPU keys, job ids, queued job ids."""
    if pane == "nodes":
        return [gpu.key for node in frame.nodes() for gpu in node.gpus]
    if pane == "jobs":
        return [job.id for job in frame.jobs]
    if pane == "queue":
        return [row.id for row in frame.queue]
    return []


# -- drawing --------------------------------------------------------------------------------


def render(frame: Frame, ui: Ui, width: int, height: int, detail: Any = None) -> RenderableType:
    from rich.layout import Layout
    from rich.panel import Panel
    from rich.text import Text

    head = Text("\n".join(header_lines(frame)), no_wrap=True, overflow="ellipsis")
    root = Layout()
    root.split_column(Layout(head, size=3), Layout(name="body"), Layout(_footer(ui, frame), size=1))
    body_height = max(4, height - 4)
    if ui.detail is not None:
        kind, _, key = ui.detail.partition(":")
        title = f"{'GPU' if kind == 'gpu' else 'job'} {key}"
        root["body"].update(Panel(_detail_text(frame, ui.detail, detail), title=title))
        return root
    narrow = width < NARROW

    def pane(name: str, size: int) -> Layout:
        return Layout(_panel(frame, ui, name, size, narrow), size=size)

    if narrow:  # one pane above the other, the nodes taking half
        sizes = _split(body_height, (3, 1, 1, 1))
        root["body"].split_column(*(pane(n, s) for n, s in zip(PANES, sizes, strict=True)))
    else:
        sizes = _split(body_height, (1, 1, 1))
        right = Layout()
        right.split_column(*(pane(n, s) for n, s in zip(PANES[1:], sizes, strict=True)))
        nodes = Layout(_panel(frame, ui, "nodes", body_height, narrow))
        root["body"].split_row(Layout(nodes, ratio=3), Layout(right, ratio=2))
    return root


def _split(total: int, weights: tuple[int, ...]) -> list[int]:
    sizes = [max(3, total * w // sum(weights)) for w in weights]
    sizes[0] += total - sum(sizes)
    return sizes


def pane_lines(frame: Frame, name: str) -> tuple[list[tuple[str, Any]], list[int]]:
    """A pane's lines as (kind, value), nothing drawn yet (a 1,000-node pool has ~9,000 GPU
    lines, of which a screen shows fifty), and the line of each selectable item in
    `items` order."""
    lines: list[tuple[str, Any]] = []
    positions: list[int] = []
    if name == "nodes":
        for site, nodes in frame.sites:
            lines.append(("site", site))
            for node in nodes:
                lines.append(("node", node))
                for gpu in node.gpus:
                    positions.append(len(lines))
                    lines.append(("gpu", gpu))
        if frame.hidden_nodes:
            lines.append(("hidden", frame.hidden_nodes))
    elif name == "jobs":
        lines = [("job", job) for job in frame.jobs]
        positions = list(range(len(lines)))
    elif name == "queue":
        lines = [("queue", row) for row in frame.queue]
        positions = list(range(len(lines)))
    else:
        lines = [("event", event) for event in frame.events]
    return lines, positions


def _panel(frame: Frame, ui: Ui, name: str, size: int, narrow: bool) -> Any:
    """A pane's lines, scrolled so that its selected line shows, in a titled border."""
    from rich.panel import Panel
    from rich.text import Text

    lines, positions = ui.lines_of(frame, name)
    focused = PANES[ui.pane] == name
    room = max(1, size - 2)
    chosen = None
    if focused and positions:
        chosen = positions[min(ui.selected[name], len(positions) - 1)]
    start = 0
    if chosen is not None and chosen >= room:
        start = chosen - room + 1
    if name == "events":
        start = max(0, len(lines) - room)  # newest last, and kept in view
    shown = [
        _draw(kind, value, narrow, start + i == chosen)
        for i, (kind, value) in enumerate(lines[start : start + room])
    ]
    text = Text("\n").join(shown) if shown else Text("none", style="dim")
    text.no_wrap, text.overflow = True, "ellipsis"  # one line per item: scrolling counts lines
    more = len(lines) - len(shown)
    title = f"{name}" + (f" (+{more} more)" if more > 0 else "")
    return Panel(
        text,
        title=title,
        title_align="left",
        border_style="bold cyan" if focused else "grey50",
        padding=(0, 1),
    )


def _draw(kind: str, value: Any, narrow: bool, selected: bool) -> Any:
    from rich.text import Text

    if kind == "site":
        return Text(value, style="bold underline")
    if kind == "node":
        return _node_text(value)
    if kind == "gpu":
        return _gpu_text(value, narrow, selected)
    if kind == "hidden":
        return Text(f"{value} node(s) hidden by the filter", style="dim")
    if kind == "job":
        return _job_text(value, selected)
    if kind == "queue":
        return _queue_text(value, selected)
    return _event_text(value)


def _node_text(node: NodeRow) -> Any:
    from rich.text import Text

    status = node.state if node.reason is None else f"{node.state}: {node.reason}"
    return Text(f" {node.host}  {status}", style="bold" if node.state == "ok" else "bold red")


def _job_text(job: JobRow, selected: bool) -> Any:
    from rich.text import Text

    who = f"{job.owner}/{job.team}" if job.team else job.owner
    text = f"{job.id:<7}{who:<14}{job.state:<8}{age(job.age_s):>5}  {','.join(job.hosts)}"
    return Text(text, style="reverse" if selected else "")


def _queue_text(row: QueueRow, selected: bool) -> Any:
    from rich.text import Text

    who = f"{row.owner}/{row.team}" if row.team else row.owner
    text = f"{row.id:<7}{who:<14}p{row.priority:<4}{age(row.waited_s):>5}  {row.want}"
    line = Text(text, style="reverse" if selected else "")
    if row.reason:
        line.append(f"  {row.reason}", style="italic")
    return line


def _event_text(event: Event) -> Any:
    from rich.text import Text

    line = Text(f"{event.ts[11:19]} ", style="dim")
    line.append(f"{event.kind:<8}", style="bold")
    line.append(event.text)
    return line


def _gpu_text(gpu: GpuCell, narrow: bool, selected: bool) -> Any:
    from rich.text import Text

    name = f"gpu{gpu.index}" if gpu.index is not None else gpu.key.rsplit("/", 1)[-1]
    line = Text(f"  {name:<6}", style="reverse" if selected else "")
    if not narrow:
        line.append(f"{short_model(gpu.model)[:18]:<19}{gib(gpu.memory_mib):>6} ")
    line.append(f"{gpu.state:<11} ", style=GPU_STYLES.get(gpu.state, ""))
    for cell in gpu.slices:
        if narrow:
            line.append(STATE_MARKS.get(cell.state, "?"), style=SLICE_STYLES.get(cell.state, ""))
        else:
            line.append(f" {slice_text(cell)} ", style=SLICE_STYLES.get(cell.state, ""))
            line.append(" ")
    measures = gpu_measures(gpu)
    if measures and not narrow:
        line.append(f" {measures}", style="dim")
    return line


def _footer(ui: Ui, frame: Frame) -> Any:
    from rich.text import Text

    if ui.typing is not None:
        return Text(f"filter: {ui.typing}_   (enter applies, esc cancels)", style="bold")
    if ui.message:
        return Text(ui.message, style="bold red")
    if ui.detail is not None:
        return Text("esc or enter: back", style="dim")
    shown = f"   filter: {ui.filter.text}" if ui.filter.text else ""
    line = Text(f"q quit  / filter  tab pane  up/down move  enter details{shown}", style="dim")
    if frame.warnings:  # a damaged ledger, hosts whose facts could not be read, ...
        more = f" (+{len(frame.warnings) - 1} more)" if len(frame.warnings) > 1 else ""
        line.append(f"   warning: {frame.warnings[0]}{more}", style="bold red")
    return line


def _detail_text(frame: Frame, chosen: str, record: Any) -> Any:
    from rich.text import Text

    kind, _, key = chosen.partition(":")
    if kind == "gpu":
        gpu = frame.gpu(key)
        if gpu is None:
            return Text(f"{key} is no longer in the view")
        lines = [
            f"{gpu.key}  {gpu.model}",
            f"state: {gpu.state}" + (f" ({gpu.reason})" if gpu.reason else ""),
            f"memory: {gib(gpu.memory_mib)} GiB, {gib(gpu.held_mib)} GiB held",
        ]
        if gpu_measures(gpu):
            lines.append(f"facts: {gpu_measures(gpu)}")
        lines.append("slices:")
        for cell in gpu.slices:
            who = f"  held by {cell.owner} ({cell.job})" if cell.state == "held" else ""
            team = f" team {cell.team}" if cell.team else ""
            size = f"{gib(cell.memory_mib)} GiB"
            lines.append(f"  {cell.id}  {cell.label}  {size}  {cell.state}{who}{team}")
        return Text("\n".join(lines))
    if record is None:
        return Text(f"{key}: not in the ledger any more")
    lines = [f"why it waits: {q.reason}" for q in frame.queue if q.id == key and q.reason]
    for field_name in (
        "id",
        "name",
        "state",
        "owner",
        "created",
        "updated",
        "argv",
        "request",
        "nodes",
        "exit_code",
        "error",
        "reason",
        "run",
        "restarts",
    ):
        value = record.get(field_name)
        if value not in (None, [], {}):
            lines.append(f"{field_name}: {value}")
    return Text("\n".join(lines))


# -- the loop -------------------------------------------------------------------------------


def run_live(source: FrameSource, chosen: Filter, every: float) -> int:
    """The live view until `q` (exit 0) or Ctrl-C (exit 130). It draws again only when
    something changed (the ledger, a key, the terminal's size, or every REBUILD_EVERY_S for
    ages), and between draws sleeps in select() on the keyboard: idle, it costs one stat of
    the journal per interval."""
    from rich.console import Console
    from rich.live import Live

    console = Console(no_color="NO_COLOR" in os.environ, highlight=False)
    fd = sys.stdin.fileno()
    ui = Ui(filter=chosen)
    journal = source.follower.ledger.paths.journal
    frame = source.frame(ui.filter)
    built_at, seen, drawn_for = time.monotonic(), _stamp(journal), None
    try:
        with cbreak(fd), Live(console=console, screen=True, auto_refresh=False) as live:
            while True:
                width, height = console.size
                looks = (ui.pane, tuple(ui.selected.values()), ui.typing, ui.message, ui.detail)
                drawn = (id(frame), width, height, looks)
                if drawn != drawn_for:
                    record = _record_for(source, ui.detail)
                    live.update(render(frame, ui, width, height, record), refresh=True)
                    drawn_for = drawn
                old_filter = ui.filter
                for key in read_keys(fd, every):
                    if ui.handle(key, frame):
                        return 0
                now, stamp = time.monotonic(), _stamp(journal)
                if (
                    stamp != seen
                    or ui.filter is not old_filter
                    or now - built_at >= REBUILD_EVERY_S
                    or source.facts_every is not None
                ):
                    frame = source.frame(ui.filter)
                    built_at, seen = now, stamp
    except KeyboardInterrupt:
        return int(ExitCode.INTERRUPTED)
    except EOFError:
        return 0


def _stamp(path: Any) -> tuple[int, int] | None:
    """The journal's size and mtime: whether anyone wrote since the last look, by one stat."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _record_for(source: FrameSource, chosen: str | None) -> Any:
    if chosen is None or not chosen.startswith("job:"):
        return None
    return source.detail(chosen.partition(":")[2])
