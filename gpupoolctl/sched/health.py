"""Node loss: what a pass decides about hosts that stop answering, their jobs and their runs.

Pure: the decisions are a function of what the ledger knows (running jobs, silent and lost
hosts, when each host last answered, fences, drains: a `HealthView`, which the ledger's
State is), of this pass's poll (`Heartbeats`), of the health policy and of the clock. They
come back as typed values in the order they are to be recorded; the executor
(jobs.lost) records them in the ledger's transaction and makes the agent calls. A replay in
virtual time applies the same values to its own view.

The poll is the heartbeat. A host with running jobs that does not answer is `silent` (since
this process last heard it, else since now); one that answers again is `answering`; that a
host answered is recorded at most once a HEARD_EVERY of node-dead-after (`heard`), so that
a loss is told from the last answer. A host with running jobs silent for node-dead-after is
declared lost: drained (source `health`, beside an admin's drain), every run of each of its
jobs fenced (on the other hosts of a multi-node job too: the job goes on as a whole or not),
each job requeued when the restart rule allows (policy.restarts; no back-off: the node
failed, not the job), else ended failed "node lost". A fenced run on a host that answers is
killed when it still runs, and its fence cleared. A lost host that answers with no fence
left has `returned`; with return-to-service auto its automatic drain is lifted.

A pass decides in three steps, each over the view as the previous one left it (the kills
of step 2 are agent calls whose outcome step 3 depends on):

    decisions = observe(view, beats, health, now)      # marks, losses: one transaction
    settle = settle_fences(view.fences, beats)         # KillRun / ClearFence per fenced run
    back = returns(view, beats, health)                # HostReturned (+ LiftDrain)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpupoolctl.policy import restarts
from gpupoolctl.policy.model import HealthPolicy
from gpupoolctl.timestamps import seconds_between

LOST_REASON = "node lost"  # the automatic drain's reason starts so; only those are lifted
# A host's answer is recorded when the last one recorded is older than this part of
# node-dead-after (Slurm pings a node every SlurmdTimeout/3): passes that poll more often
# write nothing, and "no answer since T" is that much early at most.
HEARD_EVERY = 1 / 3


class HealthView(Protocol):
    """What the decisions read of the ledger's state (ledger.State has these, as dicts)."""

    @property
    def jobs(self) -> Mapping[str, Mapping[str, Any]]: ...  # unfinished jobs by id
    @property
    def silent(self) -> Mapping[str, str]: ...  # host -> silent since
    @property
    def lost(self) -> Mapping[str, Any]: ...  # host -> its lost record
    @property
    def answered(self) -> Mapping[str, str]: ...  # host -> last answer recorded
    @property
    def fences(self) -> Mapping[str, Mapping[str, Any]]: ...  # "host:run" -> fence
    @property
    def drains(self) -> Mapping[str, Mapping[str, Mapping[str, Any]]]: ...  # target -> source


@dataclass(frozen=True)
class Heartbeats:
    """This pass's poll: who answered (with what each asked run is doing), who did not
    (and why: the transport's outcome), and when this process last heard each host."""

    answered: Mapping[str, Mapping[str, Any]]  # host -> {run (node id): status}
    silent: Mapping[str, str]  # host -> why
    last_heard: Mapping[str, str] = field(default_factory=dict)  # host -> ledger time


# -- the decisions, in the order they are recorded ------------------------------------------


@dataclass(frozen=True)
class MarkAnswering:
    """A silent host answered again: it takes work again."""

    host: str


@dataclass(frozen=True)
class MarkHeard:
    """Record that the host answered (its last answer recorded is old enough)."""

    host: str


@dataclass(frozen=True)
class MarkSilent:
    """The host did not answer; it is silent since `since`. `answered`: its last answer
    known (this process's or the ledger's), None when none is."""

    host: str
    since: str
    why: str
    answered: str | None


@dataclass(frozen=True)
class DeclareLost:
    """The host has been silent for node-dead-after with jobs running: it is lost. `jobs`:
    the ones it ends or requeues (each has its own EndJob or RequeueJob after this)."""

    host: str
    since: str
    why: str
    answered: str | None
    silent_s: float
    jobs: tuple[str, ...]


@dataclass(frozen=True)
class DrainHost:
    """The health check's drain of a lost host (source `health`, beside an admin's)."""

    host: str
    reason: str


