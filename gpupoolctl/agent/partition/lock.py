"""One `partition` run at a time on a node.

Two runs on one node (two operators, or a cron run while the previous one still waits on an
AMD driver reload) would interleave their ops on the same GPUs, each planned from facts the
other is changing. The lock is an flock: the kernel frees it when its holder dies, so a
crashed run never leaves the node locked. A second run does not wait: it was planned from
facts the first one is changing, so it is refused whole and plans again later.

Where: a file every user of the node can open (/run/lock), so that two operators logged in
as different users exclude each other too; on a simulated node, beside its state file (the
simulated nodes of a workstation share its /run/lock, but not their GPUs).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import sys
import time
from collections.abc import Iterator

from gpupoolctl.agent.jobs.paths import state_home
from gpupoolctl.hw import sharing

LOCK_NAME = "gpupoolctl-partition.lock"
SHARED_FOLDERS = ("/run/lock", "/var/lock")


class NodeBusy(Exception):
    """Another partition run holds the node."""


def _simulated_state_file() -> str | None:
    """The state file of the simulated node the fakes are bound to (sim.activate), if any."""
    for name in ("pynvml", "amdsmi"):
        module = sys.modules.get(name)
        if module is None or not module.__name__.startswith("gpupoolctl.sim."):
            continue
        state = getattr(module, "_state", None)
        if state is not None:
            return str(state.path)
    return None


def lock_paths() -> list[str]:
    """Where to try the lock, in order: the shared folders, then the user's state folder."""
    simulated = _simulated_state_file()
    if simulated is not None:
        return [simulated + ".partition.lock"]
    out = [os.path.join(folder, LOCK_NAME) for folder in SHARED_FOLDERS if os.path.isdir(folder)]
    out.append(os.path.join(state_home(), "gpupoolctl", "partition.lock"))
    return out


def _open(path: str) -> tuple[int, bool]:
    """(fd, writable). Another user's lock file is opened read-only: flock does not need
    write access, and O_CREAT on someone else's file in a sticky folder is refused."""
    try:
        sharing.make_dirs(os.path.dirname(path))
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o644)  # readable by the other users of a shared folder
        return fd, True
    except PermissionError:
        return os.open(path, os.O_RDONLY), False


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f" (pid {text})" if text.isdigit() else ""


# A run that finds the lock taken tries again for this long before it is refused: `facts`
# takes the lock shared for an instant to see whether a run is in progress (running()).
BUSY_RETRY_S = 1.0


def _take(fd: int) -> None:
    """flock(fd, LOCK_EX), waiting at most BUSY_RETRY_S; OSError (EWOULDBLOCK) after."""
    deadline = time.monotonic() + BUSY_RETRY_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


def running(paths: list[str] | None = None) -> bool:
    """Whether a partition run holds the node now (one the workstation that started it may
    no longer wait for: interrupted, or its connection lost). Never creates a lock file."""
    for path in paths or lock_paths():
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                return True
        finally:
            os.close(fd)  # closing releases the shared lock at once
    return False


@contextlib.contextmanager
def node_lock(paths: list[str] | None = None) -> Iterator[str]:
    """Hold the node's partition lock; yields its path. NodeBusy when another run has it."""
    problems = []
    for path in paths or lock_paths():
        try:
            fd, writable = _open(path)
        except OSError as exc:
            problems.append(f"{path}: {exc.strerror or exc}")
            continue
        try:
            try:
                _take(fd)
            except OSError as exc:
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                    problems.append(f"{path}: {exc.strerror or exc}")  # e.g. no locks there
                    continue
                raise NodeBusy(
                    f"another `gpupoolctl partition` run holds this node{_holder(fd)}: "
                    "nothing was done; take facts and plan again when it has ended"
                ) from None
            if writable:  # who holds it, for the message of a run refused meanwhile
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            yield path
            return
        finally:
            os.close(fd)
    raise NodeBusy("cannot open a partition lock file: " + "; ".join(problems))
