"""The core every job step shares: the ledger, the nodes, placement and the records, each
step recorded in the ledger first.

Side effects on nodes (launch, signal) happen outside the ledger lock; decisions and their
records happen inside it, against the state as it is at that moment. A step whose record
finds the job moved on (another process settled it) records nothing.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpupoolctl.jobs.errors import JobError, NoSuchJob
from gpupoolctl.jobs.events import Event
from gpupoolctl.jobs.nodes import Call, Nodes
from gpupoolctl.jobs.repartition import Unanswered
from gpupoolctl.jobs.spec import JobSpec
from gpupoolctl.ledger import Ledger, State, Transaction, View
from gpupoolctl.sched import JobRequest, NoFit, Placement, PoolView
from gpupoolctl.sched.names import check_names

if TYPE_CHECKING:
    from gpupoolctl.policy import PoolPolicy
    from gpupoolctl.sched import QueueEntry
    from gpupoolctl.sched.elastic import InHosts, Upcoming
    from gpupoolctl.sched.snapshot import EntriesMemo, Snapshot

# Agent errors that prove a launch did not happen (anything else: ask the node).
# NoSuchDevice: the node has no device the job was given (its cards changed behind the
# ledger); the node's, not the job's: jobs.launching requeues it.
NOT_LAUNCHED = frozenset(
    {"BadRequest", "BadDevices", "BadWorkdir", "LaunchFailed", "SimError", "NoSuchDevice"}
)
KILL_WAIT_S = 5.0  # after SIGKILL, how long to wait for the process group to be gone


def node_id(job_id: str, run: int) -> str:
    """The job's folder name on its node: one per run, as a requeued job runs again."""
    return job_id if run <= 1 else f"{job_id}.{run}"


def submitter() -> dict[str, Any]:
    from gpupoolctl.agent.jobs.paths import proc_start

    return {"host": socket.gethostname(), "pid": os.getpid(), "start": proc_start(os.getpid())}


@dataclass
class Outcome:
    """What a submit or a schedule pass did: for the CLI to render."""

    job_id: str | None = None
    state: str | None = None
    placement: dict[str, Any] | None = None
    reason: str | None = None
    events: list[Event] = field(default_factory=list)


