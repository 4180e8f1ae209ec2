"""Changing cards' partitions: the one executor of elastic re-cuts and `partition apply/reset`.

Every card is reserved in the ledger before it is touched (a `reshape` record: nothing is
placed on its slices from then on, and its holds are checked again under the ledger lock);
then each host gets one `partition` request with its GPUs' plans (the agent refuses the
whole node if any GPU changed since the plan, refuses a busy GPU, and rolls back a step that
fails); the hosts that were sent a request are read again and their new slices recorded;
every reservation is closed, done or failed.

A host that did not answer, or could not be read afterwards, may still be changing: its
cards stay reserved. So do the cards of a run that ended before it closed them (Ctrl-C,
SIGKILL): `recover`, at the start of the next pass or apply, reads their nodes again, waits
while a node says a partition run holds it, then records what the cards are now and closes
the reservations.

Without a ledger (partitioning does not start one) the same requests are sent and nothing
is recorded.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from gpupoolctl.hw.slice import card_key, gpu_id, hive_key
from gpupoolctl.jobs import hooks
from gpupoolctl.jobs.events import Event, Reshaped
from gpupoolctl.jobs.nodes import Call, Nodes
from gpupoolctl.ledger import Transaction, reservations

if TYPE_CHECKING:
    from gpupoolctl.ledger import Ledger
    from gpupoolctl.partition import HostPlan
    from gpupoolctl.remote.results import HostResult
    from gpupoolctl.sched.elastic import Recut


# A re-cut whose partition request got no answer (timed out, connection lost) may still be
# running on its node: the loop that sent it keeps it reserved at least this long
# (partition apply's own limit) before a recovery may ask the node.
SETTLE_S = 900.0


@dataclass
class Unanswered:
    """The reservations whose partition request got no answer, by id, with when
    (time.time()). Owned by the loop that sent the requests (a JobsCore, a CardWork): its
    later calls leave such a card reserved for SETTLE_S, while its node may still be at it.
    Two loops in one process (tests, benchmarks) each have their own."""

    since: dict[str, float] = field(default_factory=dict)

    def mark(self, reservation_id: str, now: float) -> None:
        self.since[reservation_id] = now

    def forget(self, reservation_id: str) -> None:
        self.since.pop(reservation_id, None)

    def settling(self, reservation_id: str, now: float) -> bool:
        """Whether the reservation's request went unanswered less than SETTLE_S ago."""
        asked = self.since.get(reservation_id)
        return asked is not None and now - asked < SETTLE_S


class Work(Protocol):
    """What the executor needs: the ledger (None: none is kept), the nodes, where its
    warnings go, and the loop's own record of requests that got no answer (a JobsCore is
    one; CardWork is one for `partition`)."""

    @property
    def ledger(self) -> Ledger | None: ...

    @property
    def nodes(self) -> Nodes: ...

    @property
    def warnings(self) -> list[str]: ...

    @property
    def unanswered(self) -> Unanswered: ...

    def warn(self, message: str) -> None: ...


@dataclass
class CardWork:
    ledger: Ledger | None
    nodes: Nodes
    warnings: list[str] = field(default_factory=list)
    unanswered: Unanswered = field(default_factory=Unanswered)

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


@dataclass(frozen=True)
class Reserved:
    """A card (an NVIDIA GPU, or an AMD hive) recorded as reserved: what closing it records
    again. `gpus`: the GPU indexes whose outcomes decide it (empty when found in the ledger
    by a recovery)."""

    id: str
    gpu: str
    host: str
    index: int
    before: str
    after: str
    reason: str
    jobs: tuple[str, ...] = ()
    source: str = "elastic"
    gpus: tuple[int, ...] = ()
    recut: Recut | None = None  # an elastic re-cut's decision, when this run made it

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
            source=str(record.get("source") or "elastic"),
        )


def holding(tx: Transaction, key: str) -> dict[str, Any] | None:
    """The reservation that holds card `key` in this transaction's state, or None."""
    return next((r for r in tx.state.reshapes.values() if r.get("gpu") == key), None)


def reserve_card(
    tx: Transaction,
    *,
    key: str,
    host: str,
    gpus: Sequence[int],
    before: str,
    after: str,
    reason: str,
    source: str,
    jobs: Sequence[str] = (),
    layout: Sequence[Any] = (),
) -> Reserved:
    """Record card `key` as reserved (the caller has checked that nobody else holds it)."""
    state = tx.state
    slices = [s for s, e in state.slices.items() if key in (card_key(e), hive_key(e))]
    reshape_id = f"r-{tx.next_seq}"
    tx.append(
        "reshape",
        {
            "id": reshape_id,
            "state": "reserved",
            "gpu": key,
            "host": host,
            "index": min(gpus),
            "slices": sorted(slices),
            "before": before,
            "after": after,
            "layout": [list(p) for p in layout],
            "reason": reason,
            "jobs": list(jobs),
            "source": source,
            "by": reservations.this_process(),
        },
    )
    return Reserved(
        reshape_id, key, host, min(gpus), before, after, reason, tuple(jobs), source,
        tuple(sorted(gpus)),
    )  # fmt: skip


