"""The JSON state file behind one simulated node: reading, locking and saving it.

Layout: {"version": 1, "host": str, "template": str, "nvidia": {...}?, "amd": {...}?,
"network": {"nics": [Nic, ...]}} (Nic: gpupoolctl.hw.model; the agent reports these as the
node's network facts, and sim workloads read them to model inter-node bandwidth).
Each vendor section belongs to its fake module (gpupoolctl.sim.pynvml / gpupoolctl.sim.amdsmi).
Writes are atomic (temp file, fsync, rename) under an exclusive flock on a side lock file, so
two agents acting on the same simulated node never interleave.

This is the bottom of the sim: the fakes (pynvml, amdsmi) bind to a StateFile and import
nothing above it; creating a node from its template is gpupoolctl.sim.state's (SimState).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Self

from gpupoolctl.hw import sharing
from gpupoolctl.hw.proc import alive

STATE_VERSION = 1


def default_state_dir() -> Path:
    """$GPUPOOL_SIM_DIR, else $XDG_STATE_HOME/gpupoolctl/sim, else ~/.local/state/..."""
    explicit = os.environ.get("GPUPOOL_SIM_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "gpupoolctl" / "sim"


def _safe_file_name(host: str) -> str:
    # Host names come from inventories: keep them from escaping the state folder, and give
    # a name that had to be changed a short hash, so that "a/b" and "a_b" stay two nodes.
    cleaned = "".join(c if c.isalnum() or c in "-_." else "_" for c in host).lstrip(".") or "_"
    if cleaned == host:
        return cleaned
    import hashlib

    return f"{cleaned}-{hashlib.sha256(host.encode()).hexdigest()[:8]}"


class StateFile:
    """One node's simulated hardware, loaded from and saved to its state file."""

    def __init__(self, path: Path, data: dict[str, Any]) -> None:
        self.path = path
        self.data = data
        self._stamp: tuple[int, int, int] | None = None  # identity of the file data came from

    @property
    def host(self) -> str:
        return str(self.data.get("host", ""))

    @property
    def template(self) -> str:
        return str(self.data.get("template", ""))

    def section(self, vendor: str) -> dict[str, Any] | None:
        value = self.data.get(vendor)
        return value if isinstance(value, dict) else None

    @classmethod
    def path_for(cls, host: str, state_dir: str | os.PathLike[str] | None = None) -> Path:
        folder = Path(state_dir) if state_dir else default_state_dir()
        return folder / f"{_safe_file_name(host)}.json"

    @classmethod
    def load(cls, path: Path) -> Self:
        with open(path, encoding="utf-8") as handle:
            stamp = _stamp(os.fstat(handle.fileno()))
            data = json.load(handle)
        if not isinstance(data, dict) or data.get("version") != STATE_VERSION:
            raise ValueError(f"{path}: not a gpupoolctl sim state file (version {STATE_VERSION})")
        prune_ended_jobs(data)  # launched jobs that have ended are no longer GPU processes
        state = cls(path, data)
        state._stamp = stamp
        return state

    @contextlib.contextmanager
    def mutate(self) -> Iterator[dict[str, Any]]:
        """Reload under the lock, let the caller change the data, then save atomically."""
        with locked(self.path):
            if self.path.exists():
                fresh = type(self).load(self.path)
                self.data, self._stamp = fresh.data, fresh._stamp
            yield self.data
            self._write()

    def refresh(self) -> None:
        """Pick up changes other agents saved; one stat when the file is as it was read.
        The fakes call this on every "live hardware" read, many times per request."""
        try:
            stamp = _stamp(os.stat(self.path))
        except FileNotFoundError:
            return
        if stamp != self._stamp:
            fresh = type(self).load(self.path)
            self.data, self._stamp = fresh.data, fresh._stamp

    def _write(self) -> None:
        import tempfile  # only writers pay for it: most agent runs only read

        sharing.make_dirs(self.path.parent)
        mode = sharing.replacing_mode(self.path)
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(self.data, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, mode)
            os.replace(tmp, self.path)
            self._stamp = _stamp(os.stat(self.path))
        except BaseException:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise


def _stamp(status: os.stat_result) -> tuple[int, int, int]:
    # Every save is a rename of a new file, so the inode tells saves apart even when two
    # land within one mtime tick with the same size.
    return (status.st_ino, status.st_mtime_ns, status.st_size)


@contextlib.contextmanager
def locked(path: Path) -> Iterator[None]:
    sharing.make_dirs(path.parent)
    lock_path = path.with_name(path.name + ".lock")
    fd = sharing.open_file(lock_path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def prune_ended_jobs(data: dict[str, Any]) -> None:
    """Drop job processes whose pid has ended (in place): the simulated driver, like the real
    one, stops listing a process that has exited. See gpupoolctl.sim.procs."""
    for vendor in ("nvidia", "amd"):
        section = data.get(vendor)
        if not isinstance(section, dict):
            continue
        for gpu in section.get("gpus") or []:
            procs = gpu.get("processes")
            if procs and any("job" in p for p in procs):
                gpu["processes"] = [p for p in procs if "job" not in p or _alive(p["pid"])]


def _alive(pid: Any) -> bool:
    return alive(pid) if isinstance(pid, int) else False  # the agent's own liveness rule
