"""The in-memory model that replaying records builds: slices, allocations, jobs, the queue.

`apply` is total: a record that contradicts the state (a slice taken twice, a release of an
unknown allocation) is applied as far as it makes sense and noted in `problems`, so replay
never fails and `ledger verify` can say exactly where history went wrong.
Times are the journal's fixed-width UTC strings, so comparing them as text is comparing times.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# card_key and hive_key are imported from here by much of the house: the keys are hw.slice's.
from gpupoolctl.hw.slice import Slice, card_key, hive_key, within_capacity
from gpupoolctl.timestamps import seconds_between

OPS = (
    "slices",
    "alloc",
    "release",
    "expire",
    "enqueue",
    "dequeue",
    "job",
    "repair",
    "reshape",
    "drain",
    "host",
    "fence",
)
# A host with running jobs that stops answering is `silent` (since when), `answering` again,
# or `lost` after the health policy's node-dead-after; a lost host that answers again has
# `returned`. Those transitions are recorded, and that a polled host answered (`heard`), not
# every poll: at most once a third of node-dead-after, so that a node lost can say when it
# last answered (`silent` and `lost` records carry that time too, as `answered`).
HOST_STATES = ("silent", "answering", "lost", "returned", "heard")
# A run left on a lost host (its job ended or restarted elsewhere) is `fenced` until the host
# answers again and the run is killed there, then `cleared`: nothing runs twice.
FENCE_STATES = ("fenced", "cleared")
# A reshape (an elastic re-cut of one card) is `reserved` before the card is touched (no
# placement may use its slices meanwhile), then `done` or `failed`.
RESHAPE_STATES = ("reserved", "done", "failed")
# queued: waits in the queue; pending: placed and holding its slices, being launched;
# running: launched (pid recorded); done / failed / cancelled: over, its slices released.
JOB_STATES = ("queued", "pending", "running", "done", "failed", "cancelled")
JOB_TERMINAL = frozenset({"done", "failed", "cancelled"})
# States in which a job holds the allocation its placement recorded (`job["alloc"]`).
JOB_HOLDING = frozenset({"pending", "running"})


@dataclass
class Allocation:
    id: str
    owner: str
    slices: list[str]
    uuids: list[str | None]  # identity of each slice when taken: a changed uuid means gone
    created: str
    expires: str | None
    seq: int
    actor: str
    request: dict[str, Any] = field(default_factory=dict)

    def expired(self, now: str) -> bool:
        return self.expires is not None and self.expires <= now


@dataclass
class State:
    seq: int = 0
    slices: dict[str, Slice] = field(default_factory=dict)
    allocations: dict[str, Allocation] = field(default_factory=dict)
    holders: dict[str, str] = field(default_factory=dict)  # slice id -> allocation id
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    queue: dict[str, dict[str, Any]] = field(default_factory=dict)
    problems: list[dict[str, Any]] = field(default_factory=list)
    # Allocations closed since the snapshot: lets `release` say "already released" precisely.
    # Not part of the snapshot (it would grow with history) nor of equality.
    closed: dict[str, str] = field(default_factory=dict)
    # Jobs that ended since the snapshot, as their last record left them (for `jobs --all`,
    # `logs` and `--wait`); like `closed`, not part of the snapshot nor of equality.
    finished: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Elastic re-cuts in flight, by reshape id (their `reserved` record's data).
    reshapes: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Card (GPU key "host/gpuN") -> when it last changed: a hold began or ended on it, its
    # slices changed, it was re-cut. How long a card has been idle is measured from this.
    card_changed: dict[str, str] = field(default_factory=dict)
    # Card -> when its last re-cut failed (elastic leaves it alone for a back-off period).
    card_failed: dict[str, str] = field(default_factory=dict)
    # Re-cuts ended, by outcome ("done", "failed"): what `export prometheus` counts.
    reshape_totals: dict[str, int] = field(default_factory=dict)
    # Drained hosts and cards ("host" or "host/gpuN") -> source ("admin", "health") ->
    # {target, reason, source, actor, ts}: no new work is placed there (what runs there goes
    # on). A target may be drained by both: each is lifted on its own.
    drains: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # Hosts with running jobs that did not answer -> since when (the first poll that failed).
    silent: dict[str, str] = field(default_factory=dict)
    # Hosts declared lost -> {host, since, ts, answered?}: their jobs were ended or requeued.
    lost: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Host -> the last time it is known to have answered a poll (ledger time); ledgers
    # written before it was recorded start without.
    answered: dict[str, str] = field(default_factory=dict)
    # Runs to kill when their host answers again, by fence_key(host, node_id).
    fences: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Holds whose `alloc` record `ledger repair` quarantined while they were live, by
    # allocation id -> {id, owner, slices, seq}: their slices stay out of placement until a
    # pool admin releases them.
    quarantined: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Team -> [GiB-seconds held, decayed to ts; ts]: the history fair share weighs (holds
    # that ended; what is held now is counted by the scheduler).
    team_usage: dict[str, list[Any]] = field(default_factory=dict)
    # "team<TAB>user" -> [GiB-seconds, GPU-seconds] of every hold that ended, never decayed:
    # what `export prometheus` counts without reading the archives (team "-": none).
    usage_totals: dict[str, list[float]] = field(default_factory=dict)
    # recutting_slices() as of (seq, slice map): reports ask it once per slice.
    _recutting: tuple[tuple[int, int], dict[str, str]] | None = field(
        default=None, repr=False, compare=False
    )

    # -- replay ---------------------------------------------------------------------------

    def apply(self, record: dict[str, Any]) -> None:
        seq = record["seq"]
        handler = _HANDLERS.get(record["op"])
        if handler is None:
            self._problem(seq, f"unknown op {record['op']!r} (written by a newer gpupoolctl?)")
        else:
            try:
                handler(self, record)
            except (KeyError, TypeError, ValueError, AttributeError) as exc:
                self._problem(seq, f"malformed {record['op']} record: {exc!r}")
        self.seq = seq

    def _problem(self, seq: int, message: str, alloc_id: str | None = None) -> None:
        problem: dict[str, Any] = {"seq": seq, "message": message}
        if alloc_id is not None:
            problem["alloc"] = alloc_id
        self.problems.append(problem)

    def _slices(self, record: dict[str, Any]) -> None:
        data = record["data"]
        hosts = set(data["hosts"])
        kept = {k: v for k, v in self.slices.items() if v["host"] not in hosts}
        before = _cards_of(v for v in self.slices.values() if v["host"] in hosts)
        for entry in data["slices"]:
            kept[entry["id"]] = dict(entry)
        after = _cards_of(v for k, v in kept.items() if v["host"] in hosts)
        # A card seen for the first time has not changed: how long it has been idle is unknown
        # (long ago, for elastic re-cuts), not "just now".
        for card in before:
            if before[card] != after.get(card):
                self.card_changed[card] = record["ts"]
        self.slices = kept

    def _touch(self, slice_ids: list[str], ts: str) -> None:
        for slice_id in slice_ids:
            card = card_key(self.slices.get(slice_id))
            if card is not None:
                self.card_changed[card] = ts

    def _alloc(self, record: dict[str, Any]) -> None:
        data = record["data"]
        seq = record["seq"]
        alloc_id = str(data["id"])
        if alloc_id in self.allocations:
            self._problem(seq, f"allocation {alloc_id} recorded twice")
            return
        slices = [str(s) for s in data["slices"]]
        uuids = list(data.get("uuids") or [None] * len(slices))
        for slice_id in slices:
            if slice_id not in self.slices:
                self._problem(seq, f"{alloc_id} takes unknown slice {slice_id}")
            if not self.has_room(slice_id):
                held = ", ".join(self.holders_of(slice_id))
                self._problem(seq, f"{alloc_id} takes {slice_id}, already held by {held}")
            else:
                self.holders[slice_id] = alloc_id
        self.allocations[alloc_id] = Allocation(
            id=alloc_id,
            owner=str(data["owner"]),
            slices=slices,
            uuids=uuids,
            created=record["ts"],
            expires=data.get("expires"),
            seq=seq,
            actor=record["actor"],
            request=dict(data.get("request") or {}),
        )
        self._touch(slices, record["ts"])

    def _close(self, seq: int, alloc_id: str, how: str, ts: str = "") -> None:
        alloc = self.allocations.pop(alloc_id, None)
        if alloc is None:
            self._problem(seq, f"{how} of {alloc_id}, which is not held", alloc_id)
            return
        if ts:
            self._touch(alloc.slices, ts)
            self._count_usage(alloc, ts)
        for slice_id in alloc.slices:
            if self.holders.get(slice_id) == alloc_id:
                del self.holders[slice_id]
        self.closed[alloc_id] = how

    def _count_usage(self, alloc: Allocation, ts: str) -> None:
        """Add a hold that ended to the usage totals and to its team's decayed usage."""
        from gpupoolctl.ledger.usage import gpu_share

        end = min(ts, alloc.expires) if alloc.expires else ts
        seconds = max(0.0, seconds_between(alloc.created, end))
        entries = [self.slices.get(s) or {} for s in alloc.slices]
        gib = sum(int(e.get("memory_mib") or 0) for e in entries) / 1024
        gpus = sum(gpu_share(e) for e in entries if e)
        team = str(alloc.request.get("team") or "")
        key = f"{team or '-'}\t{alloc.owner}"
        total = self.usage_totals.setdefault(key, [0.0, 0.0])
        total[0] += gib * seconds
        total[1] += gpus * seconds
        if team:
            before = self.team_usage.get(team)
            value = decayed(float(before[0]), str(before[1]), ts) if before else 0.0
            self.team_usage[team] = [value + gib * seconds, ts]

    def usage_counters(self, now: str) -> dict[tuple[str, str], tuple[float, float]]:
        """(team, user) -> (GiB-seconds, GPU-seconds) held up to `now`: the holds that ended
        (since the ledger began, or since this version first wrote it) and the open ones so
        far. Counters: they only grow."""
        from gpupoolctl.ledger.usage import gpu_share

        out: dict[tuple[str, str], list[float]] = {}
        for key, (gib_s, gpu_s) in self.usage_totals.items():
            team, _, user = key.partition("\t")
            out[(team, user)] = [float(gib_s), float(gpu_s)]
        for alloc in self.allocations.values():
            end = min(now, alloc.expires) if alloc.expires else now
            seconds = max(0.0, seconds_between(alloc.created, end))
            entries = [self.slices.get(s) or {} for s in alloc.slices]
            row = out.setdefault((str(alloc.request.get("team") or "-"), alloc.owner), [0.0, 0.0])
            row[0] += sum(int(e.get("memory_mib") or 0) for e in entries) / 1024 * seconds
            row[1] += sum(gpu_share(e) for e in entries if e) * seconds
        return {k: (v[0], v[1]) for k, v in out.items()}

    def team_history(self, now: str) -> dict[str, float]:
        """Team -> GiB-seconds of holds that ended, decayed to `now` (fair share)."""
        return {team: decayed(float(v), str(at), now) for team, (v, at) in self.team_usage.items()}

    def _release(self, record: dict[str, Any]) -> None:
        alloc_id = str(record["data"]["id"])
        if alloc_id not in self.allocations and self.quarantined.pop(alloc_id, None):
            self.closed[alloc_id] = "release"  # a quarantined hold, let go by an admin
            return
        self._close(record["seq"], alloc_id, "release", record["ts"])

    def _expire(self, record: dict[str, Any]) -> None:
        for alloc_id in record["data"]["ids"]:
            self._close(record["seq"], str(alloc_id), "expiry", record["ts"])

    def _enqueue(self, record: dict[str, Any]) -> None:
        data = record["data"]
        entry_id = str(data["id"])
        if entry_id in self.queue:
            self._problem(record["seq"], f"queue entry {entry_id} enqueued twice")
        self.queue[entry_id] = {
            "id": entry_id,
            "owner": str(data["owner"]),
            "priority": int(data.get("priority", 0)),
            "request": dict(data.get("request") or {}),
            "job": data.get("job"),
            "seq": record["seq"],
            "ts": record["ts"],
        }
        if data.get("not_before"):  # a restart's back-off: not placed before this time
            self.queue[entry_id]["not_before"] = str(data["not_before"])

    def _dequeue(self, record: dict[str, Any]) -> None:
        entry_id = str(record["data"]["id"])
        if self.queue.pop(entry_id, None) is None:
            self._problem(record["seq"], f"dequeue of {entry_id}, which is not queued")

    def _job(self, record: dict[str, Any]) -> None:
        data = record["data"]
        job_id = str(data["id"])
        status = str(data["state"])
        if status not in JOB_STATES:
            self._problem(record["seq"], f"job {job_id}: unknown state {status!r}")
            return
        # A new dict, never an update in place: a caller holding the job as it was (the
        # run it is about to act on) must still see that version after later records.
        old = self.jobs.get(job_id) or {"id": job_id, "created": record["ts"]}
        job = {**old, **{k: v for k, v in data.items() if k != "id"}, "updated": record["ts"]}
        if status in JOB_TERMINAL:
            self.jobs.pop(job_id, None)  # finished jobs are history, not state
            self.finished[job_id] = job
        else:
            self.jobs[job_id] = job
            self.finished.pop(job_id, None)  # requeued after it ended

    def _reshape(self, record: dict[str, Any]) -> None:
        data = record["data"]
        reshape_id, card, status = str(data["id"]), str(data["gpu"]), str(data["state"])
        if status not in RESHAPE_STATES:
            self._problem(record["seq"], f"reshape {reshape_id}: unknown state {status!r}")
            return
        if status == "reserved":
            busy = [r for r in self.reshapes.values() if r["gpu"] == card]
            if busy:
                self._problem(
                    record["seq"],
                    f"{reshape_id} reserves {card}, already reserved by {busy[0]['id']}",
                )
            self.reshapes[reshape_id] = {**data, "ts": record["ts"]}
            return
        if self.reshapes.pop(reshape_id, None) is None:
            self._problem(record["seq"], f"reshape {reshape_id} {status}, which was not reserved")
        self.card_changed[card] = record["ts"]
        if status == "failed":
            self.card_failed[card] = record["ts"]
        self.reshape_totals[status] = self.reshape_totals.get(status, 0) + 1

    def _drain(self, record: dict[str, Any]) -> None:
        """A drain replaces its own source's drain of the target only: an admin's and the
        health check's stand side by side. An `undrained` record names the source it lifts;
        one without (written by versions with one drain per target) lifts them all."""
        data = record["data"]
        target, status = str(data["target"]), str(data["state"])
        if status == "drained":
            source = str(data.get("source") or "admin")
            self.drains.setdefault(target, {})[source] = {
                "target": target,
                "reason": str(data.get("reason") or ""),
                "source": source,
                "actor": record["actor"],
                "ts": record["ts"],
            }
        elif status == "undrained":
            held = self.drains.get(target, {})
            source = data.get("source")
            if not held or (source is not None and str(source) not in held):
                what = f"{target}'s {source} drain" if source is not None else target
                self._problem(record["seq"], f"undrain of {what}, which is not drained")
                return
            if source is None:
                held.clear()
            else:
                del held[str(source)]
            if not held:
                del self.drains[target]
        else:
            self._problem(record["seq"], f"drain of {target}: unknown state {status!r}")

    def _host(self, record: dict[str, Any]) -> None:
        data = record["data"]
        host, status = str(data["host"]), str(data["state"])
        if data.get("answered"):  # the last answer known when the host fell silent
            self._heard(host, str(data["answered"]))
        if status == "silent":
            self.silent[host] = str(data.get("since") or record["ts"])
        elif status in ("answering", "heard"):
            self.silent.pop(host, None)
            self._heard(host, record["ts"])
        elif status == "lost":
            self.silent.pop(host, None)
            since = str(data.get("since") or record["ts"])
            self.lost[host] = {"host": host, "since": since, "ts": record["ts"]}
            if host in self.answered:
                self.lost[host]["answered"] = self.answered[host]
        elif status == "returned":
            if self.lost.pop(host, None) is None:
                self._problem(record["seq"], f"{host} returned, but it was not lost")
            self.silent.pop(host, None)
            self._heard(host, record["ts"])
        else:
            self._problem(record["seq"], f"host {host}: unknown state {status!r}")

    def _heard(self, host: str, ts: str) -> None:
        if ts > self.answered.get(host, ""):  # fixed-width UTC times compare as text
            self.answered[host] = ts

    def _fence(self, record: dict[str, Any]) -> None:
        data = record["data"]
        host, node, status = str(data["host"]), str(data["node_id"]), str(data["state"])
        key = fence_key(host, node)
        if status == "fenced":
            self.fences[key] = {"host": host, "node_id": node, "job": data.get("job")}
            if data.get("slices"):  # the slices the run was given (not in older records)
                self.fences[key]["slices"] = [str(s) for s in data["slices"]]
        elif status == "cleared":
            if self.fences.pop(key, None) is None:
                self._problem(record["seq"], f"fence of {key} cleared, but it was not fenced")
        else:
            self._problem(record["seq"], f"fence of {key}: unknown state {status!r}")

    def drain_of(self, target: str) -> dict[str, Any] | None:
        """The drain of a host or card that says most about it (the health check's, which
        says it failed, before an admin's), or None."""
        held = self.drains.get(target)
        if not held:
            return None
        return held.get("health") or next(iter(held.values()))

    def drained(self, entry: dict[str, Any] | None) -> dict[str, Any] | None:
        """The drain that covers a slice (its card's, else its host's), or None."""
        if not self.drains or not entry:
            return None
        card = card_key(entry)
        return (self.drain_of(card) if card else None) or self.drain_of(entry["host"])

    def _repair(self, record: dict[str, Any]) -> None:
        """A repair declares the seqs lost to damage. Closing an allocation whose record was
        lost is an expected consequence, not a new problem: forget those. It may also
        acknowledge history problems by the seq they were found at (an operator's `ledger
        repair` of a history that older versions could write): those are forgotten too,
        while the records themselves, and the repair naming them, stay in the journal."""
        data = record["data"]
        for hold in data.get("holds") or ():
            self.quarantined[str(hold["id"])] = {
                "id": str(hold["id"]),
                "owner": str(hold.get("owner") or "?"),
                "slices": [str(s) for s in hold.get("slices") or ()],
                "seq": hold.get("seq"),
                "ts": record["ts"],
            }
        lost = [(int(a), int(b)) for a, b in data.get("gaps", [])]
        acknowledged = {int(entry["seq"]) for entry in data.get("acknowledged", [])}

        def explained(problem: dict[str, Any]) -> bool:
            if int(problem["seq"]) in acknowledged:
                return True
            number = str(problem.get("alloc") or "").removeprefix("a-")
            return number.isdigit() and any(a <= int(number) <= b for a, b in lost)

        self.problems = [p for p in self.problems if not explained(p)]

    # -- queries --------------------------------------------------------------------------

    def active(self, now: str) -> dict[str, Allocation]:
        """Allocations that hold their slices at `now` (expired ones are free already)."""
        return {k: a for k, a in self.allocations.items() if not a.expired(now)}

    def expired(self, now: str) -> list[str]:
        return [k for k, a in self.allocations.items() if a.expired(now)]

    def holder(self, slice_id: str, now: str) -> Allocation | None:
        alloc_id = self.holders.get(slice_id)
        alloc = self.allocations.get(alloc_id) if alloc_id else None
        return alloc if alloc is not None and not alloc.expired(now) else None

    def holders_of(self, slice_id: str, now: str | None = None) -> list[str]:
        """The allocations holding the slice (at `now`, an expired one does not; without,
        as recorded)."""
        if now is not None:
            alloc = self.holder(slice_id, now)
            return [alloc.id] if alloc is not None else []
        alloc_id = self.holders.get(slice_id)
        return [alloc_id] if alloc_id is not None else []

    def has_room(self, slice_id: str, now: str | None = None) -> bool:
        """Whether one more allocation may take the slice, by its capacity (hw.slice): the
        ledger's own invariant, whoever chose the slice, in replay and in `alloc` alike."""
        held = len(self.holders_of(slice_id, now))
        return within_capacity(self.slices.get(slice_id), held + 1)

    def slice_state(self, slice_id: str, now: str) -> str:
        """The slice's state at `now` in the ledger's own terms: held while an allocation
        holds it (an expired one does not), re-cutting while its card is reserved for an
        elastic re-cut (nothing may take it), drained, free otherwise: what the ledger's
        own checks ask. Why a slice is out of placement, as placement, `pool`, `top` and the
        exports see it, is sched.unavailable's (lost cards and nodes, stale runs, ...)."""
        if self.holder(slice_id, now) is not None:
            return "held"
        if self.reshapes and slice_id in self.recutting_slices():
            return "re-cutting"
        if self.drains and self.drained(self.slices.get(slice_id)) is not None:
            return "drained"
        return "free"

    def recutting_slices(self) -> dict[str, str]:
        """Slice id -> the reshape that reserved its card, for every card being re-cut: the
        slices the reservation names and every slice the card has now (a refresh while it
        is re-cut records new ids, half-made ones included: none of them may be taken
        before the reshape is closed). An AMD hive's key names its host and island."""
        if not self.reshapes:
            return {}
        key = (self.seq, id(self.slices))
        if self._recutting is not None and self._recutting[0] == key:
            return self._recutting[1]
        out: dict[str, str] = {}
        for record in self.reshapes.values():
            for slice_id in record.get("slices") or ():
                out[str(slice_id)] = str(record["id"])
        by_card = {str(r["gpu"]): str(r["id"]) for r in self.reshapes.values()}
        for slice_id, entry in self.slices.items():
            reshape = by_card.get(card_key(entry) or "") or by_card.get(hive_key(entry) or "")
            if reshape is not None:
                out[slice_id] = reshape
        self._recutting = (key, out)
        return out

    def queue_order(self) -> list[dict[str, Any]]:
        """Highest priority first, then first come first served."""
        return sorted(self.queue.values(), key=lambda e: (-e["priority"], e["seq"]))

    def orphans(self) -> list[tuple[Allocation, str]]:
        """Holds on slices that no longer exist (or were re-created: another uuid)."""
        found: list[tuple[Allocation, str]] = []
        for alloc in self.allocations.values():
            for index, slice_id in enumerate(alloc.slices):
                current = self.slices.get(slice_id)
                uuid = alloc.uuids[index] if index < len(alloc.uuids) else None
                if current is None or (uuid is not None and current.get("uuid") != uuid):
                    found.append((alloc, slice_id))
        return found

    def job_holding(self, alloc_id: str) -> dict[str, Any] | None:
        """The pending or running job whose placement is `alloc_id`, if any: such an
        allocation ends with its job (reaped or cancelled), never on its own."""
        for job in self.jobs.values():
            if job.get("alloc") == alloc_id and job.get("state") in JOB_HOLDING:
                return job
        return None

    def job_conflicts(self) -> list[tuple[str, str, str]]:
        """(kind, where, message) for every live job whose allocation was closed while it
        ran (a slice it runs on held by another as well is `ledger verify`'s capacity
        check)."""
        found: list[tuple[str, str, str]] = []
        for job in self.jobs.values():
            alloc_id = job.get("alloc")
            if job.get("state") not in JOB_HOLDING or not alloc_id:
                continue
            if alloc_id not in self.allocations:
                how = self.closed.get(str(alloc_id), "closed")
                found.append(
                    (
                        "job",
                        str(job["id"]),
                        f"{job['id']} is {job['state']} but its allocation {alloc_id} was "
                        f"ended ({how}) while it runs",
                    )
                )
        return found

    def recent_finished(self, since: str, limit: int) -> list[dict[str, Any]]:
        """Finished jobs last updated at or after `since`, at most `limit` of the newest:
        what a snapshot keeps so that `jobs --all`, `logs` and `cancel` still know a job
        that ended shortly before a compaction."""
        recent = [j for j in self.finished.values() if str(j.get("updated", "")) >= since]
        recent.sort(key=lambda j: str(j.get("updated", "")))
        return recent[-limit:] if limit > 0 else []

    # -- snapshot form --------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "slices": list(self.slices.values()),
            "allocations": [asdict(a) for a in self.allocations.values()],
            "jobs": list(self.jobs.values()),
            "queue": list(self.queue.values()),
            "problems": list(self.problems),
            "reshapes": list(self.reshapes.values()),
            "card_changed": dict(self.card_changed),
            "card_failed": dict(self.card_failed),
            "reshape_totals": dict(self.reshape_totals),
            "drains": [d for held in self.drains.values() for d in held.values()],
            "silent": dict(self.silent),
            "lost": list(self.lost.values()),
            "answered": dict(self.answered),
            "fences": list(self.fences.values()),
            "quarantined": list(self.quarantined.values()),
            "team_usage": dict(self.team_usage),
            "usage_totals": dict(self.usage_totals),
        }

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> State:
        state = cls(seq=int(raw["seq"]))
        state.slices = {s["id"]: dict(s) for s in raw["slices"]}
        for entry in raw["allocations"]:
            alloc = Allocation(**entry)
            state.allocations[alloc.id] = alloc
            for slice_id in alloc.slices:
                state.holders.setdefault(slice_id, alloc.id)
        state.jobs = {j["id"]: dict(j) for j in raw["jobs"]}
        state.queue = {q["id"]: dict(q) for q in raw["queue"]}
        state.problems = [dict(p) for p in raw.get("problems", [])]
        # Written by versions with elastic re-cuts; older snapshots have none.
        state.reshapes = {r["id"]: dict(r) for r in raw.get("reshapes", [])}
        state.card_changed = dict(raw.get("card_changed", {}))
        state.card_failed = dict(raw.get("card_failed", {}))
        state.reshape_totals = dict(raw.get("reshape_totals", {}))
        for drain in raw.get("drains", []):
            source = str(drain.get("source") or "admin")
            state.drains.setdefault(drain["target"], {})[source] = dict(drain)
        # Written by versions that notice lost nodes; older snapshots have none.
        state.silent = dict(raw.get("silent", {}))
        state.lost = {entry["host"]: dict(entry) for entry in raw.get("lost", [])}
        state.answered = dict(raw.get("answered", {}))  # older snapshots: none recorded
        state.fences = {fence_key(f["host"], f["node_id"]): dict(f) for f in raw.get("fences", [])}
        # Written by versions that keep quarantined holds; older snapshots have none.
        state.quarantined = {q["id"]: dict(q) for q in raw.get("quarantined", [])}
        # Written by versions with teams; older snapshots have none.
        state.team_usage = {k: list(v) for k, v in raw.get("team_usage", {}).items()}
        state.usage_totals = {k: list(v) for k, v in raw.get("usage_totals", {}).items()}
        # Recently finished jobs kept by compaction (not part of equality, like `finished`).
        state.finished = {j["id"]: dict(j) for j in raw.get("finished", [])}
        return state

    def __eq__(self, other: object) -> bool:
        return isinstance(other, State) and self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]


