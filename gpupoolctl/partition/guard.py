"""Partitioning must not cut away slices the ledger says somebody holds.

The node's own busy check sees running processes only; an allocation made by hand or a job
between its placement and its launch has none yet, so the ledger is asked too.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpupoolctl.ledger.state import State
from gpupoolctl.partition.diff import HostPlan


def held_gpus(state: State, now: str) -> dict[tuple[str, int], list[str]]:
    """(host, GPU index) -> ids of the active allocations holding a slice on that GPU."""
    held: dict[tuple[str, int], list[str]] = {}
    for alloc in state.active(now).values():
        for slice_id in alloc.slices:
            entry = state.slices.get(slice_id)
            if entry is None or entry.get("gpu") is None:
                continue
            owners = held.setdefault((str(entry["host"]), int(entry["gpu"])), [])
            if alloc.id not in owners:
                owners.append(alloc.id)
    return held


def keep_held_gpus(plans: Iterable[HostPlan], held: dict[tuple[str, int], list[str]]) -> list[str]:
    """Leave every GPU that holds allocations as it is (its ops dropped), and every GPU
    whose ops would change a held one too (an AMD card's other partitions, its hive); one
    message per GPU so left."""
    messages = []
    for plan in plans:
        for diff in plan.gpus:
            if not diff.ops:
                continue
            owners = held.get((plan.host, diff.index))
            if owners:
                diff.ops = []
                messages.append(
                    f"{plan.host} GPU {diff.index}: left as it is, its slices are held by "
                    f"{', '.join(sorted(owners))} (release them first, or use --force)"
                )
                continue
            reached = [
                (i, held[(plan.host, i)]) for i in diff.also_changes if (plan.host, i) in held
            ]
            if reached:
                diff.ops = []
                others = "; ".join(f"GPU {i} by {', '.join(sorted(o))}" for i, o in reached)
                messages.append(
                    f"{plan.host} GPU {diff.index}: left as it is, its change would also change "
                    f"GPUs whose slices are held ({others}; release them first, or use --force)"
                )
    return messages
