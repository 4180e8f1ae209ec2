"""The ramp runner against in-process backends whose behaviour each test controls."""

from __future__ import annotations

import threading
import time

import pytest

from gpupoolctl.stress.backend import Backend, Finished, NoopBackend, SubmitRefused, Ticket, Work
from gpupoolctl.stress.model import LevelResult
from gpupoolctl.stress.runner import HarnessError, LevelDone, LevelStarted, Ramp, reap_wait
from gpupoolctl.stress.scenario import Scenario, Workload, parse_threshold
from gpupoolctl.stress.thresholds import evaluate


def scenario(**fields: object) -> Scenario:
    base: dict[str, object] = {
        "name": "unit",
        "levels": (1, 3),
        "warmup_s": 0.0,
        "hold_s": 0.4,
        "drain_s": 2.0,
        "job_timeout_s": 5.0,
        "workload": Workload("sleep", {"seconds": 0.01}),
    }
    base.update(fields)
    return Scenario(**base)  # type: ignore[arg-type]


class TimedBackend:
    """Jobs run `run_s` (wall clock); tracks how many are in flight at once."""

    name = "timed"
    transport = None

    def __init__(self, run_s: float = 0.02, fail_every: int = 0) -> None:
        self.run_s = run_s
        self.fail_every = fail_every
        self.lock = threading.Lock()
        self.in_flight = 0
        self.most_in_flight = 0
        self.count = 0
        self.closed = False
        self.names: list[str] = []

    def submit(self, work: Work) -> Ticket:
        with self.lock:
            self.count += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.names.append(work.name)
            serial = self.count
        return Ticket(job_id=f"t-{serial}", accepted=time.time(), phases={"ledger": 0.001})

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        started = time.time()
        time.sleep(min(self.run_s, timeout))
        with self.lock:
            self.in_flight -= 1
        serial = int(ticket.job_id.split("-")[1])
        ok = not (self.fail_every and serial % self.fail_every == 0)
        return Finished(
            ok=ok,
            started=started,
            ended=time.time(),
            error=None if ok else "exit code 1",
            run_s=self.run_s,
        )

    def abandon(self, ticket: Ticket) -> None:
        raise AssertionError("no job should be abandoned")

    def warnings(self) -> list[str]:
        return []

    def close(self) -> None:
        self.closed = True


def test_closed_model_keeps_exactly_the_level_in_flight_and_records_every_job() -> None:
    backend = TimedBackend(run_s=0.02)
    events: list[object] = []
    result = Ramp(scenario(levels=(1, 4)), backend, on_event=events.append).run()
    assert backend.most_in_flight == 4  # reached, never exceeded
    assert backend.closed
    assert [lv.level for lv in result.levels] == [1.0, 4.0]
    one, four = result.levels
    assert one.failed == 0 and four.failed == 0
    assert four.completed > one.completed  # four submitters did more than one
    assert one.phases["ledger"] == pytest.approx(0.001)
    assert one.phases["run"] == pytest.approx(0.02)
    # The progress callback saw each level start and end, in order.
    kinds = [(type(e).__name__, getattr(e, "level", None)) for e in events]
    assert kinds[0] == ("LevelStarted", 1.0) and kinds[-1][0] == "LevelDone"
    assert sum(isinstance(e, LevelStarted) for e in events) == 2
    assert sum(isinstance(e, LevelDone) for e in events) == 2
    assert result.backend == "timed" and result.scenario["name"] == "unit"


def test_failed_jobs_count_as_failures_with_their_error() -> None:
    backend = TimedBackend(run_s=0.005, fail_every=2)
    result = Ramp(scenario(levels=(2,)), backend).run()
    level = result.levels[0]
    assert level.failed > 0 and level.completed > 0
    assert level.failure_rate == pytest.approx(level.failed / (level.failed + level.completed))
    assert any("exit code" in message for message in level.errors)


class RefusingBackend(NoopBackend):
    name = "refusing"

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def submit(self, work: Work) -> Ticket:
        self.calls += 1
        raise SubmitRefused("the pool can never satisfy this request: no slice has 9 TB")


def test_refused_submissions_fail_and_are_not_retried_in_a_hot_loop() -> None:
    backend = RefusingBackend()
    result = Ramp(scenario(levels=(2,), hold_s=0.5), backend).run()
    level = result.levels[0]
    assert level.completed == 0 and level.failed > 0 and level.failure_rate == 1.0
    # Two submitters backing off 50 ms each over 0.5 s: about 20 calls, never thousands.
    assert backend.calls <= 2 * (0.5 / 0.05 + 2)
    assert "no slice has" in next(iter(level.errors))


class HangingBackend(TimedBackend):
    """Jobs never end; abandon records the ticket."""

    name = "hanging"

    def __init__(self) -> None:
        super().__init__()
        self.abandoned: list[str] = []

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        time.sleep(timeout)
        return None

    def abandon(self, ticket: Ticket) -> None:
        self.abandoned.append(ticket.job_id)


