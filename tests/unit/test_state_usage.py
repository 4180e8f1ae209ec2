"""What the ledger's state remembers of teams' usage (gpupoolctl.ledger.state): the decayed
history fair share weighs (a 7-day half-life), the never-decayed totals the Prometheus
counters read, open holds counted to now and expired ones to their expiry; all of it kept
by the snapshot form and part of equality."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupoolctl.ledger import Ledger, State
from gpupoolctl.ledger.state import FAIR_SHARE_HALF_LIFE_S
from gpupoolctl.ledger.units import format_ts

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
HOUR = 3600.0
WEEK = timedelta(days=7)
# Two 40 GiB slices of one 80 GiB card (half a card each) and a whole 80 GiB card.
SLICES = [
    {"id": "n1/gpu0/a", "host": "n1", "gpu": 0, "kind": "mig", "memory_mib": 40960,
     "gpu_memory_mib": 81920},
    {"id": "n1/gpu0/b", "host": "n1", "gpu": 0, "kind": "mig", "memory_mib": 40960,
     "gpu_memory_mib": 81920},
    {"id": "n1/gpu1", "host": "n1", "gpu": 1, "kind": "gpu", "memory_mib": 81920},
]  # fmt: skip


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def book(tmp_path: Path) -> Ledger:
    clock = Clock()
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, actor="t@h", clock=clock)
    ledger.refresh_slices(["n1"], SLICES)
    return ledger


def hold(
    ledger: Ledger,
    slice_id: str,
    owner: str,
    team: str | None = None,
    ttl: timedelta | None = None,
) -> str:
    request = {"team": team} if team else {}
    done = ledger.alloc(lambda _s, _n: [slice_id], owner=owner, request=request, ttl=ttl)
    return done.value.id


def advance(ledger: Ledger, delta: timedelta) -> None:
    ledger.clock.advance(delta)  # type: ignore[attr-defined]


def now_of(ledger: Ledger) -> str:
    return format_ts(ledger.clock())


def state_of(ledger: Ledger) -> State:
    return ledger.read().state


def test_team_usage_decays_with_a_week_half_life(book: Ledger) -> None:
    assert FAIR_SHARE_HALF_LIFE_S == 7 * 86400
    first = hold(book, "n1/gpu1", "ann", "ml")  # 80 GiB for an hour
    advance(book, timedelta(hours=1))
    book.release(first)
    one_hour = 80 * HOUR  # GiB-seconds
    state = state_of(book)
    assert state.team_usage["ml"] == [pytest.approx(one_hour), now_of(book)]
    assert state.team_history(now_of(book)) == {"ml": pytest.approx(one_hour)}
    # A week after the first ended, the same hold again: the older one weighs half.
    advance(book, WEEK - timedelta(hours=1))
    second = hold(book, "n1/gpu1", "ann", "ml")
    advance(book, timedelta(hours=1))
    book.release(second)
    state = state_of(book)
    assert state.team_usage["ml"][0] == pytest.approx(one_hour * 0.5 + one_hour)
    assert state.team_usage["ml"][1] == now_of(book)
    assert state.team_history(now_of(book))["ml"] == pytest.approx(1.5 * one_hour)
    # And a week later all of it weighs half again; two weeks: a quarter.
    later = format_ts(book.clock() + WEEK)
    assert state.team_history(later)["ml"] == pytest.approx(0.75 * one_hour)
    assert state.team_history(format_ts(book.clock() + 2 * WEEK))["ml"] == pytest.approx(
        0.375 * one_hour
    )
    # The totals never decay: two full hours of 80 GiB, two GPU-hours.
    assert state.usage_totals["ml\tann"] == [pytest.approx(2 * one_hour), pytest.approx(2 * HOUR)]


def test_holds_without_a_team_are_counted_as_dash_and_not_in_the_team_history(
    book: Ledger,
) -> None:
    alloc = hold(book, "n1/gpu0/a", "bob")  # half a card, 40 GiB
    advance(book, timedelta(hours=2))
    book.release(alloc)
    state = state_of(book)
    assert state.team_usage == {}
    assert state.usage_totals == {"-\tbob": [pytest.approx(80 * HOUR), pytest.approx(HOUR)]}
    assert state.usage_counters(now_of(book)) == {
        ("-", "bob"): (pytest.approx(80 * HOUR), pytest.approx(HOUR))
    }


def test_open_holds_count_to_now_and_expired_ones_to_their_expiry(book: Ledger) -> None:
    ended = hold(book, "n1/gpu1", "ann", "ml")
    advance(book, timedelta(hours=1))
    book.release(ended)  # 80 GiB-hours, one GPU-hour
    hold(book, "n1/gpu0/a", "ann", "ml")  # open: 40 GiB, half a card
    hold(book, "n1/gpu0/b", "bob", "ml", ttl=timedelta(minutes=30))  # expires after 30 min
    advance(book, timedelta(hours=2))
    state = state_of(book)  # nothing written since: the expired hold is still in the state
    assert len(state.allocations) == 2
    now = now_of(book)
    counters = state.usage_counters(now)
    assert counters[("ml", "ann")] == (
        pytest.approx(80 * HOUR + 40 * 2 * HOUR),
        pytest.approx(HOUR + 0.5 * 2 * HOUR),
    )
    assert counters[("ml", "bob")] == (pytest.approx(40 * 1800), pytest.approx(0.5 * 1800))
    # Counters: later they have only grown, bob's stays at its expiry.
    later = state.usage_counters(format_ts(book.clock() + timedelta(hours=1)))
    assert later[("ml", "ann")][0] == pytest.approx(counters[("ml", "ann")][0] + 40 * HOUR)
    assert later[("ml", "bob")] == counters[("ml", "bob")]
    # Only holds that ended are in the totals and the team history.
    assert set(state.usage_totals) == {"ml\tann"}
    # The next write records the expiry: counted to the expiry too, not to when it was noticed.
    book.release(next(a for a in state_of(book).allocations))
    state = state_of(book)
    assert state.allocations == {}
    assert state.usage_totals["ml\tbob"] == [pytest.approx(40 * 1800), pytest.approx(0.5 * 1800)]
    assert state.usage_counters(now_of(book)) == {
        ("ml", "ann"): counters[("ml", "ann")],
        ("ml", "bob"): counters[("ml", "bob")],
    }
    # The history decays: the first hold ended two hours before the others were counted.
    assert state.team_history(now_of(book))["ml"] == pytest.approx(
        80 * HOUR * 0.5 ** (2 / (7 * 24)) + 40 * 2 * HOUR + 40 * 1800
    )


def test_usage_survives_the_snapshot_form_and_is_part_of_equality(book: Ledger) -> None:
    first = hold(book, "n1/gpu1", "ann", "ml")
    advance(book, timedelta(hours=3))
    book.release(first)
    second = hold(book, "n1/gpu0/a", "bob")
    advance(book, timedelta(hours=1))
    book.release(second)
    hold(book, "n1/gpu0/b", "carl", "cv")  # still open
    advance(book, timedelta(hours=1))
    state = state_of(book)
    assert state.team_usage and state.usage_totals
    now = now_of(book)
    back = State.from_dict(json.loads(json.dumps(state.to_dict())))  # as a snapshot file is
    assert back == state
    assert back.team_usage == state.team_usage
    assert back.usage_totals == state.usage_totals
    assert back.team_history(now) == state.team_history(now)
    assert back.usage_counters(now) == state.usage_counters(now)
    # Equality sees them: a state that differs only there is another state.
    other = State.from_dict(state.to_dict())
    other.team_usage["ml"] = [other.team_usage["ml"][0] + 1, other.team_usage["ml"][1]]
    assert other != state
    other = State.from_dict(state.to_dict())
    other.usage_totals["-\tbob"] = [0.0, 0.0]
    assert other != state
    # An older snapshot without them reads as no usage yet.
    raw = state.to_dict()
    del raw["team_usage"], raw["usage_totals"]
    old = State.from_dict(raw)
    assert old.team_usage == {} and old.usage_totals == {}


def test_usage_survives_a_compaction(book: Ledger) -> None:
    first = hold(book, "n1/gpu1", "ann", "ml")
    advance(book, timedelta(hours=3))
    book.release(first)
    hold(book, "n1/gpu0/a", "carl", "ml")
    advance(book, timedelta(hours=1))
    before = state_of(book)
    book.compact()
    after = state_of(book)
    now = now_of(book)
    assert after == before
    assert after.team_history(now) == pytest.approx(before.team_history(now))
    assert after.usage_counters(now) == before.usage_counters(now)
