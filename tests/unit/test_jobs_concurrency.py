"""Two processes on one ledger: concurrent schedule passes, and cancel racing a launch.

Each side has its own Ledger object on the same file (its own flock descriptor, as two
processes would), and the interleavings are forced with hooks (a node call that blocks, a
ledger write that lets the other side go first), never with sleeps.
"""

from __future__ import annotations

import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from gpupoolctl.errors import ExitCode
from gpupoolctl.jobs import (
    Jobs,
    JobSpec,
    Nodes,
    cancelling,
    following,
    launching,
    refreshing,
    scheduling,
    submitting,
)
from gpupoolctl.jobs.errors import JobError
from gpupoolctl.jobs.events import Waiting
from gpupoolctl.ledger import Ledger
from gpupoolctl.remote.results import HostResult
from gpupoolctl.remote.target import target_from_vars
from gpupoolctl.sched import JobRequest, place
from tests.unit.test_jobs_service import SLICES, FakeNode, state_of

TARGETS = ("n1", "n2", "n3")
HOSTS = TARGETS[:2]  # the pool of most tests: one whole card on each of two hosts


def cards(hosts: tuple[str, ...]) -> list[dict[str, Any]]:
    return [dict(SLICES[0], id=f"{h}/gpu0", host=h, island=f"{h}/island0") for h in hosts]


class Node(FakeNode):
    """FakeNode that claims job ids as the agent does (a fenced or launched id can never be
    launched again) and can hold the first TERM it gets until the test lets it go on."""

    def __init__(self) -> None:
        super().__init__()
        self.terms: list[str] = []
        self.hold_term = False
        self.in_term = threading.Event()
        self.go_on = threading.Event()
        self.lock = threading.Lock()

    def answer(self, name: str, request: dict[str, Any]) -> HostResult:
        verb, args = request["verb"], request["args"]
        if verb == "launch" and args["job_id"] in self.jobs:
            self.calls.append(verb)
            return HostResult(name, "failed", error="exists", error_type="JobExists")
        if verb == "signal" and args["signal"] == "TERM":
            with self.lock:
                self.terms.append(args["job_id"])
                hold, self.hold_term = self.hold_term, False
            if hold:
                self.in_term.set()
                assert self.go_on.wait(10), "the test never let the held TERM go on"
        return super().answer(name, request)


def jobs_on(path: Path, node: Node, hosts: set[str] | None = None) -> Jobs:
    """A Jobs of its own on the ledger at `path`: what a second process would have."""
    targets = [target_from_vars(h, {"transport": "local"}) for h in TARGETS]
    return Jobs(Ledger(path, durable=False), Nodes(targets, node), owner="alice", hosts=hosts)


@pytest.fixture
def path(tmp_path: Path) -> Path:
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    ledger.refresh_slices(list(HOSTS), cards(HOSTS))
    return ledger.path


def spec(**request: Any) -> JobSpec:
    return JobSpec(argv=["x"], request=JobRequest(profile="gpu", **request), grace_s=1)


def queue_only(jobs: Jobs, job_spec: JobSpec) -> str:
    """Record a job as queued without running a schedule pass (as submit's first step)."""

    def build(tx: Any) -> str:
        job = {"id": f"j-{tx.next_seq}", "owner": "alice", "run": 0, **job_spec.record()}
        tx.append("job", {**job, "state": "queued"})
        jobs.enqueue(tx, job)
        return str(job["id"])

    return str(jobs.ledger.write(build).value)


def preempt_marks(jobs: Jobs, by: str) -> list[str]:
    """Job ids marked to be preempted for `by`, one per mark recorded."""
    records = jobs.ledger.history(ops={"job"}).records
    return [r["data"]["id"] for r in records if (r["data"].get("preempt") or {}).get("by") == by]


# -- two schedule passes ---------------------------------------------------------------------


