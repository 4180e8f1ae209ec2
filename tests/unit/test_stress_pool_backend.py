"""PoolBackend's waiting and reaping, with the ledger and nodes replaced by stand-ins that
each test controls (the real path is covered end to end in tests/e2e/test_cli_stress.py)."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from gpupoolctl.jobs import logs as job_logs
from gpupoolctl.jobs import refreshing
from gpupoolctl.jobs.errors import JobError
from gpupoolctl.jobs.nodes import Call
from gpupoolctl.stress.backend import Ticket
from gpupoolctl.stress.pool_backend import Meter, PoolBackend, Timeline

DONE = {"id": "j-1", "state": "done", "exit_code": 0, "nodes": [{"started": 100.0}], "ended": 101.5}


class FakeJobs:
    """What the reaper reads: a ledger view whose finished jobs the test sets."""

    def __init__(self, finished: dict[str, dict[str, Any]]) -> None:
        self.finished = finished
        self.warnings: list[str] = []
        self.hosts_failed = False
        self.ledger = SimpleNamespace(closed=False)
        self.ledger.close = lambda: setattr(self.ledger, "closed", True)

    def read(self) -> Any:
        return SimpleNamespace(state=SimpleNamespace(finished=self.finished, jobs={}))


class StandInBackend(PoolBackend):
    def __init__(self, finished: dict[str, dict[str, Any]]) -> None:
        super().__init__(
            open_ledger=lambda: None,  # type: ignore[arg-type,return-value]
            targets=[],
            run=lambda requests: [],
            owner="tester",
            hosts=None,
            make_spec=lambda work: None,  # type: ignore[arg-type,return-value]
            poll_s=0.05,
        )
        self.fakes: list[FakeJobs] = []
        self.finished_jobs = finished

    def _new_jobs(self) -> tuple[Any, Meter]:
        fake = FakeJobs(self.finished_jobs)
        self.fakes.append(fake)
        return fake, Meter()


def wait_in_slices(backend: PoolBackend, ticket: Ticket, within: float) -> Any:
    """As the runner waits: short slices, again and again."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        finished = backend.wait(ticket, 0.2)
        if finished is not None:
            return finished
    return None


def test_an_ended_job_is_seen_even_when_a_reaper_pass_outlasts_each_short_wait(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A pass over far nodes can take longer than one wait slice; the job must still be seen.
    monkeypatch.setattr(refreshing, "refresh", lambda jobs: time.sleep(0.7))
    backend = StandInBackend({"j-1": DONE})
    ticket = Ticket(job_id="j-1", accepted=time.time())
    try:
        finished = wait_in_slices(backend, ticket, within=5.0)
    finally:
        backend.close()
    assert finished is not None and finished.ok
    assert finished.started == 100.0 and finished.run_s == pytest.approx(1.5)


def test_a_reaper_that_breaks_stops_the_waits_with_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken(jobs: Any) -> None:
        raise KeyError("nodes")

    monkeypatch.setattr(refreshing, "refresh", broken)
    backend = StandInBackend({})
    ticket = Ticket(job_id="j-9", accepted=time.time())
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="the reaper stopped: KeyError"):
        wait_in_slices(backend, ticket, within=10.0)
    assert time.monotonic() - started < 5.0  # not left to time out
    backend.close()