@dataclass(frozen=True)
class FenceRun:
    """A run that may still be going on its host: kept out of placement (its slices) until
    its host answers and it is killed there."""

    host: str
    node_id: str
    job: str
    slices: tuple[str, ...]


@dataclass(frozen=True)
class EndJob:
    """A lost host's job that may not restart: its slices released, recorded failed."""

    job: str
    error: str  # "node lost: gpu-a3 did not answer for 1m30s"
    reason: str | None  # "node lost (...) (no restarts left: 3/3)"; None without a budget


@dataclass(frozen=True)
class RequeueJob:
    """A lost host's job that restarts: its slices released, queued again at once."""

    job: str
    restart: restarts.Restart


@dataclass(frozen=True)
class KillRun:
    """A fenced run still running on a host that answered: to be killed there (SIGKILL),
    then its fence cleared."""

    host: str
    node_id: str
    job: str | None


@dataclass(frozen=True)
class ClearFence:
    """A fenced run that is gone from its host: nothing can run twice any more."""

    host: str
    node_id: str


@dataclass(frozen=True)
class HostReturned:
    """A lost host answers with no fenced run left."""

    host: str
    undrained: bool  # whether its automatic drain is lifted (LiftDrain follows)


@dataclass(frozen=True)
class LiftDrain:
    """Lift the health check's drain of a returned host (an admin's stays)."""

    host: str


Decision = (
    MarkAnswering
    | MarkHeard
    | MarkSilent
    | DeclareLost
    | DrainHost
    | FenceRun
    | EndJob
    | RequeueJob
    | KillRun
    | ClearFence
    | HostReturned
    | LiftDrain
)


# -- step 1: what the poll says about hosts ---------------------------------------------------


def observe(view: HealthView, beats: Heartbeats, health: HealthPolicy, now: str) -> list[Decision]:
    """The records this poll calls for, in order: answering hosts marked, answers due
    recorded, silent hosts marked, and each host silent for node-dead-after with jobs
    running declared lost (drain, fences, and one end or requeue per job). A job that
    spans two lost hosts is ended once, by the first; a host whose only jobs were ended so
    stays silent, lost to nothing."""
    out: list[Decision] = []
    for host in sorted(beats.answered):
        if host in view.silent:
            out.append(MarkAnswering(host))
        elif host not in view.lost and heard_due(view.answered.get(host), now, health):
            out.append(MarkHeard(host))
    ended: set[str] = set()
    for host, why in sorted(beats.silent.items()):
        if host in view.lost:
            continue
        mark = mark_silent(view, host, why, beats.last_heard, now)
        since = mark.since if mark is not None else view.silent[host]
        answered = mark.answered if mark is not None else view.answered.get(host)
        if mark is not None:
            out.append(mark)
        silent_s = seconds_between(since, now)
        jobs = [job for job in running_on(view.jobs.values(), host) if job["id"] not in ended]
        # A host with no running job is lost to nothing: it stays silent (and placement
        # leaves it alone) until it answers.
        if silent_s >= health.node_dead_after_s and jobs:
            out.extend(_lost(host, since, why, answered, silent_s, jobs, now))
            ended.update(str(job["id"]) for job in jobs)
    return out


def mark_silent(
    view: HealthView, host: str, why: str, last_heard: Mapping[str, str], now: str
) -> MarkSilent | None:
    """The mark of a host that did not answer (a poll, or a launch that could not reach
    it): None when it is lost, or silent already (it stays silent since then)."""
    if host in view.lost or host in view.silent:
        return None
    answered = max(last_heard.get(host, ""), view.answered.get(host, ""))
    return MarkSilent(host, last_heard.get(host, now), why, answered or None)


def _lost(
    host: str,
    since: str,
    why: str,
    answered: str | None,
    silent_s: float,
    jobs: list[Mapping[str, Any]],
    now: str,
) -> list[Decision]:
    from gpupoolctl.policy.values import duration_text

    # Told from its last answer when the ledger knows it (`since` is the first poll that
    # failed: the silence counted towards node-dead-after).
    if answered is not None:
        silent_s = max(silent_s, seconds_between(answered, now))
        reason = f"{LOST_REASON}: no answer since {answered} ({why})"
    else:
        reason = f"{LOST_REASON}: no answer since {since} or earlier ({why})"
    ids = tuple(str(job["id"]) for job in jobs)
    out: list[Decision] = [
        DeclareLost(host, since, why, answered, silent_s, ids),
        DrainHost(host, reason[:200]),
    ]
    detail = f"{host} did not answer for {duration_text(round(silent_s))}"
    for job in jobs:
        out.extend(fences_of(job))  # the other hosts' runs too: the job goes on whole or not
        out.append(end_or_requeue(job, detail))
    return out