def second_pass_while_first_stops(node: Node, first: Jobs, second: Jobs) -> tuple[Any, Any]:
    """Run a pass of `first` in a thread and hold it in the first TERM it sends (after its
    victims are marked); meanwhile `second` runs a whole pass (a cron `schedule` next to a
    `submit`). Returns the second pass's outcome, then the first's."""
    outcomes: list[Any] = []

    def run_first() -> None:
        try:
            outcomes.append(scheduling.schedule(first))
        finally:
            node.in_term.set()  # wakes the test also when the first pass stopped nothing

    with node.lock:
        node.hold_term = True
    runner = threading.Thread(target=run_first)
    runner.start()
    assert node.in_term.wait(10)
    with node.lock:
        node.hold_term = False
    try:
        during = scheduling.schedule(second)
    finally:
        node.go_on.set()
        runner.join(10)
    assert not runner.is_alive() and outcomes
    return during, outcomes[0]


@pytest.mark.parametrize("first_hosts", [None, {"n1"}], ids=["same-pool", "first-limited-to-n1"])
def test_two_passes_preempt_at_most_one_set_of_victims_for_one_queued_job(
    path: Path, first_hosts: set[str] | None
) -> None:
    node = Node()
    setup = jobs_on(path, node)
    # Two preemptible low jobs, one per host; the one on n2 is the cheaper victim.
    on_n1 = submitting.submit(setup, spec(host="n1", priority=20, preemptible=True)).job_id
    on_n2 = submitting.submit(setup, spec(host="n2", priority=10, preemptible=True)).job_id
    boss = queue_only(setup, spec(priority=90))  # needs one card: one victim is enough

    during, _ = second_pass_while_first_stops(
        node, jobs_on(path, node, first_hosts), jobs_on(path, node)
    )

    victim = node.terms[0]  # the first pass's (n1's when it sees only n1)
    assert node.terms == [victim]  # one TERM in all: the second pass stopped nothing
    assert preempt_marks(setup, boss) == [victim]  # and marked nothing
    assert [e.kind for e in during.events if getattr(e, "job", None) == boss] == ["waiting"]
    last = during.events[-1]
    assert isinstance(last, Waiting) and "preempted for it" in last.reason
    assert last.code == "victims-stopping"
    survivor = on_n1 if victim == on_n2 else on_n2
    assert state_of(setup, str(survivor))["state"] == "running"
    assert state_of(setup, victim)["state"] == "cancelled"
    assert state_of(setup, boss)["state"] == "running"


@settings(max_examples=20, deadline=None)
@given(
    priorities=st.lists(st.integers(0, 80), min_size=1, max_size=3),
    need=st.integers(1, 3),
    first_hosts=st.sampled_from([None, {"n1"}, {"n2", "n3"}]),
)
def test_concurrent_passes_never_stop_more_than_one_set_for_one_job(
    priorities: list[int], need: int, first_hosts: set[str] | None
) -> None:
    # A pass that sees fewer cards than the job needs would refuse it for good: not this.
    assume(first_hosts is None or len(first_hosts) >= need)
    with tempfile.TemporaryDirectory() as folder:
        node = Node()
        setup = jobs_on(Path(folder) / "ledger.jsonl", node)
        setup.ledger.refresh_slices(list(TARGETS), cards(TARGETS))
        for index, host in enumerate(TARGETS):  # every card held; some preemptible
            held = index < len(priorities)
            priority = priorities[index] if held else 50
            submitting.submit(setup, spec(host=host, priority=priority, preemptible=held))
        boss = queue_only(setup, spec(gpus=need, priority=90))

        path = setup.ledger.path
        during, first = second_pass_while_first_stops(
            node, jobs_on(path, node, first_hosts), jobs_on(path, node)
        )

        marks = preempt_marks(setup, boss)
        assert len(marks) == len(set(marks)) <= need  # nobody marked twice, no extra victim
        assert sorted(node.terms) == sorted(marks)  # each marked job stopped once
        preempting = [o for o in (first, during) if any(e.kind == "preempted" for e in o.events)]
        assert len(preempting) <= 1


