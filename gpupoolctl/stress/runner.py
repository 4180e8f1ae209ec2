"""The ramp: drive a backend level by level and sum each level up.

Closed model: N submitter threads, each submits a job, waits for it to end, and goes again
until the level's hold ends. Open model: jobs arrive on a fixed schedule (rate per second)
whatever the system does; an arrival with no free worker is dropped and counted, as k6 does,
because a late arrival would hide the very saturation being measured. Open-model latencies
are measured from the arrival's planned time (no coordinated omission).

Every loop is bounded by the level's clock (warm-up + hold + drain) and every job by the
scenario's job time-out. Jobs still running when a level's drain ends are abandoned (cancelled
and counted as failed), so a level never leaks load into the next.
"""

from __future__ import annotations

import math
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass
from time import perf_counter
from typing import Any

from gpupoolctl.errors import GpupoolError
from gpupoolctl.stress.backend import CLOCK_SKEW_S, Backend, Finished, SubmitRefused, Work
from gpupoolctl.stress.clock import Clock, Joinable, WallClock
from gpupoolctl.stress.model import LevelResult, RunResult, Sample, inferred_queue


def reap_wait(finished: Finished) -> float | None:
    """Seconds from the job's end on its node (its start there plus its run time) to the
    backend learning that it ended: the "reap" phase, before any clamping (below 0 only
    where the node's clock runs ahead of the one `ended` was read on). None where the end
    on the node is not known (the job never started, or its run time was not reported)."""
    if finished.started is None or finished.run_s is None:
        return None
    return finished.ended - (finished.started + finished.run_s)


class HarnessError(GpupoolError):
    """The harness or its backend broke (not the system under test being slow): exit 1."""


REFUSED_BACKOFF_S = 0.05  # a refused submit is retried no faster than this (no hot loop)
MAX_OPEN_WORKERS = 1024
WAIT_SLICE_S = 0.5
JOIN_MARGIN_S = 60.0


@dataclass(frozen=True)
class LevelStarted:
    index: int
    total: int
    level: float
    seconds: float  # warm-up + hold


@dataclass(frozen=True)
class LevelDone:
    index: int
    total: int
    result: LevelResult


Event = LevelStarted | LevelDone


class _Level:
    """One level's shared state: the clock, the samples, the stop signal."""

    def __init__(self, scenario: Any, index: int, level: float, clock: Clock) -> None:
        start = clock.now()
        self.clock = clock
        self.scenario = scenario
        self.index = index
        self.level = level
        self.start = start
        self.warm_end = start + scenario.warmup_s
        self.hold_end = self.warm_end + scenario.hold_s
        self.drain_end = self.hold_end + scenario.drain_s
        self.samples: list[Sample] = []
        self.dropped = 0
        self.lock = threading.Lock()
        self.stop = clock.event()  # set on interrupt: submit nothing more
        self.stopped_at: float | None = None
        self.crash: BaseException | None = None  # the first unexpected error of a worker

    def guarded(self, target: Callable[..., None]) -> Callable[..., None]:
        """A worker body whose unexpected error stops the level instead of vanishing
        with its thread (it is re-raised by the runner as a harness error)."""

        def run(*args: Any) -> None:
            try:
                target(*args)
            except BaseException as exc:
                with self.lock:
                    if self.crash is None:
                        self.crash = exc
                self.halt()

        return run

    def halt(self) -> None:
        if not self.stop.is_set():
            self.stopped_at = self.clock.now()
            self.stop.set()

    def window(self) -> tuple[float, float]:
        """The steady window, cut short when the level was interrupted."""
        end = self.hold_end if self.stopped_at is None else min(self.hold_end, self.stopped_at)
        return (self.warm_end, max(self.warm_end, end))

    def submitting(self) -> bool:
        return not self.stop.is_set() and self.clock.now() < self.hold_end

    def record(self, sample: Sample) -> None:
        with self.lock:
            self.samples.append(sample)


