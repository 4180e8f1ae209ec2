"""A byte stream to one serve-mode agent (gpupoolctl.agent.main.serve), read by lines.

The transports (local.LocalStream, ssh_stream.SshStream) supply raw reads and writes bounded
by a deadline; this base class cuts lines, bounds their length and keeps the end of the
agent's stderr for error messages.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod

STDERR_TAIL_BYTES = 8192  # enough for a traceback's last lines or the bootstrap's reason


class StreamEnded(Exception):
    """The agent's end closed (it exited, or its connection went away)."""


class LineTooLong(Exception):
    """The agent sent a line longer than the bound: the stream is unusable."""


class Stream(ABC):
    def __init__(self) -> None:
        self._buffer = bytearray()
        self._scanned = 0  # bytes of _buffer known to hold no newline
        self._stderr = bytearray()
        self.agent_pid: int | None = None  # on the node, from the agent's ready line
        self.closing: threading.Thread | None = None  # a close still under way, if any

    # -- what a transport provides ------------------------------------------------------------

    @abstractmethod
    def read_some(self, deadline: float) -> bytes:
        """Some stdout bytes; b"" at EOF. Raises TimeoutError at `deadline` (monotonic)."""

    @abstractmethod
    def write(self, data: bytes, deadline: float) -> None:
        """All of `data`, or StreamEnded / TimeoutError."""

    @abstractmethod
    def exit_status(self, wait: float) -> int | None:
        """The agent's exit status once it ended, waiting up to `wait` seconds; else None."""

    @abstractmethod
    def close(self, *, graceful: bool) -> None:
        """End the agent: graceful sends EOF and waits a moment for it to leave on its own;
        either way everything is closed (and, where this side can, killed) on return."""

    # -- shared ------------------------------------------------------------------------------

    def wait_closed(self, timeout: float) -> None:
        """Let a close that went on in the background finish (bounded)."""
        if self.closing is not None:
            self.closing.join(timeout)

    def keep_stderr(self, chunk: bytes) -> None:
        self._stderr += chunk
        if len(self._stderr) > STDERR_TAIL_BYTES:
            del self._stderr[: len(self._stderr) - STDERR_TAIL_BYTES]

    @property
    def stderr_tail(self) -> bytes:
        return bytes(self._stderr)

    def read_line(self, limit: int, deadline: float) -> bytes:
        """The next line, newline included. Raises LineTooLong past `limit` bytes (having
        held at most about `limit` plus one read), StreamEnded, TimeoutError."""
        while True:
            end = self._buffer.find(b"\n", self._scanned)
            if end >= 0:
                line = bytes(self._buffer[: end + 1])
                del self._buffer[: end + 1]
                self._scanned = 0
                return line
            self._scanned = len(self._buffer)
            if len(self._buffer) > limit:
                self._buffer.clear()
                self._scanned = 0
                raise LineTooLong
            chunk = self.read_some(deadline)
            if not chunk:
                raise StreamEnded
            self._buffer += chunk