def test_one_pass_preempts_every_victim_a_job_needs(path: Path) -> None:
    node = Node()
    jobs = jobs_on(path, node)
    victims = [
        submitting.submit(jobs, spec(host=h, priority=10, preemptible=True)).job_id for h in HOSTS
    ]
    boss = str(submitting.submit(jobs, spec(gpus=2, priority=90)).job_id)
    assert state_of(jobs, boss)["state"] == "running"
    assert sorted(preempt_marks(jobs, boss)) == sorted(victims) == sorted(node.terms)


def test_a_preemption_left_half_done_blocks_a_second_one_until_reaping_ends_it(
    path: Path,
) -> None:
    """A pass that marked its victim and died before signalling it: later passes do not
    pick other victims; reaping kills the marked one once its grace is over, and the job
    starts on its slice."""
    node = Node()
    jobs = jobs_on(path, node)
    victim = str(submitting.submit(jobs, spec(host="n1", priority=10, preemptible=True)).job_id)
    other = str(submitting.submit(jobs, spec(host="n2", priority=20, preemptible=True)).job_id)
    boss = queue_only(jobs, spec(priority=90))
    mark = {"by": boss, "at": time.time() - 60, "grace_s": 1}
    jobs.ledger.write(
        lambda tx: tx.append("job", {"id": victim, "state": "running", "preempt": mark})
    )

    first = refreshing.refresh(jobs)  # kills the overdue victim; the boss still waits for it
    assert [e.kind for e in first.events] == ["waiting"]
    assert node.terms == [] and node.jobs[victim]["state"] == "exited"
    second = refreshing.refresh(jobs)  # records it ended: its slice goes to the boss
    assert [e.kind for e in second.events] == ["started"]
    assert state_of(jobs, boss)["nodes"][0]["host"] == "n1"
    assert state_of(jobs, other)["state"] == "running" and preempt_marks(jobs, boss) == [victim]


# -- cancel against a launch -----------------------------------------------------------------


def place_only(jobs: Jobs, job_id: str) -> dict[str, Any]:
    """What a schedule pass records before it launches: the job is pending, its submitter
    (this process) alive; the launch has not reached the node yet."""

    def build(tx: Any) -> dict[str, Any]:
        job = tx.state.jobs[job_id]
        placed = place(JobRequest(**job["request"]), jobs.pool(tx.state, tx.now), "best-fit")
        (entry_id,) = [q["id"] for q in tx.state.queue.values() if q["job"] == job_id]
        tx.append("dequeue", {"id": entry_id, "reason": "placed"})
        return jobs.record_placed(tx, job, placed)

    return dict(jobs.ledger.write(build).value)


def test_cancel_of_a_pending_job_with_a_live_submitter_wins_over_its_launch(path: Path) -> None:
    node = Node()
    launcher, canceller = jobs_on(path, node), jobs_on(path, node)
    job_id = queue_only(launcher, spec())
    pending = place_only(launcher, job_id)

    cancelled = cancelling.cancel(canceller, job_id)

    assert cancelled["state"] == "cancelled" and cancelled["reason"] == "cancelled"
    assert canceller.ledger.read().state.allocations == {}  # its slice is free again
    # The launcher goes on with the launch it had decided: the node refuses it (the id was
    # claimed by cancel's fencing poll) and the ledger keeps the job cancelled.
    launching.launch(launcher, pending)
    assert node.jobs[job_id].get("fenced") and node.calls.count("launch") == 1
    assert state_of(launcher, job_id)["state"] == "cancelled"
    assert launcher.ledger.read().state.allocations == {}


def test_cancel_of_a_pending_job_that_did_start_stops_it(path: Path) -> None:
    node = Node()
    launcher, canceller = jobs_on(path, node), jobs_on(path, node)
    job_id = queue_only(launcher, spec())
    pending = place_only(launcher, job_id)
    node.jobs[job_id] = {"state": "running", "pid": 4242}  # launched; not recorded yet

    cancelled = cancelling.cancel(canceller, job_id)

    assert cancelled["state"] == "cancelled" and cancelled["exit_code"] == 143
    assert node.terms == [job_id]
    launching._record_launch(
        launcher, pending, [{**pending["nodes"][0], "pid": 4242}], launching._Refused()
    )
    assert state_of(launcher, job_id)["state"] == "cancelled"  # the late record changed nothing
    assert launcher.ledger.read().state.allocations == {}


