"""The backend that measures gpupoolctl itself: every job goes through `Jobs.submit`, the
same path as `gpupoolctl submit` (ledger transaction, placement, launch through the agent).

Each submitting thread gets its own Jobs (own ledger handle), as separate `submit` processes
would. One reaper thread does what `gpupoolctl jobs` does (recover, reap, schedule) every
`poll_s` while anything is outstanding, and wakes the threads whose jobs ended. Time spent in
ledger transactions is metered per thread, so a knee can be attributed.

A job is placed and launched by whichever scheduling pass gets to it first (its own submit,
another submitter's, the reaper's), so each job's queue wait and launch come from a timeline
that every Jobs this backend made writes into: when the ledger recorded it queued, when it
recorded its placement (its slice granted), when the agent call that launched it returned,
all on this workstation's clock. Queue wait is placement less queued: the wait for a slice,
launch excluded; launch is its own phase.

What the reaper's heartbeat sees happen to hosts (a node declared lost, one that returned)
is kept with the time this backend saw it, so that the ramp counts lost nodes per level
(events_between). The passes that see it are the reaper's and each submit's (a submit reaps
first, as `gpupoolctl submit` does).

A job that failed with nothing but an exit code gets the last line its command wrote to
stderr as its reason (the workload's own words: "matmul: neither PyTorch nor CuPy can be
imported ..."), read from its node once it ended, outside the measured times.

Nodes are reached through `run`; the CLI gives it agent sessions (gpupoolctl.remote.session:
one agent process per host for the whole ramp, as a long-running pool would), closed by
`close_run` at the end of close().
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from time import perf_counter
from typing import TYPE_CHECKING, Any

from gpupoolctl.errors import GpupoolError
from gpupoolctl.jobs import Jobs, Nodes
from gpupoolctl.jobs.events import Event, NodeLost, NodeReturned
from gpupoolctl.jobs.repartition import Unanswered
from gpupoolctl.ledger.state import JOB_TERMINAL
from gpupoolctl.stress.backend import Finished, SubmitRefused, Ticket, Work

if TYPE_CHECKING:
    from gpupoolctl.jobs.nodes import Call, Runner
    from gpupoolctl.jobs.spec import JobSpec
    from gpupoolctl.ledger import Ledger
    from gpupoolctl.policy import PoolPolicy
    from gpupoolctl.remote.results import HostResult
    from gpupoolctl.remote.target import Target

_LEDGER_CALLS = {"read", "write", "refresh_slices"}
STDERR_TAIL_BYTES = 4096  # enough for a workload's last line, little to ask a node for
_STAMPED_STATES = {"queued": "queued", "pending": "placed"}  # job record state -> stamp
NODE_EVENTS = (NodeLost, NodeReturned)  # pass events kept (as dicts) for events_between


class Timeline:
    """When each job was queued, placed and launched, on this workstation's clock, whichever
    thread's Jobs did it. Thread-safe; a job's stamps are kept until taken."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._stamps: dict[str, dict[str, float]] = {}

    def _stamp(self, job_id: str, what: str, at: float) -> None:
        with self._lock:
            # The first of each: a job queued again (preempted, requeued) keeps its first
            # wait, so the harness never reports less waiting than there was.
            self._stamps.setdefault(job_id, {}).setdefault(what, at)

    def saw_records(self, records: Iterable[dict[str, Any]]) -> None:
        """A ledger write returned (committed) with these records."""
        at = self._clock()
        for record in records:
            data = record.get("data") or {}
            what = _STAMPED_STATES.get(str(data.get("state")))
            if record.get("op") == "job" and what is not None and data.get("id"):
                self._stamp(str(data["id"]), what, at)

    def saw_launch(self, calls: Sequence[Call]) -> None:
        """The agent calls that launched these jobs returned."""
        at = self._clock()
        for call in calls:
            if call.verb == "launch" and call.args.get("job_id"):
                # The node's id is the job's, or `<job>.<run>` for a later run.
                self._stamp(str(call.args["job_id"]).split(".", 1)[0], "launched", at)

    def take(self, job_id: str) -> dict[str, float]:
        """The job's "queue" (queued to placed) and "launch" (placed to launched) phases,
        those that were seen; its stamps are forgotten."""
        with self._lock:
            stamps = self._stamps.pop(job_id, {})
        phases = {}
        queued, placed, launched = (stamps.get(k) for k in ("queued", "placed", "launched"))
        if queued is not None and placed is not None:
            phases["queue"] = max(0.0, placed - queued)
        if placed is not None and launched is not None:
            phases["launch"] = max(0.0, launched - placed)
        return phases

    def forget(self, job_id: str | None = None) -> None:
        """Drop one job's stamps, or everyone's."""
        with self._lock:
            if job_id is None:
                self._stamps.clear()
            else:
                self._stamps.pop(job_id, None)


