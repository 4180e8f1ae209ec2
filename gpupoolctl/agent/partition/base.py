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
        """Processes that these ops would pull the rug from under, one phrase each."""
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


def describe(op: dict[str, Any]) -> str:
    """An op in a few words, for messages: "create_gi 3g.40gb@4:4"."""
    name = op.get("op")
    if name == "create_gi":
        text = f"create_gi {op['profile']}@{op['start']}:{op['size']}"
        cis = op.get("compute_instances")
        return text + (f" with {', '.join(cis)}" if cis else "")
    if name == "destroy_gi":
        return f"destroy_gi {op['gi']}"
    if name == "destroy_ci":
        return f"destroy_ci {op['gi']}/{op['ci']}"
    if name == "set_mig_mode":
        return f"set_mig_mode {'enabled' if op['enabled'] else 'disabled'}"
    if name in ("set_compute_partition", "set_memory_partition"):
        return f"{name} {op['mode']}"
    if name == "set_sriov_vfs":
        return f"set_sriov_vfs {op['count']}"
    return str(name)
