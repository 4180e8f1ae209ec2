"""Elastic re-cuts, executed: the card is reserved in the ledger first, then re-cut through
exactly the path `partition apply` takes (a spec for that one GPU, partition.plan_host, the
agent's `partition` verb, which refuses a GPU with a running process and rolls back a step
that fails), then the host's slices are read again and the reshape is closed, done or
failed. A failed re-cut keeps the card out of elastic use for the policy's back-off.

The decision (which card, which layout) is sched.elastic's; this module only carries it out.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gpupoolctl.jobs import hooks
from gpupoolctl.jobs.nodes import Call
from gpupoolctl.ledger import Transaction
from gpupoolctl.sched.cards import WHOLE, AmdHive, AnyCard
from gpupoolctl.sched.elastic import Recut

ELASTIC_LABEL = "elastic"


@dataclass(frozen=True)
class Reserved:
    """A reshape recorded as reserved: what closing it records again."""

    id: str
    gpu: str
    host: str
    index: int
    before: str
    after: str
    reason: str
    jobs: tuple[str, ...]
    recut: Recut | None = None  # None when found in the ledger (recovery)

    @classmethod
    def of(cls, reshape_id: str, recut: Recut) -> Reserved:
        card = recut.card
        return cls(
            reshape_id, card.key, card.host, _first_index(card), recut.before, recut.after,
            recut.reason, recut.jobs, recut,
        )  # fmt: skip

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> Reserved:
        return cls(
            id=str(record["id"]),
            gpu=str(record["gpu"]),
            host=str(record["host"]),
            index=int(record["index"]),
            before=str(record.get("before") or ""),
            after=str(record.get("after") or ""),
            reason=str(record.get("reason") or ""),
            jobs=tuple(str(j) for j in record.get("jobs") or ()),
        )


def reserve(tx: Transaction, recut: Recut) -> Reserved | None:
    """Record the card as being re-cut, if it still is idle and free of other re-cuts in
    this transaction's state (another pass may have taken it meanwhile)."""
    state = tx.state
    card = recut.card
    if any(r.get("gpu") == card.key for r in state.reshapes.values()):
        return None
    if any(s in state.holders for s in card.slices) or any(
        s not in state.slices for s in card.slices
    ):
        return None
    reshape_id = f"r-{tx.next_seq}"
    tx.append(
        "reshape",
        {
            "id": reshape_id,
            "state": "reserved",
            "gpu": card.key,
            "host": card.host,
            "index": _first_index(card),
            "slices": list(card.slices),
            "before": recut.before,
            "after": recut.after,
            "layout": [list(p) for p in recut.layout],
            "reason": recut.reason,
            "jobs": list(recut.jobs),
            "by": _this_process(),
        },
    )
    return Reserved.of(reshape_id, recut)


def _first_index(card: AnyCard) -> int:
    return card.indexes[0] if isinstance(card, AmdHive) else card.index


def _this_process() -> dict[str, Any]:
    import os
    import socket
    import threading

    from gpupoolctl.hw.proc import proc_start

    pid = os.getpid()
    return {
        "host": socket.gethostname(),
        "pid": pid,
        "start": proc_start(pid),
        "thread": threading.get_ident(),  # the stress ramp runs passes in many threads
    }


# A reservation whose process cannot be checked (made on another workstation) is taken as
# abandoned after this long: a re-cut takes seconds, an AMD memory change minutes.
ABANDONED_AFTER_S = 3600.0
# A re-cut whose partition request got no answer (timed out, connection lost) may still be
# running on its node: it stays reserved at least this long (partition apply's own limit).
SETTLE_S = 900.0
# Reshapes of this process whose partition request got no answer (id -> when).
_UNANSWERED: dict[str, float] = {}


def _abandoned(record: Mapping[str, Any], now: float) -> bool:
    import os
    import socket
    import threading

    from gpupoolctl.hw.proc import alive
    from gpupoolctl.ledger.units import parse_ts

    who = record.get("by") or {}
    if who.get("host") == socket.gethostname():
        pid = int(who.get("pid") or 0)
        if pid == os.getpid() and who.get("thread") == threading.get_ident():
            # Ours, from an earlier call of this thread (`schedule --watch`): a call closes
            # what it reserves unless its node could not be read afterwards, or did not
            # answer the re-cut (then the node may still be at it: wait SETTLE_S).
            asked = _UNANSWERED.get(str(record["id"]))
            return asked is None or now - asked >= SETTLE_S
        return not alive(pid, who.get("start"))
    return now - parse_ts(str(record["ts"])).timestamp() > ABANDONED_AFTER_S