def test_jobs_that_never_end_are_abandoned_by_their_time_out() -> None:
    backend = HangingBackend()
    started = time.monotonic()
    # A 1 s hold: both submitters start inside it even on a loaded machine.
    result = Ramp(scenario(levels=(2,), hold_s=1.0, job_timeout_s=0.3, drain_s=5.0), backend).run()
    elapsed = time.monotonic() - started
    level = result.levels[0]
    assert {"t-1", "t-2"} <= set(backend.abandoned)  # both submitters' jobs, and any later
    assert level.failed == len(backend.abandoned) and level.completed == 0
    assert any(message.startswith("timed out after") for message in level.errors)
    assert elapsed < 5.0  # the job time-out, not the drain, ended the wait


def test_jobs_still_running_when_the_drain_ends_are_abandoned() -> None:
    backend = HangingBackend()
    result = Ramp(scenario(levels=(1,), hold_s=0.2, job_timeout_s=30.0, drain_s=0.2), backend).run()
    assert backend.abandoned == ["t-1"]
    assert "still running when the level's drain ended" in result.levels[0].errors


def test_open_model_drops_arrivals_when_no_worker_is_free() -> None:
    backend = TimedBackend(run_s=1.0)
    ramp = Ramp(
        scenario(model="open", levels=(40,), hold_s=0.5, drain_s=3.0),
        backend,
        open_workers=2,
    )
    level = ramp.run().levels[0]
    assert backend.most_in_flight == 2
    assert level.submitted == 2
    # 40/s for 0.5 s is 20 arrivals; the two workers were busy for all but the first two.
    assert 15 <= level.dropped <= 19


def test_open_model_measures_from_the_planned_arrival() -> None:
    backend = TimedBackend(run_s=0.01)
    level = Ramp(scenario(model="open", levels=(20,), hold_s=0.5), backend).run().levels[0]
    assert level.dropped == 0
    assert 8 <= level.submitted <= 11  # 20/s over 0.5 s, give or take the window edges
    assert level.turnaround.p50 is not None and level.turnaround.p50 >= 0.01


def test_the_ramp_stops_after_thresholds_break_at_two_levels_in_a_row() -> None:
    never = parse_threshold("throughput > 1000000/s")
    backend = TimedBackend(run_s=0.01)
    result = Ramp(scenario(levels=(1, 2, 3, 4), hold_s=0.2, thresholds=(never,)), backend).run()
    assert [lv.level for lv in result.levels] == [1.0, 2.0]
    assert result.stopped_early and "2 levels in a row" in result.stopped_early
    assert not result.thresholds_ok
    assert result.levels[0].thresholds[0].expr == "throughput > 1000000/s"


def test_interrupt_ends_the_level_early_and_keeps_what_was_measured() -> None:
    backend = TimedBackend(run_s=0.01)
    ramp = Ramp(scenario(levels=(1, 2), hold_s=30.0), backend)
    timer = threading.Timer(0.4, ramp.interrupt)
    timer.start()
    started = time.monotonic()
    result = ramp.run()
    timer.cancel()
    assert time.monotonic() - started < 10.0
    assert len(result.levels) == 1
    assert result.stopped_early == "interrupted during level 1"
    level = result.levels[0]
    assert level.completed > 0
    assert level.window_s < 5.0  # cut at the interrupt, not the 30 s hold
    assert backend.closed


def test_a_broken_backend_stops_the_ramp_as_a_harness_error_and_is_closed() -> None:
    class Exploding(TimedBackend):
        def submit(self, work: Work) -> Ticket:
            raise RuntimeError("boom")

    backend = Exploding()
    started = time.monotonic()
    with pytest.raises(HarnessError, match="level 1: RuntimeError: boom"):
        Ramp(scenario(levels=(1, 2), hold_s=30.0), backend).run()
    assert time.monotonic() - started < 10.0  # it did not sit out the 30 s hold
    assert backend.closed


def test_a_submit_that_never_returns_is_a_harness_error_not_an_endless_wait() -> None:
    class Stuck(TimedBackend):
        def submit(self, work: Work) -> Ticket:
            time.sleep(30)  # a lock that is never granted
            raise AssertionError("unreachable in this test")

    ramp = Ramp(scenario(levels=(3, 4), hold_s=0.1, drain_s=0.2), Stuck())
    ramp.join_margin_s = 0.5
    started = time.monotonic()
    with pytest.raises(HarnessError, match=r"level 3: 3 worker\(s\) still busy"):
        ramp.run()
    assert time.monotonic() - started < 5.0  # one margin for all three, not three


class VirtualTimesBackend(NoopBackend):
    """Jobs end at once, but report the times of a slow system on a virtual clock: the
    launch (like sbatch) takes LAUNCH_S inside submit, then the job waits QUEUE_S for a
    slice before it starts on its node. Nothing sleeps."""

    name = "virtual"
    LAUNCH_S, QUEUE_S = 0.2, 0.03

    def submit(self, work: Work) -> Ticket:
        ticket = super().submit(work)
        ticket.phases = {"launch": self.LAUNCH_S}
        return ticket

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        started = ticket.accepted + self.LAUNCH_S + self.QUEUE_S
        return Finished(ok=True, started=started, ended=started + 0.01, run_s=0.01)


