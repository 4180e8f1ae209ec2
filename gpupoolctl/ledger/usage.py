"""What was held, summed over a period: GPU-hours, GiB-hours and slice-hours per team, user,
host, model or job, from the ledger's records (journal and archives alike).

A hold is an `alloc` record until the record that closes it (`release` of its id, `expire`
naming it), or until its `expires` time when that comes first (an expired hold stopped
holding at its expiry, whenever the expiry was recorded), or until now while it is open.
Each of its slices counts as the slice was when the hold began: the slice map is replayed
from `slices` records (each replaces the slices of its hosts) in seq order.

Per slice and hour held:

- gpu_hours: the slice's share of its card: memory_mib / gpu_memory_mib where the card's
  memory is known (MIG instances: a 1g.10gb on an 80 GB card is ~1/8), else 1 (a whole card);
- gib_hours: memory_mib / 1024 (a 1g.10gb for an hour ~ 10, a whole H100 ~ 80);
- slice_hours: 1.

`holds` counts the holds that overlap the period (in a row: those with a slice in it).
Only the part of a hold inside [since, until] counts.

Pure: records in, rows out. `Meter` streams (it keeps only open holds and the slice map);
`usage()` is the same over a list. Reading the files is gpupoolctl.ledger.history's.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from gpupoolctl.errors import UsageError

KEYS = ("team", "user", "host", "model", "job")
DEFAULT_BY = ("team", "user")
MEASURES = ("gpu_hours", "gib_hours", "slice_hours", "holds")
NONE = "-"  # a key that is empty or missing (a hold without a team, a slice without a model)


def check_by(by: Sequence[str] | None) -> tuple[str, ...]:
    """`--by` values -> the keys in the order given (duplicates dropped); default team, user."""
    if not by:
        return DEFAULT_BY
    unknown = [name for name in by if name not in KEYS]
    if unknown:
        raise UsageError(f"bad --by {unknown[0]!r}: use {', '.join(KEYS)}")
    return tuple(dict.fromkeys(by))


def seconds(ts: str) -> float:
    """A journal time (fixed-width UTC text) -> seconds since the epoch."""
    return datetime.fromisoformat(ts).timestamp()


def gpu_share(entry: dict[str, Any]) -> float:
    """How much of a card one slice is: memory over the card's memory when the card's is
    known, else 1 (a whole card, or a slice whose card is not described)."""
    memory = _number(entry.get("memory_mib"))
    card = _number(entry.get("gpu_memory_mib"))
    if memory > 0 and card > 0:
        return min(memory / card, 1.0)
    return 1.0


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _text(value: Any) -> str:
    return str(value) if value not in (None, "") else NONE


@dataclass(frozen=True)
class _Slice:
    host: str
    model: str
    share: float  # of its card
    gib: float


def _slice_of(slice_id: str, entry: dict[str, Any] | None) -> _Slice:
    if entry is None:  # unknown when it was taken: a card of unknown memory on its host
        return _Slice(slice_id.split("/", 1)[0] or NONE, NONE, 1.0, 0.0)
    return _Slice(
        _text(entry.get("host")),
        _text(entry.get("model")),
        gpu_share(entry),
        _number(entry.get("memory_mib")) / 1024,
    )


@dataclass
class _Hold:
    id: str
    user: str
    team: str
    job: str
    start: float
    expires: float | None
    slices: list[_Slice]


@dataclass
class Usage:
    by: tuple[str, ...]
    since: str | None  # None: from the start of what is known
    until: str
    rows: list[dict[str, Any]]  # the keys of `by`, then MEASURES; sorted by the keys
    total: dict[str, Any]  # MEASURES over all rows (holds: each hold once)
    # Set when history before a seq is not known (archives gone): holds that ended at or
    # before `known_after_seq` are not counted.
    known_after_seq: int | None = None
    warnings: list[str] = field(default_factory=list)


class Meter:
    """Feed records in seq order (after `start`); `result()` sums what was held.

    `since`/`until`/`now` are journal time texts; `since_seq` starts the period at the time
    of the first record at or after that seq. Holds still open end at `now` (and the period
    at `until`, when given, else at `now`).
    """

    def __init__(
        self,
        *,
        now: str,
        by: Sequence[str] | None = None,
        since: str | None = None,
        since_seq: int | None = None,
        until: str | None = None,
    ) -> None:
        self.by = check_by(by)
        self.now = now
        self._now = seconds(now)
        self.until = until if until is not None else now
        self._until = min(seconds(self.until), self._now) if until is not None else self._now
        self.since = since
        self._since: float | None = seconds(since) if since is not None else None
        self.since_seq = since_seq
        self._waiting_for_seq = since_seq is not None and since is None
        self.start(None, 0)

    # -- input ----------------------------------------------------------------------------

    def start(self, state: dict[str, Any] | None, seq: int) -> None:
        """Begin (again) from a snapshot's state at `seq`, or from nothing (None, 0). What
        was summed before is dropped: a reader that finds history incomplete starts over."""
        self.known_after_seq = seq if state is not None else None
        self._sums: dict[tuple[str, ...], list[float]] = {}
        self._count = 0
        self._open: dict[str, _Hold] = {}
        self.slices: dict[str, dict[str, Any]] = {}
        self._parts: dict[str, _Slice] = {}  # what each slice of the map counts for
        if self._waiting_for_seq:
            self._since = None
        if state is None:
            return
        self.slices = {str(s["id"]): dict(s) for s in state.get("slices", [])}
        if self._waiting_for_seq and self.since_seq is not None and self.since_seq <= seq:
            # The period starts in history that is gone: from what is known.
            self._waiting_for_seq = False
        for alloc in state.get("allocations", []):
            # An open hold's own record is gone, but the snapshot kept what it said.
            self._opened(
                alloc.get("id"),
                alloc.get("owner"),
                alloc.get("slices"),
                alloc.get("expires"),
                alloc.get("request"),
                str(alloc.get("created") or ""),
            )

    def feed(self, record: dict[str, Any]) -> None:
        op = record.get("op")
        if self._waiting_for_seq and record.get("seq", 0) >= (self.since_seq or 0):
            self._waiting_for_seq = False
            self._since = seconds(record["ts"])
        try:
            if op == "slices":
                self._slices(record["data"])
            elif op == "alloc":
                data = record["data"]
                self._opened(
                    data.get("id"),
                    data.get("owner"),
                    data.get("slices"),
                    data.get("expires"),
                    data.get("request"),
                    record["ts"],
                )
            elif op == "release":
                self._closed(record["data"].get("id"), record["ts"])
            elif op == "expire":
                for alloc_id in record["data"].get("ids") or []:
                    self._closed(alloc_id, record["ts"])
        except (KeyError, TypeError, ValueError, AttributeError):
            pass  # a malformed record: replay notes it (ledger verify); it holds nothing here

    def _slices(self, data: dict[str, Any]) -> None:
        hosts = set(data["hosts"])
        kept = {k: v for k, v in self.slices.items() if v.get("host") not in hosts}
        for entry in data["slices"]:
            kept[str(entry["id"])] = entry
        self.slices = kept
        self._parts = {}

    def _opened(
        self,
        alloc_id: Any,
        owner: Any,
        slice_ids: Any,
        expires: Any,
        request: Any,
        ts: str,
    ) -> None:
        alloc_id = str(alloc_id)
        if alloc_id in self._open or not ts:
            return  # recorded twice: replay keeps the first
        request = request if isinstance(request, dict) else {}
        ids = [str(s) for s in slice_ids or []]
        self._open[alloc_id] = _Hold(
            id=alloc_id,
            user=_text(owner),
            team=_text(request.get("team")),
            job=_text(request.get("job")),
            start=seconds(ts),
            expires=seconds(expires) if isinstance(expires, str) and expires else None,
            slices=[self._part(s) for s in ids],
        )

    def _part(self, slice_id: str) -> _Slice:
        part = self._parts.get(slice_id)
        if part is None:
            part = self._parts[slice_id] = _slice_of(slice_id, self.slices.get(slice_id))
        return part

    def _closed(self, alloc_id: Any, ts: str) -> None:
        hold = self._open.pop(str(alloc_id), None)
        if hold is not None:
            self._count_hold(hold, seconds(ts))

    # -- sums -----------------------------------------------------------------------------

    def _count_hold(self, hold: _Hold, end: float) -> None:
        if self._waiting_for_seq:
            return  # ended before the record that starts the period
        if hold.expires is not None:
            end = min(end, hold.expires)
        end = max(end, hold.start)  # clocks of two writers may disagree a little
        lo = hold.start if self._since is None else max(hold.start, self._since)
        hi = min(end, self._until)
        if hi < lo or (hi == lo and end > hold.start):
            return  # outside the period (a hold of no length counts where it lies)
        hours = (hi - lo) / 3600
        self._count += 1
        rows: set[tuple[str, ...]] = set()
        for part in hold.slices:
            key = tuple(self._key(name, hold, part) for name in self.by)
            sums = self._sums.setdefault(key, [0.0, 0.0, 0.0, 0])
            sums[0] += hours * part.share
            sums[1] += hours * part.gib
            sums[2] += hours
            if key not in rows:
                rows.add(key)
                sums[3] += 1

    @staticmethod
    def _key(name: str, hold: _Hold, part: _Slice) -> str:
        if name == "team":
            return hold.team
        if name == "user":
            return hold.user
        if name == "job":
            return hold.job
        if name == "host":
            return part.host
        return part.model

    def result(self) -> Usage:
        """The sums, with the holds still open counted up to now (not closing them: more
        records may follow)."""
        saved = {k: list(v) for k, v in self._sums.items()}
        count = self._count
        for hold in self._open.values():
            self._count_hold(hold, self._now)
        rows = []
        total: dict[str, Any] = {"gpu_hours": 0.0, "gib_hours": 0.0, "slice_hours": 0.0}
        for key in sorted(self._sums):
            gpu, gib, slice_hours, holds = self._sums[key]
            rows.append(
                {
                    **dict(zip(self.by, key, strict=True)),
                    "gpu_hours": gpu,
                    "gib_hours": gib,
                    "slice_hours": slice_hours,
                    "holds": int(holds),
                }
            )
            total["gpu_hours"] += gpu
            total["gib_hours"] += gib
            total["slice_hours"] += slice_hours
        total["holds"] = self._count
        self._sums, self._count = saved, count
        since = self.since
        if since is None and self._since is not None:  # from --since SEQ: that record's time
            from gpupoolctl.ledger.units import format_ts

            since = format_ts(datetime.fromtimestamp(self._since, UTC))
        warnings = []
        if self.known_after_seq is not None:
            warnings.append(
                f"usage before seq {self.known_after_seq + 1} is not known (the archives "
                "before it are gone): holds that ended before it are not counted"
            )
        return Usage(
            by=self.by,
            since=since,
            until=self.until,
            rows=rows,
            total=total,
            known_after_seq=self.known_after_seq,
            warnings=warnings,
        )


def usage(
    records: Iterable[dict[str, Any]],
    *,
    now: str,
    by: Sequence[str] | None = None,
    since: str | None = None,
    since_seq: int | None = None,
    until: str | None = None,
    state: dict[str, Any] | None = None,
    state_seq: int = 0,
) -> Usage:
    """`Meter` over records already at hand, from `state` (a snapshot's) or from nothing."""
    meter = Meter(now=now, by=by, since=since, since_seq=since_seq, until=until)
    if state is not None:
        meter.start(state, state_seq)
    for record in records:
        meter.feed(record)
    return meter.result()


def measure(
    ledger: Any,
    *,
    now: str,
    by: Sequence[str] | None = None,
    since: str | None = None,
    since_seq: int | None = None,
    until: str | None = None,
) -> Usage:
    """Usage over everything `ledger` (a Ledger) still has: its archives and its journal,
    streamed through a `Meter` (history.replay_ledger). Warnings of both are returned."""
    from gpupoolctl.ledger.history import replay_ledger

    meter = Meter(now=now, by=by, since=since, since_seq=since_seq, until=until)
    read_warnings = replay_ledger(ledger, meter)
    result = meter.result()
    result.warnings = [*read_warnings, *result.warnings]
    return result
