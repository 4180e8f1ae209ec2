"""A serve-mode agent on one exec channel of one SSH connection (ssh.open_exec).

Imported only when a session has an ssh target: it loads paramiko."""

from __future__ import annotations

import contextlib
import select
import threading
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
        channel = self.channel
        running = not channel.closed and not channel.status_event.is_set()
        if not graceful and running and channel.get_transport().is_active():
            # A hung or misbehaving agent: killed, as the local transport kills its process
            # group, rather than left to end at its next read or write. In the background:
            # the request that gave up on it has used its time already.
            self.closing = threading.Thread(
                target=self._kill_and_close, name="gpupool-ssh-kill", daemon=True
            )
            self.closing.start()
            return
        try:
            if graceful and running:
                channel.shutdown_write()  # EOF: the agent leaves
                self.exit_status(_GRACE_S)
        except Exception:  # a dead connection: nothing to wait for
            pass
        finally:
            self._close_now()

    def _kill_and_close(self) -> None:
        channel = self.channel
        try:
            # RFC 4254 "signal": sshd delivers it where it runs sessions privilege-separated
            # (not for root logins); else a `kill` on a second channel of the connection.
            _send_signal(channel, "KILL")
            if self.agent_pid is not None and not channel.status_event.wait(0.2):
                killer = channel.get_transport().open_session(timeout=_GRACE_S)
                try:
                    killer.exec_command(f"kill -KILL {int(self.agent_pid)}")
                    killer.status_event.wait(_GRACE_S)
                finally:
                    killer.close()
        except Exception:  # the connection died meanwhile: so did the agent's session
            pass
        finally:
            self._close_now()

    def _close_now(self) -> None:
        with contextlib.suppress(Exception):
            self.channel.close()
        close_chain(self._chain)


def _send_signal(channel: paramiko.Channel, name: str) -> None:
    """RFC 4254 6.9 "signal" (OpenSSH's sshd delivers it to the session's process, here the
    agent, which the bootstrap's `exec` made the session's process). paramiko has no call
    for it; this is how it sends its own channel requests (send_exit_status)."""
    message = paramiko.Message()
    message.add_byte(paramiko.common.cMSG_CHANNEL_REQUEST)
    message.add_int(channel.remote_chanid)
    message.add_string("signal")
    message.add_boolean(False)
    message.add_string(name)
    channel.transport._send_user_message(message)
