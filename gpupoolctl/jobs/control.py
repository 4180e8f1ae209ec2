"""cancel, logs, the job list, refresh (settle, reap, schedule) and following a job."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.errors import ExitCode, UsageError
from gpupoolctl.jobs import lost, reaping, scheduling, stopping
from gpupoolctl.jobs.errors import JobError, NoSuchJob
from gpupoolctl.jobs.service import JobsCore, Outcome, find
from gpupoolctl.ledger import Transaction
from gpupoolctl.policy.ownership import NotOwner, as_admin, refusal

ACTIVE = ("queued", "pending", "running")
FOLLOW_INTERVAL_S = (0.1, 1.0)  # first and longest wait between polls while following
# How long cancel asks a pending job's node(s) whether its launch started (a launch in
# progress there answers "starting" for the moment it takes to start the process).
CANCEL_SETTLE_S = 10.0


def cancel(
    jobs: JobsCore,
    job_id: str,
    grace_s: float | None = None,
    *,
    settle_s: float = CANCEL_SETTLE_S,
    sleep: Callable[[float], None] = time.sleep,
) -> dict[str, Any]:
    """Cancel a job in any state it can be in, whoever else is working on it.

    One transaction decides on the job as the ledger has it then: a queued job leaves the
    queue, cancelled (a schedule pass that read it earlier finds it gone when it goes to
    claim slices for it); a pending or running one is marked `cancel`. A pending job is then
    settled on its node(s) with a fencing poll, so a launch still in flight can no longer
    start it: never started -> released, cancelled; started -> stopped like a running job
    (SIGTERM, grace, SIGKILL), released, cancelled. When its node cannot tell within
    `settle_s` seconds, JobError; the mark stays, and whoever records the launch stops it.

    Only the job's owner or a pool admin (`jobs.owner`, `jobs.admin`) may cancel it
    (NotOwner otherwise, nothing recorded); an admin's cancel of another user's job is
    recorded `"as_admin": true` (in the cancel mark of a pending or running job).
    """

    def ask(tx: Transaction) -> dict[str, Any]:
        current = tx.state.jobs.get(job_id)
        if current is None:
            ended = tx.state.finished.get(job_id)
            if ended is None:
                raise NoSuchJob(f"no job {job_id!r} (see `gpupoolctl jobs --all`)")
            raise JobError(f"{job_id} has already ended ({ended.get('state')})")
        by_admin = _check_owner(jobs, "cancel", current)
        if current.get("state") == "queued":
            for entry in list(tx.state.queue.values()):
                if entry.get("job") == job_id:
                    tx.append("dequeue", {"id": entry["id"], "reason": "cancelled"})
            ended_now = {"id": job_id, "state": "cancelled", "reason": "cancelled", **by_admin}
            tx.append("job", ended_now)
            return tx.state.finished[job_id]
        grace = grace_s if grace_s is not None else float(current.get("grace_s") or 0)
        # In the mark, not beside it: a mark is cleared when the job is placed again.
        mark = {"at": time.time(), "grace_s": grace, **by_admin}
        tx.append("job", {"id": job_id, "state": current["state"], "cancel": mark})
        return tx.state.jobs[job_id]

    job = jobs.ledger.write(ask).value
    if job.get("state") == "pending":
        job = _settle_launch(jobs, job, settle_s, sleep)
    if job.get("state") not in ACTIVE:
        return job
    job = stopping.stop_cancelled(jobs, job)
    if job.get("state") == "done":  # it had exited 0 on its own before the cancel
        raise JobError(f"{job_id} has already ended (done, exit code {job.get('exit_code')})")
    if job.get("state") in ACTIVE:
        raise JobError(
            f"{job_id} was signalled but its node could not confirm it ended; "
            "`gpupoolctl jobs` records it when it does (a node gone for good: "
            f"`gpupoolctl cancel --forget {job_id}`)"
        )
    return job


def forget(jobs: JobsCore, job_id: str, *, who: str) -> dict[str, Any]:
    """End a job in the ledger without asking its node (one that is gone for good): it is
    recorded failed and its slices released in one transaction. What may still run on the
    node is fenced, as a lost node's runs are (jobs.lost): its slices take no new work until
    a pass finds its node answering and kills it there. Only its owner or a pool admin may
    (as for cancel)."""

    def build(tx: Transaction) -> dict[str, Any]:
        current = tx.state.jobs.get(job_id)
        if current is None:
            ended = tx.state.finished.get(job_id)
            if ended is None:
                raise NoSuchJob(f"no job {job_id!r} (see `gpupoolctl jobs --all`)")
            raise JobError(f"{job_id} has already ended ({ended.get('state')})")
        by_admin = _check_owner(jobs, "cancel", current)
        for entry in list(tx.state.queue.values()):
            if entry.get("job") == job_id:
                tx.append("dequeue", {"id": entry["id"], "reason": "forgotten"})
        if current.get("state") in ("pending", "running"):
            lost.fence_runs(tx, current)
            if current.get("alloc"):
                tx.release(str(current["alloc"]))
        error = f"forgotten by {who} (its node was not asked)"
        ended_now = {"id": job_id, "state": "failed", "error": error, "submitter": None}
        tx.append("job", {**ended_now, **by_admin})
        return tx.state.finished[job_id]

    return jobs.ledger.write(build).value


def _check_owner(jobs: JobsCore, action: str, job: dict[str, Any]) -> dict[str, bool]:
    """Refuse (NotOwner) unless who acts (`jobs.owner`) owns the job or is a pool admin
    (`jobs.admin`); what the record of the act adds: {"as_admin": True} when only being an
    admin allows it, else nothing."""
    owner = job.get("owner")
    refused = refusal(action, "job", str(job["id"]), owner, user=jobs.owner, admin=jobs.admin)
    if refused:
        raise NotOwner(refused)
    return {"as_admin": True} if as_admin(owner, user=jobs.owner, admin=jobs.admin) else {}


def _settle_launch(
    jobs: JobsCore, job: dict[str, Any], settle_s: float, sleep: Callable[[float], None]
) -> dict[str, Any]:
    """Fence and settle a pending job marked cancelled, until it is no longer pending."""
    deadline = time.monotonic() + settle_s
    delay = FOLLOW_INTERVAL_S[0]
    while True:
        reaping.settle_pending(jobs, job, submitter_gone=False)
        current = find(jobs, job["id"])
        if current.get("state") != "pending":
            return current
        if time.monotonic() >= deadline:
            raise JobError(
                f"{job['id']} is being launched and its node could not say whether it "
                "started; the cancel is recorded: it is stopped when its launch is recorded "
                "(`gpupoolctl jobs` shows it)"
            )
        sleep(delay)
        delay = min(delay * 1.5, FOLLOW_INTERVAL_S[1])


def _read_logs(
    jobs: JobsCore, job_id: str, args: dict[str, Any], host: str | None = None
) -> tuple[str, dict[str, Any]]:
    """Ask the job's node (its first, or the one on `host`) the agent's `logs` verb with
    `args`: (that host, its answer)."""
    job = find(jobs, job_id)
    nodes = job.get("nodes") or []
    if host is not None and nodes:
        chosen = [n for n in nodes if n["host"] == host]
        if not chosen:
            names = ", ".join(str(n["host"]) for n in nodes)
            raise UsageError(f"--host {host}: {job_id} has no node there (its nodes: {names})")
        nodes = chosen
    if not nodes:
        raise JobError(f"{job_id} has not been launched yet ({job.get('state')}): no output")
    node = nodes[0]
    result = jobs.nodes.one(node["host"], "logs", {"job_id": node["node_id"], **args})
    if not result.ok:
        raise JobError(f"{node['host']}: {result.outcome}: {result.error}")
    return node["host"], dict(result.data)


def _both_streams(jobs: JobsCore, job_id: str, offsets: dict[str, int]) -> dict[str, Any]:
    """The next chunk of stdout and of stderr of the job's first node, in one round trip:
    {"streams": {name: chunk}, "state"}."""
    return _read_logs(jobs, job_id, {"streams": dict(offsets)})[1]


def logs(
    jobs: JobsCore,
    job_id: str,
    *,
    stream: str = "stdout",
    offset: int = 0,
    max_bytes: int = 65536,
    host: str | None = None,
) -> dict[str, Any]:
    """One chunk of the job's output from its node: {text, next_offset, state, ...}."""
    args = {"stream": stream, "offset": offset, "max_bytes": max_bytes}
    where, data = _read_logs(jobs, job_id, args, host)
    return {**data, "host": where, "job": job_id}


