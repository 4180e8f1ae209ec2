"""Agent sessions for long-running callers: one agent process per host, kept for many
requests (the stress ramp's pool backend, `schedule --watch`), instead of one SSH connection
and one `python3` per request.

    with SessionPool(timeouts=..., forks=...) as sessions:
        nodes = Nodes(targets, run=sessions.run)      # a jobs Runner

Per target: over SSH one connection and one exec channel running the bootstrap in serve
mode (host keys checked exactly as for one-shot requests, by the same KnownHosts); locally
one subprocess (per simulated node). Requests to one host take turns on its session;
different hosts go in parallel, bounded by `forks`. Every request ends within
`timeouts.total` (connect + auth + command) of being handed in: with the agent's answer, or
as failed / unreachable / timed-out like a one-shot request. A session that times out,
sends garbage or too much, or dies (agent killed, connection lost, sshd restarted) is
closed and opened again by the next request; a request that is safe to repeat
(RETRY_SAFE: a launch too, as the agent answers a repeated launch with the job it already
started) is sent once more on a fresh session when the one it was sent on died before
answering. close() ends every agent (EOF, then kill).
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from gpupoolctl.agent.main import SERVE_READY
from gpupoolctl.errors import UsageError
from gpupoolctl.remote.bootstrap import encode_serve_header
from gpupoolctl.remote.fanout import DEFAULT_FORKS, finish_result, host_request
from gpupoolctl.remote.local import LocalStream, local_python
from gpupoolctl.remote.payload import Payload, agent_payload
from gpupoolctl.remote.results import (
    FAILED,
    TIMED_OUT,
    ExecResult,
    HostFailure,
    HostResult,
    classify_envelope,
    classify_exec,
)
from gpupoolctl.remote.stream import LineTooLong, Stream, StreamEnded
from gpupoolctl.remote.target import Target
from gpupoolctl.remote.timeouts import Timeouts

if TYPE_CHECKING:
    from gpupoolctl.remote.ssh import SshContext

# The longest answer line read from an agent (as ssh.MAX_ANSWER_BYTES for one-shot
# answers); the agent itself answers AnswerTooLarge above its own, smaller bound.
MAX_ANSWER_LINE = 64 << 20
# Lines a login script may print before the agent's ready line, at most this much.
MAX_GREETING_BYTES = 64 << 10
RETRY_SAFE = frozenset({"ping", "facts", "poll", "logs", "launch"})


class _Gone(Exception):
    """The session's agent ended before answering (StreamEnded, with why)."""