def test_close_closes_every_ledger_handle_it_made(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(refreshing, "refresh", lambda jobs: None)
    backend = StandInBackend({"j-1": DONE})
    ticket = Ticket(job_id="j-1", accepted=time.time())
    assert wait_in_slices(backend, ticket, within=5.0) is not None
    with backend._borrow():
        pass
    backend.close()
    assert backend.fakes and all(fake.ledger.closed for fake in backend.fakes)


# -- queue wait and launch: a timeline of every Jobs' writes and launches ----------------------


class VirtualClock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_queue_wait_ends_when_the_slice_is_granted_and_launch_is_its_own_phase() -> None:
    clock = VirtualClock()
    timeline = Timeline(clock)
    # Submit's first write queues the job; a later pass (another thread's Jobs) places it
    # 2 s later; the launch call returns 0.6 s after that.
    timeline.saw_records([{"op": "job", "data": {"id": "j-7", "state": "queued"}}])
    clock.now += 0.001
    timeline.saw_records([{"op": "job", "data": {"id": "j-7", "state": "queued"}}])  # again
    clock.now += 1.999
    timeline.saw_records(
        [
            {"op": "dequeue", "data": {"id": "q-8"}},
            {"op": "alloc", "data": {"id": "a-9"}},
            {"op": "job", "data": {"id": "j-7", "state": "pending", "alloc": "a-9"}},
        ]
    )
    clock.now += 0.6
    timeline.saw_launch([Call("node-1", "poll", {"job_ids": ["j-3"]})])
    timeline.saw_launch([Call("node-1", "launch", {"job_id": "j-7", "argv": ["true"]})])
    phases = timeline.take("j-7")
    assert phases == {"queue": pytest.approx(2.0), "launch": pytest.approx(0.6)}
    assert timeline.take("j-7") == {}  # taken once


def test_a_later_run_of_a_job_is_stamped_as_the_job() -> None:
    clock = VirtualClock()
    timeline = Timeline(clock)
    timeline.saw_records([{"op": "job", "data": {"id": "j-2", "state": "pending"}}])
    clock.now += 0.25
    timeline.saw_launch([Call("node-1", "launch", {"job_id": "j-2.2"})])
    assert timeline.take("j-2") == {"launch": pytest.approx(0.25)}  # never seen queued


def test_every_jobs_the_backend_makes_writes_into_its_timeline() -> None:
    written = [{"op": "job", "data": {"id": "j-4", "state": "queued"}}]
    ledger = SimpleNamespace(write=lambda build: SimpleNamespace(records=written, value=None))
    backend = PoolBackend(
        open_ledger=lambda: ledger,  # type: ignore[arg-type,return-value]
        targets=[],
        run=lambda requests: [],
        owner="tester",
        hosts=None,
        make_spec=lambda work: None,  # type: ignore[arg-type,return-value]
    )
    jobs, meter = backend._new_jobs()
    jobs.ledger.write(lambda tx: None)
    written[:] = [{"op": "job", "data": {"id": "j-4", "state": "pending"}}]
    jobs.ledger.write(lambda tx: None)
    assert set(backend.timeline.take("j-4")) == {"queue"}
    assert "ledger" in meter.take()


# -- why a job failed ---------------------------------------------------------------------------

FAILED = {
    "id": "j-1",
    "state": "failed",
    "exit_code": 3,
    "nodes": [{"started": 100.0, "host": "node-1", "node_id": "j-1"}],
    "ended": 100.05,
}


def test_a_job_that_failed_with_only_an_exit_code_gets_its_stderr_last_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[dict[str, Any]] = []

    def logs(jobs: Any, job_id: str, **args: Any) -> dict[str, Any]:
        asked.append({"job_id": job_id, **args})
        text = (
            "loading\nmatmul: neither PyTorch nor CuPy can be imported by python3 on node-1; "
            "install one, or use the sim/sleep workloads\n\n"
        )
        return {"text": text, "state": "exited"}

    monkeypatch.setattr(refreshing, "refresh", lambda jobs: None)
    monkeypatch.setattr(job_logs, "logs", logs)
    backend = StandInBackend({"j-1": FAILED})
    try:
        finished = wait_in_slices(backend, Ticket(job_id="j-1", accepted=time.time()), 5.0)
    finally:
        backend.close()
    assert finished is not None and not finished.ok
    assert finished.error == (
        "exit code 3: matmul: neither PyTorch nor CuPy can be imported by python3 on node-1; "
        "install one, or use the sim/sleep workloads"
    )
    [call] = asked
    assert call["job_id"] == "j-1" and call["stream"] == "stderr" and call["offset"] < 0


def test_a_failure_the_ledger_explains_is_not_asked_of_the_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def logs(jobs: Any, job_id: str, **args: Any) -> dict[str, Any]:
        raise AssertionError("the ledger already says why")

    launch_failed = {**FAILED, "error": "launch failed: node-1: cannot run 'nope'"}
    monkeypatch.setattr(refreshing, "refresh", lambda jobs: None)
    monkeypatch.setattr(job_logs, "logs", logs)
    backend = StandInBackend({"j-1": launch_failed})
    try:
        finished = wait_in_slices(backend, Ticket(job_id="j-1", accepted=time.time()), 5.0)
    finally:
        backend.close()
    assert finished is not None and finished.error == launch_failed["error"]


def test_a_node_that_cannot_show_stderr_leaves_the_exit_code_and_warns_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def logs(jobs: Any, job_id: str, **args: Any) -> dict[str, Any]:
        raise JobError(f"node-1: unreachable ({job_id})")

    monkeypatch.setattr(refreshing, "refresh", lambda jobs: None)
    monkeypatch.setattr(job_logs, "logs", logs)
    backend = StandInBackend({"j-1": FAILED, "j-2": {**FAILED, "id": "j-2"}})
    try:
        errors = [
            wait_in_slices(backend, Ticket(job_id=j, accepted=time.time()), 5.0).error
            for j in ("j-1", "j-2")
        ]
    finally:
        backend.close()
    assert errors == ["exit code 3", "exit code 3"]
    assert len([w for w in backend.warnings() if "stderr" in w]) == 1
