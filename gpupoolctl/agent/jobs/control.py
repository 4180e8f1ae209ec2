"""The `poll`, `signal` and `logs` verbs: read a job's folder, signal its process group."""

from __future__ import annotations

import os
import signal as signals
import time
from pathlib import Path
from typing import Any

from gpupoolctl.agent.jobs import paths
from gpupoolctl.agent.protocol import AgentError
from gpupoolctl.hw import proc, sharing

STARTING_GRACE_S = 30.0  # a folder without pid.json younger than this is a launch in progress
MAX_LOG_CHUNK = 1 << 20
# Signals a job may be sent as a warning (--signal): those it can catch. The admin side's
# list (gpupoolctl.jobs.spec.SIGNALS) is the same.
CATCHABLE = ("HUP", "INT", "QUIT", "USR1", "USR2", "ALRM", "TERM", "CONT", "URG", "WINCH")
_SIGNALS = {"KILL": signals.SIGKILL}
_SIGNALS.update({name: getattr(signals, f"SIG{name}") for name in CATCHABLE})


def status(root: Path, job_id: str, fence: bool = False) -> dict[str, Any]:
    """One job's state from its folder (and whether its processes still run)."""
    folder = paths.job_dir(root, job_id)
    out: dict[str, Any] = {
        "state": "absent",
        "exit_code": None,
        "signal": None,
        "pid": None,
        "started": None,
        "ended": None,
        "error": None,
        "reason": None,
        "fenced": False,
    }
    if not folder.is_dir():
        if fence:
            paths.ensure_root(root)
            try:
                sharing.make_dir(folder)  # the same claim launch makes: whoever is first wins
            except FileExistsError:
                return status(root, job_id)
            os.close(sharing.open_file(folder / "fenced", os.O_WRONLY))
            out["fenced"] = True
        return out
    exited = paths.read_json(folder / "exit.json")
    started = paths.read_json(folder / "pid.json")
    if started:
        out.update(pid=started.get("pid"), started=started.get("started"))
    if exited:
        out.update(
            state="exited",
            exit_code=exited.get("exit_code"),
            signal=exited.get("signal"),
            ended=exited.get("ended"),
            error=exited.get("error"),
            reason=exited.get("reason"),  # "time-limit": ended at its time limit
        )
        # What the job said of itself (a built-in workload's report.json), in the same
        # answer: no extra round trip. Bounded; a malformed one is left out with a note.
        from gpupoolctl.agent.workloads import report

        found, note = report.read(folder)
        if found is not None:
            out["report"] = found
        elif note is not None:
            out["report_note"] = note
        return out
    if started:
        wrapper = proc.alive(int(started.get("wrapper_pid") or 0), started.get("wrapper_start"))
        job = proc.alive(int(started.get("pid") or 0), started.get("proc_start"))
        if wrapper or job:
            out["state"] = "running"
            if not wrapper:
                out["error"] = "its wrapper died: the exit code will not be known"
        else:
            # Both gone without exit.json: killed with its wrapper, or the node rebooted.
            exited = paths.read_json(folder / "exit.json")  # unless it just finished
            if exited:
                return status(root, job_id)
            out.update(state="lost", error="the job and its wrapper are gone, no exit code")
        return out
    if (folder / "fenced").exists():
        out["fenced"] = True
        return out
    meta = paths.read_json(folder / "meta.json") or {}
    created = float(meta.get("created") or _mtime(folder))
    if time.time() - created < STARTING_GRACE_S:
        out["state"] = "starting"
    else:
        out.update(state="lost", error="launched but never started")
    return out


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def poll(args: dict[str, Any], root: Path) -> dict[str, Any]:
    job_ids = args.get("job_ids")
    if not isinstance(job_ids, list):
        raise AgentError("poll: job_ids must be a list", "BadRequest")
    fence = bool(args.get("fence"))
    return {"jobs": {paths.check_job_id(j): status(root, j, fence) for j in job_ids}}


