"""GPU health across the pool: verdicts from the nodes' facts, and what `health --drain` does.

The verdict rules are gpupoolctl.hw.health's (they ship in the agent too); this module turns
per-host results into per-GPU rows and decides the drains: every failed GPU is drained with
source "health", and a drain whose source is "health" is lifted once its GPU reads ok again.
A drain an admin made is never lifted here (as LBNL NHC only resumes nodes whose reason it
wrote), a degraded GPU is not drained, and a GPU that could not be read keeps what it has. A
card an admin drained is drained by health too when it fails: each drain is lifted on its own.
Nothing here prints.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.hw import health as rules
from gpupoolctl.hw.slice import gpu_id

SOURCE = "health"
REASON_PREFIX = "health: "


def card(host: str, index: int) -> str:
    """The ledger's name for a card (its key, hw.slice.card_key)."""
    return gpu_id(host, index)


def gpu_rows(results: Sequence[Any], now: float | None = None) -> list[dict[str, Any]]:
    """One row per GPU of every host that answered: host, index, uuid, model, verdict,
    reasons, action, unknown signals, notes."""
    rows = []
    for result in results:
        if not result.ok:
            continue
        for gpu in (result.data or {}).get("gpus") or []:
            judged = rules.judge(gpu.get("health"), gpu.get("vendor"), now)
            rows.append(
                {
                    "host": result.name,
                    "index": gpu.get("index"),
                    "card": card(result.name, int(gpu.get("index") or 0)),
                    "uuid": gpu.get("uuid") or None,
                    "model": gpu.get("model"),
                    "vendor": gpu.get("vendor"),
                    **judged,
                }
            )
    return rows


@dataclass
class DrainPlan:
    drain: list[tuple[str, str]] = field(default_factory=list)  # (card, reason)
    lift: list[str] = field(default_factory=list)


def plan(
    rows: Sequence[Mapping[str, Any]], drains: Mapping[str, Mapping[str, Mapping[str, Any]]]
) -> DrainPlan:
    """What `health --drain` changes, given the rows and the ledger's drains (target ->
    source -> drain record with "reason"). Only the health check's own drain of a card is
    looked at: an admin's drain of the same card neither stops a failed card's health drain
    (it is recorded beside it, and outlives the admin's `undrain`) nor is ever lifted."""
    out = DrainPlan()
    for row in rows:
        target = str(row["card"])
        current = (drains.get(target) or {}).get(SOURCE)
        verdict = row["verdict"]
        if verdict == "failed":
            reason = _reason(row)
            if current is None or current.get("reason") != reason:
                out.drain.append((target, reason))  # new, or the health drain's reason changes
        elif verdict == "ok" and current is not None:
            out.lift.append(target)
    return out


def _reason(row: Mapping[str, Any]) -> str:
    first = (row.get("reasons") or ["failed"])[0]
    text = f"{REASON_PREFIX}{first}"
    return text if len(text) <= 200 else text[:197] + "..."