_HANDLERS = {
    "slices": State._slices,
    "alloc": State._alloc,
    "release": State._release,
    "expire": State._expire,
    "enqueue": State._enqueue,
    "dequeue": State._dequeue,
    "job": State._job,
    "repair": State._repair,
    "reshape": State._reshape,
    "drain": State._drain,
    "host": State._host,
    "fence": State._fence,
}


# Fair share's usage halves every week (Slurm's PriorityDecayHalfLife default): last
# month's burst weighs little against this week's.
FAIR_SHARE_HALF_LIFE_S = 7 * 86400.0


def decayed(value: float, since: str, now: str) -> float:
    """`value` recorded at `since`, decayed to `now` with FAIR_SHARE_HALF_LIFE_S."""
    if not value or now <= since:
        return value
    return value * 0.5 ** (seconds_between(since, now) / FAIR_SHARE_HALF_LIFE_S)


def fence_key(host: str, node_id: str) -> str:
    """A run's key among the fences: its host and its folder there (one per run)."""
    return f"{host}:{node_id}"


def _cards_of(entries: Any) -> dict[str, set[tuple[str, Any]]]:
    """Card -> its slices (id, uuid): what says whether a card changed."""
    out: dict[str, set[tuple[str, Any]]] = {}
    for entry in entries:
        card = card_key(entry)
        if card is not None:
            out.setdefault(card, set()).add((entry["id"], entry.get("uuid")))
    return out
