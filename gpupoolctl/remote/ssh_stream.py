"""A serve-mode agent on one exec channel of one SSH connection (ssh.open_exec).

Imported only when a session has an ssh target: it loads paramiko."""

from __future__ import annotations

import contextlib
import select
import time

import paramiko

from gpupoolctl.remote.ssh import SshContext, close_chain, open_exec
from gpupoolctl.remote.stream import Stream, StreamEnded
from gpupoolctl.remote.target import Target

_CHUNK = 65536
_GRACE_S = 2.0  # how long a closed agent may take to send its exit status


class SshStream(Stream):
    def __init__(self, target: Target, ctx: SshContext) -> None:
        super().__init__()
        self._chain, self.channel = open_exec(target, ctx)

    @property
    def connections(self) -> int:
        return len(self._chain)

    def _drain_stderr(self) -> None:
        while self.channel.recv_stderr_ready():
            self.keep_stderr(self.channel.recv_stderr(_CHUNK))

    def read_some(self, deadline: float) -> bytes:
        channel = self.channel
        while True:
            self._drain_stderr()
            if channel.recv_ready():
                return channel.recv(_CHUNK)
            if channel.eof_received or channel.closed:
                return b""
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            # Channel.fileno() becomes readable on stdout or stderr data, EOF and close.
            select.select([channel], [], [], min(remaining, 1.0))

    def write(self, data: bytes, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        if self.channel.closed or not self.channel.get_transport().is_active():
            raise StreamEnded
        self.channel.settimeout(remaining)
        try:
            self.channel.sendall(data)
        except TimeoutError:
            raise
        except (OSError, EOFError, paramiko.SSHException) as exc:
            raise StreamEnded from exc

    def exit_status(self, wait: float) -> int | None:
        if not self.channel.status_event.wait(wait):
            return None
        return self.channel.recv_exit_status()

    def close(self, *, graceful: bool) -> None:
        try:
            if graceful and not self.channel.closed:
                self.channel.shutdown_write()  # EOF: the agent leaves
                self.exit_status(_GRACE_S)
        except Exception:  # a dead connection: nothing to wait for
            pass
        finally:
            # Closing the channel closes the agent's pipes on the node: it ends at its next
            # read or write (a request it is still working on runs to its end first).
            with contextlib.suppress(Exception):
                self.channel.close()
            close_chain(self._chain)
