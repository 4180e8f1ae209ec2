"""Restarts: the budget, the back-off (virtual clock, no sleeps), what each try is told,
preemption not counted; and the parsers of --time-limit / --signal / --checkpoint-dir."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.errors import UsageError
from gpupoolctl.jobs import (
    Jobs,
    JobSpec,
    Nodes,
    reaping,
    restarts,
    scheduling,
    stopping,
    submitting,
)
from gpupoolctl.jobs.spec import (
    MAX_RESTARTS,
    expand_checkpoint_dir,
    parse_signal,
    parse_time_limit,
)
from gpupoolctl.ledger import Ledger
from gpupoolctl.remote.results import HostResult
from gpupoolctl.remote.target import target_from_vars
from gpupoolctl.sched import JobRequest
from tests.unit.test_jobs_service import SLICES


class Clock:
    """The ledger's clock, moved by hand."""

    def __init__(self) -> None:
        self.now = datetime(2026, 1, 5, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


class Node:
    """A node whose jobs end as told: each launch is recorded with its args; every job
    exits with `exit_code` at once (None: it keeps running)."""

    def __init__(self) -> None:
        self.launches: list[dict[str, Any]] = []
        self.signals: list[tuple[str, str, float]] = []
        self.jobs: dict[str, dict[str, Any]] = {}
        self.exit_code: int | None = 1

    def __call__(self, requests: list[tuple[Any, dict[str, Any]]]) -> list[HostResult]:
        return [self.answer(target.name, request) for target, request in requests]

    def answer(self, name: str, request: dict[str, Any]) -> HostResult:
        verb, args = request["verb"], request["args"]
        if verb == "launch":
            self.launches.append(args)
            if self.exit_code is None:
                self.jobs[args["job_id"]] = {"state": "running", "pid": 7}
            else:
                self.jobs[args["job_id"]] = {"state": "exited", "exit_code": self.exit_code}
            return HostResult(name, "ok", data={"pid": 7, "started": 1.0})
        if verb == "poll":
            out = {j: self.jobs.get(j, {"state": "absent"}) for j in args["job_ids"]}
            return HostResult(name, "ok", data={"jobs": out})
        if verb == "signal":
            self.signals.append((args["job_id"], args["signal"], args.get("wait_s")))
            if args["signal"] in ("TERM", "KILL"):
                self.jobs[args["job_id"]] = {"state": "exited", "exit_code": 143}
            state = self.jobs[args["job_id"]]["state"]
            return HostResult(name, "ok", data={"sent": True, "state": state})
        raise AssertionError(verb)


@pytest.fixture
def pool(tmp_path: Path) -> tuple[Jobs, Node, Clock]:
    clock = Clock()
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, clock=clock)
    ledger.refresh_slices(["n1"], SLICES[:1])  # one card: a second job waits for it
    node = Node()
    nodes = Nodes([target_from_vars("n1", {"transport": "local"})], node)
    return Jobs(ledger, nodes, owner="alice"), node, clock


def job_of(jobs: Jobs, job_id: str) -> dict[str, Any]:
    state = jobs.ledger.read().state
    return state.jobs.get(job_id) or state.finished[job_id]


def spec(**fields: Any) -> JobSpec:
    request = fields.pop("request", JobRequest())
    return JobSpec(argv=["python", "train.py"], request=request, **fields)


def test_backoff_doubles_from_10s_and_is_capped() -> None:
    assert [restarts.backoff_s(n) for n in range(1, 8)] == [10, 20, 40, 80, 160, 300, 300]
    assert restarts.backoff_s(10_000) == restarts.BACKOFF_CAP_S