def recover(jobs: Any) -> list[dict[str, Any]]:
    """Close re-cuts whose pass ended before it finished them (killed, crashed): their
    hosts' slices are read again (the card is whatever the node says it is now, the agent
    having rolled back or finished), and the reshape is recorded failed, so the card is
    usable again after its back-off. Returns one event per reshape closed."""
    state = jobs.read().state
    now = time.time()
    stale = [r for r in state.reshapes.values() if _abandoned(r, now)]
    if not stale:
        return []
    hosts = sorted({str(r["host"]) for r in stale})
    results = jobs.nodes.call([Call(h, "facts", {}) for h in hosts])
    read = [r for r in results if r.ok]
    if read:
        jobs.warnings.extend(jobs.ledger.refresh_from_facts(read).warnings)
    unread = {r.name for r in results if not r.ok}
    items, errors = [], {}
    for record in stale:
        if record["host"] in unread:
            continue  # its node cannot say what the card is now: keep it reserved
        items.append(Reserved.from_record(record))
        errors[str(record["id"])] = "interrupted: the pass that reserved it ended first"
    return close(jobs, items, errors)


def spec_for(recut: Recut) -> Any:
    """A partition spec asking for the new layout of this one card (a MIG GPU at pinned
    placements, or every logical GPU of an AMD hive in one mode pair)."""
    from gpupoolctl.partition import MigDevice, Spec, SpecEntry, parse_profile_name

    card = recut.card
    asks: dict[str, Any]
    if isinstance(card, AmdHive):
        compute, memory = recut.layout  # type: ignore[misc]
        devices = card.indexes
        asks = {"compute_partition": compute, "memory_partition": memory}
    elif recut.layout == WHOLE:
        devices, asks = (card.index,), {"mig_enabled": False}
    else:
        pinned = tuple(
            MigDevice(f"{name}@{start}", parse_profile_name(name), 1, start, 0)
            for name, start in recut.layout  # type: ignore[misc]
        )
        devices, asks = (card.index,), {"mig_enabled": True, "mig_devices": pinned}
    entry = SpecEntry(
        source="elastic", label=ELASTIC_LABEL, line=0, devices=devices, hosts=(card.host,), **asks
    )
    return Spec(source="elastic", labels=[ELASTIC_LABEL], configs={ELASTIC_LABEL: [entry]})


def _why_not(facts: Mapping[str, Any], recut: Recut) -> str | None:
    """Why the node's facts say the card may not be re-cut now, or None: it is not the card
    that was chosen any more, or a process runs on it that the ledger did not know of."""
    card = recut.card
    gpus = {int(g["index"]): g for g in facts.get("gpus") or [] if g.get("index") is not None}
    if isinstance(card, AmdHive):
        mine = [gpus.get(i) for i in card.indexes]
        amd = [g for g in gpus.values() if g.get("vendor") == "amd"]
        if any(g is None or g.get("vendor") != "amd" for g in mine) or len(amd) != len(mine):
            return f"{card.key}: the node's AMD GPUs are no longer the hive that was chosen"
    else:
        gpu = gpus.get(card.index)
        uuid = card.common.get("gpu_uuid")
        if gpu is None or (uuid is not None and gpu.get("uuid") != uuid):
            return f"{card.key} is no longer the card that was chosen"
        mine = [gpu]
    if any(g.get("processes") for g in mine if g):
        return f"{card.key}: a process runs on it (the ledger did not know)"
    return None


