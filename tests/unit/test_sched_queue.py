"""Queue order, aging, schedule passes, and preemption choices on small pools."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from gpupoolctl.ledger.state import State
from gpupoolctl.sched import (
    Holder,
    JobRequest,
    PoolView,
    QueueEntry,
    choose_preemption,
    effective_priority,
    order_queue,
    queue_entries,
    schedule_pass,
)

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)


def entry(name: str, priority: int, seq: int, minutes: float = 0, **request) -> QueueEntry:
    return QueueEntry(
        id=name,
        priority=priority,
        seq=seq,
        enqueued=T0 + timedelta(minutes=minutes),
        request=JobRequest(priority=priority, **request),
        job=f"j-{name}",
    )


def cards(host: str, count: int) -> list[dict]:
    return [
        {
            "id": f"{host}/gpu{g}",
            "host": host,
            "gpu": g,
            "kind": "gpu",
            "profile": None,
            "memory_mib": 81920,
            "island": f"{host}/island0",
        }
        for g in range(count)
    ]


def test_priority_then_fifo_then_aging():
    queue = [entry("a", 10, 1), entry("b", 90, 2), entry("c", 50, 3), entry("d", 90, 4)]
    assert [e.id for e in order_queue(queue, T0)] == ["b", "d", "c", "a"]
    # 80 minutes on (+1 per 2 minutes): b and d are at the cap, `c` (50 + 40) ties a
    # fresh high entry and goes first, having come first
    later = T0 + timedelta(minutes=80)
    fresh = entry("e", 90, 5, minutes=80)
    assert [e.id for e in order_queue([*queue, fresh], later)] == ["b", "d", "c", "e", "a"]
    assert effective_priority(queue[0], T0 + timedelta(hours=10)) == 100  # capped


def test_entries_come_from_the_ledger_queue():
    state = State()
    state.queue["q-3"] = {
        "id": "q-3",
        "owner": "bob",
        "priority": 90,
        "job": "j-3",
        "seq": 3,
        "ts": "2025-06-01T12:00:00.000Z",
        "request": {**JobRequest(gpus=2, priority=90).to_dict(), "job": "j-3"},
    }
    (only,) = queue_entries(state)
    assert (only.id, only.priority, only.seq, only.job, only.enqueued) == ("q-3", 90, 3, "j-3", T0)
    assert only.request.gpus == 2


def test_a_pass_backfills_but_stops_at_a_starving_entry():
    view = PoolView(cards("a", 2))
    queue = [
        entry("big", 50, 1, gpus=3),  # never fits on 2 cards
        entry("two", 50, 2, gpus=2),
        entry("one", 50, 3),
    ]
    result = schedule_pass(queue, view, T0)
    assert [e.id for e, _ in result.placed] == ["two"]
    assert [e.id for e, _ in result.never] == ["big"]
    assert [e.id for e, _ in result.waiting] == ["one"]
    # a fully aged entry that does not fit keeps every slice it could use: backfill only
    # goes to slices it could never use (here: the small card)
    small_card = {**cards("b", 1)[0], "memory_mib": 10000}
    view = PoolView([*cards("a", 2), small_card], [Holder(alloc="x", slices=("a/gpu0",))])
    queue = [
        entry("old", 10, 1, minutes=-600, gpus=2, memory_mib=40000),
        entry("big", 50, 2, memory_mib=40000),
        entry("small", 50, 3, memory_mib=5000),
    ]
    result = schedule_pass(queue, view, T0)
    assert result.reserved_for == ["old"]
    assert [e.id for e, p in result.placed] == ["small"] and result.placed[0][1].hosts == ["b"]
    assert [e.id for e, _ in result.waiting] == ["old", "big"]
    assert set(view.free) == {"a/gpu1"}  # the reservation ends with the pass


def test_preemption_takes_the_fewest_cheapest_eligible_victims():
    view = PoolView(
        cards("a", 4),
        [
            Holder(
                alloc="a-1",
                slices=("a/gpu0",),
                job="j-1",
                priority=10,
                preemptible=True,
                since="2025-06-01T10:00:00.000Z",
            ),
            Holder(
                alloc="a-2",
                slices=("a/gpu1",),
                job="j-2",
                priority=10,
                preemptible=True,
                since="2025-06-01T11:00:00.000Z",
            ),
            Holder(
                alloc="a-3", slices=("a/gpu2", "a/gpu3"), job="j-3", priority=50, preemptible=True
            ),
        ],
    )
    # one card: the youngest of the cheapest (lowest priority) goes
    assert choose_preemption(JobRequest(priority=90), view, T0) == ["j-2"]
    # two cards: one victim holding two beats two victims holding one each
    assert choose_preemption(JobRequest(gpus=2, priority=90), view, T0) == ["j-3"]
    # equal priority is never preempted; nothing fits -> None
    assert choose_preemption(JobRequest(gpus=2, priority=50), view, T0) == ["j-1", "j-2"]
    assert choose_preemption(JobRequest(priority=10), view, T0) is None
    assert choose_preemption(JobRequest(gpus=5, priority=100), view, T0) is None
    assert len(view.free) == 0  # the view is left as it was


def test_no_preemption_needed_and_non_job_holds_are_safe():
    view = PoolView(cards("a", 2), [Holder(alloc="a-1", slices=("a/gpu0",))])
    assert choose_preemption(JobRequest(priority=100), view, T0) == []
    assert choose_preemption(JobRequest(gpus=2, priority=100), view, T0) is None
