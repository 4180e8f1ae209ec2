"""Ledger records as the events a person watching the pool cares about: placements, jobs that
end, re-cuts, preemptions, drains, nodes going silent or lost. Everything else (slice
refreshes, queue bookkeeping, fences) is left out.

`describe(record, state)` is given the state just before the record was applied, so a release
can still name the job and owner that held the slices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpupoolctl.ledger.state import State

# Event kinds, each a word the views colour and filter by.
PLACED, ENDED, RECUT, PREEMPT, DRAIN, NODE = "placed", "ended", "re-cut", "preempt", "drain", "node"


@dataclass(frozen=True)
class Event:
    seq: int
    ts: str
    kind: str
    text: str
    host: str | None = None  # the host it happened on, when there is one (for the filter)
    owner: str | None = None


def describe(record: dict[str, Any], state: State) -> Event | None:
    """The event a record is, or None when it is not one worth showing."""
    op = record.get("op")
    data = record.get("data") or {}
    seq, ts = int(record.get("seq") or 0), str(record.get("ts") or "")
    if op == "job":
        return _job_event(seq, ts, data, state)
    if op == "reshape":
        card = str(data.get("gpu"))
        host = card.split("/", 1)[0]
        status = data.get("state")
        if status == "reserved":
            before = _layout(data.get("before"))
            after = _layout(data.get("after"))
            doing = "partitioning" if data.get("source") == "apply" else "re-cutting"
            text = f"{doing} {card}: {before} -> {after}"
            if data.get("source") == "apply" and data.get("reason"):
                text += f" ({data['reason']})"
            jobs = data.get("jobs") or []
            if jobs:
                text += f" for {', '.join(str(j) for j in jobs)}"
            return Event(seq, ts, RECUT, text, host)
        return Event(seq, ts, RECUT, f"re-cut of {card} {status}", host)
    if op == "drain":
        target = str(data.get("target"))
        host = target.split("/", 1)[0]
        if data.get("state") == "drained":
            why = f": {data['reason']}" if data.get("reason") else ""
            return Event(seq, ts, DRAIN, f"drained {target}{why}", host)
        return Event(seq, ts, DRAIN, f"undrained {target}", host)
    if op == "host":
        host = str(data.get("host"))
        status = str(data.get("state"))
        if status == "heard":
            return None  # a heartbeat: nothing happened
        words = {
            "silent": "stopped answering",
            "answering": "answers again",
            "lost": "declared lost",
            "returned": "returned",
        }
        return Event(seq, ts, NODE, f"{host} {words.get(status, status)}", host)
    if op == "alloc" and not _is_jobs_own(data, state):
        slices = [str(s) for s in data.get("slices") or []]
        owner = str(data.get("owner") or "")
        host = slices[0].split("/", 1)[0] if slices else None
        return Event(
            seq, ts, PLACED, f"{data.get('id')} ({owner}) took {_few(slices)}", host, owner
        )
    return None


def _job_event(seq: int, ts: str, data: dict[str, Any], state: State) -> Event | None:
    job_id = str(data.get("id"))
    status = str(data.get("state"))
    before = state.jobs.get(job_id) or state.finished.get(job_id) or {}
    owner = str(data.get("owner") or before.get("owner") or "") or None
    nodes = data.get("nodes") or before.get("nodes") or []
    host = str(nodes[0]["host"]) if nodes else None
    preempt = data.get("preempt")
    if preempt and not before.get("preempt"):
        by = preempt.get("by")
        why = f"reclaimed for team {preempt['reclaim']}" if preempt.get("reclaim") else "preempted"
        return Event(seq, ts, PREEMPT, f"{job_id} ({owner}) {why} by {by}", host, owner)
    if status == "pending" and before.get("state") != "pending":
        placement = data.get("placement") or {}
        slices = [str(s) for s in placement.get("slices") or []]
        hosts = placement.get("hosts") or []
        where = str(hosts[0]) if hosts else None
        return Event(seq, ts, PLACED, f"{job_id} ({owner}) placed on {_few(slices)}", where, owner)
    if status in ("done", "failed", "cancelled") and before.get("state") != status:
        why = data.get("error") or data.get("reason")
        code = data.get("exit_code")
        detail = f": {why}" if why else (f" (exit {code})" if code is not None else "")
        return Event(seq, ts, ENDED, f"{job_id} ({owner}) {status}{detail}", host, owner)
    if status == "queued" and before.get("state") in ("pending", "running"):
        why = data.get("reason") or data.get("error") or "requeued"
        return Event(seq, ts, PREEMPT, f"{job_id} ({owner}) back in the queue: {why}", host, owner)
    return None


def _is_jobs_own(data: dict[str, Any], _state: State) -> bool:
    """A job's placement is told by its job record ("placed on"), not twice by its alloc."""
    return bool((data.get("request") or {}).get("job"))


def _layout(value: Any) -> str:
    if isinstance(value, list | tuple):
        return " + ".join(str(v) for v in value) or "nothing"
    return str(value or "?")


def _few(items: list[str], most: int = 3) -> str:
    if len(items) <= most:
        return ", ".join(items) or "nothing"
    return f"{', '.join(items[:most])} and {len(items) - most} more"