class PlacedBackend(NoopBackend):
    """A backend that saw the placement: it reports queue and launch itself."""

    name = "placed"

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        started = ticket.accepted + 0.5
        return Finished(
            ok=True,
            started=started,
            ended=started + 0.01,
            run_s=0.01,
            phases={"queue": 0.1, "launch": 0.4},
        )


def test_queue_wait_leaves_launch_out_and_launch_has_its_own_percentiles() -> None:
    level = Ramp(scenario(levels=(2,), hold_s=0.2), VirtualTimesBackend()).run().levels[0]
    assert level.submitted > 0
    # The distribution and the phase are the same wait: for a slice, launch excluded.
    assert level.queue_wait.p95 == pytest.approx(VirtualTimesBackend.QUEUE_S, abs=0.01)
    assert level.phases["queue"] == pytest.approx(level.queue_wait.mean, abs=0.001)
    assert level.launch.count == level.submitted
    assert level.launch.p95 == pytest.approx(VirtualTimesBackend.LAUNCH_S, rel=0.01)
    # Thresholds can hold launch to its own limit, and queue wait to its own.
    checks = ("launch.p95 < 100ms", "queue_wait.p95 < 100ms")
    judged = evaluate([parse_threshold(text) for text in checks], level)
    assert [check.ok for check in judged] == [False, True]


def test_a_backend_that_saw_the_placement_gives_queue_and_launch_as_measured() -> None:
    level = Ramp(scenario(levels=(1,), hold_s=0.2), PlacedBackend()).run().levels[0]
    assert level.queue_wait.p50 == pytest.approx(0.1, rel=0.01)  # not start - submit (0.5)
    assert level.launch.p50 == pytest.approx(0.4, rel=0.01)
    # Means over however many jobs fit in the hold: equal up to rounding, not bit for bit.
    assert level.phases["queue"] == pytest.approx(0.1)
    assert level.phases["launch"] == pytest.approx(0.4)


# -- reap: from the job's end on its node to the backend learning of it ---------------------


class EndedBackend(NoopBackend):
    """Jobs that start START_S after submit returns and run RUN_S on their node; the
    backend learns of the end REAP_S after it. Times as reported: nothing sleeps."""

    name = "ended"
    START_S, RUN_S, REAP_S = 0.05, 0.2, 0.3

    def __init__(self, **changes: object) -> None:
        super().__init__()
        self.changes = changes

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        started = ticket.accepted + self.START_S
        finished = Finished(
            ok=True, started=started, ended=started + self.RUN_S + self.REAP_S, run_s=self.RUN_S
        )
        for key, value in self.changes.items():
            setattr(finished, key, value)
        return finished


def _one_level(backend: Backend) -> tuple[LevelResult, Ramp]:
    ramp = Ramp(scenario(levels=(1,), hold_s=0.2), backend)
    [level] = ramp.run().levels
    assert level.completed > 0
    return level, ramp


def test_reap_wait_is_the_end_learned_less_the_end_on_the_node() -> None:
    finished = Finished(ok=True, started=100.0, ended=103.5, run_s=2.0)
    assert reap_wait(finished) == pytest.approx(1.5)
    assert reap_wait(Finished(ok=True, started=100.0, ended=103.5, run_s=None)) is None
    assert reap_wait(Finished(ok=False, started=None, ended=103.5, run_s=2.0)) is None
    # A node clock ahead of the workstation's: below zero, for the runner to judge.
    assert reap_wait(Finished(ok=True, started=100.0, ended=101.0, run_s=2.0)) == -1.0


def test_the_runner_measures_reap_from_the_node_s_start_and_run() -> None:
    level, ramp = _one_level(EndedBackend())
    assert level.phases["reap"] == pytest.approx(EndedBackend.REAP_S)
    assert level.phases["run"] == pytest.approx(EndedBackend.RUN_S)
    assert ramp.notes == []


@pytest.mark.parametrize("unknown", ["run_s", "started"])
def test_reap_is_absent_not_zero_where_the_end_on_the_node_is_unknown(unknown: str) -> None:
    level, _ = _one_level(EndedBackend(**{unknown: None}))
    assert "reap" not in level.phases


def test_a_reap_the_backend_measured_is_kept() -> None:
    level, _ = _one_level(EndedBackend(phases={"reap": 0.07}))
    assert level.phases["reap"] == pytest.approx(0.07)  # not the 0.3 the times would give


def test_a_node_clock_ahead_leaves_reap_out_and_says_so() -> None:
    # Learned 1 s "before" the job ended on its node: the clocks disagree.
    level, ramp = _one_level(EndedBackend(ended=0.0))
    assert "reap" not in level.phases
    [note] = ramp.notes
    assert "ahead of this workstation's" in note and "reap times are left out" in note


def test_an_end_learned_at_once_is_a_measured_zero() -> None:
    level, ramp = _one_level(NoopBackend())  # started = accepted, run 0, ended after
    assert level.phases["reap"] >= 0.0 and level.phases["reap"] < 0.05
    assert ramp.notes == []
