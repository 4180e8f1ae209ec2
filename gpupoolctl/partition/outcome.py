"""What became of an apply or reset: the agents' answers merged with the plans, per host.

The agent's `partition` verb answers per GPU (gpupoolctl.agent.partition); this joins each
answer with the plan it was sent (the GPU's model and how many ops it had), and says whether
the whole run failed: a host's request did not come back ok, a hook failed, or a GPU did not
end ok.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpupoolctl.partition.diff import GpuDiff, HostPlan


class RequestResult(Protocol):
    """How one host's partition request ended (gpupoolctl.remote.results.HostResult)."""

    @property
    def ok(self) -> bool: ...

    outcome: str
    error: str | None
    data: Any


@dataclass
class ApplyOutcome:
    """`hosts`: one document per planned host, in plan order: name, changed, outcome
    ("unchanged" when nothing was sent), error, gpus (the agent's GpuOutcome plus the plan's
    model and op count), hooks, stopped_by, warnings. `failed_requests`: the hosts whose
    request did not come back ok, in the same order. `failed`: some request failed or some
    GPU did not end ok, or some hook failed."""

    hosts: list[dict[str, Any]] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    failed: bool = False


def merge_outcomes(plans: Sequence[HostPlan], results: Mapping[str, RequestResult]) -> ApplyOutcome:
    """Join each plan with its host's answer (`results` by host name; a host that was sent
    nothing has no entry)."""
    merged = ApplyOutcome()
    for plan in plans:
        diffs = {g.index: g for g in plan.gpus}
        result = results.get(plan.host)
        answer = result.data if result is not None and result.ok else {}
        entry: dict[str, Any] = {
            "name": plan.host,
            "changed": plan.changed,
            "outcome": result.outcome if result is not None else "unchanged",
            "error": result.error if result is not None else None,
            "gpus": [],
            "hooks": answer.get("hooks", []),
            "stopped_by": answer.get("stopped_by"),
            "warnings": answer.get("warnings", []),
        }
        if result is not None and not result.ok:
            merged.failed = True
            merged.failed_requests.append(plan.host)
        # A failed hook fails the host too: apply-exit typically restarts what pre-apply
        # stopped (kubelet, dcgm), and a node left without it is not "done".
        if any(not hook.get("ok") for hook in entry["hooks"]):
            merged.failed = True
        for outcome in answer.get("gpus", []):
            diff = diffs.get(outcome["index"])
            if diff is not None and diff.unchanged and diff.withheld is None:
                continue  # sent only to be checked; a refusal names it on the changed GPUs
            model = diff.model if diff is not None else None
            entry["gpus"].append(
                {**outcome, "model": model, "ops": len(diff.ops) if diff is not None else None}
            )
            merged.failed = merged.failed or not outcome["ok"]
        for diff in plan.gpus:
            if diff.withheld is not None:  # refused here, before the request: never sent
                entry["gpus"].append(_withheld(diff))
                merged.failed = True
        entry["gpus"].sort(key=lambda gpu: gpu["index"])
        merged.hosts.append(entry)
    return merged


def _withheld(diff: GpuDiff) -> dict[str, Any]:
    """A GPU left out of the request (partition.guard) as an outcome: refused, 0 applied."""
    return {
        "index": diff.index,
        "uuid": diff.uuid,
        "ok": False,
        "applied": 0,
        "error": diff.withheld,
        "rolled_back": False,
        "rollback_error": None,
        "reset_required": False,
        "model": diff.model,
        "ops": diff.withheld_ops,
    }