def test_a_launch_recorded_after_cancel_was_asked_is_stopped_at_once(path: Path) -> None:
    """The node could not be asked when cancel ran (the launch still in flight, say): cancel
    records what was asked, and whoever records the launch stops the job."""
    node = Node()
    launcher, canceller = jobs_on(path, node), jobs_on(path, node)
    job_id = queue_only(launcher, spec())
    pending = place_only(launcher, job_id)
    node.jobs[job_id] = {"state": "starting"}
    canceller.nodes = Nodes([], node)  # every host unknown: the fencing poll cannot answer

    with pytest.raises(JobError, match="when its launch is recorded"):
        cancelling.cancel(canceller, job_id, settle_s=0)
    assert state_of(canceller, job_id)["cancel"]  # asked for, on the pending record

    node.jobs.pop(job_id)
    ran = launching.launch(launcher, pending)
    assert ran["state"] == "cancelled" and node.terms == [job_id]
    assert launcher.ledger.read().state.allocations == {}


def test_a_pass_that_picked_the_job_before_cancel_does_not_launch_it(path: Path) -> None:
    node = Node()
    runner, canceller = jobs_on(path, node), jobs_on(path, node)
    job_id = queue_only(runner, spec())
    real_write = runner.ledger.write

    def cancel_first(build: Any) -> Any:  # the pass has read the queue; cancel comes first
        runner.ledger.write = real_write  # type: ignore[method-assign]
        cancelling.cancel(canceller, job_id)
        return real_write(build)

    runner.ledger.write = cancel_first  # type: ignore[method-assign]
    outcome = scheduling.schedule(runner)

    assert "launch" not in node.calls and outcome.events == []
    assert state_of(runner, job_id)["state"] == "cancelled"
    assert runner.ledger.read().state.allocations == {}


def test_a_waiting_submitter_sees_the_cancel_of_its_queued_job(path: Path) -> None:
    node = Node()
    blocker = jobs_on(path, node)
    for host in HOSTS:  # both cards held: the followed job stays queued until cancelled
        submitting.submit(blocker, spec(host=host))
    waiter, canceller = jobs_on(path, node), jobs_on(path, node)
    job_id = queue_only(waiter, spec())

    def cancel_while_waiting(_: float) -> None:
        if state_of(canceller, job_id)["state"] == "queued":
            cancelling.cancel(canceller, job_id)

    *_, ended = following.follow(waiter, job_id, output=False, sleep=cancel_while_waiting)

    assert isinstance(ended, following.Ended)
    assert ended.job["state"] == "cancelled" and ended.exit_code == int(ExitCode.ERROR)
    assert node.calls.count("launch") == 2  # the two blockers; nothing for the cancelled job


def test_a_waiting_submitter_sees_the_cancel_of_its_pending_job(path: Path) -> None:
    """Placed, its launch not settled (the node did not answer the launcher), the
    submitter following it: cancel from elsewhere ends it, and the follower exits."""
    node = Node()
    waiter, canceller = jobs_on(path, node), jobs_on(path, node)
    job_id = queue_only(waiter, spec())
    place_only(waiter, job_id)
    waiter.nodes = Nodes([], node)  # the waiter cannot reach the node; cancel can

    def cancel_while_waiting(_: float) -> None:
        if state_of(canceller, job_id)["state"] == "pending":
            cancelling.cancel(canceller, job_id)

    *_, ended = following.follow(waiter, job_id, output=False, sleep=cancel_while_waiting)

    assert isinstance(ended, following.Ended)
    assert ended.job["state"] == "cancelled" and ended.exit_code == int(ExitCode.ERROR)
    assert node.jobs[job_id]["fenced"] and "launch" not in node.calls
    assert canceller.ledger.read().state.allocations == {}