def execute(jobs: Any, reserved: Sequence[Reserved]) -> list[dict[str, Any]]:
    """Re-cut every reserved card (hosts one request each), refresh their hosts' slices,
    close every reshape. Returns one event per reshape."""
    from gpupoolctl.partition import plan_host

    if not reserved:
        return []
    hosts = sorted({r.host for r in reserved})
    answers = jobs.nodes.call([Call(h, "facts", {}) for h in hosts])
    facts = dict(zip(hosts, answers, strict=True))
    errors: dict[str, str] = {}
    plans: dict[str, list[Any]] = {}
    for item in reserved:
        assert item.recut is not None  # made by this pass
        card = item.recut.card
        result = facts[card.host]
        if not result.ok:
            errors[item.id] = f"{card.host}: {result.outcome}: {result.error}"
            continue
        why = _why_not(result.data, item.recut)
        if why is not None:
            errors[item.id] = why
            continue
        plan = plan_host(spec_for(item.recut), ELASTIC_LABEL, card.host, (), result.data)
        if plan.errors:
            errors[item.id] = f"{card.key}: {plan.errors[0]}"
            continue
        plans.setdefault(card.host, []).append((item, plan))
    hooks.crash_point("reshape-reserved")
    calls, sent = [], []
    for host, items in plans.items():
        gpus = [g for _, plan in items for g in plan.agent_args(False)["gpus"]]
        calls.append(Call(host, "partition", {"gpus": gpus, "force": False}))
        sent.append(items)
    unanswered: set[str] = set()
    for items, answer in zip(sent, jobs.nodes.call(calls) if calls else [], strict=True):
        by_index = {}
        if answer.ok:
            by_index = {g.get("index"): g for g in answer.data.get("gpus") or []}
        for item, plan in items:
            if not answer.ok:
                # No answer is not a rollback: the node may still be re-cutting the card.
                unanswered.add(item.id)
                _UNANSWERED[item.id] = time.time()
                jobs.warn(
                    f"{item.gpu}: the re-cut got no answer ({answer.outcome}: {answer.error}); "
                    "the card stays reserved until its node can be read and has settled"
                )
                continue
            # Every GPU the plan changed must say ok (an AMD hive is several).
            asked = [g.index for g in plan.gpus if not g.unchanged]
            outcomes = [by_index.get(index) for index in asked]
            bad = [o for o in outcomes if o is None or not o.get("ok")]
            if bad:
                why = (bad[0] or {}).get("error") or "the node did not report it"
                errors[item.id] = f"{item.gpu}: {why} (rolled back)"
    hooks.crash_point("reshape-applied")
    # Every host that was sent a request may have changed, answered or not: read it again.
    touched = sorted({c.host for c in calls})
    unread: set[str] = set()
    if touched:
        results = jobs.nodes.call([Call(h, "facts", {}) for h in touched])
        done = jobs.ledger.refresh_from_facts([r for r in results if r.ok])
        jobs.warnings.extend(done.warnings)
        unread = {r.name for r in results if not r.ok}
    # A card whose node could not be read after the request may have changed: it stays
    # reserved (nothing is placed on slices that may be gone) until a later pass reads it.
    for item in reserved:
        if item.host in unread:
            jobs.warn(f"{item.gpu}: its node was not read after the re-cut; kept reserved")
    settled = [r for r in reserved if r.host not in unread and r.id not in unanswered]
    return close(jobs, settled, errors)


def close(jobs: Any, reserved: Sequence[Reserved], errors: Mapping[str, str]) -> list[dict]:
    """Record every reshape done or failed; one event each."""

    def build(tx: Transaction) -> list[dict[str, Any]]:
        events = []
        for item in reserved:
            _UNANSWERED.pop(item.id, None)
            if item.id not in tx.state.reshapes:
                continue  # closed by someone else (a recovery pass)
            error = errors.get(item.id)
            data = {
                "id": item.id,
                "state": "failed" if error else "done",
                "gpu": item.gpu,
                "host": item.host,
                "index": item.index,
                "before": item.before,
                "after": item.after,
                "reason": item.reason,
                "jobs": list(item.jobs),
            }
            if error:
                data["error"] = error
            tx.append("reshape", data)
            events.append(
                {
                    "event": "reshape-failed" if error else "reshaped",
                    "gpu": item.gpu,
                    "before": item.before,
                    "after": item.after,
                    "jobs": list(item.jobs),
                    "error": error,
                }
            )
        return events

    done = jobs.ledger.write(build)
    jobs.warnings.extend(done.warnings)
    return list(done.value)
