"""The state a plan was made from, and whether a GPU still is in it.

A plan is made from facts taken a moment before it runs (minutes, behind a confirmation
prompt), and its ops name GPU and compute instances by id, which the driver reuses. Had the
GPU changed in between (another apply, someone with nvidia-smi), a `destroy_gi 2` would
destroy whatever instance now has id 2 and the run would still end "ok". So the workstation
sends, with each GPU's ops, the state it planned from (`from_facts`), and the agent refuses
a GPU whose state (`from_snapshot`, read under the node's partition lock) differs.

State, JSON; only the keys present are compared (facts of an older driver may lack some):
    {"mig": "enabled" | "disabled", "mig_pending": "enabled" | "disabled",
     "instances": ["gi2 id9@4:4 ci0", ...],   # GI id, profile id, placement, CI ids
     "compute": "CPX", "memory": "NPS4", "vfs": 8}
Stdlib only: this ships to the nodes, and the workstation imports it too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any


def _instance(gi: int, profile_id: int, start: int, size: int, cis: list[int]) -> str:
    return f"gi{gi} id{profile_id}@{start}:{size} ci{','.join(str(c) for c in sorted(cis))}"


def _word(enabled: bool) -> str:
    return "enabled" if enabled else "disabled"


def from_facts(gpu: Mapping[str, Any]) -> dict[str, Any]:
    """What the facts say about the parts of a GPU that partition ops change."""
    out: dict[str, Any] = {}
    mig = gpu.get("mig") or {}
    if gpu.get("vendor") == "nvidia" and mig.get("capable"):
        out["mig"] = mig.get("mode")
        if mig.get("pending") in ("enabled", "disabled"):
            out["mig_pending"] = mig["pending"]
        # Facts without ids (the nvidia-smi fallback) leave the instances out; the mode is
        # still checked.
        with contextlib.suppress(KeyError, TypeError, ValueError):
            out["instances"] = sorted(
                _instance(
                    int(gi["gi_id"]),
                    int(gi["profile_id"]),
                    int(gi["placement_start"]),
                    int(gi["placement_size"]),
                    [int(ci["ci_id"]) for ci in gi.get("compute_instances") or []],
                )
                for gi in mig.get("instances") or []
            )
    part = gpu.get("partition") or {}
    if gpu.get("vendor") == "amd" and part.get("compute") and part.get("memory"):
        out["compute"], out["memory"] = str(part["compute"]), str(part["memory"])
    sriov = gpu.get("sriov")
    if sriov:
        out["vfs"] = int(sriov.get("num_vfs") or 0)
    return out


def from_snapshot(snapshot: Mapping[str, Any]) -> dict[str, Any]:
    """The same shape from a card's snapshot (agent.partition.nvidia / amd)."""
    out: dict[str, Any] = {}
    if "gpu_instances" in snapshot:
        modes = snapshot.get("mig")
        if modes is None:
            return out
        out["mig"] = _word(int(modes["current"]) == 1)
        out["mig_pending"] = _word(int(modes["pending"]) == 1)
        out["instances"] = sorted(
            _instance(
                int(gi["id"]),
                int(gi["profile_id"]),
                int(gi["start"]),
                int(gi["size"]),
                [int(ci["id"]) for ci in gi["compute_instances"]],
            )
            for gi in snapshot["gpu_instances"]
        )
        return out
    out["compute"], out["memory"] = snapshot.get("compute"), snapshot.get("memory")
    out["vfs"] = int(snapshot.get("sriov") or 0)
    return out


_LABELS = {
    "mig": "MIG mode",
    "mig_pending": "pending MIG mode",
    "compute": "compute partition",
    "memory": "memory partition",
    "vfs": "SR-IOV VFs",
}


def differences(expected: Mapping[str, Any], now: Mapping[str, Any]) -> list[str]:
    """How `now` differs from what the plan expected, one phrase each ([] when it does not)."""
    out = []
    for key, want in expected.items():
        have = now.get(key)
        if key == "instances":
            gone = sorted(set(want or []) - set(have or []))
            new = sorted(set(have or []) - set(want or []))
            if gone or new:
                parts = [f"{', '.join(new)} appeared"] if new else []
                parts += [f"{', '.join(gone)} went away"] if gone else []
                out.append("GPU instances changed: " + "; ".join(parts))
        elif have != want:
            out.append(f"{_LABELS.get(key, key)} is {have}, the plan saw {want}")
    return out
