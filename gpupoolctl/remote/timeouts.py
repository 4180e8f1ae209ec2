"""Time bounds for reaching one host: every phase is bounded, so a fan-out always ends."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Timeouts:
    """Seconds. `connect` bounds the TCP connect and the key exchange (per hop), `auth` the
    SSH banner, the authentication and the channel open, `command` the remote exec from
    sending stdin to the exit status. A host's worst case is their sum (times its hops)."""

    connect: float = 10.0
    auth: float = 15.0
    command: float = 300.0

    def __post_init__(self) -> None:
        for name in ("connect", "auth", "command"):
            if not getattr(self, name) > 0:
                raise ValueError(f"timeout {name} must be positive, got {getattr(self, name)!r}")

    @property
    def total(self) -> float:
        return self.connect + self.auth + self.command
