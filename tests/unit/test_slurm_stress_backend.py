"""The Slurm stress backend's own bookkeeping: one squeue per poll for all jobs, outcomes
from Slurm's states, workload argv for nodes without an agent, clean-up at close. A stand-in
client records calls; the real daemons are in tests/integration/test_slurm_backend.py."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from typing import Any

from gpupoolctl.agent.workloads import RUN_WORKLOAD
from gpupoolctl.jobs.spec import JobSpec
from gpupoolctl.sched.request import JobRequest
from gpupoolctl.slurm.parse import SlurmJob
from gpupoolctl.stress.backend import Work
from gpupoolctl.stress.slurm_backend import SlurmBackend, finished_from_job, node_argv
from gpupoolctl.stress.workload import RequestShape


class StandIn:
    """Answers like a cluster whose jobs end when the test says so."""

    timeout_s = 5.0

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.jobs: dict[str, SlurmJob] = {}
        self.scripts: list[str] = []
        self.calls: list[str] = []
        self.cancelled: list[str] = []

    def node_gres(self) -> dict[str, dict[str, int]]:
        return {"node1": {"test": 8}}

    def sbatch(self, args: Sequence[str], script: str) -> str:
        with self.lock:
            job_id = str(len(self.jobs) + 1)
            self.jobs[job_id] = SlurmJob(job_id=job_id, state="PENDING", submitted=100.0)
            self.scripts.append(script)
            self.calls.append("sbatch")
        return job_id

    def queue(self, user: str | None = None) -> list[SlurmJob]:
        with self.lock:
            self.calls.append("squeue")
            return list(self.jobs.values())

    def finished_job(self, job_id: str) -> SlurmJob | None:
        self.calls.append(f"finished {job_id}")
        return None

    def scancel(self, job_ids: Sequence[str]) -> None:
        self.cancelled.extend(job_ids)

    def end(self, job_id: str, state: str, exit_code: int = 0) -> None:
        with self.lock:
            self.jobs[job_id] = SlurmJob(
                job_id=job_id,
                state=state,
                submitted=100.0,
                started=101.0,
                ended=104.0,
                exit_code=exit_code,
                reason="NonZeroExitCode" if exit_code else "None",
            )


def _make_spec(work: Work) -> JobSpec:
    shape: Any = work.shape
    return JobSpec(argv=list(work.argv), request=JobRequest(**shape.job_fields()), name=work.name)


def _work(n: int) -> Work:
    argv = ["gpupoolctl-workload", "sleep", "--seconds", "1"]
    return Work(argv=argv, name=f"stress-{n}", shape=RequestShape())


def test_one_squeue_per_round_for_all_jobs() -> None:
    client = StandIn()
    backend = SlurmBackend(client, _make_spec, poll_s=0.01, python="/py")  # type: ignore[arg-type]
    backend.prepare([RequestShape()])
    tickets = [backend.submit(_work(n)) for n in range(5)]
    assert all("launch" in t.phases for t in tickets)
    client.end("1", "COMPLETED")
    client.end("2", "FAILED", exit_code=3)
    first = backend.wait(tickets[0], 5.0)
    second = backend.wait(tickets[1], 5.0)
    assert first is not None and first.ok and first.run_s == 3.0
    assert second is not None and not second.ok
    assert second.error == "slurm job 2 FAILED (NonZeroExitCode), exit code 3"
    assert backend.wait(tickets[2], 0.05) is None  # still pending
    backend.close()
    assert sorted(client.cancelled) == ["3", "4", "5"]
    # Never one call per job: only squeue rounds (and no per-job lookups: all were listed).
    assert set(client.calls) == {"sbatch", "squeue"}
    assert "from gpupoolctl.agent.workloads.__main__ import main" in client.scripts[0]
    assert "sys.exit(main())' sleep" in client.scripts[0]
    assert "GPUPOOL_JOB_DIR=" in client.scripts[0]


def test_a_job_slurm_forgot_fails_with_a_reason() -> None:
    client = StandIn()
    backend = SlurmBackend(client, _make_spec, poll_s=0.01)  # type: ignore[arg-type]
    ticket = backend.submit(_work(1))
    with client.lock:
        client.jobs.clear()
    finished = backend.wait(ticket, 5.0)
    backend.close()
    assert finished is not None and not finished.ok
    assert finished.error == "Slurm no longer knows job 1"
    assert "finished 1" in client.calls


class Breaking(StandIn):
    """squeue fails `times` times with an error that is no GpupoolError, then answers."""

    def __init__(self, times: int) -> None:
        super().__init__()
        self.failures_left = times

    def queue(self, user: str | None = None) -> list[SlurmJob]:
        with self.lock:
            if self.failures_left:
                self.failures_left -= 1
                self.calls.append("squeue")
                raise UnicodeDecodeError("utf-8", b"caf\xe9", 3, 4, "invalid continuation")
        return super().queue(user)


def test_the_reaper_survives_any_failed_poll() -> None:
    client = Breaking(times=3)
    backend = SlurmBackend(client, _make_spec, poll_s=0.01)  # type: ignore[arg-type]
    ticket = backend.submit(_work(1))
    client.end("1", "COMPLETED")
    finished = backend.wait(ticket, 5.0)
    backend.close()
    assert finished is not None and finished.ok
    assert client.failures_left == 0
    (warning,) = backend.warnings()  # once, for three failures
    assert warning.startswith("reaper: a poll failed (UnicodeDecodeError: ")
    assert warning.endswith("; polling on")


def test_start_is_never_before_the_submit_call() -> None:
    job = SlurmJob(job_id="1", state="COMPLETED", started=100.0, ended=101.0, exit_code=0)
    finished = finished_from_job(job, submitted=100.6, now=102.0)
    assert finished.started == 100.6 and finished.ok and finished.run_s == 1.0


def test_node_argv_runs_builtin_workloads_with_python() -> None:
    assert node_argv(["gpupoolctl-workload", "sim", "--work", "1"], "/usr/bin/python3") == [
        "/usr/bin/python3",
        "-c",
        RUN_WORKLOAD,
        "sim",
        "--work",
        "1",
    ]
    assert node_argv(["sleep", "1"]) == ["sleep", "1"]


def test_reap_is_measured_from_slurm_s_end_time_even_when_the_start_was_moved() -> None:
    job = SlurmJob(job_id="1", state="COMPLETED", started=100.0, ended=101.0, exit_code=0)
    finished = finished_from_job(job, submitted=100.6, now=102.25)
    # Not now - (started + run) = 0.65: the start was moved up to the sbatch call.
    assert finished.phases == {"reap": 1.25}


def test_no_reap_where_the_job_never_ran_or_slurm_s_clock_runs_ahead() -> None:
    cancelled = SlurmJob(job_id="1", state="CANCELLED", started=None, ended=101.0)
    assert finished_from_job(cancelled, submitted=100.0, now=102.0).phases == {}
    ahead = SlurmJob(job_id="2", state="COMPLETED", started=100.0, ended=105.0, exit_code=0)
    finished = finished_from_job(ahead, submitted=100.0, now=102.0)
    assert finished.run_s == 5.0 and finished.phases == {}


def test_the_reaper_warns_once_when_slurm_s_clock_runs_ahead() -> None:
    client = StandIn()
    backend = SlurmBackend(client, _make_spec, poll_s=0.01)  # type: ignore[arg-type]
    tickets = [backend.submit(_work(n)) for n in range(2)]
    future = time.time() + 3600.0
    for ticket in tickets:
        with client.lock:
            client.jobs[ticket.job_id] = SlurmJob(
                job_id=ticket.job_id, state="COMPLETED", started=future, ended=future + 1.0
            )
    ended = [backend.wait(ticket, 5.0) for ticket in tickets]
    backend.close()
    assert all(f is not None and f.ok and "reap" not in f.phases for f in ended)
    (warning,) = backend.warnings()
    assert warning.startswith("slurmctld's clock is ahead of this workstation's")
