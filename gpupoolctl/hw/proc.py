"""Whether a process still runs, read from Linux /proc. Stdlib only.

The agent (job folders, poll) and the simulator (a launched job stays a GPU process while it
runs) apply one liveness rule; it lives here, below both, so that the sim needs nothing of
the agent.
"""

from __future__ import annotations

import os


def _stat_fields(pid: int) -> list[str] | None:
    """/proc/<pid>/stat after the command name (which may hold spaces), or None."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()


def proc_start(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid."""
    fields = _stat_fields(pid)
    return fields[19] if fields is not None and len(fields) > 19 else None


def alive(pid: int, started: str | None = None) -> bool:
    """True while `pid` runs (a zombie has ended; a pid reused by another process too)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # someone else's process holds the pid: alive, though maybe not ours
    fields = _stat_fields(pid)
    if fields is None:
        return True  # no /proc (not Linux): kill(0) is all we can know
    if fields and fields[0] in ("Z", "X"):
        return False
    return not (started and len(fields) > 19 and fields[19] != started)