def test_a_failing_job_runs_max_restarts_plus_one_times_then_fails(pool) -> None:
    jobs, node, clock = pool
    job_id = str(submitting.submit(jobs, spec(max_restarts=2, checkpoint_dir="/ckpt/%j")).job_id)
    job = job_of(jobs, job_id)
    assert job["checkpoint_dir"] == f"/ckpt/{job_id}"
    reasons = []
    for expected in (1, 2):
        reaping.reap(jobs)
        job = job_of(jobs, job_id)
        assert job["state"] == "queued" and job["restarts"] == expected
        assert job["reason"] == f"exited 1, requeued ({expected}/2)"
        reasons.append(job["reason"])
        wait = restarts.backoff_s(expected)
        clock.advance(wait - 1)  # not yet: the pass leaves it waiting, nothing is launched
        launched = len(node.launches)
        outcome = scheduling.schedule(jobs)
        assert len(node.launches) == launched
        (waiting,) = [e for e in outcome.events if getattr(e, "job", None) == job_id]
        assert waiting.reason == "restarting in 1s (backoff)"
        clock.advance(1)
        scheduling.schedule(jobs)
        assert len(node.launches) == launched + 1
    reaping.reap(jobs)
    job = job_of(jobs, job_id)
    assert job["state"] == "failed" and job["exit_code"] == 1 and job["restarts"] == 2
    assert job["reason"] == "exited 1 (no restarts left: 2/2)"
    assert len(node.launches) == 3
    # Each try is a run of its own, told which try it is; the checkpoint folder is the same.
    assert [launch["job_id"] for launch in node.launches] == [job_id, f"{job_id}.2", f"{job_id}.3"]
    for count, launch in enumerate(node.launches):
        env = launch["env"]
        assert env["GPUPOOL_RESTART_COUNT"] == env["TORCHELASTIC_RESTART_COUNT"] == str(count)
        assert env["TORCHELASTIC_MAX_RESTARTS"] == "2" and env["GPUPOOL_JOB_ID"] == job_id
        assert env["GPUPOOL_CHECKPOINT_DIR"] == f"/ckpt/{job_id}"
    assert jobs.ledger.read().state.allocations == {}


def test_without_a_budget_a_failure_ends_the_job_as_before(pool) -> None:
    jobs, node, _ = pool
    job_id = str(submitting.submit(jobs, spec(requeue=True)).job_id)
    reaping.reap(jobs)
    job = job_of(jobs, job_id)
    assert job["state"] == "failed" and job["exit_code"] == 1 and not job.get("reason")
    assert "GPUPOOL_CHECKPOINT_DIR" not in node.launches[0]["env"]


def test_exit_0_is_done_and_a_signal_death_is_named(pool) -> None:
    jobs, node, _ = pool
    node.jobs.clear()
    node.exit_code = 0
    done = str(submitting.submit(jobs, spec(max_restarts=1)).job_id)
    reaping.reap(jobs)
    assert job_of(jobs, done)["state"] == "done"
    node.exit_code = None
    killed = str(submitting.submit(jobs, spec(max_restarts=1)).job_id)
    node.jobs[killed] = {"state": "exited", "exit_code": 139, "signal": "SEGV"}
    reaping.reap(jobs)
    assert job_of(jobs, killed)["reason"] == "killed by SIGSEGV, requeued (1/1)"


def test_preemption_does_not_count_against_the_budget(pool) -> None:
    jobs, node, _ = pool
    node.exit_code = None  # runs until stopped
    request = JobRequest(priority=10, preemptible=True)
    victim = str(
        submitting.submit(jobs, spec(requeue=True, max_restarts=1, request=request)).job_id
    )
    assert job_of(jobs, victim)["state"] == "running"
    urgent = str(submitting.submit(jobs, spec(request=JobRequest(priority=90))).job_id)
    job = job_of(jobs, victim)
    assert job["state"] == "queued" and job["restarts"] == 0 and "preempted" in job["reason"]
    queue = jobs.ledger.read().state.queue.values()
    assert [q.get("not_before") for q in queue if q["job"] == victim] == [None]
    node.jobs[job_of(jobs, urgent)["nodes"][0]["node_id"]] = {"state": "exited", "exit_code": 0}
    reaping.reap(jobs)
    scheduling.schedule(jobs)  # no back-off after a preemption: it runs again at once
    job = job_of(jobs, victim)
    assert job["state"] == "running" and job["run"] == 2
    assert node.launches[-1]["env"]["GPUPOOL_RESTART_COUNT"] == "0"
    node.jobs[job["nodes"][0]["node_id"]] = {"state": "exited", "exit_code": 2}
    reaping.reap(jobs)
    assert job_of(jobs, victim)["reason"] == "exited 2, requeued (1/1)"


