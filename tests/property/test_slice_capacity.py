"""A slice's capacity is one rule (hw.slice.within_capacity): the pool view, the ledger's state
and `ledger verify` ask it and agree. Today it is one holder per slice."""

from __future__ import annotations

import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.hw.slice import Capacity, capacity, within_capacity
from gpupoolctl.ledger import Ledger, LedgerError
from gpupoolctl.sched import Holder, PoolView

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
SLICES: list[dict[str, Any]] = [
    {"id": "n1/gpu0", "host": "n1", "gpu": 0, "kind": "gpu", "memory_mib": 81920},
    {"id": "n1/gpu1/mig-1g.10gb@0", "host": "n1", "gpu": 1, "kind": "mig", "memory_mib": 9984},
    {"id": "n1/gpu1/mig-1g.10gb@1", "host": "n1", "gpu": 1, "kind": "mig", "memory_mib": 9984},
    {"id": "n1/gpu2/cpx-nps4", "host": "n1", "gpu": 2, "kind": "partition", "memory_mib": 24576},
]
IDS = [s["id"] for s in SLICES]
# Holds asked for one after another: each a few slice ids, perhaps already held.
attempts = st.lists(st.lists(st.sampled_from(IDS), min_size=1, max_size=3, unique=True), max_size=8)


def fresh_ledger(folder: str) -> Ledger:
    ledger = Ledger(Path(folder) / "l.jsonl", durable=False, actor="t@h", clock=lambda: T0)
    ledger.refresh_slices(["n1"], SLICES)
    return ledger


def test_a_slice_takes_one_holder_who_holds_all_of_its_memory() -> None:
    entry = SLICES[1]
    assert capacity(entry) == Capacity(holders=1, memory_mib=9984)
    assert within_capacity(entry, 0) and within_capacity(entry, 1)
    assert not within_capacity(entry, 2)
    assert capacity(None).holders == 1  # a slice the ledger does not know: one holder too


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attempts)
def test_view_state_and_ledger_agree_a_slice_at_capacity_takes_no_holder(
    holds: list[list[str]],
) -> None:
    with tempfile.TemporaryDirectory() as folder:
        ledger = fresh_ledger(folder)
        view = PoolView(SLICES)
        held: dict[str, int] = {}
        for n, ids in enumerate(holds):
            state = ledger.read().state
            now = "2025-06-01T12:00:00.000Z"
            expected = all(within_capacity(SLICES[IDS.index(s)], held.get(s, 0) + 1) for s in ids)
            assert all(view.has_room(s) for s in ids) == expected
            assert all(state.has_room(s, now) for s in ids) == expected
            try:
                view.hold(ids, Holder(alloc=f"v-{n}", slices=tuple(ids)))
                by_view = True
            except ValueError:
                by_view = False
            try:
                ledger.alloc(lambda _state, _now, ids=ids: ids, owner="ann")
                by_ledger = True
            except LedgerError as refused:
                assert "is held by" in str(refused)
                by_ledger = False
            assert by_view == by_ledger == expected
            if expected:
                for s in ids:
                    held[s] = held.get(s, 0) + 1
        # What was taken never exceeds a capacity, in the view or in the ledger.
        assert all(within_capacity(SLICES[IDS.index(s)], n) for s, n in held.items())
        assert {s for s in IDS if not view.is_free(s)} == set(held)
        report = ledger.verify()
        assert report.ok, report.problems


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(attempts)
def test_verify_flags_exactly_the_slices_held_beyond_their_capacity(
    holds: list[list[str]],
) -> None:
    """Records written past the check (an older version, a hand-edited journal): replay
    notes each one that found no room, and verify names every slice over its capacity."""
    with tempfile.TemporaryDirectory() as folder:
        ledger = fresh_ledger(folder)
        for n, ids in enumerate(holds):
            record = {"id": f"a-x{n}", "owner": "ann", "slices": ids}
            ledger.write(lambda tx, record=record: tx.append("alloc", record))
        named: dict[str, int] = {}
        for ids in holds:
            for s in ids:
                named[s] = named.get(s, 0) + 1
        over = {s for s, n in named.items() if not within_capacity(SLICES[IDS.index(s)], n)}
        report = ledger.verify()
        assert {p.where for p in report.problems if p.kind == "double-hold"} == over
        history = [p.message for p in report.problems if p.kind == "history"]
        assert len(history) == sum(n - 1 for n in named.values() if n > 1)
        # The view built from that state still never shows a slice held twice.
        view = PoolView.from_state(ledger.read().state, T0)
        assert {s for s in IDS if view.holder(s) is not None} == set(named)


@pytest.mark.parametrize("slices_of", [lambda ids: ids, lambda ids: list(reversed(ids))])
def test_the_view_refuses_a_hold_on_a_slice_taken_without_a_holder(slices_of: Any) -> None:
    """A slice kept (for a re-cut) or picked tentatively has no room for a holder."""
    view = PoolView(SLICES)
    view.keep([IDS[0]], "kept to be cut")
    assert not view.has_room(IDS[0]) and view.has_room(IDS[1])
    with pytest.raises(ValueError, match=IDS[0]):
        view.hold(slices_of(IDS[:2]), Holder(alloc="a-1", slices=tuple(IDS[:2])))
    assert view.is_free(IDS[1])  # nothing of a refused hold is taken
