"""A job's allocation ends with the job: never by `release`, never twice, and verify sees a
slice that two live holders share (the double booking an older version allowed)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, LedgerError
from gpupoolctl.sched import JobRequest

from .test_ledger_ops import Clock, make_slices

SLICE = "n1/gpu1/mig-1g.10gb@0"


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = Ledger(tmp_path / "ledger.jsonl", durable=False, actor="tester@box", clock=Clock())
    led.refresh_slices(["n1"], make_slices())
    return led


def place_job(led: Ledger, job_id: str, alloc_id: str, slice_id: str = SLICE) -> None:
    """What a schedule pass writes when it places a job: alloc + job pending, then running."""

    def build(tx):
        tx.append("alloc", {"id": alloc_id, "owner": "ann", "slices": [slice_id]})
        nodes = [{"host": "n1", "node_id": job_id, "slices": [slice_id]}]
        tx.append("job", {"id": job_id, "state": "pending", "alloc": alloc_id, "nodes": nodes})
        tx.append("job", {"id": job_id, "state": "running"})

    led.write(build)


def test_release_refuses_a_running_jobs_allocation_and_names_the_job(ledger):
    place_job(ledger, "j-1", "a-1")
    with pytest.raises(LedgerError, match=r"a-1 is the allocation of running job j-1.*cancel j-1"):
        ledger.release("a-1")
    state = ledger.read().state
    assert state.holders[SLICE] == "a-1"
    # nothing was written: the next hand-taken alloc cannot land on the job's slice
    taken = hold(ledger, JobRequest(profile="1g.10gb"), owner="bob").value
    assert SLICE not in taken.slices


def test_release_still_ends_a_hand_taken_allocation(ledger):
    held = hold(ledger, JobRequest(profile="1g.10gb"), owner="bob").value
    assert ledger.release(held.id).value.id == held.id
    assert held.id not in ledger.read().state.allocations


def test_a_job_ending_after_its_allocation_is_gone_writes_no_release(ledger):
    """A ledger an older version wrote (the allocation released by hand while its job ran):
    the job's end must not add a release of what is not held, which never verifies again."""
    place_job(ledger, "j-1", "a-1")
    ledger.write(lambda tx: tx.append("release", {"id": "a-1"}))  # the old `release`

    def end(tx):
        released = tx.release("a-1")
        tx.append("job", {"id": "j-1", "state": "cancelled"})
        return released

    assert ledger.write(end).value is False
    assert ledger.verify().ok


def test_tx_release_skips_an_allocation_that_expires_in_the_same_transaction(tmp_path):
    clock = Clock()
    led = Ledger(tmp_path / "l.jsonl", durable=False, actor="t@b", clock=clock)
    led.refresh_slices(["n1"], make_slices())
    held = hold(led, JobRequest(profile="1g.10gb"), owner="bob", ttl=timedelta(minutes=5)).value
    clock.now = datetime(2025, 6, 1, 13, 0, tzinfo=UTC)
    done = led.write(lambda tx: tx.release(held.id))
    assert done.value is False
    assert [r["op"] for r in done.records] == []
    led.write(lambda tx: tx.append("job", {"id": "j-9", "state": "queued"}))  # writes expiry
    assert led.verify().ok


def test_verify_finds_a_slice_used_by_a_job_and_held_by_another_allocation(ledger):
    place_job(ledger, "j-1", "a-1")
    ledger.write(lambda tx: tx.append("release", {"id": "a-1"}))  # the old `release`
    place_job(ledger, "j-2", "a-2")  # the next submit lands on the same slice
    report = ledger.verify()
    kinds = {(p.kind, p.where) for p in report.problems}
    assert ("double-hold", SLICE) in kinds
    assert ("job", "j-1") in kinds
    message = next(p.message for p in report.problems if p.kind == "double-hold")
    assert "j-1" in message and "a-2" in message


def test_verify_names_every_holder_of_a_slice_over_capacity_once(ledger):
    """Two jobs placed on one slice (records an older version could write): one problem for
    the slice, naming both jobs and their allocations, not one per way of seeing it."""
    place_job(ledger, "j-1", "a-1")
    place_job(ledger, "j-2", "a-2")  # a-1 still holds it
    report = ledger.verify()
    found = [p for p in report.problems if p.kind == "double-hold"]
    assert [(p.where, p.message) for p in found] == [
        (SLICE, "held by j-1 (a-1), j-2 (a-2) at once")
    ]


def test_repair_records_history_problems_as_known_and_keeps_the_records(ledger):
    place_job(ledger, "j-1", "a-1")
    ledger.write(lambda tx: tx.append("release", {"id": "a-1"}))
    ledger.write(lambda tx: tx.append("release", {"id": "a-1"}))  # what the old cancel wrote
    ledger.write(lambda tx: tx.append("job", {"id": "j-1", "state": "cancelled"}))
    before = ledger.verify()
    assert [p.kind for p in before.problems] == ["history"]
    seq = int(before.problems[0].where.removeprefix("seq "))

    result = ledger.repair().value
    assert [p["seq"] for p in result.acknowledged] == [seq]
    assert ledger.verify().ok
    ops = [r["op"] for r in ledger.history().records]
    assert ops.count("release") == 2 and ops[-1] == "repair"
    # and it survives a compaction (the snapshot keeps no acknowledged problem)
    ledger.compact()
    assert ledger.verify().ok
    assert ledger.repair().value.acknowledged == []


def test_repair_leaves_records_it_cannot_read_reported(ledger):
    """A newer version's op may hold slices: repair must not call it known."""
    ledger.write(lambda tx: tx.append("hold", {"id": "x-1", "slices": [SLICE]}))
    ledger.write(lambda tx: tx.append("release", {"id": "a-99"}))
    assert ledger.repair().value.acknowledged == [
        {"seq": 3, "message": "release of a-99, which is not held"}
    ]
    left = [p.message for p in ledger.verify().problems]
    assert len(left) == 1 and "unknown op 'hold'" in left[0]
