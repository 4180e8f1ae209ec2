"""What the scheduler reads of the ledger's state, as Protocols: sched/ decides from values and
never imports the ledger (the ledger's State and Allocation satisfy these; so may an
in-memory stand-in). A field the scheduler does not read is not named here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol


class RecordedHold(Protocol):
    """An allocation as recorded: who holds which slices, since when, until when."""

    @property
    def id(self) -> str: ...
    @property
    def owner(self) -> str: ...
    @property
    def slices(self) -> Sequence[str]: ...
    @property
    def created(self) -> str: ...
    @property
    def expires(self) -> str | None: ...
    @property
    def request(self) -> Mapping[str, Any]: ...


class RecordedState(Protocol):
    """The ledger's state: slices, holds, jobs, the queue, what keeps slices out of
    placement (lost and silent hosts, drains, fences, quarantined holds, re-cuts), and what
    elastic and fair share weigh (when cards changed, the teams' usage history)."""

    @property
    def slices(self) -> dict[str, Any]: ...  # slice id -> hw.slice.Slice
    @property
    def holders(self) -> Mapping[str, str]: ...  # slice id -> allocation id
    @property
    def jobs(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def queue(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def reshapes(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def drains(self) -> Mapping[str, Mapping[str, Mapping[str, Any]]]: ...
    @property
    def lost(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def silent(self) -> Mapping[str, str]: ...
    @property
    def fences(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def quarantined(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def allocations(self) -> Mapping[str, RecordedHold]: ...  # recorded, expired ones too
    @property
    def answered(self) -> Mapping[str, str]: ...  # host -> its last answer (heartbeat)
    @property
    def card_changed(self) -> Mapping[str, str]: ...  # card -> when a hold or re-cut changed it
    @property
    def card_failed(self) -> Mapping[str, str]: ...  # card -> when its last re-cut failed

    def team_history(self, now: str) -> dict[str, float]:
        """Team -> GiB-seconds of holds that ended, decayed to `now` (fair share)."""
        ...

    def active(self, now: str) -> Mapping[str, RecordedHold]:
        """The allocations that hold their slices at `now`."""
        ...

    def holder(self, slice_id: str, now: str) -> RecordedHold | None: ...

    def recutting_slices(self) -> Mapping[str, str]:
        """Slice id -> the reshape that reserved its card."""
        ...
