"""Usage equals the hold intervals of the history that made the ledger, however it was
compacted.

Random histories (slice refreshes, allocs with teams and time-to-lives, releases, time passing,
compactions, reopened ledgers, a journal that compacts itself every few records) go through
the real Ledger API with a fake clock. The model below keeps the intervals itself: a hold
runs from its alloc until its release, or its expiry when that came first, or now; each slice
counts as it was when taken. `usage` read from the files (archives + journal) must give the
same per-team sums, before and after a final compaction, and over a random period.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from gpupoolctl.ledger import Ledger, LedgerError
from gpupoolctl.ledger.units import format_ts
from gpupoolctl.ledger.usage import measure

T0 = datetime(2025, 6, 1, tzinfo=UTC)
HOSTS = ("h1", "h2")
# (kind, memory_mib, card memory or None): whole cards of two sizes and MIG cuts of both
SHAPES = [
    ("gpu", 81920, None),
    ("gpu", 40960, None),
    ("mig", 10240, 81920),
    ("mig", 20480, 40960),
    ("mig", 40960, 81920),
]
TEAMS = ["ml", "vision", "", None]


def host_slices(host: str, shape: list[int]) -> list[dict]:
    out = []
    for i, pick in enumerate(shape):
        kind, memory, card = SHAPES[pick]
        entry = {
            "id": f"{host}/gpu{i}" + (f"/mig-{memory}" if kind == "mig" else ""),
            "host": host,
            "gpu": i,
            "kind": kind,
            "model": "H100" if (card or memory) == 81920 else "A100",
            "memory_mib": memory,
            "uuid": f"{host}-{i}-{pick}",
        }
        if card:
            entry["gpu_memory_mib"] = card
        out.append(entry)
    return out


@dataclass
class Hold:
    team: str
    slices: list[dict]
    start: datetime
    expires: datetime | None
    end: datetime | None = None  # released at


@dataclass
class Model:
    now: datetime = T0
    slices: dict[str, dict] = field(default_factory=dict)
    holds: dict[str, Hold] = field(default_factory=dict)

    def live(self, alloc_id: str) -> bool:
        hold = self.holds[alloc_id]
        return hold.end is None and (hold.expires is None or hold.expires > self.now)

    def held_slices(self) -> set[str]:
        return {s["id"] for k, h in self.holds.items() if self.live(k) for s in h.slices}

    def per_team(self, since: datetime | None = None, until: datetime | None = None) -> dict:
        sums: dict[str, list[float]] = {}
        lo_bound = since or datetime.min.replace(tzinfo=UTC)
        hi_bound = min(until or self.now, self.now)
        for hold in self.holds.values():
            end = hold.end or self.now
            if hold.expires is not None:
                end = min(end, hold.expires)
            lo, hi = max(hold.start, lo_bound), min(end, hi_bound)
            if hi <= lo:
                continue
            hours = (hi - lo).total_seconds() / 3600
            team = hold.team or "-"
            row = sums.setdefault(team, [0.0, 0.0])
            for entry in hold.slices:
                card = entry.get("gpu_memory_mib")
                row[0] += hours * (entry["memory_mib"] / card if card else 1.0)
                row[1] += hours * entry["memory_mib"] / 1024
        return {team: tuple(v) for team, v in sums.items() if v != [0.0, 0.0]}


def per_team(found) -> dict:
    out: dict[str, list[float]] = {}
    for row in found.rows:
        sums = out.setdefault(row["team"], [0.0, 0.0])
        sums[0] += row["gpu_hours"]
        sums[1] += row["gib_hours"]
    return {team: tuple(v) for team, v in out.items() if v != [0.0, 0.0]}


def same(got: dict, want: dict) -> bool:
    return got.keys() == want.keys() and all(
        got[k] == pytest.approx(want[k], abs=1e-9) for k in want
    )


alloc_step = st.tuples(
    st.just("alloc"),
    st.integers(1, 2),
    st.sampled_from(["ann", "bob"]),
    st.sampled_from(TEAMS),
    st.sampled_from([None, 20, 90]),
    st.randoms(use_true_random=False),
)
steps = st.lists(
    st.one_of(
        alloc_step,
        st.tuples(st.just("tick"), st.integers(1, 120)),
        st.tuples(st.just("release"), st.integers(0, 30)),
        alloc_step,
        st.tuples(st.just("tick"), st.integers(1, 120)),
        st.tuples(
            st.just("refresh"),
            st.sampled_from(HOSTS),
            st.lists(st.integers(0, len(SHAPES) - 1), max_size=4),
        ),
        st.tuples(st.just("compact")),
        st.tuples(st.just("reopen")),
    ),
    min_size=3,
    max_size=50,
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.lists(st.integers(0, len(SHAPES) - 1), min_size=2, max_size=4), min_size=2, max_size=2
    ),
    steps,
    st.sampled_from([0, 3]),  # 3: the journal compacts itself into archives every 3 records
    st.tuples(st.integers(0, 600), st.integers(0, 600)),
)
def test_usage_per_team_equals_the_hold_intervals(shapes, sequence, autocompact, period):
    model = Model()

    def clock() -> datetime:
        return model.now

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ledger.jsonl"

        def open_ledger() -> Ledger:
            return Ledger(path, durable=False, actor="p@h", clock=clock, autocompact=autocompact)

        ledger = open_ledger()
        ids: list[str] = []
        first = [("refresh", host, shape) for host, shape in zip(HOSTS, shapes, strict=True)]
        for step in first + sequence:
            kind = step[0]
            if kind == "refresh":
                entries = host_slices(step[1], step[2])
                ledger.refresh_slices([step[1]], entries)
                model.slices = {k: v for k, v in model.slices.items() if v["host"] != step[1]} | {
                    e["id"]: e for e in entries
                }
            elif kind == "alloc":
                _, count, owner, team, ttl, rnd = step
                free = sorted(set(model.slices) - model.held_slices())
                if len(free) < count:
                    continue
                chosen = rnd.sample(free, count)
                request = {} if team is None else {"team": team}
                life = timedelta(minutes=ttl) if ttl else None
                try:
                    done = ledger.alloc(
                        lambda _s, _n, picked=chosen: picked, owner=owner, ttl=life, request=request
                    )
                except LedgerError:
                    continue  # the ledger's own reasons (a re-created slice still held): no hold
                ids.append(done.value.id)
                model.holds[done.value.id] = Hold(
                    team=team or "",
                    slices=[dict(model.slices[s]) for s in chosen],
                    start=model.now,
                    expires=model.now + life if life else None,
                )
            elif kind == "release":
                if not ids:
                    continue
                alloc_id = ids[step[1] % len(ids)]
                want = model.live(alloc_id)
                try:
                    ledger.release(alloc_id)
                    got = True
                except LedgerError:
                    got = False
                assert got == want
                if got:
                    model.holds[alloc_id].end = model.now
            elif kind == "tick":
                model.now += timedelta(minutes=step[1])
            elif kind == "compact":
                ledger.compact()
            else:
                ledger = open_ledger()

        now = format_ts(model.now)
        found = measure(ledger, now=now)
        assert found.warnings == []
        assert same(per_team(found), model.per_team())
        assert found.total["holds"] == len(model.holds)  # over all time: every hold
        event(f"holds: {min(len(model.holds), 5)}")
        ledger.compact()
        again = measure(open_ledger(), now=now)
        assert same(per_team(again), model.per_team())
        # Row by row: pytest.approx compares flat mappings, not a list of them.
        assert again.rows == [pytest.approx(row) for row in found.rows]

        a, b = sorted(period)
        since, until = T0 + timedelta(minutes=a), T0 + timedelta(minutes=b)
        clipped = measure(ledger, now=now, since=format_ts(since), until=format_ts(until))
        assert same(per_team(clipped), model.per_team(since, until))
