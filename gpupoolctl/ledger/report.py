"""What `pool` shows: every slice the ledger knows with its holder, per node, and the holds
on slices that no longer exist. Plain data; rendering is the caller's."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Any

from gpupoolctl.ledger.state import State

_DIGITS = re.compile(r"(\d+)")


def slice_rows(
    state: State,
    now: str,
    hosts: Collection[str] | None = None,
    *,
    blocked: Mapping[str, Any],
) -> list[dict[str, Any]]:
    """One dict per slice (host, slice, kind, profile, memory_mib, state, owner, alloc,
    expires, uuid, why), grouped by host in ledger order, each host's slices in fit order.
    `hosts`: only these hosts (None: all). `blocked`: what keeps slices out of placement
    (sched.unavailable.blocks: slice id -> a Block, with .state and .why). `state` is "held"
    as of `now`, else the block's state (lost, drained, blocked, re-cutting), else "free";
    `why` is the block's reason, held or not."""
    rows = []
    by_host: dict[str, list[dict[str, Any]]] = {}
    for entry in state.slices.values():
        if hosts is None or entry["host"] in hosts:
            by_host.setdefault(entry["host"], []).append(entry)
    for host in by_host:
        for entry in sorted(by_host[host], key=lambda s: _natural(s["id"])):
            holder = state.holder(entry["id"], now)
            block = blocked.get(entry["id"])
            shown = "held" if holder else (block.state if block else "free")
            rows.append(
                {
                    "host": host,
                    "slice": entry["id"],
                    "kind": entry.get("kind"),
                    "profile": entry.get("profile"),
                    "memory_mib": entry.get("memory_mib"),
                    "state": shown,
                    "owner": holder.owner if holder else None,
                    "alloc": holder.id if holder else None,
                    "expires": holder.expires if holder else None,
                    "uuid": entry.get("uuid"),
                    "why": block.why if block else None,
                }
            )
    return rows


def shape_of(row: dict[str, Any]) -> str:
    """A slice's shape as people name it: its profile (1g.10gb, cpx), else its kind."""
    return str(row.get("profile") or row.get("kind") or "?")


def pool_report(
    state: State,
    now: str,
    hosts: Collection[str] | None = None,
    *,
    blocked: Mapping[str, Any],
    free_only: bool = False,
) -> dict[str, Any]:
    """{"seq", "now", "nodes", "orphans"}: per node its slice counts (total, free, held),
    its free slices per shape and free memory, its orphaned holds (`orphaned`: holds on
    slices of it that no longer exist, as `ledger verify` reports them) and its slices (as
    `slice_rows`, same order; only the free ones with `free_only`, the counts still of
    all); per orphaned hold (an allocation holding a slice that no longer exists) its
    alloc, owner, slice and a message for the user. A host with orphaned holds and no
    slice left is a node of no slices."""
    nodes: dict[str, dict[str, Any]] = {}

    def node_of(host: str) -> dict[str, Any]:
        return nodes.setdefault(
            host,
            {
                "host": host,
                "total": 0,
                "free": 0,
                "held": 0,
                "orphaned": 0,
                "free_mib": 0,
                "free_shapes": {},
                "slices": [],
            },
        )

    for row in slice_rows(state, now, hosts, blocked=blocked):
        node = node_of(row["host"])
        node["total"] += 1
        node["free" if row["state"] == "free" else "held"] += 1  # re-cutting: not free
        if row["state"] == "free":
            node["free_mib"] += int(row.get("memory_mib") or 0)
            shapes = node["free_shapes"]
            shapes[shape_of(row)] = shapes.get(shape_of(row), 0) + 1
        if row["state"] == "free" or not free_only:
            node["slices"].append(row)
    orphans = [
        {
            "alloc": alloc.id,
            "owner": alloc.owner,
            "slice": slice_id,
            "message": f"{alloc.id} ({alloc.owner}) holds {slice_id}, which no longer exists "
            "(partition changed?); release it",
        }
        for alloc, slice_id in state.orphans()
    ]
    for orphan in orphans:  # the host a slice id names, as the ledger's ids all do
        host = str(orphan["slice"]).split("/", 1)[0]
        if hosts is None or host in hosts:
            node_of(host)["orphaned"] += 1
    return {"seq": state.seq, "now": now, "nodes": list(nodes.values()), "orphans": orphans}


def _natural(text: str) -> tuple[Any, ...]:
    # "n2/gpu10" after "n2/gpu9": the order sched breaks ties in (gpupoolctl.sched.ids), kept
    # here so that reading the ledger loads nothing of the scheduler.
    return tuple(int(p) if p.isdigit() else p for p in _DIGITS.split(text))