def dry_pass(jobs: JobsCore, view: Any = None) -> list[dict[str, Any]]:
    """What a scheduling pass would decide now (sched.schedule_pass, as `schedule` runs it,
    preemption and elastic re-cuts included), on the ledger as it is and a view that is
    thrown away: one event per decision, in the pass's order. Writes nothing and asks no
    node (so jobs that ended since the last pass still hold their slices here)."""
    from gpupoolctl.sched.snapshot import run_pass

    view = view or jobs.read()
    snap = jobs.snapshot(view.state, view.now)
    if not snap.queue:
        return []
    result = run_pass(snap, preempt=True, foresee=True)
    events: list[dict[str, Any]] = []
    for entry, placement in result.placed:
        events.append(
            {
                "event": "would-start",
                "job": entry.job,
                "slices": list(placement.slices),
                "reason": f"fits now on {', '.join(placement.slices)}",
            }
        )
    if result.preempt is not None:
        entry, victims = result.preempt
        events.append(
            {
                "event": "would-preempt",
                "job": entry.job,
                "victims": victims,
                "reclaim": result.reclaim,
                "reason": f"would stop {', '.join(victims)} to make room"
                + (f" (reclaim for team {entry.request.team})" if result.reclaim else ""),
            }
        )
    for recut in result.recuts:
        events.append(
            {
                "event": "would-re-cut",
                "job": ",".join(recut.jobs),
                "gpu": recut.card.key,
                "before": recut.before,
                "after": recut.after,
                "reason": f"would {recut.describe()}: {recut.reason}",
            }
        )
    for entry, nofit in result.waiting:
        events.append(scheduling.waiting_event(result, entry, nofit, snap.now))
    for entry, nofit in result.never:
        events.append({"event": "would-refuse", "job": entry.job, "reason": nofit.reason})
    return events