class HostSession:
    """One target's agent. Its lock is held for a whole request."""

    def __init__(self, target: Target, payload: Payload, ctx: SshContext | None) -> None:
        self.target = target
        self.lock = threading.Lock()
        self._payload = payload
        self._ctx = ctx
        self._stream: Stream | None = None
        self._next_id = 0
        self.agent_pid: int | None = None  # on the node; None while no agent runs
        self.closed_streams: list[Stream] = []  # closes that may still run in the background
        self.opened = 0  # agents started so far (tests and stats)

    @property
    def python(self) -> str:
        return local_python(self.target) if self.target.transport == "local" else self.target.python

    def exchange(self, request: dict[str, Any], deadline: float, command: float) -> HostResult:
        """Send one request (the lock held), answer within `deadline`; per-host problems
        raise HostFailure."""
        started = time.monotonic()
        stats = {"connections": 0, "sessions": 0, "requests": 1}
        tries = 2 if request.get("verb") in RETRY_SAFE else 1
        for attempt in range(tries):
            if self._stream is None:
                self._open(deadline, command, stats)
            try:
                envelope = self._ask(request, min(deadline, time.monotonic() + command), command)
            except _Gone as gone:
                if attempt + 1 < tries and time.monotonic() < deadline:
                    continue  # sent at most twice, each time to a fresh agent
                raise HostFailure(
                    FAILED, f"the agent ended before it answered: {gone}", "AgentGone"
                ) from None
            return classify_envelope(self.target.name, envelope, time.monotonic() - started, stats)
        raise AssertionError("unreachable")  # the loop returns or raises

    def _open(self, deadline: float, command: float, stats: dict[str, int]) -> None:
        stream = self._start()
        stats["connections"] += getattr(stream, "connections", 0)
        stats["sessions"] += 1
        wait_until = min(deadline, time.monotonic() + command)
        try:
            stream.write(encode_serve_header(self._payload), wait_until)
            ready = self._ready(stream, wait_until)
        except TimeoutError:
            stream.close(graceful=False)
            raise HostFailure(
                TIMED_OUT, f"the agent did not start within {command:g}s", "CommandTimeout"
            ) from None
        except (StreamEnded, LineTooLong):
            status = stream.exit_status(1.0)
            stream.close(graceful=False)
            # As a one-shot exec that gave no answer: no python, too old, bootstrap failure.
            raw = ExecResult(-1 if status is None else status, b"", stream.stderr_tail)
            result = classify_exec(self.target.name, self.python, raw, 0.0)
            raise HostFailure(result.outcome, result.error or "", result.error_type) from None
        self._stream = stream
        self.agent_pid = ready.get("pid") if isinstance(ready.get("pid"), int) else None
        stream.agent_pid = self.agent_pid
        self.opened += 1

    def _start(self) -> Stream:
        if self.target.transport == "local":
            try:
                return LocalStream(self.target)
            except FileNotFoundError as exc:
                raise _no_python(self.target.name, self.python, 127, exc) from None
            except PermissionError as exc:
                raise _no_python(self.target.name, self.python, 126, exc) from None
        from gpupoolctl.remote.ssh_stream import SshStream

        assert self._ctx is not None
        return SshStream(self.target, self._ctx)

    @staticmethod
    def _ready(stream: Stream, deadline: float) -> dict[str, Any]:
        """The agent's ready line, past anything a login script printed first."""
        seen = 0
        while True:
            line = stream.read_line(MAX_GREETING_BYTES, deadline)
            seen += len(line)
            try:  # a login script's words may precede it on its line
                value = json.loads(line[max(0, line.find(b'{"' + SERVE_READY.encode())) :])
            except ValueError:
                value = None
            if isinstance(value, dict) and value.get(SERVE_READY) == 1:
                return value
            if seen > MAX_GREETING_BYTES:
                raise LineTooLong

    def _ask(self, request: dict[str, Any], deadline: float, command: float) -> dict[str, Any]:
        stream = self._stream
        assert stream is not None
        self._next_id += 1
        request_id = self._next_id
        frame = json.dumps({"id": request_id, "request": request}, separators=(",", ":"))
        try:
            stream.write(frame.encode("utf-8") + b"\n", deadline)
            line = stream.read_line(MAX_ANSWER_LINE, deadline)
        except TimeoutError:
            self.close(graceful=False)
            raise HostFailure(
                TIMED_OUT, f"command did not finish within {command:g}s", "CommandTimeout"
            ) from None
        except LineTooLong:
            self.close(graceful=False)
            raise HostFailure(
                FAILED,
                f"the node answered more than {MAX_ANSWER_LINE >> 20} MiB in one line; "
                "stopped reading and closed its session",
                "AnswerTooLarge",
            ) from None
        except StreamEnded:
            why = self._why_ended(stream)
            self.close(graceful=False)
            raise _Gone(why) from None
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        envelope = answer.get("answer") if isinstance(answer, dict) else None
        if not isinstance(envelope, dict) or answer.get("id") != request_id:  # type: ignore[union-attr]
            self.close(graceful=False)
            raise HostFailure(
                FAILED, "the agent's answer was not the answer to this request", "BadAnswer"
            )
        return envelope

    def _why_ended(self, stream: Stream) -> str:
        from gpupoolctl.remote.results import stderr_excerpt

        status = stream.exit_status(0.5)
        said = stderr_excerpt(stream.stderr_tail) if stream.stderr_tail.strip() else None
        where = "its session closed" if status is None else f"exit status {status}"
        return where + (f"; stderr: {said}" if said else "")

    def close(self, *, graceful: bool) -> None:
        stream, self._stream = self._stream, None
        self.agent_pid = None
        if stream is not None:
            stream.close(graceful=graceful)
            self.closed_streams = [s for s in self.closed_streams if s.closing is not None]
            if stream.closing is not None:
                self.closed_streams.append(stream)


def _no_python(name: str, python: str, status: int, exc: OSError) -> HostFailure:
    result = classify_exec(name, python, ExecResult(status, b"", str(exc).encode()), 0.0)
    return HostFailure(result.outcome, result.error or "", result.error_type)


