"""Partitioning must not cut away slices the ledger says somebody holds.

The node's own busy check sees running processes only; an allocation made by hand or a job
between its placement and its launch has none yet, so the ledger is asked too.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpupoolctl.ledger.state import Allocation, State
from gpupoolctl.partition.diff import HostPlan


def held_gpus(state: State, now: str) -> dict[tuple[str, int], list[str]]:
    """(host, GPU index) -> the active allocations holding a slice on that GPU, each as
    its id, owner and job ("a-7 (alice)", "a-9 (bob, job j-3)")."""
    held: dict[tuple[str, int], list[str]] = {}
    for alloc in state.active(now).values():
        holder = holder_text(alloc)
        for slice_id in alloc.slices:
            entry = state.slices.get(slice_id)
            if entry is None or entry.get("gpu") is None:
                continue
            owners = held.setdefault((str(entry["host"]), int(entry["gpu"])), [])
            if holder not in owners:
                owners.append(holder)
    return held


def holder_text(alloc: Allocation) -> str:
    """An allocation as a refusal names it: its id, its owner and, for a job's, the job."""
    job = (alloc.request or {}).get("job")
    return f"{alloc.id} ({alloc.owner}{f', job {job}' if job else ''})"


def keep_held_gpus(plans: Iterable[HostPlan], held: dict[tuple[str, int], list[str]]) -> list[str]:
    """Leave every GPU that holds allocations as it is (its ops dropped, the reason kept in
    its diff's `withheld`), and every GPU whose ops would change a held one too (an AMD
    card's other partitions, its hive); one message per GPU so left."""
    messages = []
    for plan in plans:
        for diff in plan.gpus:
            if not diff.ops:
                continue
            owners = held.get((plan.host, diff.index))
            reached = [
                (i, held[(plan.host, i)]) for i in diff.also_changes if (plan.host, i) in held
            ]
            if owners:
                reason = (
                    f"left as it is, its slices are held by {', '.join(sorted(owners))}; "
                    "release them first, or use --force"
                )
            elif reached:
                others = "; ".join(f"GPU {i} by {', '.join(sorted(o))}" for i, o in reached)
                reason = (
                    "left as it is, its change would also change GPUs whose slices are held "
                    f"({others}; release them first, or use --force)"
                )
            else:
                continue
            diff.withheld, diff.withheld_ops, diff.ops = reason, len(diff.ops), []
            messages.append(f"{plan.host} GPU {diff.index}: {reason}")
    return messages
