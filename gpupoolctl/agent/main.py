"""Agent entry point: read one JSON request, answer one JSON envelope on stdout; or, in
serve mode, answer a stream of requests, one JSON line each, until EOF.

Serve mode (for long-running callers: one agent process per host, not one per request):
    agent -> {"serve": 1, "v": 1, "pid": <pid>}          once, when ready for requests
    ws    -> {"id": <int>, "request": {...request...}}    one line per request
    agent -> {"id": <int>, "answer": {...envelope...}}    one line per answer, in order
A line that is not a request frame is answered with "id": null (or its id) and a
BadRequest envelope; one longer than MAX_REQUEST_BYTES is skipped and answered
RequestTooLarge; an answer longer than MAX_ANSWER_BYTES is replaced by an AnswerTooLarge
envelope. EOF on stdin (the workstation closed the session) ends the agent with 0.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from typing import IO, Any

from gpupoolctl.agent import protocol
from gpupoolctl.agent.drivers import sim as sim_driver
from gpupoolctl.agent.protocol import AgentError


def handle(request: Any) -> dict[str, Any]:
    """Answer one request. Never raises: every failure becomes an error envelope."""
    try:
        request = protocol.check_request(request)
        return protocol.ok(_dispatch(request))
    except AgentError as exc:
        return protocol.failure(exc.type_name, str(exc))
    except Exception as exc:  # the workstation must get an envelope, not a traceback
        return protocol.failure(type(exc).__name__, str(exc) or repr(exc))


def _dispatch(request: dict[str, Any]) -> Any:
    verb = request["verb"]
    host = str(request.get("host") or "")
    sim = request.get("sim")
    if verb == "ping":
        return {"pong": True}
    if verb == "sim_reset":
        if not sim:
            raise AgentError("sim_reset is only for simulated nodes", "BadRequest")
        return sim_driver.reset(host, sim)
    if verb == "sim_fault":  # reaches a node that is down: that is how it comes back
        if not sim:
            raise AgentError("sim_fault is only for simulated nodes", "BadRequest")
        return sim_driver.fault(host, sim, request.get("args"))
    state = None
    if sim:
        # A node whose state says down answers NodeDown to everything else (the
        # workstation reports it unreachable): a partition, so its jobs run on.
        state = sim_driver.activate(host, sim)
    if verb == "facts":
        from gpupoolctl.agent import facts

        # The CLI tools of a real node must not leak into a simulated one, nor this
        # machine's NICs: a simulated node has the network its state file describes.
        network = sim_driver.network(state) if state is not None else None
        return facts.collect(host, simulated=bool(sim), allow_cli=not sim, network=network)
    if verb == "partition":
        from gpupoolctl.agent import partition

        return partition.handle(request.get("args"))
    if verb in ("launch", "poll", "signal", "logs"):
        from gpupoolctl.agent import jobs

        return jobs.handle(verb, request.get("args"), host, sim)
    raise AgentError(f"unknown verb {verb!r}", "BadRequest")


def main(raw: str | None = None) -> int:
    """Answer one request: `raw` when the bootstrap already read it from stdin, else stdin."""
    if raw is None:
        raw = sys.stdin.read()
    try:
        request = json.loads(raw)
    except ValueError as exc:
        response = protocol.failure("BadRequest", f"request is not JSON: {exc}")
    else:
        response = handle(request)
    sys.stdout.write(json.dumps(response, separators=(",", ":")))
    sys.stdout.write("\n")
    sys.stdout.flush()
    _after_answer()
    return 0


def _after_answer() -> None:
    """The bookkeeping requests left for after their answer (agent.jobs.after_answer)."""
    jobs = sys.modules.get("gpupoolctl.agent.jobs")  # not imported: nothing was left
    if jobs is not None:
        jobs.run_after_answer()


SERVE_READY = "serve"
# A request is kilobytes (a partition plan, a launch's argv and env); an answer too (a logs
# chunk is at most 64 KiB). The bounds only stop a runaway from filling memory, and the
# answer's is below what the workstation reads, so an oversize answer arrives as an error.
MAX_REQUEST_BYTES = 8 << 20
MAX_ANSWER_BYTES = 32 << 20
_SKIP_CHUNK = 1 << 16


def serve(
    reader: IO[bytes],
    writer: IO[bytes],
    *,
    max_request: int = MAX_REQUEST_BYTES,
    max_answer: int = MAX_ANSWER_BYTES,
) -> int:
    """Answer request frames from `reader` on `writer` until EOF. Returns the exit status."""
    ready = {SERVE_READY: 1, "v": protocol.PROTOCOL_VERSION, "pid": os.getpid()}
    if not _send(writer, ready):
        return 0
    while True:
        line = reader.readline(max_request + 1)
        if not line:
            return 0
        if not line.endswith(b"\n"):
            if len(line) <= max_request:
                return 0  # a partial last line: the workstation went away mid-write
            _skip_line(reader)
            answer = protocol.failure(
                "RequestTooLarge", f"request line longer than {max_request} bytes, skipped"
            )
            if not _answer(writer, None, answer, max_answer):
                return 0
            continue
        if not line.strip():
            continue
        request_id, answer = _answer_line(line)
        sent = _answer(writer, request_id, answer, max_answer)
        _after_answer()
        if not sent:
            return 0


def _answer_line(line: bytes) -> tuple[Any, dict[str, Any]]:
    try:
        frame = json.loads(line)
    except ValueError as exc:
        return None, protocol.failure("BadRequest", f"request line is not JSON: {exc}")
    if not isinstance(frame, dict):
        return None, protocol.failure("BadRequest", "request line must be a JSON object")
    request_id = frame.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int):
        return None, protocol.failure("BadRequest", "request line has no integer 'id'")
    if "request" not in frame:
        return request_id, protocol.failure("BadRequest", "request line has no 'request'")
    return request_id, handle(frame["request"])


def _skip_line(reader: IO[bytes]) -> None:
    """Read and drop the rest of an oversize line, a chunk at a time (bounded memory)."""
    while True:
        chunk = reader.readline(_SKIP_CHUNK)
        if not chunk or chunk.endswith(b"\n"):
            return


def _answer(writer: IO[bytes], request_id: Any, answer: dict[str, Any], most: int) -> bool:
    data = _encode({"id": request_id, "answer": answer})
    if len(data) > most:
        too_large = protocol.failure(
            "AnswerTooLarge", f"the answer was {len(data)} bytes, more than the {most} allowed"
        )
        data = _encode({"id": request_id, "answer": too_large})
    return _write(writer, data)


def _send(writer: IO[bytes], value: dict[str, Any]) -> bool:
    return _write(writer, _encode(value))


def _encode(value: dict[str, Any]) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8") + b"\n"


def _write(writer: IO[bytes], data: bytes) -> bool:
    """False when the workstation is gone (its end of the pipe or channel closed)."""
    try:
        writer.write(data)
        writer.flush()
    except (BrokenPipeError, ConnectionResetError, ValueError):
        return False
    return True


def serve_stdio(stdin: IO[bytes]) -> int:
    """Serve mode on the process's own stdin/stdout (the bootstrap's `serve` header).

    The frames get private copies of both descriptors; fd 0 becomes /dev/null and fd 1 goes
    to stderr, so a vendor library or a child process that reads stdin or prints cannot eat
    a request or break a frame. The workstation waits for the ready line before it sends a
    request, so nothing is left in the bootstrap's read buffer."""
    in_fd = os.dup(stdin.fileno())
    out_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    sys.stdout.flush()
    os.dup2(2, 1)
    reader = os.fdopen(in_fd, "rb")
    writer = os.fdopen(out_fd, "wb")
    try:
        return serve(reader, writer)
    finally:
        for stream in (reader, writer):
            with contextlib.suppress(OSError):  # the workstation's end is gone
                stream.close()


if __name__ == "__main__":
    raise SystemExit(main())