class SessionPool:
    """Agent sessions for every target a caller asks; `run` is a jobs Runner."""

    def __init__(
        self,
        *,
        timeouts: Timeouts | None = None,
        forks: int = DEFAULT_FORKS,
        accept_new: bool = False,
        known_hosts: str | os.PathLike[str] | None = None,
        ssh_config: str | os.PathLike[str] | None = None,
    ) -> None:
        if forks < 1:
            raise UsageError(f"forks must be at least 1, got {forks}")
        self.timeouts = timeouts or Timeouts()
        self.forks = forks
        self._ssh_options = {
            "accept_new": accept_new,
            "known_hosts": known_hosts,
            "ssh_config": ssh_config,
        }
        self._ctx: SshContext | None = None
        self._lock = threading.Lock()
        self._sessions: dict[str, HostSession] = {}
        self._closed = False

    def __enter__(self) -> SessionPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def session(self, target: Target) -> HostSession:
        """The target's session (made on first use; its agent starts on its first request)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the session pool is closed")
            session = self._sessions.get(target.name)
            if session is None or session.target != target:
                if target.transport == "ssh" and self._ctx is None:
                    from gpupoolctl.remote.ssh import SshContext  # paramiko only when needed

                    self._ctx = SshContext.create(self.timeouts, **self._ssh_options)  # type: ignore[arg-type]
                if session is not None:
                    session.close(graceful=False)
                session = HostSession(target, agent_payload(), self._ctx)
                self._sessions[target.name] = session
            return session

    def run(self, requests: Sequence[tuple[Target, Mapping[str, Any]]]) -> list[HostResult]:
        """One result per (target, request), in order: a jobs Runner. Requests to one host
        take turns; hosts go in parallel (at most `forks` at once)."""
        entered = time.monotonic()
        by_host: dict[str, list[int]] = {}
        for index, (target, _) in enumerate(requests):
            by_host.setdefault(target.name, []).append(index)
        results: list[HostResult | None] = [None] * len(requests)

        def host_turns(indices: list[int]) -> None:
            for index in indices:
                target, request = requests[index]
                results[index] = self.call(target, request, entered=entered)

        groups = list(by_host.values())
        if len(groups) <= 1 or self.forks == 1:
            for indices in groups:
                host_turns(indices)
        else:
            with ThreadPoolExecutor(
                max_workers=min(self.forks, len(groups)), thread_name_prefix="gpupool-session"
            ) as executor:
                for future in [executor.submit(host_turns, g) for g in groups]:
                    future.result()  # call() never raises for a host's problem
        return [result for result in results if result is not None]

    def call(
        self, target: Target, request: Mapping[str, Any], *, entered: float | None = None
    ) -> HostResult:
        """One request to one target, ended within timeouts.total of `entered` (now)."""
        started = time.monotonic() if entered is None else entered
        if target.invalid:
            return HostResult(target.name, FAILED, error=target.invalid, error_type="BadHostVars")
        bound = self.timeouts.total
        deadline = started + bound
        try:
            session = self.session(target)
            if not session.lock.acquire(timeout=max(0.0, deadline - time.monotonic())):
                raise HostFailure(
                    TIMED_OUT,
                    f"no answer within {bound:g}s: earlier requests to this host held it",
                    "Deadline",
                )
            try:
                result = session.exchange(
                    host_request(target, request), deadline, self.timeouts.command
                )
            finally:
                session.lock.release()
            result.elapsed = time.monotonic() - started
            return finish_result(target, request, result)
        except HostFailure as failure:
            return HostResult(
                target.name,
                failure.outcome,
                error=failure.message,
                error_type=failure.error_type,
                elapsed=time.monotonic() - started,
            )
        except Exception as exc:  # a bug here must cost one request, not the caller's loop
            return HostResult(
                target.name,
                FAILED,
                error=f"internal error: {type(exc).__name__}: {exc}",
                error_type="InternalError",
                elapsed=time.monotonic() - started,
            )

    def close(self) -> None:
        """End every agent: EOF to all at once, a moment for them to leave, then kill."""
        with self._lock:
            self._closed = True
            sessions = list(self._sessions.values())
            self._sessions.clear()
        if not sessions:
            return
        with ThreadPoolExecutor(
            max_workers=min(len(sessions), 16), thread_name_prefix="gpupool-close"
        ) as executor:
            list(executor.map(_close_session, sessions))
        deadline = time.monotonic() + 3.0  # background kills of timed-out agents, bounded
        for session in sessions:
            for stream in session.closed_streams:
                stream.wait_closed(max(0.0, deadline - time.monotonic()))


def _close_session(session: HostSession) -> None:
    # A request still in flight (another thread) keeps the lock: close under it anyway,
    # after a moment, so close() never waits on a hung host for long.
    held = session.lock.acquire(timeout=1.0)
    try:
        session.close(graceful=held)
    finally:
        if held:
            session.lock.release()