def waiting_reasons(jobs: JobsCore, view: Any = None) -> dict[str, str]:
    """Why each queued job waits, from the scheduler's own pass (dry_pass): what does not
    fit and why, the re-cut it waits for, or that it fits and waits its turn."""
    reasons: dict[str, str] = {}
    for event in dry_pass(jobs, view):
        job = str(event["job"])
        if event["event"] == "would-start":
            reasons[job] = "fits now: the next schedule pass starts it"
        elif event["event"] in ("waiting", "would-refuse"):
            reasons[job] = str(event["reason"])
        elif event["event"] == "would-preempt":
            reasons[job] = f"the next schedule pass {event['reason'].removeprefix('would ')}"
    return reasons


def refresh(jobs: JobsCore) -> Outcome:
    """Settle launches left half-done, record the jobs that ended (releasing their slices),
    then one schedule pass. Returns the pass's outcome (its events)."""
    reaping.recover(jobs)
    reaping.reap(jobs)
    outcome = scheduling.schedule(jobs)
    outcome.events[:0] = jobs.node_events  # a node lost before what was placed for its jobs
    jobs.node_events = []
    return outcome


@dataclass(frozen=True)
class Output:
    """Text the followed job wrote to its stdout (or to its stderr)."""

    text: str
    stream: str = "stdout"


@dataclass(frozen=True)
class FollowWarning:
    """Something the user should know (for stderr); following goes on."""

    message: str


@dataclass(frozen=True)
class Waiting:
    """The followed job is queued (or being launched) and why: yielded when that changes
    (`key`: what it waits for, without the countdown of a re-cut's reason)."""

    state: str
    reason: str = field(compare=False)
    key: Any = None


