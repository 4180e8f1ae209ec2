"""Elastic re-cuts, executed: the card is reserved in the ledger by the pass that chose it,
then re-cut through the executor `partition apply` uses too (jobs.repartition): a spec for
that one GPU, partition.plan_host, the agent's `partition` verb, the host's slices read
again, the reservation closed, done or failed. A failed re-cut keeps the card out of
elastic use for the policy's back-off.

The decision (which card, which layout) is sched.elastic's; this module only carries it out.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from gpupoolctl.jobs.events import Event
from gpupoolctl.jobs.nodes import Call
from gpupoolctl.jobs.repartition import HostRequest, Reserved, Work, carry_out, holding
from gpupoolctl.jobs.repartition import reserve_card as _reserve_card
from gpupoolctl.ledger import Transaction
from gpupoolctl.sched.cards import WHOLE, AmdHive, AnyCard
from gpupoolctl.sched.elastic import Recut

ELASTIC_LABEL = "elastic"


def reserve(tx: Transaction, recut: Recut) -> Reserved | None:
    """Record the card as being re-cut, if it still is idle and free of other reservations
    in this transaction's state (another pass, or a partition apply, may have taken it)."""
    state = tx.state
    card = recut.card
    if holding(tx, card.key) is not None:
        return None
    if any(s in state.holders for s in card.slices) or any(
        s not in state.slices for s in card.slices
    ):
        return None
    reserved = _reserve_card(
        tx,
        key=card.key,
        host=card.host,
        gpus=_indexes(card),
        before=recut.before,
        after=recut.after,
        reason=recut.reason,
        source="elastic",
        jobs=recut.jobs,
        layout=recut.layout,
    )
    return replace(reserved, recut=recut)


def _indexes(card: AnyCard) -> tuple[int, ...]:
    return card.indexes if isinstance(card, AmdHive) else (card.index,)


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


def execute(work: Work, reserved: Sequence[Reserved]) -> list[Event]:
    """Re-cut every reserved card (each host one request), refresh their hosts' slices,
    close every reservation. Returns one event per reservation closed."""
    from gpupoolctl.partition import plan_host

    if not reserved:
        return []
    hosts = sorted({item.host for item in reserved})
    answers = work.nodes.call([Call(h, "facts", {}) for h in hosts])
    facts = dict(zip(hosts, answers, strict=True))
    errors: dict[str, str] = {}
    requests: dict[str, HostRequest] = {}
    for item in reserved:
        recut = item.recut
        assert recut is not None  # reserved by this pass
        card = recut.card
        result = facts[card.host]
        if not result.ok:
            errors[item.id] = f"{card.host}: {result.outcome}: {result.error}"
            continue
        why = _why_not(result.data, recut)
        if why is not None:
            errors[item.id] = why
            continue
        plan = plan_host(spec_for(recut), ELASTIC_LABEL, card.host, (), result.data)
        if plan.errors:
            errors[item.id] = f"{card.key}: {plan.errors[0]}"
            continue
        if not plan.changed:
            continue  # already as wanted (closed done)
        request = requests.setdefault(card.host, HostRequest(card.host, [], []))
        request.gpus.extend(plan.agent_args(False)["gpus"])
        request.reserved.append(item)
    return carry_out(work, reserved, list(requests.values()), errors=errors).events
