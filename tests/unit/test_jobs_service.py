"""The jobs library against in-memory nodes: launch outcomes, recovery, spec checks."""

from __future__ import annotations

import dataclasses
from datetime import UTC
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.errors import UsageError
from gpupoolctl.jobs import Jobs, JobSpec, NeverFits, Nodes, reaping, submitting
from gpupoolctl.jobs.errors import JobError
from gpupoolctl.jobs.spec import parse_env
from gpupoolctl.ledger import Ledger
from gpupoolctl.remote.results import HostResult
from gpupoolctl.remote.target import target_from_vars
from gpupoolctl.sched import JobRequest, place


class FakeNode:
    """A node's job folders in memory; `launch_answer` decides how launch calls end."""

    def __init__(self) -> None:
        self.jobs: dict[str, dict[str, Any]] = {}
        self.launch_answer = "ok"  # ok | timeout | refuse
        self.calls: list[str] = []

    def __call__(self, requests: list[tuple[Any, dict[str, Any]]]) -> list[HostResult]:
        return [self.answer(target.name, request) for target, request in requests]

    def answer(self, name: str, request: dict[str, Any]) -> HostResult:
        verb, args = request["verb"], request["args"]
        self.calls.append(verb)
        if verb == "launch":
            if self.launch_answer == "refuse":
                return HostResult(name, "failed", error="BadDevices: no", error_type="BadDevices")
            self.jobs[args["job_id"]] = {"state": "running", "pid": 100 + len(self.jobs)}
            if self.launch_answer == "timeout":  # it started, but the answer never came
                return HostResult(name, "timed-out", error="slow", error_type="CommandTimeout")
            return HostResult(name, "ok", data={"pid": self.jobs[args["job_id"]]["pid"]})
        if verb == "poll":
            out = {}
            for job_id in args["job_ids"]:
                if job_id not in self.jobs and args.get("fence"):
                    self.jobs[job_id] = {"state": "absent", "fenced": True}
                out[job_id] = self.jobs.get(job_id, {"state": "absent"})
            return HostResult(name, "ok", data={"jobs": out})
        if verb == "signal":
            self.jobs[args["job_id"]] = {"state": "exited", "exit_code": 143}
            return HostResult(name, "ok", data={"sent": True, "state": "exited"})
        raise AssertionError(verb)


SLICES = [
    {
        "id": f"n1/gpu{i}",
        "host": "n1",
        "gpu": i,
        "kind": "gpu",
        "profile": None,
        "memory_mib": 40960,
        "uuid": f"GPU-{i}",
        "devices": [f"GPU-{i}"],
        "vendor": "nvidia",
        "model": "A100",
        "island": f"n1/island{i}",
    }
    for i in range(2)
]


@pytest.fixture
def setup(tmp_path: Path) -> tuple[Jobs, FakeNode]:
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    ledger.refresh_slices(["n1"], SLICES)
    node = FakeNode()
    nodes = Nodes([target_from_vars("n1", {"transport": "local"})], node)
    return Jobs(ledger, nodes, owner="alice"), node


def spec(**request: Any) -> JobSpec:
    return JobSpec(argv=["python", "x.py"], request=JobRequest(**request))


def state_of(jobs: Jobs, job_id: str) -> dict[str, Any]:
    state = jobs.ledger.read().state
    return state.jobs.get(job_id) or state.finished[job_id]


def test_submit_records_placement_then_running(setup) -> None:
    jobs, _ = setup
    outcome = submitting.submit(jobs, spec())
    job = state_of(jobs, str(outcome.job_id))
    assert job["state"] == "running" and job["nodes"][0]["pid"] == 100
    assert job["nodes"][0]["devices"] == {"vendor": "nvidia", "uuids": ["GPU-0"]}
    assert jobs.ledger.read().state.allocations[job["alloc"]].request["job"] == job["id"]


def test_refused_launch_fails_the_job_and_frees_its_slice(setup) -> None:
    jobs, node = setup
    node.launch_answer = "refuse"
    outcome = submitting.submit(jobs, spec())
    job = state_of(jobs, str(outcome.job_id))
    assert job["state"] == "failed" and "BadDevices" in job["error"]
    assert jobs.ledger.read().state.allocations == {}


def test_launch_that_timed_out_but_ran_is_recorded_running(setup) -> None:
    jobs, node = setup
    node.launch_answer = "timeout"
    outcome = submitting.submit(jobs, spec())
    assert state_of(jobs, str(outcome.job_id))["state"] == "running"
    assert node.calls[-1] == "poll"  # it asked the node (fencing) instead of guessing


