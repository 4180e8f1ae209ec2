"""What `partition` prints: documents for machines, rows and text blocks for people."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpupoolctl.cli.render import Column
from gpupoolctl.hw.ops import describe

if TYPE_CHECKING:
    from gpupoolctl.partition import GpuDiff, HostPlan

PLAN_COLUMNS = (
    Column("host", "HOST"),
    Column("gpu", "GPU", "right"),
    Column("model", "MODEL"),
    Column("current", "CURRENT"),
    Column("desired", "DESIRED"),
    Column("ops", "OPS", "right"),
)
PLAN_CSV_COLUMNS = (*PLAN_COLUMNS[:-1], Column("ops", "ops"), Column("notes", "notes"))

OUTCOME_COLUMNS = (
    Column("host", "HOST"),
    Column("gpu", "GPU", "right"),
    Column("model", "MODEL"),
    Column("result", "RESULT"),
    Column("applied", "APPLIED", "right"),
    Column("error", "ERROR"),
)

SHOW_COLUMNS = (
    Column("host", "HOST"),
    Column("gpu", "GPU", "right"),
    Column("model", "MODEL"),
    Column("state", "STATE"),
    Column("instances", "INSTANCES"),
    Column("processes", "PROCS", "right"),
)

PROFILE_COLUMNS = (
    Column("model", "MODEL"),
    Column("profile", "PROFILE"),
    Column("id", "ID", "right"),
    Column("slices", "SLICES"),
    Column("memory_slots", "MEM SLOTS"),
    Column("memory_mib", "MEMORY MiB", "right"),
    Column("sms", "SM/CU", "right"),
    Column("max_instances", "MAX", "right"),
    Column("placements", "PLACEMENTS"),
)
HOST_PROFILE_COLUMNS = (Column("host", "HOST"), Column("gpus", "GPUS"), *PROFILE_COLUMNS)


def no_profiles_text(models: Sequence[str]) -> str:
    """One line for a `profiles --model` answer without rows."""
    names = ", ".join(models)
    verb = "has" if len(models) == 1 else "have"
    return f"{names} {verb} no MIG profiles and no AMD partition modes: used as whole cards"


def gpu_plan_dict(gpu: GpuDiff) -> dict[str, Any]:
    return {
        "index": gpu.index,
        "uuid": gpu.uuid,
        "model": gpu.model,
        "vendor": gpu.vendor,
        "current": gpu.current,
        "desired": gpu.desired,
        "unchanged": gpu.unchanged,
        "ops": list(gpu.ops),
        "notes": list(gpu.notes),
        "also_changes": list(gpu.also_changes),  # other GPUs of the host the ops change too
    }


def plan_rows(plans: Sequence[HostPlan], verbose: bool) -> list[dict[str, Any]]:
    return [
        {
            "host": plan.host,
            "gpu": gpu.index,
            "model": gpu.model,
            "current": gpu.current,
            "desired": "(unchanged)" if gpu.unchanged else gpu.desired,
            "ops": len(gpu.ops) if not verbose else "; ".join(describe(dict(o)) for o in gpu.ops),
            "notes": "; ".join(gpu.notes),
        }
        for plan in plans
        for gpu in plan.gpus
    ]


def write_plan_text(plans: Sequence[HostPlan], verbose: bool) -> None:
    """Per host and GPU: the change and its ordered operations (GPUs already right are
    counted, and listed with -v)."""
    out = sys.stdout
    for plan in plans:
        changed = [g for g in plan.gpus if not g.unchanged]
        same = [g for g in plan.gpus if g.unchanged]
        out.write(f"{plan.host}: {len(changed)} GPU(s) to change, {len(same)} already right\n")
        for gpu in plan.gpus:
            if gpu.unchanged and not verbose:
                continue
            arrow = "(unchanged)" if gpu.unchanged else f"-> {gpu.desired}"
            out.write(f"  GPU {gpu.index} {gpu.model}: {gpu.current} {arrow}\n")
            for step, op in enumerate(gpu.ops, 1):
                out.write(f"    {step:>2}. {describe(dict(op))}\n")
            for note in gpu.notes:
                out.write(f"        note: {note}\n")


def result_word(outcome: dict[str, Any]) -> str:
    if outcome.get("ok"):
        return "ok, reset required" if outcome.get("reset_required") else "ok"
    if outcome.get("reset_required"):
        return "waiting for GPU reset"
    if outcome.get("rollback_error"):
        return "FAILED, ROLLBACK FAILED"
    if outcome.get("rolled_back"):
        return "failed, rolled back"
    if outcome.get("applied"):
        return "failed"
    return "refused"


def outcome_rows(hosts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per GPU of the outcome documents (gpupoolctl.partition.outcome)."""
    return [
        {
            "host": host["name"],
            "gpu": gpu["index"],
            "model": gpu["model"],
            "result": result_word(gpu),
            "applied": f"{gpu['applied']}/{gpu['ops'] if gpu['ops'] is not None else '?'}",
            "error": "; ".join(x for x in (gpu["error"], gpu["rollback_error"]) if x) or None,
        }
        for host in hosts
        for gpu in host["gpus"]
    ]


def instances_text(gpu: dict[str, Any]) -> str | None:
    mig = gpu.get("mig") or {}
    parts = []
    for gi in mig.get("instances") or []:
        text = f"{gi['profile']}@{gi['placement_start']}"
        cis = [ci["profile"] for ci in gi.get("compute_instances") or []]
        if cis != [gi["profile"]]:
            text += f"[{','.join(cis) or 'no CI'}]"
        parts.append(text)
    return " ".join(parts) or None
