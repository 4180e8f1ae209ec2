"""The `ssh` transport: one connection per host (plus its ProxyJump hops), one exec channel.

Imported lazily by the fan-out only when a target uses ssh: paramiko and fabric are slow to
import and most commands that touch no node should not pay for them.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import select
import socket
import threading
import time
from dataclasses import dataclass

import fabric
import paramiko

from gpupoolctl.remote.bootstrap import remote_command
from gpupoolctl.remote.hostkeys import (
    HostKeyChanged,
    HostKeyRevoked,
    HostKeyUnknown,
    KnownHosts,
    host_key_name,
)
from gpupoolctl.remote.results import FAILED, TIMED_OUT, UNREACHABLE, ExecResult, HostFailure
from gpupoolctl.remote.sshconfig import load_fabric_config
from gpupoolctl.remote.target import Target
from gpupoolctl.remote.timeouts import Timeouts

_UNREACHABLE_ERRNOS = {
    errno.ECONNREFUSED,
    errno.EHOSTUNREACH,
    errno.ENETUNREACH,
    errno.EHOSTDOWN,
    errno.ENETDOWN,
    errno.EADDRNOTAVAIL,
}
_READ_CHUNK = 65536
# The most a node may answer (stdout and stderr together). An agent's answer is kilobytes
# (a logs chunk at most 64 KiB); a misbehaving node must not fill the workstation's memory.
MAX_ANSWER_BYTES = 64 << 20


class AnswerTooLarge(Exception):
    """The node sent more than MAX_ANSWER_BYTES."""


@dataclass
class SshContext:
    """What every ssh connection of one run shares: parsed ssh_config and known_hosts."""

    config: fabric.Config
    known_hosts: KnownHosts
    timeouts: Timeouts

    @classmethod
    def create(
        cls,
        timeouts: Timeouts,
        *,
        accept_new: bool = False,
        known_hosts: str | os.PathLike[str] | None = None,
        ssh_config: str | os.PathLike[str] | None = None,
    ) -> SshContext:
        return cls(
            config=load_fabric_config(ssh_config),
            known_hosts=KnownHosts(known_hosts, accept_new=accept_new),
            timeouts=timeouts,
        )


def _connection(target: Target, ctx: SshContext) -> fabric.Connection:
    timeouts = ctx.timeouts
    # Fabric int()s connect_timeout, so round up rather than let 0.5 become "no timeout".
    connect_timeout = max(1, math.ceil(timeouts.connect))
    phase_kwargs = {
        "banner_timeout": timeouts.auth,
        "auth_timeout": timeouts.auth,
        "channel_timeout": timeouts.auth,
    }
    kwargs = dict(phase_kwargs)
    if target.identity_file:
        kwargs["key_filename"] = [os.path.expanduser(target.identity_file)]
    # With no address the alias itself goes to ssh_config, which may map it (HostName).
    conn = fabric.Connection(
        target.address or target.name,
        user=target.user,
        port=target.port,
        config=ctx.config,
        connect_timeout=connect_timeout,
        connect_kwargs=kwargs,
    )
    for hop in _chain(conn):
        ctx.known_hosts.attach(hop.client, target.name if hop is conn else f"jump host {hop.host}")
        if hop is not conn:  # ProxyJump hops get no kwargs from fabric: bound them too
            hop.connect_timeout = connect_timeout
            for key, value in phase_kwargs.items():
                hop.connect_kwargs.setdefault(key, value)
    return conn


def _chain(conn: fabric.Connection) -> list[fabric.Connection]:
    """The connection and its ProxyJump gateways, target first, first hop last."""
    chain = [conn]
    while isinstance(chain[-1].gateway, fabric.Connection):
        chain.append(chain[-1].gateway)
    return chain


def _where(conn: fabric.Connection) -> str:
    return f"{conn.user}@{conn.host}:{conn.port}"


def _classify_open_error(
    exc: BaseException, hop: fabric.Connection, is_target: bool, timeouts: Timeouts
) -> HostFailure:
    where = _where(hop) if is_target else f"jump host {_where(hop)}"
    connected_tcp = hop.client.get_transport() is not None
    if isinstance(exc, HostKeyChanged | HostKeyUnknown | HostKeyRevoked):
        return HostFailure(FAILED, str(exc), type(exc).__name__)
    if isinstance(exc, paramiko.BadHostKeyException):
        name = host_key_name(hop.host, hop.port)
        policy = hop.client._policy  # our _Policy, set by KnownHosts.attach
        if policy.store.is_revoked(exc.key):  # revoked keys are dropped from the known ones
            return HostFailure(
                FAILED, policy.store.revoked_message(policy.label, name, exc.key), "HostKeyRevoked"
            )
        return HostFailure(
            FAILED,
            _changed_message(hop, name, exc),
            "HostKeyChanged",
        )
    if isinstance(exc, paramiko.AuthenticationException):
        if "timeout" in str(exc).lower():
            return HostFailure(
                TIMED_OUT,
                f"authentication to {where} got no answer within {timeouts.auth:g}s",
                "AuthTimeout",
            )
        keys = hop.connect_kwargs.get("key_filename") or []
        tried = f" (keys: {', '.join(map(str, keys))}, plus agent and ~/.ssh defaults)"
        return HostFailure(
            FAILED,
            f"authentication failed for {where}: {exc}{tried}; check the user and the "
            "identity_file host var or IdentityFile in ssh_config",
            "AuthFailed",
        )
    if isinstance(exc, socket.gaierror):
        return HostFailure(UNREACHABLE, f"cannot resolve {hop.host}: {exc.strerror or exc}", "DNS")
    if isinstance(exc, paramiko.ssh_exception.NoValidConnectionsError):
        reasons = {os.strerror(e.errno) for e in exc.errors.values() if e.errno}
        reason = ", ".join(sorted(reasons)) or "connection failed"
        return HostFailure(UNREACHABLE, f"cannot connect to {where}: {reason}", "Connect")
    if isinstance(exc, TimeoutError) and not connected_tcp:
        return HostFailure(
            UNREACHABLE,
            f"cannot connect to {where}: no answer within {math.ceil(timeouts.connect)}s",
            "ConnectTimeout",
        )
    if isinstance(exc, OSError) and exc.errno in _UNREACHABLE_ERRNOS and not connected_tcp:
        return HostFailure(UNREACHABLE, f"cannot connect to {where}: {exc.strerror}", "Connect")
    timed_out = isinstance(exc, TimeoutError) or (
        isinstance(exc, paramiko.SSHException) and "timed out" in str(exc).lower()
    )
    if timed_out:
        return HostFailure(
            TIMED_OUT, f"SSH handshake with {where} timed out: {exc}", "HandshakeTimeout"
        )
    if isinstance(exc, paramiko.ChannelException):  # direct-tcpip refused by a jump host
        return HostFailure(UNREACHABLE, f"{where} could not open a tunnel: {exc}", "Connect")
    if isinstance(exc, paramiko.SSHException):
        return HostFailure(FAILED, f"SSH with {where} failed: {exc}", "SSHError")
    return HostFailure(
        FAILED, f"cannot open SSH to {where}: {type(exc).__name__}: {exc}", "SSHError"
    )


def _changed_message(hop: fabric.Connection, name: str, exc: paramiko.BadHostKeyException) -> str:
    # paramiko raises this itself before any policy is consulted, so accept-new cannot
    # bypass it; we only make the message loud and actionable.
    policy = hop.client._policy  # our _Policy, set by KnownHosts.attach
    return policy.store.changed_message(policy.label, name, exc.key, exc.expected_key)


def _open(conn: fabric.Connection, timeouts: Timeouts) -> None:
    """Open the first hop first, so a failure names the hop it happened on."""
    chain = _chain(conn)
    for hop in reversed(chain):
        try:
            hop.open()
        except HostFailure:
            raise
        except Exception as exc:
            raise _classify_open_error(exc, hop, hop is conn, timeouts) from exc


def _exec(
    conn: fabric.Connection, command: str, stdin_data: bytes, timeout: float
) -> tuple[int, bytes, bytes]:
    deadline = time.monotonic() + timeout
    channel = conn.transport.open_session(timeout=timeout)
    try:
        channel.settimeout(max(0.01, deadline - time.monotonic()))
        channel.exec_command(command)
        channel.sendall(stdin_data)
        channel.shutdown_write()
        answer = _Answer()
        while True:
            answer.drain(channel)
            if channel.eof_received or channel.closed:
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError
            # Channel.fileno() becomes readable on stdout or stderr data, EOF and close.
            select.select([channel], [], [], min(remaining, 1.0))
        remaining = deadline - time.monotonic()
        if not channel.status_event.wait(max(0.0, remaining)):
            raise TimeoutError
        answer.drain(channel)
        return channel.recv_exit_status(), b"".join(answer.stdout), b"".join(answer.stderr)
    finally:
        channel.close()


class _Answer:
    """What a node sent so far, and how much (bounded by MAX_ANSWER_BYTES)."""

    def __init__(self) -> None:
        self.stdout: list[bytes] = []
        self.stderr: list[bytes] = []
        self.size = 0

    def drain(self, channel: paramiko.Channel) -> None:
        while channel.recv_ready():
            self._keep(self.stdout, channel.recv(_READ_CHUNK))
        while channel.recv_stderr_ready():
            self._keep(self.stderr, channel.recv_stderr(_READ_CHUNK))

    def _keep(self, into: list[bytes], chunk: bytes) -> None:
        self.size += len(chunk)
        if self.size > MAX_ANSWER_BYTES:
            raise AnswerTooLarge
        into.append(chunk)


def run_ssh(target: Target, stdin_data: bytes, ctx: SshContext) -> ExecResult:
    """Connect, exec the bootstrap once with the payload on stdin, return its output.
    Per-host problems raise HostFailure; nothing else is expected to escape."""
    timeouts = ctx.timeouts
    conn = _connection(target, ctx)
    chain = _chain(conn)
    expired = threading.Event()

    def _expire() -> None:
        # Last resort if a phase ignores its own timeout: closing the sockets unblocks it.
        expired.set()
        for hop in chain:
            hop.client.close()

    hard_bound = timeouts.total + (timeouts.connect + timeouts.auth) * (len(chain) - 1) + 2
    watchdog = threading.Timer(hard_bound, _expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        try:
            _open(conn, timeouts)
        except HostFailure:
            if expired.is_set():
                raise HostFailure(
                    TIMED_OUT, f"no SSH session within {hard_bound:g}s", "Deadline"
                ) from None
            raise
        try:
            status, out, err = _exec(
                conn, remote_command(target.python), stdin_data, timeouts.command
            )
        except TimeoutError:
            raise HostFailure(
                TIMED_OUT,
                f"command did not finish within {timeouts.command:g}s",
                "CommandTimeout",
            ) from None
        except AnswerTooLarge:
            raise HostFailure(
                FAILED,
                f"the node answered more than {MAX_ANSWER_BYTES >> 20} MiB; stopped reading "
                "(is `python` on that node really python?)",
                "AnswerTooLarge",
            ) from None
        except Exception as exc:
            if expired.is_set():
                raise HostFailure(
                    TIMED_OUT, f"no answer within {hard_bound:g}s", "Deadline"
                ) from None
            raise HostFailure(
                FAILED, f"SSH exec on {_where(conn)} failed: {exc}", "SSHError"
            ) from exc
        return ExecResult(status, out, err, {"connections": len(chain), "sessions": 1})
    finally:
        watchdog.cancel()
        for hop in chain:  # fabric's close() leaves gateways open
            hop.close()


def open_exec(target: Target, ctx: SshContext) -> tuple[list[fabric.Connection], paramiko.Channel]:
    """Connect (host keys checked as for run_ssh) and start the bootstrap on one exec
    channel, for a serve-mode session. Returns the connection chain (target first) and the
    channel; per-host problems raise HostFailure, with everything closed."""
    timeouts = ctx.timeouts
    conn = _connection(target, ctx)
    chain = _chain(conn)
    expired = threading.Event()

    def _expire() -> None:  # as in run_ssh: a phase that ignores its own timeout
        expired.set()
        for hop in chain:
            hop.client.close()

    hard_bound = (timeouts.connect + timeouts.auth) * len(chain) + 2
    watchdog = threading.Timer(hard_bound, _expire)
    watchdog.daemon = True
    watchdog.start()
    try:
        try:
            _open(conn, timeouts)
            channel = conn.transport.open_session(timeout=timeouts.auth)
            channel.exec_command(remote_command(target.python))
        except HostFailure:
            if expired.is_set():
                raise HostFailure(
                    TIMED_OUT, f"no SSH session within {hard_bound:g}s", "Deadline"
                ) from None
            raise
        except Exception as exc:
            if expired.is_set():
                raise HostFailure(
                    TIMED_OUT, f"no SSH session within {hard_bound:g}s", "Deadline"
                ) from None
            raise HostFailure(
                FAILED, f"SSH exec on {_where(conn)} failed: {exc}", "SSHError"
            ) from exc
    except BaseException:
        close_chain(chain)
        raise
    finally:
        watchdog.cancel()
    return chain, channel


def close_chain(chain: list[fabric.Connection]) -> None:
    for hop in chain:  # fabric's close() leaves gateways open
        with contextlib.suppress(Exception):  # a dead one must not mask why it died
            hop.close()