def test_pending_job_of_a_dead_submitter_never_launched_is_requeued_and_runs(setup) -> None:
    jobs, node = setup

    def place_only(tx):
        job = {"id": "j-x", "owner": "alice", "run": 0, **spec().record()}
        tx.append("job", {**job, "state": "queued"})
        placed = place(JobRequest(), jobs.pool(tx.state, tx.now), "best-fit")
        recorded = jobs.record_placed(tx, tx.state.jobs["j-x"], placed)
        tx.append("job", {"id": "j-x", "state": "pending", "submitter": None})
        return recorded

    jobs.ledger.write(place_only)
    (settled,) = reaping.recover(jobs)
    assert settled["state"] == "queued" and node.jobs["j-x"]["fenced"]
    assert jobs.ledger.read().state.allocations == {}
    from gpupoolctl.jobs import scheduling

    scheduling.schedule(jobs)
    job = state_of(jobs, "j-x")
    assert job["state"] == "running" and job["run"] == 2 and "j-x.2" in node.jobs


def test_never_fits_records_nothing(setup) -> None:
    jobs, _ = setup
    before = jobs.ledger.read().state.seq
    with pytest.raises(NeverFits):
        submitting.submit(jobs, spec(gpus=3, same_node=True))
    assert jobs.ledger.read().state.seq == before


def test_spec_checks() -> None:
    assert parse_env(["A=1", "B=x=$(y)"]) == {"A": "1", "B": "x=$(y)"}
    for bad in (
        JobSpec(argv=[], request=JobRequest()),
        JobSpec(argv=["x"], request=JobRequest(), env={"GH_TOKEN": "s"}),
        JobSpec(argv=["x"], request=JobRequest(), env={"1X": "s"}),
        JobSpec(argv=["x"], request=JobRequest(), grace_s=-1),
        JobSpec(argv=["x"], request=JobRequest(gpus=0)),
    ):
        with pytest.raises(UsageError):
            bad.validate()
    with pytest.raises(UsageError):
        parse_env(["NOVALUE"])


def test_aged_waiting_job_keeps_its_slices_but_others_still_backfill(tmp_path: Path) -> None:
    from datetime import datetime, timedelta

    moment = [datetime(2026, 1, 1, tzinfo=UTC)]
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, clock=lambda: moment[0])
    l40s = dict(
        SLICES[0],
        id="n1/gpu2",
        gpu=2,
        uuid="GPU-2",
        devices=["GPU-2"],
        model="L40S",
        island="n1/island2",
    )
    ledger.refresh_slices(["n1"], [*SLICES, l40s])
    node = FakeNode()
    nodes = Nodes([target_from_vars("n1", {"transport": "local"})], node)
    jobs = Jobs(ledger, nodes, owner="alice")
    submitting.submit(jobs, spec(profile="gpu", model="A100"))  # holds one A100 and keeps running
    big = submitting.submit(jobs, spec(gpus=2, profile="gpu", model="A100"))
    assert big.state == "queued"
    moment[0] += timedelta(hours=3)  # long enough to reach the aging cap
    # A small job that wants the other A100 waits behind the aged one...
    small_a100 = submitting.submit(jobs, spec(profile="gpu", model="A100"))
    assert small_a100.state == "queued"
    # ...but one that wants a slice the aged job can never use still starts.
    small_l40s = submitting.submit(jobs, spec(profile="gpu", model="L40S"))
    assert state_of(jobs, str(small_l40s.job_id))["state"] == "running"
    assert state_of(jobs, str(big.job_id))["state"] == "queued"