def end_or_requeue(job: Mapping[str, Any], detail: str) -> EndJob | RequeueJob:
    """Requeue a lost node's job when it may restart (policy.restarts), else end it."""
    restart = restarts.after_failure(job, "node-lost", detail)
    if restart is not None:
        # No back-off: the node failed, not the job; back-off is for a job's crash loop.
        return RequeueJob(str(job["id"]), dataclasses.replace(restart, backoff_s=0.0))
    reason = restarts.end_reason(job, "node-lost", detail)
    return EndJob(str(job["id"]), f"{LOST_REASON}: {detail}", reason)


def fences_of(job: Mapping[str, Any]) -> list[FenceRun]:
    """A fence for every run of `job` (each of its nodes)."""
    return [
        FenceRun(
            str(node["host"]),
            str(node["node_id"]),
            str(job["id"]),
            tuple(str(s) for s in node.get("slices") or ()),
        )
        for node in job.get("nodes") or []
    ]


def running_on(jobs: Iterable[Mapping[str, Any]], host: str) -> list[Mapping[str, Any]]:
    """The running jobs with a run on `host`, in the ledger's order."""
    return [
        job
        for job in jobs
        if job.get("state") == "running" and any(n["host"] == host for n in job.get("nodes") or [])
    ]


def heard_due(last: str | None, now: str, health: HealthPolicy) -> bool:
    """Whether a host's answer is to be recorded: none recorded yet (`last`), or the last
    one recorded is older than HEARD_EVERY of node-dead-after."""
    if last is None:
        return True
    return seconds_between(last, now) >= health.node_dead_after_s * HEARD_EVERY


def quiet(view: HealthView, beats: Heartbeats, health: HealthPolicy, now: str) -> bool:
    """The usual pass: everyone answered, no silent or lost host answered, no answer is
    due to be recorded and nothing is fenced. Nothing to decide (the executor takes no
    lock)."""
    changed = bool(beats.silent) or bool(set(beats.answered) & {*view.silent, *view.lost})
    due = any(heard_due(view.answered.get(h), now, health) for h in beats.answered)
    return not changed and not due and not view.fences


def probes(view: HealthView) -> dict[str, list[str]]:
    """What the poll must ask besides running jobs: the fenced runs, by host, and every
    lost or silent host (an empty poll: does it answer again?)."""
    out: dict[str, list[str]] = {host: [] for host in (*view.lost, *view.silent)}
    for fence in view.fences.values():
        out.setdefault(str(fence["host"]), []).append(str(fence["node_id"]))
    return out


# -- step 2: fenced runs on hosts that answered -----------------------------------------------


def settle_fences(
    fences: Mapping[str, Mapping[str, Any]], beats: Heartbeats
) -> list[KillRun | ClearFence]:
    """For each fenced run on a host that answered: kill it when the poll says it still
    runs, else clear its fence (the executor clears a killed one's after the kill)."""
    out: list[KillRun | ClearFence] = []
    for fence in fences.values():
        statuses = beats.answered.get(str(fence["host"]))
        if statuses is None:
            continue
        host, node_id = str(fence["host"]), str(fence["node_id"])
        if (statuses.get(node_id) or {}).get("state") == "running":
            out.append(KillRun(host, node_id, fence.get("job")))
        else:
            out.append(ClearFence(host, node_id))
    return out


# -- step 3: lost hosts back ------------------------------------------------------------------


def returns(
    view: HealthView, beats: Heartbeats, health: HealthPolicy
) -> list[HostReturned | LiftDrain]:
    """Lost hosts that answered with no fenced run left have returned; with
    return-to-service auto the loss's own drain is lifted (an admin's stays)."""
    fenced = {f["host"] for f in view.fences.values()}
    out: list[HostReturned | LiftDrain] = []
    for host in sorted(set(view.lost) & set(beats.answered) - fenced):
        drain = (view.drains.get(host) or {}).get("health")
        lifted = (
            health.return_to_service == "auto"
            and drain is not None
            and str(drain.get("reason", "")).startswith(LOST_REASON)
        )
        out.append(HostReturned(host, lifted))
        if lifted:
            out.append(LiftDrain(host))
    return out