def _abandoned(record: Mapping[str, Any], now: float, unanswered: Unanswered) -> bool:
    who = record.get("by") or {}
    if (
        reservations.made_here(record)
        and int(who.get("pid") or 0) == os.getpid()
        and who.get("thread") == threading.get_ident()
    ):
        # Ours, from an earlier call of this thread (`schedule --watch`): a call closes what
        # it reserves unless its node could not be read afterwards, or did not answer the
        # request (then the node may still be at it: wait SETTLE_S).
        return not unanswered.settling(str(record["id"]), now)
    return reservations.maker_gone(record, now)


def recover(work: Work) -> list[Event]:
    """Close the reservations of runs that ended before they closed them (killed, crashed,
    interrupted): their hosts' slices are read again (the cards are whatever the nodes say
    they are now, the agent having rolled back or finished) and each is recorded failed,
    so the card is usable again (elastic leaves it alone for its back-off). A node that
    cannot be read, or says a partition run holds it now, keeps its cards reserved. Returns
    one event per reservation closed."""
    if work.ledger is None:
        return []
    state = work.ledger.read().state
    now = time.time()
    stale = [r for r in state.reshapes.values() if _abandoned(r, now, work.unanswered)]
    if not stale:
        return []
    hosts = sorted({str(r["host"]) for r in stale})
    results = work.nodes.call([Call(h, "facts", {}) for h in hosts])
    busy = {r.name for r in results if r.ok and (r.data or {}).get("partition_running")}
    for host in sorted(busy):
        work.warn(f"{host}: a partition run still holds the node; its cards stay reserved")
    read = [r for r in results if r.ok and r.name not in busy]
    if read:
        work.warnings.extend(work.ledger.refresh_from_facts(read).warnings)
    settled = {r.name for r in read}
    items = [Reserved.from_record(r) for r in stale if r["host"] in settled]
    errors = {item.id: "interrupted: the run that reserved it ended first" for item in items}
    return close(work, items, errors)


@dataclass
class HostRequest:
    """One host's `partition` request: its GPUs' plans (hw.ops.GpuPlan), and the reserved
    cards they change."""

    host: str
    gpus: list[Any]
    reserved: list[Reserved]


@dataclass
class Carried:
    """What the executor did: each host's answer (by host), one event per reservation
    closed, and the hosts that may still be changing (kept reserved)."""

    answers: dict[str, HostResult] = field(default_factory=dict)
    events: list[Event] = field(default_factory=list)
    unsure: list[str] = field(default_factory=list)


def carry_out(
    work: Work,
    reserved: Sequence[Reserved],
    requests: Sequence[HostRequest],
    *,
    errors: Mapping[str, str] | None = None,
    hooks_argv: Mapping[str, Any] | None = None,
    force: bool = False,
) -> Carried:
    """Send each host its request, read the hosts sent one again and record their slices,
    close every reservation of `reserved` whose node settled (`errors`: those refused
    before anything was sent, by id)."""
    failed = dict(errors or {})
    hooks.crash_point("reshape-reserved")
    calls = []
    for request in requests:
        args: dict[str, Any] = {"gpus": request.gpus, "force": force}
        if hooks_argv:
            args["hooks"] = dict(hooks_argv)
        calls.append(Call(request.host, "partition", args))
    carried = Carried()
    unanswered: set[str] = set()
    for request, answer in zip(requests, work.nodes.call(calls) if calls else [], strict=True):
        carried.answers[request.host] = answer
        if not answer.ok:
            # No answer is not a rollback: the node may still be changing the cards.
            for item in request.reserved:
                unanswered.add(item.id)
                work.unanswered.mark(item.id, time.time())
            work.warn(
                f"{request.host}: the partition request got no answer ({answer.outcome}: "
                f"{answer.error}); its cards stay reserved until the node can be read and "
                "has settled"
            )
            continue
        by_index = {g.get("index"): g for g in answer.data.get("gpus") or []}
        for item in request.reserved:
            outcomes = [by_index.get(index) for index in item.gpus]
            bad = [o for o in outcomes if o is None or not o.get("ok")]
            if bad:
                why = (bad[0] or {}).get("error") or "the node did not report it"
                rolled = " (rolled back)" if (bad[0] or {}).get("rolled_back") else ""
                failed[item.id] = f"{item.gpu}: {why}{rolled}"
    hooks.crash_point("reshape-applied")
    # Every host that was sent a request may have changed, answered or not: read it again.
    touched = sorted({c.host for c in calls})
    unread: set[str] = set()
    if touched and work.ledger is not None:
        results = work.nodes.call([Call(h, "facts", {}) for h in touched])
        work.warnings.extend(work.ledger.refresh_from_facts([r for r in results if r.ok]).warnings)
        unread = {r.name for r in results if not r.ok}
    # A card whose node could not be read after the request may have changed: it stays
    # reserved (nothing is placed on slices that may be gone) until a later run reads it.
    for host in sorted(unread):
        work.warn(f"{host}: not read again after the partition request; cards kept reserved")
    silent = {host for host, answer in carried.answers.items() if not answer.ok}
    carried.unsure = sorted(unread | silent)
    settled = [r for r in reserved if r.host not in unread and r.id not in unanswered]
    carried.events = close(work, settled, failed)
    return carried