def test_a_placement_that_cannot_launch_fails_the_job_without_blocking_the_queue(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    amd = dict(SLICES[1], vendor="amd", model="MI300X")
    ledger.refresh_slices(["n1"], [SLICES[0], amd])
    nodes = Nodes([target_from_vars("n1", {"transport": "local"})], FakeNode())
    jobs = Jobs(ledger, nodes, owner="alice")
    mixed = submitting.submit(jobs, spec(gpus=2, profile="gpu"))  # one NVIDIA + one AMD card on n1
    job = state_of(jobs, str(mixed.job_id))
    assert job["state"] == "failed" and "vendor" in job["error"]
    state = jobs.ledger.read().state
    assert state.queue == {} and state.holders == {}
    after = submitting.submit(jobs, spec(profile="gpu"))
    assert state_of(jobs, str(after.job_id))["state"] == "running"


def test_a_pass_limited_to_some_hosts_never_fails_a_job_other_hosts_could_hold(tmp_path):
    from gpupoolctl.jobs import scheduling

    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    l40s = dict(SLICES[0], id="n2/gpu0", host="n2", uuid="GPU-9", devices=["GPU-9"])
    l40s.update(model="L40S", island="n2/island0")
    ledger.refresh_slices(["n1", "n2"], [*SLICES, l40s])
    node = FakeNode()
    targets = [target_from_vars(h, {"transport": "local"}) for h in ("n1", "n2")]
    everyone = Jobs(ledger, Nodes(targets, node), owner="alice")
    submitting.submit(
        everyone, spec(profile="gpu", model="L40S")
    )  # n2's only card: busy from now on
    queued = submitting.submit(everyone, spec(profile="gpu", model="L40S"))
    assert queued.state == "queued"

    # A cron pass limited to n1 (`schedule -l n1`) sees no L40S at all...
    only_n1 = Jobs(ledger, Nodes(targets[:1], node), owner="cron", hosts={"n1"})
    events = [e.to_dict() for e in scheduling.schedule(only_n1).events]
    # ...and must leave the job waiting, not fail it for good.
    assert [e["event"] for e in events] == ["waiting"]
    assert "-l" in events[0]["reason"] and events[0]["code"] == "hosts-limited"
    assert state_of(everyone, str(queued.job_id))["state"] == "queued"
    # What no host of the pool could ever hold is still refused by a limited pass.
    with ledger.transaction() as tx:
        tx.append("job", {"id": "j-x", "state": "queued", "owner": "bob", "request": {}})
        tx.append(
            "enqueue",
            {
                "id": "q-x",
                "job": "j-x",
                "owner": "bob",
                "priority": 50,
                "request": {"gpus": 1, "profile": "gpu", "model": "H100"},
            },
        )
    events = [e.to_dict() for e in scheduling.schedule(only_n1).events]
    assert any(e["event"] == "refused" and e["job"] == "j-x" for e in events)
    assert {e["code"] for e in events if e["event"] == "refused"} == {"no-match"}
    assert state_of(everyone, "j-x")["state"] == "failed"
    # submit asks the same question (sched.modes.never_fits, on the whole pool): limited
    # to n1, an L40S job is queued for a pass that sees n2, not refused as never fitting...
    limited = submitting.submit(only_n1, spec(profile="gpu", model="L40S"))
    assert limited.state == "queued" and "-l" in str(limited.reason)
    # ...and what no host has is refused as before
    with pytest.raises(NeverFits, match="never satisfy"):
        submitting.submit(only_n1, spec(profile="gpu", model="H100"))


class EndedNode(FakeNode):
    """A node whose jobs may end on their own; a signal to an ended job changes nothing."""

    def answer(self, name: str, request: dict[str, Any]) -> HostResult:
        args = request["args"]
        if request["verb"] == "signal" and self.jobs[args["job_id"]]["state"] == "exited":
            self.calls.append("signal")
            return HostResult(name, "ok", data={"sent": False, "state": "exited"})
        return super().answer(name, request)


@pytest.mark.parametrize("finished_early", [True, False], ids=["ended-before", "stopped"])
def test_cancel_of_a_job_that_had_already_finished_records_it_done(tmp_path, finished_early):
    import time

    from gpupoolctl.jobs import cancelling

    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    ledger.refresh_slices(["n1"], SLICES)
    node = EndedNode()
    jobs = Jobs(ledger, Nodes([target_from_vars("n1", {"transport": "local"})], node), owner="a")
    job_id = str(submitting.submit(jobs, spec()).job_id)
    if finished_early:  # exited 0 five seconds ago; nobody had looked yet
        node.jobs[job_id] = {"state": "exited", "exit_code": 0, "ended": time.time() - 5}
    if finished_early:
        with pytest.raises(JobError, match=r"has already ended \(done, exit code 0\)"):
            cancelling.cancel(jobs, job_id, grace_s=0)
        job = state_of(jobs, job_id)
        assert job["state"] == "done" and job["exit_code"] == 0
        assert job["reason"] == "ended before the cancel"
    else:
        job = cancelling.cancel(jobs, job_id, grace_s=0)
        assert job["state"] == "cancelled" and job["exit_code"] == 143
    assert jobs.ledger.read().state.holders == {}


def test_a_preempted_job_that_had_already_finished_is_not_run_again(tmp_path):
    import time

    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    ledger.refresh_slices(["n1"], SLICES)
    node = EndedNode()
    jobs = Jobs(ledger, Nodes([target_from_vars("n1", {"transport": "local"})], node), owner="a")
    job_id = str(submitting.submit(jobs, spec()).job_id)
    node.jobs[job_id] = {"state": "exited", "exit_code": 0, "ended": time.time() - 5}
    with ledger.transaction() as tx:  # a pass marked it for preemption, asking a requeue
        mark = {"by": "j-99", "at": time.time(), "grace_s": 0}
        tx.append("job", {"id": job_id, "state": "running", "preempt": mark, "requeue": True})
    reaping.reap(jobs)
    job = state_of(jobs, job_id)
    assert job["state"] == "done" and job["reason"] == "ended before the preemption"
    assert jobs.ledger.read().state.queue == {}


class HalfDownNodes(FakeNode):
    """n1 launches (or refuses the workdir); n2 is unreachable."""

    def __init__(self) -> None:
        super().__init__()
        self.bad_workdir = False

    def answer(self, name: str, request: dict[str, Any]) -> HostResult:
        if name == "n2":
            self.calls.append(f"n2:{request['verb']}")
            return HostResult(name, "unreachable", error="cannot connect", error_type="Connect")
        if request["verb"] == "launch" and self.bad_workdir:
            return HostResult(name, "failed", error="BadWorkdir: no", error_type="BadWorkdir")
        return super().answer(name, request)


@pytest.fixture
def two_nodes(tmp_path: Path) -> tuple[Jobs, HalfDownNodes]:
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    more = [
        {**s, "id": s["id"].replace("n1", "n2"), "host": "n2", "uuid": f"GPU-2{s['gpu']}"}
        for s in SLICES
    ]
    ledger.refresh_slices(["n1", "n2"], SLICES + more)
    node = HalfDownNodes()
    targets = [target_from_vars(h, {"transport": "local"}) for h in ("n1", "n2")]
    return Jobs(ledger, Nodes(targets, node), owner="alice"), node


def test_a_launch_one_node_did_not_answer_is_requeued_and_its_started_part_stopped(
    two_nodes,
) -> None:
    jobs, node = two_nodes
    job_spec = spec(gpus=3)  # two cards per node: it spans both
    outcome = submitting.submit(jobs, dataclasses.replace(job_spec, max_restarts=2))
    job = state_of(jobs, str(outcome.job_id))
    assert job["state"] == "queued", job  # three cards fit nowhere while n2 is silent
    assert "n2 did not answer" in job["reason"] and "not counted" in job["reason"]
    assert not job.get("restarts")  # no restart used
    assert "signal" in node.calls  # n1's started run was stopped
    state = jobs.ledger.read().state
    assert set(state.silent) == {"n2"} and state.allocations == {}
    assert jobs.hosts_failed  # the CLI exits 3 and names n2


def test_a_refusal_for_the_jobs_sake_fails_it_even_when_another_node_did_not_answer(
    two_nodes,
) -> None:
    jobs, node = two_nodes
    node.bad_workdir = True
    outcome = submitting.submit(jobs, spec(gpus=3))
    job = state_of(jobs, str(outcome.job_id))
    assert job["state"] == "failed" and "BadWorkdir" in job["error"], job
    assert "n2: unreachable" in job["error"]
    assert set(jobs.ledger.read().state.silent) == {"n2"}


def test_the_jobs_stopping_for_each_queued_job_are_found_in_one_walk() -> None:
    """scheduling.preempting: running jobs marked for a job, by that job; a victim that is
    no longer running (it ended, or was requeued) or was never marked counts for none."""
    from gpupoolctl.jobs.scheduling import preempting
    from gpupoolctl.ledger.state import State

    state = State()
    jobs = {
        "v-1": {"state": "running", "preempt": {"by": "j-9"}},
        "v-2": {"state": "running", "preempt": {"by": "j-9"}},
        "v-3": {"state": "running", "preempt": {"by": "j-7"}},
        "v-4": {"state": "queued", "preempt": {"by": "j-7"}},  # requeued: its mark is old
        "v-5": {"state": "running", "preempt": None},
        "v-6": {"state": "running"},
    }
    state.jobs.update(jobs)
    assert preempting(state) == {"j-9": ["v-1", "v-2"], "j-7": ["v-3"]}
