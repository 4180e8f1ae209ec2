"""Drains: hosts and cards that take no new work (placement, `alloc` and elastic re-cuts
leave them alone; what runs there goes on). One `drain` record each, with the reason, the
actor and the source: `admin` (a person), or `health` (the health check and node loss, whose
drains are the only ones lifted automatically). A target may be drained by both at once:
each is recorded and lifted on its own, so an admin's `undrain` after a repair never puts a
card back to work that failed its health check meanwhile."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
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


def reason_text(reason: str) -> str:
    """The reason as recorded (one line, spaces folded); UsageError when empty or too long."""
    text = " ".join(reason.split())
    if not text:
        raise UsageError("--reason must say why (it is shown with the drain)")
    if len(text) > MAX_REASON:
        raise UsageError(f"--reason is {len(text)} characters; at most {MAX_REASON}")
    return text


def record_drains(
    tx: Transaction, targets: Sequence[str], text: str, source: str = "admin"
) -> list[dict[str, Any]]:
    """Append the drains of `targets` (hosts or cards) to the caller's transaction; a target
    that `source` drained already gets the new reason. Returns the drains as recorded."""
    if source not in SOURCES:
        raise UsageError(f"unknown drain source {source!r}: use {', '.join(SOURCES)}")
    _check(tx.state, targets)
    for target in dict.fromkeys(targets):
        tx.append("drain", {"target": target, "state": "drained", "reason": text, "source": source})
    return [tx.state.drains[t][source] for t in dict.fromkeys(targets)]


def drain(ledger: Ledger, targets: Sequence[str], reason: str, source: str = "admin") -> Done:
    """Drain hosts or cards (host/gpuN); a target drained already gets the new reason."""
    text = reason_text(reason)
    return ledger.write(lambda tx: record_drains(tx, targets, text, source))


@dataclass(frozen=True)
class Undrained:
    target: str
    source: str  # the drain lifted
    still: dict[str, Any] | None = None  # the drain that still holds the target, if any


def undrain(ledger: Ledger, targets: Sequence[str]) -> Done:
    """Lift a person's drain of each target (the admin's; a target only the health check
    drained, such as a lost node kept out by `return-to-service: manual`, has that one
    lifted). A target that another drain still holds after this is said so in the answer
    (Undrained.still). A target that is not drained is an error naming it (exit 1)."""

    def build(tx: Transaction) -> list[Undrained]:
        if not targets:
            raise UsageError("name at least one drained host or card")
        missing = [t for t in targets if t not in tx.state.drains]
        if missing:
            drained = ", ".join(sorted(tx.state.drains)) or "none"
            raise NotFound(f"{missing[0]!r} is not drained (drained now: {drained})")
        out = []
        for target in dict.fromkeys(targets):
            held = tx.state.drains[target]
            source = "admin" if "admin" in held else next(iter(held))
            tx.append("drain", {"target": target, "state": "undrained", "source": source})
            out.append(Undrained(target, source, tx.state.drain_of(target)))
        return out

    return ledger.write(build)


def lift(ledger: Ledger, targets: Sequence[str], source: str) -> Done:
    """Undrain `source`'s drain of those of `targets` that it still drains when the ledger is
    written (another source's drain of the same target stays); targets `source` does not
    drain are skipped. The Done's value is the targets lifted."""

    def build(tx: Transaction) -> list[str]:
        lifted = []
        for target in dict.fromkeys(targets):
            if source in tx.state.drains.get(target, {}):
                tx.append("drain", {"target": target, "state": "undrained", "source": source})
                lifted.append(target)
        return lifted

    return ledger.write(build)
