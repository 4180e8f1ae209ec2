"""What the executor needs from one vendor's card, whatever the vendor."""

from __future__ import annotations

from typing import Any, Protocol


class OpFailed(Exception):
    """One operation (or a read it needed) failed; the message is fit for the operator."""


class ResetPending(Exception):
    """A mode change was accepted but takes effect only after a GPU reset (Ampere MIG)."""


class Card(Protocol):
    index: int
    uuid: str
    vendor: str

    def blockers(self, ops: list[dict[str, Any]]) -> list[str]:
        """What these ops would pull the rug from under (processes, VFs in use), one phrase
        each; what cannot be read is a phrase too."""
        ...

    def snapshot(self) -> dict[str, Any]:
        """The card's current layout, complete enough to rebuild it (JSON-able)."""
        ...

    def apply(self, op: dict[str, Any]) -> None:
        """Run one op; OpFailed when it fails, ResetPending when it waits for a reset."""
        ...

    def restore(self, snapshot: dict[str, Any]) -> list[str]:
        """Bring the card back to `snapshot`, best effort; the problems met (empty: none)."""
        ...

    def differences(self, snapshot: dict[str, Any]) -> list[str]:
        """How the card now differs from `snapshot` (empty when it matches)."""
        ...