class Meter:
    """Seconds per phase for one thread's Jobs (a Jobs is used by one thread only)."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def take(self) -> dict[str, float]:
        taken, self.seconds = self.seconds, {}
        return taken


class MeteredLedger:
    """The ledger, with the time of each read and write added to a meter, and the jobs each
    write queued or placed stamped on a timeline."""

    def __init__(self, inner: Ledger, meter: Meter, timeline: Timeline | None = None) -> None:
        self._inner = inner
        self._meter = meter
        self._timeline = timeline

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._inner, name)
        if name not in _LEDGER_CALLS:
            return value

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = perf_counter()
            try:
                done = value(*args, **kwargs)
            finally:
                self._meter.add("ledger", perf_counter() - start)
            records = getattr(done, "records", None)
            if self._timeline is not None and name == "write" and records:
                self._timeline.saw_records(records)
            return done

        return timed


class MeteredNodes(Nodes):
    """Nodes whose agent calls (SSH or local exec) are added to a meter ("agent": not a
    phase of any one job, as a pass polls and launches many), and whose launches are
    stamped on a timeline (a job's own "launch" phase)."""

    def __init__(
        self, targets: Sequence[Target], run: Runner, meter: Meter, timeline: Timeline | None = None
    ) -> None:
        super().__init__(targets, run)
        self._meter = meter
        self._timeline = timeline

    def call(self, calls: Sequence[Call]) -> list[HostResult]:
        start = perf_counter()
        try:
            return super().call(calls)
        finally:
            self._meter.add("agent", perf_counter() - start)
            if self._timeline is not None:
                self._timeline.saw_launch(calls)


@dataclass
class _Waiter:
    event: threading.Event = field(default_factory=threading.Event)
    finished: Finished | None = None
    read_stderr: bool = False  # failed with no reason but its exit: ask its node why


def transport_of(targets: Sequence[Target]) -> str | None:
    kinds = {t.transport for t in targets}
    if not kinds:
        return None
    return kinds.pop() if len(kinds) == 1 else "mixed"


class PoolBackend:
    name = "pool"

    def __init__(
        self,
        *,
        open_ledger: Callable[[], Ledger],
        targets: Sequence[Target],
        run: Runner,
        owner: str,
        hosts: set[str] | None,
        make_spec: Callable[[Work], JobSpec],
        poll_s: float = 0.2,
        policy: PoolPolicy | None = None,
        in_hosts: Callable[[str, str], bool] | None = None,
        close_run: Callable[[], None] | None = None,
    ) -> None:
        self._open_ledger = open_ledger
        # What ends `run`'s agents (a SessionPool's close), last thing close() does.
        self._close_run = close_run
        # The pool policy the passes run with (elastic re-cuts), as every command's do.
        self._policy = policy
        self._in_hosts = in_hosts
        self._targets = list(targets)
        self._run = run
        self._owner = owner
        self._hosts = hosts
        self._make_spec = make_spec
        self.poll_s = poll_s
        self.transport = transport_of(self._targets)
        self._idle: list[tuple[Jobs, Meter]] = []
        self._made: list[Jobs] = []
        self._lock = threading.Lock()
        self._waiting: dict[str, _Waiter] = {}
        self._outstanding: set[str] = set()
        self._warnings: list[str] = []
        self.hosts_failed = False  # some host failed or was unreachable at some call: exit 3
        self._closed = threading.Event()
        self._reaper: threading.Thread | None = None
        self._reaper_jobs: Jobs | None = None
        self._reaper_failure: str | None = None
        self.timeline = Timeline()
        self._stderr_warned = False
        self._node_events: list[dict[str, Any]] = []  # NODE_EVENTS, each with "seen"
        self._unanswered = Unanswered()  # shared by every Jobs of this backend (_new_jobs)

    # -- plumbing ---------------------------------------------------------------------------

    def _new_jobs(self) -> tuple[Jobs, Meter]:
        meter = Meter()
        ledger: Any = MeteredLedger(self._open_ledger(), meter, self.timeline)
        nodes = MeteredNodes(self._targets, self._run, meter, self.timeline)
        jobs = Jobs(
            ledger,
            nodes,
            owner=self._owner,
            hosts=self._hosts,
            policy=self._policy,
            in_hosts=self._in_hosts,
        )
        # One loop however many Jobs serve it: a re-cut's unanswered request is known to
        # whichever thread's Jobs runs the next pass.
        jobs.unanswered = self._unanswered
        return jobs, meter

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[tuple[Jobs, Meter]]:
        """A Jobs (own ledger handle, own meter) for one call: an idle one, or a new one.
        At most as many exist as calls ran at once, and close() closes them all (one per
        thread would leak a lock descriptor per submitter per level)."""
        with self._lock:
            pair = self._idle.pop() if self._idle else None
        if pair is None:
            pair = self._new_jobs()
            with self._lock:
                self._made.append(pair[0])
        try:
            yield pair
        finally:
            with self._lock:
                self._idle.append(pair)

    def _collect(self, jobs: Jobs) -> None:
        """Move a Jobs' warnings into the run's (a Jobs lives for many submits), and the
        node events its passes saw that no refresh outcome handed over (a submit's reap)."""
        for message in jobs.warnings:
            self._warn(message)
        jobs.warnings.clear()
        pending = getattr(jobs, "node_events", None)
        if pending:
            self._saw(pending)
            jobs.node_events = []
        if jobs.hosts_failed:
            self.hosts_failed = True
        jobs.hosts_failed = False

    def warnings(self) -> list[str]:
        with self._lock:
            return list(self._warnings)

    def _warn(self, message: str) -> None:
        with self._lock:
            if message not in self._warnings:
                self._warnings.append(message)

    def _saw(self, events: Iterable[Event]) -> None:
        """Keep a pass's node events, as their dicts stamped with when this backend saw
        them."""
        now = time.time()
        kept = [
            {**event.to_dict(), "seen": now} for event in events if isinstance(event, NODE_EVENTS)
        ]
        if kept:
            with self._lock:
                self._node_events.extend(kept)

    def events_between(self, start: float, end: float) -> list[dict[str, Any]]:
        """The node events (NODE_EVENTS) seen in [start, end), oldest first."""
        with self._lock:
            return [dict(e) for e in self._node_events if start <= e["seen"] < end]

    def prepare(self, shapes: Sequence[Any] = ()) -> None:
        """Read slices from the nodes once, before any clock runs (as `submit` would on
        its first use), so the first level does not pay for inventory; then check each
        request shape as `submit` would, so that a name no catalog or slice of the pool has
        (a profile typo, a --host matching no host) stops the run before it starts."""
        from gpupoolctl.sched.names import check_names

        with self._borrow() as (jobs, meter):
            jobs.ensure_slices()
            meter.take()
            self._collect(jobs)
            slices = list(jobs.read().state.slices.values())
        for shape in shapes:
            spec = self._make_spec(Work(argv=["true"], name="prepare", shape=shape))
            spec.validate()
            check_names(spec.request, slices)

    # -- the Backend protocol ----------------------------------------------------------------

    def submit(self, work: Work) -> Ticket:
        from gpupoolctl.jobs import submitting
        from gpupoolctl.jobs.errors import NeverFits

        with self._borrow() as (jobs, meter):
            meter.take()
            try:
                outcome = submitting.submit(jobs, self._make_spec(work))
            except NeverFits as exc:
                raise SubmitRefused(str(exc)) from None
            except GpupoolError as exc:
                raise SubmitRefused(f"submit failed: {exc}") from None
            finally:
                self._collect(jobs)
            accepted = time.time()
            phases = {k: v for k, v in meter.take().items() if k == "ledger"}
        ticket = Ticket(job_id=str(outcome.job_id), accepted=accepted, phases=phases)
        if outcome.state in JOB_TERMINAL:
            ticket.finished = Finished(
                ok=outcome.state == "done",
                started=None,
                ended=accepted,
                error=outcome.reason or f"job {outcome.state} at submit",
                phases=self.timeline.take(ticket.job_id),
            )
        else:
            with self._lock:
                self._outstanding.add(ticket.job_id)
        return ticket

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        """The job's end, or None after `timeout`. The job's waiter stays registered until
        its end is taken (or the job is abandoned): a reaper pass that outlasts one short
        wait must still find it."""
        if ticket.finished is not None:
            return ticket.finished
        with self._lock:
            self._raise_if_reaper_failed()
            waiter = self._waiting.setdefault(ticket.job_id, _Waiter())
            if self._reaper is None:
                self._reaper = threading.Thread(
                    target=self._reap_loop, name="stress-reaper", daemon=True
                )
                self._reaper.start()
        waiter.event.wait(timeout)
        with self._lock:
            self._raise_if_reaper_failed()
            finished = waiter.finished
            if finished is None:
                return None
            self._waiting.pop(ticket.job_id, None)
        finished.phases.update(self.timeline.take(ticket.job_id))
        if waiter.read_stderr:
            finished = self._with_stderr_reason(ticket.job_id, finished)
        return finished

    def _with_stderr_reason(self, job_id: str, finished: Finished) -> Finished:
        """The failed job's error, and the last line its command wrote to stderr: the
        workload's own reason. Asked of its node after the job ended (its turnaround is
        already taken); a node that cannot say leaves the error as it was."""
        from gpupoolctl.jobs import logs

        with self._borrow() as (jobs, meter):
            try:
                chunk = logs.logs(
                    jobs,
                    job_id,
                    stream="stderr",
                    offset=-STDERR_TAIL_BYTES,
                    max_bytes=STDERR_TAIL_BYTES,
                )
            except GpupoolError as exc:
                if not self._stderr_warned:
                    self._stderr_warned = True
                    self._warn(f"a failed job's stderr could not be read for its reason: {exc}")
                return finished
            finally:
                meter.take()
                self._collect(jobs)
        line = last_line(chunk.get("text"))
        if not line:
            return finished
        return replace(finished, error=f"{finished.error}: {line}" if finished.error else line)

    def _raise_if_reaper_failed(self) -> None:
        if self._reaper_failure is not None:
            raise RuntimeError(f"the reaper stopped: {self._reaper_failure}")

    def abandon(self, ticket: Ticket) -> None:
        from gpupoolctl.jobs import cancelling

        with self._borrow() as (jobs, _):
            try:
                cancelling.cancel(jobs, ticket.job_id, grace_s=0)
            except GpupoolError as exc:
                self._warn(f"{ticket.job_id}: could not cancel: {exc}")
            with self._lock:
                self._outstanding.discard(ticket.job_id)
                self._waiting.pop(ticket.job_id, None)
            self.timeline.forget(ticket.job_id)
            self._collect(jobs)

    def close(self) -> None:
        """Stop the reaper, cancel what is still queued or running, record what ended.
        Problems here are warnings: they must not cost the run its measurements."""
        self._closed.set()
        if self._reaper is not None:
            self._reaper.join(timeout=60)
        try:
            with self._lock:
                left = sorted(self._outstanding)
            with self._borrow() as (jobs, _):
                if left:
                    self._cancel_left(jobs, left)
                self._collect(jobs)
        except GpupoolError as exc:
            self._warn(f"clean-up: {exc}")
        finally:
            reaper_done = self._reaper is None or not self._reaper.is_alive()
            handles = [
                *self._made,
                *([self._reaper_jobs] if self._reaper_jobs and reaper_done else []),
            ]
            for made in handles:
                made.ledger.close()
            self.timeline.forget()
            if self._close_run is not None:
                self._close_run()

    def _cancel_left(self, jobs: Jobs, left: list[str]) -> None:
        from gpupoolctl.jobs import cancelling, refreshing

        try:
            refreshing.refresh(jobs)  # record the ones that ended meanwhile
        except GpupoolError as exc:
            self._warn(f"clean-up: {exc}")
        state = jobs.read().state
        for job_id in left:
            if job_id in state.jobs:
                try:
                    cancelling.cancel(jobs, job_id, grace_s=0)
                except GpupoolError as exc:
                    self._warn(f"clean-up: {job_id}: {exc}")

    # -- the reaper -------------------------------------------------------------------------

    def _reap_loop(self) -> None:
        try:
            self._reap_until_closed()
        except BaseException as exc:
            with self._lock:
                self._reaper_failure = f"{type(exc).__name__}: {exc}"
                waiters = list(self._waiting.values())
            for waiter in waiters:
                waiter.event.set()  # they re-raise it: the ramp stops as a harness error

    def _reap_until_closed(self) -> None:
        from gpupoolctl.jobs import refreshing

        jobs, meter = self._new_jobs()
        self._reaper_jobs = jobs
        while not self._closed.wait(self.poll_s):
            with self._lock:
                pending = [j for j, w in self._waiting.items() if w.finished is None]
            if not pending:
                continue
            try:
                outcome = refreshing.refresh(jobs)
                self._saw(getattr(outcome, "events", None) or ())
                state = jobs.read().state
            except GpupoolError as exc:
                self._warn(str(exc))
                continue
            finally:
                meter.take()
                self._collect(jobs)
            now = time.time()
            for job_id in pending:
                record = state.finished.get(job_id)
                if record is None and job_id in state.jobs:
                    continue
                finished = (
                    finished_from(record, now)
                    if record is not None
                    else Finished(ok=False, started=None, ended=now, error="job left the ledger")
                )
                with self._lock:
                    # Looked up now, not from a copy: the thread may have re-registered.
                    waiter = self._waiting.get(job_id)
                    self._outstanding.discard(job_id)
                    if waiter is not None:
                        waiter.read_stderr = record is not None and unexplained(record)
                        waiter.finished = finished
                if waiter is not None:
                    waiter.event.set()


def finished_from(record: dict[str, Any], now: float) -> Finished:
    """A finished job's ledger record -> what the harness needs of it. `now` is when the
    reaper read the record (time.time(), as the nodes' start and end times are): the run
    is the nodes' first start to their last end, so the runner's "reap" phase is `now` less
    that end. (A job whose nodes never reported an end has the pass's own time as its end.)"""
    starts = [float(n["started"]) for n in record.get("nodes") or [] if n.get("started")]
    started = min(starts) if starts else None
    ended_on_node = record.get("ended")
    run_s = None
    if started is not None and isinstance(ended_on_node, int | float) and ended_on_node:
        run_s = max(0.0, float(ended_on_node) - started)
    state = record.get("state")
    error = None
    if state != "done":
        code, signal = record.get("exit_code"), record.get("signal")
        error = record.get("error") or record.get("reason")
        if error is None:
            if code is not None:
                error = f"exit code {code}"
            elif signal:
                error = f"killed by signal {signal}"
            else:
                error = f"job {state}"
    restarts = record.get("restarts")
    if isinstance(restarts, bool) or not isinstance(restarts, int) or restarts < 0:
        restarts = 0
    finished = Finished(
        ok=state == "done",
        started=started,
        ended=now,
        error=error,
        run_s=run_s,
        restarts=restarts,
    )
    apply_report(finished, record.get("report"))
    return finished


def apply_report(finished: Finished, report: Any) -> None:
    """A job's own report (the numeric summary the reaper kept on its final record, see
    gpupoolctl.agent.workloads.report) -> phases compute/comm, comm_links, work, bound_by."""
    from gpupoolctl.agent.workloads.report import summary

    usable = summary(report)
    if usable is None:
        return
    for key, phase in (("compute_s", "compute"), ("comm_s", "comm")):
        if key in usable:
            finished.phases[phase] = usable[key]
    if "samples" in usable:
        finished.work = float(usable["samples"])
    finished.comm_links = dict(usable.get("comm_links") or {})
    finished.bound_by = usable.get("bound_by")


def unexplained(record: dict[str, Any]) -> bool:
    """A failed job whose record says only how it exited: its command ran, and its reason
    is on its stderr."""
    return (
        record.get("state") == "failed"
        and not record.get("error")
        and not record.get("reason")
        and (record.get("exit_code") is not None or bool(record.get("signal")))
    )


def last_line(text: Any) -> str | None:
    """The last non-blank line of `text`, stripped; None when there is none."""
    if not isinstance(text, str):
        return None
    for line in reversed(text.splitlines()):
        if line.strip():
            return line.strip()
    return None