def signal_job(args: dict[str, Any], root: Path) -> dict[str, Any]:
    job_id = paths.check_job_id(args.get("job_id"))
    name = str(args.get("signal") or "TERM").upper().removeprefix("SIG")
    if name not in _SIGNALS:
        raise AgentError(f"signal: {name!r} is not one of {', '.join(_SIGNALS)}", "BadRequest")
    try:
        wait_s = max(0.0, min(float(args.get("wait_s") or 0), 600.0))
    except (TypeError, ValueError):
        raise AgentError("signal: wait_s must be a number", "BadRequest") from None
    current = status(root, job_id)
    sent = False
    if current["state"] == "running" and current["pid"]:
        try:
            os.killpg(int(current["pid"]), _SIGNALS[name])  # the job's own process group
            sent = True
        except ProcessLookupError:
            pass
        except PermissionError as exc:
            raise AgentError(f"signal: not allowed: {exc}", "SignalFailed") from None
    deadline = time.monotonic() + wait_s
    while sent and current["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
        current = status(root, job_id)
    if sent:
        current = status(root, job_id)
    return {"sent": sent, **current}


def logs(args: dict[str, Any], root: Path) -> dict[str, Any]:
    """One chunk of one stream ({"stream", "offset"}), or of several at once
    ({"streams": {"stdout": offset, "stderr": offset}}: one round trip for a follower)."""
    job_id = paths.check_job_id(args.get("job_id"))
    streams = args.get("streams")
    if streams is None:
        wanted = {args.get("stream") or "stdout": args.get("offset") or 0}
    elif isinstance(streams, dict) and streams:
        wanted = dict(streams)
    else:
        raise AgentError("logs: streams must map stdout/stderr to offsets", "BadRequest")
    if any(name not in ("stdout", "stderr") for name in wanted):
        raise AgentError("logs: stream must be stdout or stderr", "BadRequest")
    try:
        offsets = {name: int(value or 0) for name, value in wanted.items()}
        limit = max(1, min(int(args.get("max_bytes") or 65536), MAX_LOG_CHUNK))
    except (TypeError, ValueError):
        raise AgentError("logs: offset and max_bytes must be integers", "BadRequest") from None
    folder = paths.job_dir(root, job_id)
    if not folder.is_dir():
        raise AgentError(f"logs: no job {job_id} on this node", "NoSuchJob")
    state = status(root, job_id)["state"]  # read before the files: then no output is missed
    chunks = {name: _chunk(folder / name, offset, limit, state) for name, offset in offsets.items()}
    if streams is None:
        return {**next(iter(chunks.values())), "state": state}
    return {"streams": chunks, "state": state}


def _chunk(path: Path, offset: int, limit: int, state: str) -> dict[str, Any]:
    try:
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            start = max(0, size + offset) if offset < 0 else min(offset, size)
            handle.seek(start)
            chunk = handle.read(limit)
            while chunk and chunk[0] & 0xC0 == 0x80 and offset < 0:
                chunk, start = chunk[1:], start + 1  # from the end: start on a whole character
    except FileNotFoundError:
        size, start, chunk = 0, 0, b""
    chunk = whole_characters(chunk, more=start + len(chunk) < size or state == "running")
    return {
        "text": chunk.decode("utf-8", "replace"),
        "offset": start,
        "next_offset": start + len(chunk),
        "size": size,
    }


def whole_characters(chunk: bytes, more: bool) -> bytes:
    """Cut an incomplete UTF-8 sequence off the end when `more` follows; the next chunk
    starts with it. The admin side trims what it reads the same way (gpupoolctl.slurm.jobs)."""
    if not more:
        return chunk
    for back in range(1, min(4, len(chunk)) + 1):
        byte = chunk[-back]
        if byte & 0xC0 != 0x80:  # a lead byte (or ASCII): does its sequence fit?
            need = 1 if byte < 0x80 else 2 if byte >> 5 == 6 else 3 if byte >> 4 == 14 else 4
            return chunk if need <= back else chunk[:-back]
    return chunk