def test_a_preempted_job_with_a_signal_gets_it_before_sigterm(pool) -> None:
    jobs, node, _ = pool
    node.exit_code = None
    request = JobRequest(priority=10, preemptible=True)
    victim = str(
        submitting.submit(
            jobs, spec(signal="USR1", signal_s=120, grace_s=5, request=request)
        ).job_id
    )
    submitting.submit(jobs, spec(request=JobRequest(priority=90)))
    assert [(s[1], s[2]) for s in node.signals] == [("USR1", 5), ("TERM", 5)]
    job = job_of(jobs, victim)
    assert job["state"] == "cancelled" and job["preempt"]["warn_s"] == 5


def test_a_job_that_leaves_on_the_warning_gets_no_sigterm(pool) -> None:
    jobs, node, _ = pool
    node.exit_code = None
    original = node.answer

    def leaves_on_usr1(name: str, request: dict[str, Any]) -> HostResult:
        args = request["args"]
        if request["verb"] == "signal" and args["signal"] == "USR1":
            node.signals.append((args["job_id"], "USR1", args["wait_s"]))
            node.jobs[args["job_id"]] = {"state": "exited", "exit_code": 0}
            return HostResult(name, "ok", data={"sent": True, "state": "exited"})
        return original(name, request)

    node.answer = leaves_on_usr1  # type: ignore[method-assign]
    request = JobRequest(priority=10, preemptible=True)
    victim = str(
        submitting.submit(
            jobs, spec(signal="USR1", signal_s=2, requeue=True, request=request)
        ).job_id
    )
    submitting.submit(jobs, spec(request=JobRequest(priority=90)))
    assert [s[1] for s in node.signals] == ["USR1"]
    assert job_of(jobs, victim)["state"] == "queued"


def test_node_loss_uses_the_budget_without_node_statuses() -> None:
    job = {"id": "j-3", "max_restarts": 3, "restarts": 1}
    restart = restarts.after_failure(job, "node-lost")
    assert restart == restarts.Restart(2, 3, 20.0, "node lost, requeued (2/3)")
    assert restarts.after_failure(job, "node-lost", "n1 silent 5m").reason == (
        "node lost (n1 silent 5m), requeued (2/3)"
    )
    assert restarts.after_failure(job, "preempted") is None
    assert restarts.after_failure({**job, "restarts": 3}, "node-lost") is None
    assert restarts.end_reason({**job, "restarts": 3}, "node-lost") == (
        "node lost (no restarts left: 3/3)"
    )
    assert restarts.after_failure({"id": "j-4"}, "exit", "1") is None
    with pytest.raises(ValueError):
        restarts.after_failure(job, "bored")


def test_the_time_limit_and_signal_reach_the_launch(pool) -> None:
    jobs, node, _ = pool
    submitting.submit(jobs, spec(time_limit_s=14400.0, signal="USR1", signal_s=120.0, grace_s=3))
    launch = node.launches[0]
    assert (launch["time_limit_s"], launch["signal"], launch["signal_s"]) == (14400, "USR1", 120)
    assert launch["grace_s"] == 3 and launch["env"]["GPUPOOL_TIME_LIMIT_S"] == "14400"


def test_warning_seconds_are_at_most_the_grace() -> None:
    assert stopping.warning_s({"warn_signal": "USR1", "warn_signal_s": 120}, 30) == 30
    assert stopping.warning_s({"warn_signal": "USR1", "warn_signal_s": 5}, 30) == 5


# -- the values as given on the command line ---------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90),
        ("30m", 1800),
        ("4h", 14400),
        ("1d", 86400),
        ("1h30m", 5400),
        ("04:00:00", 14400),
        ("1-00:00:30", 86430),
        ("45", 45),
        ("2.5", 2.5),
    ],
)
def test_time_limit_forms(text: str, seconds: float) -> None:
    assert parse_time_limit(text) == seconds


@pytest.mark.parametrize("text", ["0", "0s", "-1", "4x", "1:30", "00:61:00", "abc", "", "400d"])
def test_bad_time_limits(text: str) -> None:
    with pytest.raises(UsageError, match="--time-limit"):
        parse_time_limit(text)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("USR1@120", ("USR1", 120)),
        ("SIGUSR1@120", ("USR1", 120)),
        ("usr2@2m", ("USR2", 120)),
        ("TERM", ("TERM", 60)),
        ("sigterm", ("TERM", 60)),
    ],
)
def test_signal_forms(text: str, parsed: tuple[str, float]) -> None:
    assert parse_signal(text) == parsed


