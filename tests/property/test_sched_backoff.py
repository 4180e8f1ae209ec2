"""A restart's back-off in the one scheduler (sched.schedule_pass with `now` as the clock):
an entry whose not_before has not come is only waiting (never placed, never a reason to
preempt, reserve or re-cut), and the rest of the queue is decided exactly as if it were not
there; once its time has come it is an entry like any other."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.sched import QueueEntry, schedule_pass
from tests.property.test_elastic_properties import NOW, SETTINGS, cases, view


def ids(pairs: list[tuple[QueueEntry, Any]]) -> list[tuple[str, Any]]:
    return [(e.id, getattr(x, "slices", getattr(x, "reason", None))) for e, x in pairs]


def decided(result: Any) -> dict[str, Any]:
    return {
        "placed": ids(result.placed),
        "waiting": ids(result.waiting),
        "never": ids(result.never),
        "reserved_for": result.reserved_for,
        "preempt": (result.preempt[0].id, result.preempt[1]) if result.preempt else None,
        "recuts": [(r.card.key, r.after, r.jobs) for r in result.recuts],
    }


@SETTINGS
@given(cases(), st.data())
def test_entries_in_backoff_only_wait_and_change_nothing_else(case: dict, data: Any) -> None:
    entries: list[QueueEntry] = case["entries"]
    # Each entry: no back-off, one that has passed (or ends now), or one still running.
    offsets = [data.draw(st.sampled_from([None, -30, 0, 1, 10, 300])) for _ in entries]
    marked = [
        dataclasses.replace(e, not_before=None if o is None else NOW + timedelta(seconds=o))
        for e, o in zip(entries, offsets, strict=True)
    ]
    backing_off = {e.id for e, o in zip(entries, offsets, strict=True) if o is not None and o > 0}
    result = schedule_pass(marked, view(case), NOW, preempt=case["preempt"], elastic=case["inputs"])
    for entry, nofit in result.waiting:
        if entry.id in backing_off:
            left = (entry.not_before - NOW).total_seconds()
            assert nofit.reason == f"restarting in {int(left)}s (backoff)" and not nofit.never
    assert not backing_off & {e.id for e, _ in result.placed}
    assert not backing_off & {e.id for e, _ in result.never}
    assert not backing_off & set(result.reserved_for)
    assert result.preempt is None or result.preempt[0].id not in backing_off
    jobs_of = {e.job or e.id: e.id for e in entries}
    assert not backing_off & {jobs_of.get(j) for r in result.recuts for j in r.jobs}
    if result.preempt is None:  # a pass that stops at a preemption leaves the rest undecided
        assert backing_off <= {e.id for e, _ in result.waiting}
    # The others: decided as if the entries in back-off were not queued at all, and an entry
    # whose back-off has passed as one that never had any.
    rest = [dataclasses.replace(e, not_before=None) for e in marked if e.id not in backing_off]
    alone = schedule_pass(rest, view(case), NOW, preempt=case["preempt"], elastic=case["inputs"])
    got = decided(result)
    got["waiting"] = [w for w in got["waiting"] if w[0] not in backing_off]
    assert got == decided(alone)


@given(st.integers(1, 600), st.integers(0, 700))
def test_the_entry_waits_until_its_time_and_then_is_placed(backoff: int, later: int) -> None:
    from gpupoolctl.sched import JobRequest, PoolView

    slices = [{"id": "n1/gpu0", "host": "n1", "gpu": 0, "kind": "gpu", "memory_mib": 40960}]
    entry = QueueEntry(
        id="q-1",
        priority=50,
        seq=1,
        enqueued=NOW,
        request=JobRequest(),
        job="j-1",
        not_before=NOW + timedelta(seconds=backoff),
    )
    result = schedule_pass([entry], PoolView(slices), NOW + timedelta(seconds=later))
    if later < backoff:
        assert result.placed == [] and [e.id for e, _ in result.waiting] == ["q-1"]
        assert result.waiting[0][1].reason == f"restarting in {backoff - later}s (backoff)"
    else:
        assert [e.id for e, _ in result.placed] == ["q-1"]