class Ramp:
    join_margin_s = JOIN_MARGIN_S  # after a level's drain, for a last abandon to return

    def __init__(
        self,
        scenario: Any,
        backend: Backend,
        *,
        on_event: Callable[[Event], None] | None = None,
        open_workers: int | None = None,
        clock: Clock | None = None,
    ) -> None:
        # The wall clock, or a VirtualClock shared with the backend (see stress.clock).
        self.clock: Clock = clock or WallClock()
        self.scenario = scenario
        self.open_workers = open_workers  # open model: jobs in flight at most (None: auto)
        self.backend = backend
        self.on_event = on_event or (lambda event: None)
        self._shapes = list(scenario.requests)
        self._weights = [float(s.weight) for s in self._shapes]
        self._argv = scenario.workload.argv()
        self._current: _Level | None = None
        self.interrupted = False
        self.notes: list[str] = []  # for the CLI's stderr: things that weaken the numbers
        self._skew = {"behind": 0.0, "ahead": 0.0}  # the most seen each way, in seconds

    # -- one job ----------------------------------------------------------------------------

    def _one(self, lvl: _Level, rng: random.Random, serial: str, planned: float | None) -> None:
        """Submit one job, wait for it, record the sample (with the harness's own cost)."""
        begin = perf_counter()
        shape = rng.choices(self._shapes, self._weights)[0]
        work = Work(argv=self._argv, name=f"stress-{serial}", shape=shape)
        now = self.clock.now
        sample = Sample(level=lvl.level, submitted=planned if planned is not None else now())
        spent_in_backend = 0.0
        call = perf_counter()
        try:
            ticket = self.backend.submit(work)
        except SubmitRefused as exc:
            spent_in_backend += perf_counter() - call
            sample.ended = now()
            sample.error = str(exc)
            sample.harness_s = max(0.0, perf_counter() - begin - spent_in_backend)
            lvl.record(sample)
            lvl.stop.wait(REFUSED_BACKOFF_S)
            return
        spent_in_backend += perf_counter() - call
        sample.accepted = ticket.accepted
        sample.job_id = ticket.job_id
        sample.phases.update(ticket.phases)
        deadline = min(sample.submitted + self.scenario.job_timeout_s, lvl.drain_end)
        call = perf_counter()
        finished = None
        # In short waits, so that an interrupt is noticed within WAIT_SLICE_S.
        while finished is None and not lvl.stop.is_set():
            left = deadline - now()
            if left <= 0:
                break
            finished = self.backend.wait(ticket, min(left, WAIT_SLICE_S))
        if finished is None:
            self.backend.abandon(ticket)
            spent_in_backend += perf_counter() - call
            sample.ended = now()
            overdue = sample.submitted + self.scenario.job_timeout_s <= lvl.drain_end
            if lvl.stop.is_set():
                sample.error = "cancelled: the ramp was interrupted"
            elif overdue:
                sample.error = f"timed out after {self.scenario.job_timeout_s:g}s"
            else:
                sample.error = "still running when the level's drain ended"
        else:
            spent_in_backend += perf_counter() - call
            sample.started = finished.started
            sample.ended = finished.ended
            sample.ok = finished.ok
            sample.error = finished.error
            sample.restarts = finished.restarts
            sample.work = finished.work
            sample.comm_links = dict(finished.comm_links)
            sample.bound_by = finished.bound_by
            if finished.run_s is not None:
                sample.phases["run"] = finished.run_s
            sample.phases.update(finished.phases)
            if "reap" not in sample.phases:
                # The backend did not measure it: the node's end to the backend learning it.
                waited = reap_wait(finished)
                if waited is not None and waited < -CLOCK_SKEW_S:
                    self._note_skew(-waited, ahead=True)
                elif waited is not None:
                    sample.phases["reap"] = max(0.0, waited)
            if finished.started is not None and "queue" not in sample.phases:
                # The backend did not see the placement: inferred from the node's start.
                if finished.started < sample.submitted - CLOCK_SKEW_S:
                    self._note_skew(sample.submitted - finished.started)
                waited = inferred_queue(sample)
                if waited is not None:
                    sample.phases["queue"] = waited
        sample.harness_s = max(0.0, perf_counter() - begin - spent_in_backend)
        lvl.record(sample)

    def _node_events(self, lvl: _Level) -> list[dict[str, Any]]:
        """What the backend saw happen to nodes from the level's start to now (its end,
        drain included): a node lost while the level ran counts for it, whenever its jobs
        were submitted. A backend without events_between saw nothing."""
        events_between = getattr(self.backend, "events_between", None)
        if events_between is None:
            return []
        return list(events_between(lvl.start, self.clock.now()))

    def _note_skew(self, seconds: float, *, ahead: bool = False) -> None:
        # Queue wait compares the node's start time with the workstation's submit time;
        # reap compares the node's end time with when the workstation learned of it.
        key = "ahead" if ahead else "behind"
        if seconds <= self._skew[key]:
            return
        self._skew[key] = seconds
        notes = []
        if self._skew["behind"]:
            notes.append(
                f"a node's clock is up to {self._skew['behind']:.2f}s behind this "
                "workstation's (a job started before it was submitted): queue waits are "
                "understated; sync the clocks (NTP) and run again"
            )
        if self._skew["ahead"]:
            notes.append(
                f"a node's clock is up to {self._skew['ahead']:.2f}s ahead of this "
                "workstation's (a job ended on its node after this workstation learned it "
                "ended): those jobs' reap times are left out; sync the clocks (NTP) and run "
                "again"
            )
        self.notes[:] = notes

    # -- the two load models ----------------------------------------------------------------

    def _closed(self, lvl: _Level) -> None:
        def submitter(worker: int) -> None:
            rng = random.Random(f"{self.scenario.seed}:{lvl.index}:{worker}")
            count = 0
            while lvl.submitting():
                count += 1
                self._one(lvl, rng, f"{lvl.index}-{worker}-{count}", None)

        threads = [
            self.clock.spawn(lvl.guarded(submitter), (w,), f"stress-{w}")
            for w in range(int(lvl.level))
        ]
        self._join(lvl, threads)

    def _open(self, lvl: _Level) -> None:
        rate = float(lvl.level)
        # Enough workers for ten seconds' worth of arrivals: fewer would drop arrivals on
        # a healthy system; more would only pile threads onto a saturated one.
        workers = self.open_workers or min(MAX_OPEN_WORKERS, max(16, math.ceil(rate * 10)))
        slots = threading.BoundedSemaphore(workers)
        rng = random.Random(f"{self.scenario.seed}:{lvl.index}")
        threads: list[Joinable] = []

        def worker(serial: str, planned: float, seed: int) -> None:
            try:
                self._one(lvl, random.Random(seed), serial, planned)
            finally:
                slots.release()

        arrival = 0
        while True:
            planned = lvl.start + arrival / rate
            if planned >= lvl.hold_end or lvl.stop.is_set():
                break
            delay = planned - self.clock.now()
            if delay > 0 and lvl.stop.wait(delay):
                break
            arrival += 1
            if not slots.acquire(blocking=False):
                with lvl.lock:
                    lvl.dropped += 1 if planned >= lvl.warm_end else 0
                continue
            thread = self.clock.spawn(
                lvl.guarded(worker),
                (f"{lvl.index}-{arrival}", planned, rng.getrandbits(32)),
                f"stress-{lvl.index}-{arrival}",
            )
            threads.append(thread)
        self._join(lvl, threads)

    def _join(self, lvl: _Level, threads: list[Joinable]) -> None:
        # Every wait inside a worker ends by drain_end; the margin covers a last abandon.
        # One deadline for all: N stuck threads must not cost N margins.
        deadline = lvl.drain_end + self.join_margin_s
        for thread in threads:
            thread.join(timeout=max(0.0, deadline - self.clock.now()))
        stuck = sum(thread.is_alive() for thread in threads)
        if stuck:
            lvl.halt()
            raise HarnessError(
                f"level {lvl.level:g}: {stuck} worker(s) still busy {self.join_margin_s:g}s "
                "after the drain ended (a submit or cancel call did not return)"
            )

    # -- the ramp ---------------------------------------------------------------------------

    def interrupt(self) -> None:
        """Stop submitting (from a signal handler or another thread); run() then returns
        what was measured so far."""
        self.interrupted = True
        if self._current is not None:
            self._current.halt()

    def run(self) -> RunResult:
        from gpupoolctl.stress import knee, metrics, result, thresholds

        scenario = self.scenario
        levels: list[LevelResult] = []
        stopped: str | None = None
        total = len(scenario.levels)

        def checks(level_result: LevelResult) -> list[Any]:
            return thresholds.evaluate(scenario.thresholds, level_result)

        with self.clock.running():
            try:
                for index, level in enumerate(scenario.levels):
                    lvl = _Level(scenario, index, float(level), self.clock)
                    self._current = lvl
                    if self.interrupted:
                        lvl.halt()
                    self.on_event(LevelStarted(index, total, lvl.level, lvl.hold_end - lvl.start))
                    (self._open if scenario.model == "open" else self._closed)(lvl)
                    if lvl.crash is not None:
                        raise HarnessError(
                            f"the ramp stopped at level {level:g}: {type(lvl.crash).__name__}: "
                            f"{lvl.crash}"
                        ) from lvl.crash
                    summary = metrics.summarize_level(
                        lvl.samples,
                        level=lvl.level,
                        model=scenario.model,
                        warmup_s=scenario.warmup_s,
                        hold_s=scenario.hold_s,
                        window=lvl.window(),
                        dropped=lvl.dropped,
                        evaluate=checks if scenario.thresholds else None,
                        node_events=self._node_events(lvl),
                    )
                    levels.append(summary)
                    self.on_event(LevelDone(index, total, summary))
                    if self.interrupted:
                        stopped = f"interrupted during level {level:g}"
                        break
                    streak = thresholds.broken_streak(levels)
                    if scenario.thresholds and streak >= scenario.stop_after_breaks:
                        stopped = (
                            f"thresholds broken at {streak} levels in a row "
                            f"(last: {level:g}); higher levels not run"
                        )
                        break
            finally:
                self._current = None
                self.backend.close()
        knees = knee.knees_from_results(levels)
        return RunResult(
            scenario=scenario.to_dict(),
            levels=levels,
            knees=knees,
            backend=self.backend.name,
            transport=self.backend.transport,
            stopped_early=stopped,
            **result.environment(),
        )