@pytest.mark.parametrize(
    "text", ["KILL", "SIGSTOP@10", "USR1@0", "USR1@", "USR1@x", "B:USR1@10", "9@10", "FOO"]
)
def test_bad_signals(text: str) -> None:
    with pytest.raises(UsageError, match="--signal"):
        parse_signal(text)


def test_the_signal_must_come_before_the_limit_and_the_budget_is_bounded() -> None:
    with pytest.raises(UsageError, match="before the time limit"):
        spec(time_limit_s=60, signal="USR1", signal_s=60).validate()
    spec(time_limit_s=61, signal="USR1", signal_s=60).validate()
    spec(signal="USR1", signal_s=600).validate()  # no limit: a warning before preemption
    for bad in (-1, MAX_RESTARTS + 1, True):
        with pytest.raises(UsageError, match="--max-restarts"):
            spec(max_restarts=bad).validate()
    for bad in ("", "/a/\0b", "/a/%x", "/a/%"):
        with pytest.raises(UsageError, match="--checkpoint-dir"):
            spec(checkpoint_dir=bad).validate()


def test_checkpoint_dir_expansion() -> None:
    assert expand_checkpoint_dir("/shared/ckpt/%j", "j-7") == "/shared/ckpt/j-7"
    assert expand_checkpoint_dir("ck/%j/%%j/100%%", "j-7") == "ck/j-7/%j/100%"


@given(st.integers(1, 366 * 86400 - 1))
def test_time_limit_round_trips_through_every_form(seconds: int) -> None:
    from gpupoolctl.policy.values import duration_text

    days, rest = divmod(seconds, 86400)
    clock = f"{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}"
    forms = [str(seconds), f"{seconds}s", duration_text(seconds), f"{days}-{clock}"]
    if not days:
        forms.append(clock)
    for form in forms:
        assert parse_time_limit(form) == seconds, form


@given(st.sampled_from(["HUP", "INT", "QUIT", "USR1", "USR2", "TERM"]), st.integers(1, 86400))
def test_signal_round_trips(name: str, seconds: int) -> None:
    for text in (f"{name}@{seconds}", f"SIG{name}@{seconds}", f"{name.lower()}@{seconds}s"):
        assert parse_signal(text) == (name, seconds)


@given(st.text(max_size=80))
def test_any_text_is_a_value_or_a_usage_error(text: str) -> None:
    for parse in (parse_time_limit, parse_signal, lambda t: expand_checkpoint_dir(t, "j-1")):
        try:
            parse(text)
        except UsageError as exc:
            assert "\n" not in str(exc)


def test_the_next_try_keeps_its_warning_signal_after_a_death_by_signal(pool) -> None:
    jobs, node, clock = pool
    node.exit_code = None
    job_id = str(submitting.submit(jobs, spec(max_restarts=1, signal="USR1", signal_s=30)).job_id)
    node.jobs[job_id] = {"state": "exited", "exit_code": 137, "signal": "KILL"}
    reaping.reap(jobs)
    assert job_of(jobs, job_id)["signal"] == "KILL"  # what ended the try ...
    clock.advance(restarts.BACKOFF_BASE_S)
    scheduling.schedule(jobs)
    assert [launch.get("signal") for launch in node.launches] == ["USR1", "USR1"]  # ... not this


def test_slurm_gets_the_time_limit_and_signal_and_refuses_the_rest() -> None:
    from gpupoolctl.slurm.mapping import sbatch_request

    request = JobRequest(profile="1g.10gb")
    mapped = sbatch_request(
        spec(time_limit_s=14400.5, signal="USR1", signal_s=120, request=request),
        ["h100_1g.10gb"],
    )
    assert "--time=0-04:00:01" in mapped.args and "--signal=USR1@120" in mapped.args
    for refused in ({"max_restarts": 2}, {"checkpoint_dir": "/ck/%j"}):
        with pytest.raises(UsageError, match="not with --backend slurm"):
            sbatch_request(spec(request=request, **refused), ["h100_1g.10gb"])