def close(work: Work, reserved: Sequence[Reserved], errors: Mapping[str, str]) -> list[Event]:
    """Record every reservation done or failed; one event each."""
    if work.ledger is None or not reserved:
        return []

    def build(tx: Transaction) -> list[Event]:
        events: list[Event] = []
        for item in reserved:
            work.unanswered.forget(item.id)
            if item.id not in tx.state.reshapes:
                continue  # closed by someone else (a recovery)
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
                "source": item.source,
            }
            if error:
                data["error"] = error
            tx.append("reshape", data)
            kind = "reshape-failed" if error else "reshaped"
            events.append(
                Reshaped(item.gpu, item.before, item.after, tuple(item.jobs), error, kind=kind)
            )
        return events

    done = work.ledger.write(build)
    work.warnings.extend(done.warnings)
    return list(done.value)


# -- partition apply / reset -------------------------------------------------------------------


@dataclass
class Applied:
    """What `apply_plans` did: each host's answer, the GPUs refused before anything was sent
    (one message each; their diffs say why too), and the hosts that may still be changing."""

    answers: dict[str, HostResult] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    unsure: list[str] = field(default_factory=list)


def apply_plans(
    work: Work,
    plans: Sequence[HostPlan],
    facts: Mapping[str, Mapping[str, Any]],
    *,
    reason: str,
    force: bool = False,
    hooks_argv: Mapping[str, Any] | None = None,
) -> Applied:
    """Carry out `plans` (partition.plan_host's, made from `facts` by host): reserve every
    card they change, in one ledger transaction that checks again who holds what (a GPU
    whose slices are held is left as it is unless `force`; a host with a card that another
    run has reserved is left whole), then the executor. Without a ledger, only the latter."""
    applied = Applied()
    reserved: dict[str, list[Reserved]] = {}
    if work.ledger is not None:
        done = work.ledger.write(
            lambda tx: _reserve_plans(tx, plans, facts, reason=reason, force=force)
        )
        work.warnings.extend(done.warnings)
        applied.refused, reserved = done.value
    requests = [
        HostRequest(p.host, list(p.agent_args(force)["gpus"]), reserved.get(p.host, []))
        for p in plans
        if p.changed
    ]
    everything = [item for items in reserved.values() for item in items]
    carried = carry_out(work, everything, requests, hooks_argv=hooks_argv, force=force)
    applied.answers, applied.unsure = carried.answers, carried.unsure
    return applied


def _reserve_plans(
    tx: Transaction,
    plans: Sequence[HostPlan],
    facts: Mapping[str, Mapping[str, Any]],
    *,
    reason: str,
    force: bool,
) -> tuple[list[str], dict[str, list[Reserved]]]:
    from gpupoolctl.partition.guard import held_gpus, keep_held_gpus

    refused = [] if force else keep_held_gpus(plans, held_gpus(tx.state, tx.now))
    reserved: dict[str, list[Reserved]] = {}
    for plan in plans:
        cards = _cards_changed(plan, facts.get(plan.host) or {})
        taken = [(key, r) for key in cards if (r := holding(tx, key)) is not None]
        if taken:
            refused.append(_leave_host(plan, *taken[0]))
            continue
        for key, diffs in cards.items():
            reserved.setdefault(plan.host, []).append(
                reserve_card(
                    tx,
                    key=key,
                    host=plan.host,
                    gpus=sorted({i for d in diffs for i in (d.index, *d.also_changes)}),
                    before="; ".join(dict.fromkeys(d.current for d in diffs)),
                    after="; ".join(dict.fromkeys(d.desired for d in diffs)),
                    reason=reason,
                    source="apply",
                )
            )
    return refused, reserved


def _cards_changed(plan: HostPlan, facts: Mapping[str, Any]) -> dict[str, list[Any]]:
    """The cards a host's plan changes, each with its GPU diffs: an NVIDIA GPU is its own
    card, the logical GPUs of an AMD hive one card (one changes the others)."""
    from gpupoolctl.ledger.slices import slices_from_facts

    keys: dict[int, str] = {}
    for entry in slices_from_facts(plan.host, dict(facts)):
        keys.setdefault(int(entry["gpu"]), hive_key(entry) or card_key(entry) or "")
    cards: dict[str, list[Any]] = {}
    for diff in plan.gpus:
        if diff.ops:
            key = keys.get(diff.index) or gpu_id(plan.host, diff.index)
            cards.setdefault(key, []).append(diff)
    return cards


def _leave_host(plan: HostPlan, key: str, record: Mapping[str, Any]) -> str:
    """Drop every change of the host (another run reserved one of its cards); the message."""
    why = (
        f"left as it is: {key} is being changed by {reservations.describe_maker(record)} "
        f"({record['id']}, since {record['ts']}), so nothing on {plan.host} is changed; "
        "plan again when that has ended"
    )
    for diff in plan.gpus:
        if diff.ops:
            diff.withheld, diff.withheld_ops, diff.ops = why, len(diff.ops), []
    return f"{plan.host}: {why}"