class JobsCore:
    """The ledger, the nodes and the decisions every job step shares: records, placement,
    the elastic inputs. The steps themselves are modules above this one, each a function
    of it (jobs.submitting.submit, jobs.launching.launch, jobs.reaping.reap,
    jobs.scheduling.schedule, jobs.cancelling.cancel, ...), so no step module imports
    another through a class. `gpupoolctl.jobs.Jobs` is this class."""

    def __init__(
        self,
        ledger: Ledger,
        nodes: Nodes,
        *,
        owner: str,
        hosts: set[str] | None = None,
        clock: Any = time.time,
        policy: PoolPolicy | None = None,
        in_hosts: InHosts | None = None,
        admin: bool = False,
    ) -> None:
        self.ledger = ledger
        self.nodes = nodes
        self.owner = owner
        # Whether `owner` (who acts) is a pool admin: may cancel and stop others' jobs.
        self.admin = admin
        self.hosts = hosts  # placement only on these (--limit); None: every host
        self.clock = clock
        self.policy = policy  # the pool policy file; None: a static pool
        self.in_hosts = in_hosts  # resolves a policy rule's host pattern (the inventory's)
        self.warnings: list[str] = []
        # What the reaper's heartbeat saw happen to hosts (node-lost, node-returned, ...).
        self.node_events: list[Event] = []
        # Host -> when its last poll answered (ledger time), in this process: a long-running
        # `schedule --watch` counts a silence from there, as Slurm counts from the last
        # response; a one-shot pass knows only its own poll.
        self.last_heard: dict[str, str] = {}
        self.hosts_failed = False
        self._unrecorded: list[dict[str, Any]] = []  # slices read for a dry run only
        # This loop's re-cuts whose partition request got no answer (jobs.repartition).
        self.unanswered = Unanswered()
        # The queue's entries as the last snapshot made them (sched.snapshot.queued).
        self._entries: EntriesMemo = {}

    # -- helpers ----------------------------------------------------------------------------

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    def host_failed(self, host: str, error: str | None) -> None:
        self.hosts_failed = True
        self.warn(f"{host}: {error}")

    def snapshot(
        self,
        state: State,
        now: str,
        *,
        everywhere: bool = False,
        queue: Sequence[QueueEntry] | None = None,
    ) -> Snapshot:
        """What a pass reads of the ledger at `now` (sched.snapshot, the one builder): this
        pass's hosts (--limit), or the whole pool with `everywhere`; the state's queue, or
        `queue`."""
        from gpupoolctl.sched.snapshot import snapshot

        hosts = None if everywhere else self.hosts
        return snapshot(
            state,
            self.policy,
            now,
            hosts=hosts,
            in_hosts=self.in_hosts,
            queue=queue,
            entries_memo=self._entries,
        )

    def pool(self, state: State, now: str) -> PoolView:
        """A working view of this pass's pool (the snapshot's), to place on."""
        return self.snapshot(state, now, queue=()).pool()

    def read(self) -> View:
        """The ledger's current view; its warnings (damage, a torn tail) reach the CLI."""
        view = self.ledger.read()
        for message in view.warnings:
            if message not in self.warnings:
                self.warnings.append(message)
        return view

    def never_fits(self, state: State, request: JobRequest, now: str, policy: str) -> NoFit | None:
        """Could it ever run (sched.modes.never_fits) on the whole pool, not only this pass's
        hosts (--limit): None when it could, else why not. Only then is a job refused or
        failed from the queue."""
        from gpupoolctl.sched.modes import never_fits

        return never_fits(self.snapshot(state, now, everywhere=True, queue=()), request, policy)

    def ensure_slices(self, *, record: bool = True) -> None:
        """Slices of the chosen hosts from their facts, when the ledger knows none yet
        (without `record`, kept for this run's placement only: a dry run writes nothing)."""
        state = self.read().state
        wanted = self.hosts if self.hosts is not None else set(self.nodes.targets)
        known = {s.get("host") for s in state.slices.values()}
        missing = sorted(h for h in wanted if h not in known)
        if missing:
            self.read_slices(missing, record=record)

    def read_slices(self, hosts: list[str], *, record: bool = True) -> None:
        """Read the slices of `hosts` from their facts and record them (without `record`,
        keep them for this run's placement only); a host that fails keeps what the ledger
        had, and is reported."""
        from gpupoolctl.ledger import slices_from_facts

        results = self.nodes.call([Call(h, "facts", {}) for h in hosts])
        good = [r for r in results if r.ok]
        for result in results:
            if not result.ok:
                self.host_failed(result.name, f"{result.outcome}: {result.error}")
        if good:
            slices = [s for r in good for s in slices_from_facts(r.name, r.data)]
            if not record:
                self._unrecorded = slices
                return
            done = self.ledger.refresh_slices([r.name for r in good], slices)
            self.warnings.extend(done.warnings)

    # -- records ----------------------------------------------------------------------------

    @staticmethod
    def job_nodes(state: State, slice_ids: list[str], job_id: str, run: int) -> list[dict]:
        """Per host: the slices, and the devices the job is confined to there."""
        by_host: dict[str, dict[str, Any]] = {}
        for slice_id in slice_ids:
            entry = state.slices[slice_id]
            node = by_host.setdefault(
                entry["host"],
                {
                    "host": entry["host"],
                    "node_id": node_id(job_id, run),
                    "slices": [],
                    "devices": {"vendor": entry.get("vendor"), "uuids": []},
                    "pid": None,
                },
            )
            node["slices"].append(slice_id)
            devices = entry.get("devices") or ([entry["uuid"]] if entry.get("uuid") else [])
            node["devices"]["uuids"].extend(devices)
            if entry.get("vendor") != node["devices"]["vendor"]:
                raise JobError(f"{slice_id}: a job cannot mix vendors on one host")
        return list(by_host.values())

    def record_placed(
        self, tx: Transaction, job: dict[str, Any], placement: Placement, *, borrowed: bool = False
    ) -> dict[str, Any]:
        """alloc + job pending, in the caller's transaction; returns the job as recorded.
        `borrowed`: the placement takes its team above its nominal quota (reclaim may take
        it back); the allocation's request says so."""
        slices = [s if isinstance(s, str) else s["id"] for s in placement.slices]
        run = int(job.get("run") or 0) + 1
        alloc_id = f"a-{tx.next_seq}"
        request = dict(job.get("request") or {})
        # Before anything is appended: a placement that cannot be launched (JobError) must
        # leave no hold behind when the caller records the job as failed instead.
        nodes = self.job_nodes(tx.state, slices, job["id"], run)
        tx.append(
            "alloc",
            {
                "id": alloc_id,
                "owner": job.get("owner") or self.owner,
                "slices": slices,
                "uuids": [tx.state.slices[s].get("uuid") for s in slices],
                "expires": None,
                "request": {
                    **request,
                    "job": job["id"],
                    **({"borrowed": True} if borrowed else {}),
                },
            },
        )
        tx.append(
            "job",
            {
                "id": job["id"],
                "state": "pending",
                "alloc": alloc_id,
                "run": run,
                "placement": {
                    "slices": slices,
                    "hosts": list(placement.hosts),
                    "policy": placement.policy,
                    "waste_mib": placement.waste_mib,
                    "why": placement.why,
                },
                "nodes": nodes,
                "submitter": submitter(),
                "exit_code": None,
                "ended": None,
                "error": None,
                "reason": None,
                "recovered": None,
                "preempt": None,
                "cancel": None,
            },
        )
        return tx.state.jobs[job["id"]]

    @staticmethod
    def still(tx: Transaction, job: dict[str, Any], state: str) -> dict[str, Any] | None:
        """The job as the ledger has it now, if it is still in `state` and the same run."""
        current = tx.state.jobs.get(job["id"])
        if current is None or current.get("state") != state:
            return None
        if current.get("run") != job.get("run"):
            return None
        return current

    def enqueue(
        self, tx: Transaction, job: dict[str, Any], *, not_before: str | None = None, **fields: Any
    ) -> None:
        """Queue the job (again), its record updated with `fields`; with `not_before` (a
        ledger time) the scheduler leaves the entry waiting until then (a restart's back-off)."""
        request = dict(job.get("request") or {})
        tx.append("job", {"id": job["id"], "state": "queued", "submitter": None, **fields})
        entry = {
            "id": f"q-{tx.next_seq}",
            "owner": job.get("owner") or self.owner,
            "priority": int(request.get("priority", 50)),
            "request": request,
            "job": job["id"],
        }
        if not_before is not None:
            entry["not_before"] = not_before
        tx.append("enqueue", entry)

    # -- submit ------------------------------------------------------------------------------

    def plan(self, spec: JobSpec) -> Placement | NoFit | Upcoming:
        """What would happen to the job if it were submitted now (sched.modes.what_if):
        where it would start, the re-cut made for it and when, or why it would wait;
        writes nothing."""
        from gpupoolctl.jobs import teams
        from gpupoolctl.sched.modes import what_if

        spec.validate()
        spec = teams.with_team(self, spec)
        view = self.read()
        state = view.state
        if self._unrecorded:
            extra = {s["id"]: s for s in self._unrecorded}
            state = dataclasses.replace(state, slices={**state.slices, **extra})
        snap = self.snapshot(state, view.now)
        answer = what_if(snap, spec.request, spec.policy, seq=state.seq + 1)
        if isinstance(answer, NoFit) and answer.never:
            check_names(spec.request, state.slices.values())
        return answer


def find(jobs: JobsCore, job_id: str) -> dict[str, Any]:
    """The job as the ledger has it (live or recently ended); NoSuchJob otherwise."""
    state = jobs.read().state
    job = state.jobs.get(job_id) or state.finished.get(job_id)
    if job is None:
        raise NoSuchJob(f"no job {job_id!r} (see `gpupoolctl jobs --all`)")
    return job


# The name the CLI, the stress backend and the tests use for the one object they drive.
Jobs = JobsCore
