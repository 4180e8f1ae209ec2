"""Following the ledger for a live view: the state, recent events and pool utilization over
the last hour, kept up to date by reading only what writers appended since the last look.

    follower = Follower(Ledger.from_env(path))
    view = follower.poll()          # Ledger.read(): a shared lock, never the write lock
    follower.events                 # newest last, at most `keep_events`
    follower.utilization(view)      # one value per minute of the last hour, 0..1 or None

The first poll replays the journal once, as every reader does; each later poll parses only
the new records (replay.refresh), and this module hears of each of them through the
ledger's observer hook, so nothing is parsed twice.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from gpupoolctl.board.events import Event, describe
from gpupoolctl.board.frame import Touched
from gpupoolctl.errors import UsageError
from gpupoolctl.ledger import Ledger, View
from gpupoolctl.ledger.cards import pool_memory_mib
from gpupoolctl.ledger.state import State
from gpupoolctl.ledger.units import format_ts, parse_ts, utc_now

BUCKET_S = 60
WINDOW_S = 3600


def held_fraction(state: State, at: str) -> float | None:
    """GPU memory held / the pool's GPU memory (its cards', as `top` totals it:
    ledger.cards.pool_memory_mib), at `at` (None: no slices)."""
    held = 0
    for slice_id, entry in state.slices.items():
        if slice_id in state.holders and state.holder(slice_id, at) is not None:
            held += int(entry.get("memory_mib") or 0)
    total = pool_memory_mib(state.slices.values())
    return held / total if total else None


class Follower:
    def __init__(
        self,
        ledger: Ledger,
        *,
        keep_events: int = 200,
        clock: Callable[[], datetime] = utc_now,
    ) -> None:
        self.ledger = ledger
        self.clock = clock
        self.events: deque[Event] = deque(maxlen=keep_events)
        self._samples: dict[int, float | None] = {}  # minute number -> held fraction
        self._last_seq = 0
        self._last_bucket: int | None = None
        self._since = self._bucket(clock()) - WINDOW_S // BUCKET_S
        self._touched = Touched(everything=True)
        self._state: State | None = None
        ledger.follow(self._observe)

    def poll(self) -> View:
        """The ledger's current view; new records since the last poll become events."""
        view = self.ledger.read()
        if view.state is not self._state:  # a reload: a new State, every row drawn again
            self._state = view.state
            self._touched.everything = True
        if view.state.seq < self._last_seq:  # replaced by an older copy (restored backup)
            self._last_seq = view.state.seq
            self.events = deque(
                (e for e in self.events if e.seq <= view.state.seq), maxlen=self.events.maxlen
            )
        return view

    def take_touched(self) -> Touched:
        """What the records since the last call touched (for FrameBuilder), and start
        counting again."""
        touched, self._touched = self._touched, Touched()
        return touched

    def utilization(self, view: View) -> list[float | None]:
        """Held fraction per minute of the last hour, oldest first, the last one now. A
        minute with no record carries the value before it; before the first known value,
        None (the journal does not reach back that far)."""
        current = self._bucket(parse_ts(view.now))
        last = self._last_bucket
        if last is not None and last < current and last not in self._samples:
            # No record since that minute's: the pool stood then as it stands now.
            self._samples[last] = held_fraction(view.state, _end_of(last))
        self._samples[current] = held_fraction(view.state, view.now)
        first = current - WINDOW_S // BUCKET_S + 1
        for old in [b for b in self._samples if b < first - 1]:
            del self._samples[old]
        series: list[float | None] = []
        value: float | None = self._samples.get(first - 1)
        for bucket in range(first, current + 1):
            value = self._samples.get(bucket, value)
            series.append(value)
        return series

    # -- the observer -----------------------------------------------------------------------

    def _observe(self, record: dict[str, Any], state: State) -> None:
        seq = int(record.get("seq") or 0)
        if seq <= self._last_seq:
            return  # a full reload tells the records after the snapshot again
        self._last_seq = seq
        try:
            bucket = self._bucket(parse_ts(str(record.get("ts") or "")))
        except UsageError:
            bucket = self._last_bucket
        last = self._last_bucket
        if last is not None and bucket != last and last >= self._since:
            # The state before this record is how the pool stood at the end of the minute
            # of the record before it.
            self._samples[last] = held_fraction(state, _end_of(last))
        self._last_bucket = bucket
        _touch(self._touched, record, state)
        event = describe(record, state)
        if event is not None:
            self.events.append(event)

    @staticmethod
    def _bucket(moment: datetime) -> int:
        return int(moment.timestamp() // BUCKET_S)


def _end_of(bucket: int) -> str:
    return format_ts(datetime.fromtimestamp((bucket + 1) * BUCKET_S - 0.001, tz=UTC))


def _touch(touched: Touched, record: dict[str, Any], state: State) -> None:
    """Note the hosts a record changes (the state is as it was before it)."""
    op, data = record.get("op"), record.get("data") or {}
    hosts = touched.hosts

    def of_slices(ids: Any) -> None:
        hosts.update(str(s).split("/", 1)[0] for s in ids or ())

    if op == "slices":
        touched.slices = True
        hosts.update(str(h) for h in data.get("hosts") or ())  # the hosts it refreshes
    elif op == "alloc":
        of_slices(data.get("slices"))
    elif op in ("release", "expire"):
        for alloc_id in data.get("ids") or [data.get("id")]:
            alloc = state.allocations.get(str(alloc_id))
            of_slices(alloc.slices if alloc else ())
    elif op == "job":
        # A job's id labels the slices it holds: the hosts it is placed on change.
        old = state.jobs.get(str(data.get("id"))) or {}
        for job in (data, old):
            of_slices((job.get("placement") or {}).get("slices"))
            for node in job.get("nodes") or ():
                hosts.add(str(node.get("host")))
    elif op in ("drain", "reshape", "host"):
        target = data.get("target") or data.get("host") or data.get("gpu") or ""
        hosts.add(str(target).split("/", 1)[0])
    elif op in ("enqueue", "dequeue", "fence"):
        pass  # the queue and fences are drawn from the state every frame
    else:
        touched.everything = True  # repair, or an op this version does not know