@dataclass(frozen=True)
class Ended:
    """The job ended: its last record, and the exit code to leave with (`exit_code_of`)."""

    job: dict[str, Any]
    exit_code: int


def _waiting(job_id: str, state: str, events: list[dict[str, Any]]) -> Waiting:
    """Why the job still waits, as the pass that just ran said it. A re-cut it waits for is
    the same wait however much of the time is left (the reason counts down)."""
    if state == "pending":
        return Waiting(state, "being launched", "being launched")
    for event in events:
        if event.get("job") == job_id and event.get("reason"):
            recut = event.get("recut")
            key = tuple(sorted(recut.items())) if recut else event["reason"]
            return Waiting(state, str(event["reason"]), key)
    reason = "waiting in the queue behind earlier or higher-priority jobs"
    return Waiting(state, reason, reason)


def exit_code_of(job: dict[str, Any]) -> int:
    """0 when the job is done; its own status when it has one (128+N when a signal ended
    it); otherwise ExitCode.ERROR."""
    code = job.get("exit_code")
    if job.get("state") == "done":
        return 0
    if isinstance(code, int) and code & 0xFF:
        return code & 0xFF
    return int(ExitCode.ERROR)


def follow(
    jobs: JobsCore,
    job_id: str,
    *,
    output: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Output | FollowWarning | Waiting | Ended]:
    """Follow a job until it ends, keeping the pool moving while it waits: while it is
    queued or pending each poll is a whole pass (recover, reap, schedule), since the slices
    it waits for are freed only when the jobs holding them are reaped; while it runs, reap.

    With `output`, yields what it writes to stdout and stderr as Output chunks while it
    runs (both in one round trip per poll), then what it wrote after the last read. Yields
    FollowWarning for problems reading its output and, once it ended, for the warnings
    gathered in `jobs.warnings` (which are then cleared); Waiting whenever it is queued or
    pending for a reason other than the last one said. Ends with one Ended. Polls every
    FOLLOW_INTERVAL_S[0] s, slowing to FOLLOW_INTERVAL_S[1] s while nothing happens.
    """
    offsets = {"stdout": 0, "stderr": 0}
    delay = FOLLOW_INTERVAL_S[0]
    said: Waiting | None = None

    def read() -> tuple[list[Output], str]:
        """What the job wrote since the last read, and its state on its node."""
        answer = _both_streams(jobs, job_id, offsets)
        wrote = []
        for name, chunk in answer["streams"].items():
            offsets[name] = chunk["next_offset"]
            if chunk["text"]:
                wrote.append(Output(chunk["text"], name))
        return wrote, str(answer.get("state"))

    while True:
        job = find(jobs, job_id)
        state = job.get("state")
        if state == "running" and output:
            try:
                wrote, on_node = read()
            except JobError as exc:
                yield FollowWarning(str(exc))
                wrote, on_node = [], "running"
            yield from wrote
            if wrote:
                delay = FOLLOW_INTERVAL_S[0]
                continue
            if on_node != "running":
                reaping.reap(jobs)
                continue
        elif state == "running":
            reaping.reap(jobs)
        elif state in ("queued", "pending"):
            events = refresh(jobs).events
            if find(jobs, job_id).get("state") != state:
                delay = FOLLOW_INTERVAL_S[0]
                continue
            waiting = _waiting(job_id, str(state), events)
            if waiting != said:
                said = waiting
                yield waiting
        else:
            break
        sleep(delay)
        delay = min(delay * 1.5, FOLLOW_INTERVAL_S[1])
    warnings = list(jobs.warnings)
    jobs.warnings.clear()
    for message in warnings:
        yield FollowWarning(message)
    if output and job.get("nodes"):
        try:  # what it wrote after our last read
            while True:
                wrote, _ = read()
                if not wrote:
                    break
                yield from wrote
        except JobError:
            pass
    yield Ended(job, exit_code_of(job))
