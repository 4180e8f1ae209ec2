"""Drains: hosts and cards that take no new work (placement, `alloc` and elastic re-cuts
leave them alone; what runs there goes on). One `drain` record each, with the reason, the
actor and the source (`admin`, or later `health` for automatic drains, which are the only
ones lifted automatically)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpupoolctl.errors import NotFound, UsageError
from gpupoolctl.ledger.ledger import Done, Ledger, Transaction
from gpupoolctl.ledger.state import State, card_key

SOURCES = ("admin", "health")
MAX_REASON = 200


def _known(state: State, target: str) -> bool:
    return any(
        entry["host"] == target or card_key(entry) == target for entry in state.slices.values()
    )


def _check(state: State, targets: Sequence[str]) -> None:
    if not targets:
        raise UsageError("name at least one host or card (host/gpuN)")
    unknown = [t for t in targets if not _known(state, t)]
    if unknown:
        raise NotFound(
            f"no host or card {unknown[0]!r} in the ledger (see `gpupoolctl pool`; a card is "
            "host/gpuN)"
        )


def drain(ledger: Ledger, targets: Sequence[str], reason: str, source: str = "admin") -> Done:
    """Drain hosts or cards (host/gpuN); a target drained already gets the new reason."""
    text = " ".join(reason.split())
    if not text:
        raise UsageError("--reason must say why (it is shown with the drain)")
    if len(text) > MAX_REASON:
        raise UsageError(f"--reason is {len(text)} characters; at most {MAX_REASON}")
    if source not in SOURCES:
        raise UsageError(f"unknown drain source {source!r}: use {', '.join(SOURCES)}")

    def build(tx: Transaction) -> list[dict[str, Any]]:
        _check(tx.state, targets)
        for target in dict.fromkeys(targets):
            tx.append(
                "drain", {"target": target, "state": "drained", "reason": text, "source": source}
            )
        return [tx.state.drains[t] for t in dict.fromkeys(targets)]

    return ledger.write(build)


def undrain(ledger: Ledger, targets: Sequence[str]) -> Done:
    """Lift drains; a target that is not drained is an error naming it (exit 1)."""

    def build(tx: Transaction) -> list[str]:
        if not targets:
            raise UsageError("name at least one drained host or card")
        missing = [t for t in targets if t not in tx.state.drains]
        if missing:
            drained = ", ".join(sorted(tx.state.drains)) or "none"
            raise NotFound(f"{missing[0]!r} is not drained (drained now: {drained})")
        for target in dict.fromkeys(targets):
            tx.append("drain", {"target": target, "state": "undrained"})
        return list(dict.fromkeys(targets))

    return ledger.write(build)


def lift(ledger: Ledger, targets: Sequence[str], source: str) -> Done:
    """Undrain those of `targets` whose drain is still `source`'s when the ledger is written
    (an admin may have drained one meanwhile: that drain stays); targets not drained are
    skipped. The Done's value is the targets lifted."""

    def build(tx: Transaction) -> list[str]:
        lifted = []
        for target in dict.fromkeys(targets):
            current = tx.state.drains.get(target)
            if current is not None and current.get("source") == source:
                tx.append("drain", {"target": target, "state": "undrained"})
                lifted.append(target)
        return lifted

    return ledger.write(build)
