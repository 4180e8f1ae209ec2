"""Where job folders live on a node, job id checks, and small file helpers."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from gpupoolctl.agent.protocol import AgentError
from gpupoolctl.hw import sharing

# Process liveness is hw.proc's (the sim applies it too); kept importable from here for the
# admin-side jobs code that reads it through this module.
from gpupoolctl.hw.proc import alive as alive
from gpupoolctl.hw.proc import proc_start as proc_start

# A job id becomes a folder name: no separators, no leading dot, nothing a shell would read.
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def check_job_id(value: Any) -> str:
    if not isinstance(value, str) or not _JOB_ID.fullmatch(value) or ".." in value:
        raise AgentError(f"bad job id {value!r}: letters, digits, . _ - only", "BadRequest")
    return value


def jobs_root(host: str, sim: dict[str, Any] | None) -> Path:
    if sim is not None:
        from gpupoolctl.sim.state import SimState, default_state_dir

        state_dir = sim.get("state_dir")
        base = Path(state_dir) if state_dir else default_state_dir()
        # The same name-cleaning as the node's state file: one folder per simulated node.
        return (base / "jobs" / SimState.path_for(host or "_", base).stem).absolute()
    return (Path(state_home()) / "gpupoolctl" / "jobs").absolute()


def state_home() -> str:
    """The user's state folder on this node: $XDG_STATE_HOME, else ~/.local/state."""
    return os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )


def ensure_root(root: Path) -> None:
    """The jobs root: the user's own (0700), or in a folder shared with its group (the
    simulator's, set up for several operators) one the group's agents all use."""
    sharing.make_dirs(root)
    if not sharing.is_shared(root.parent):
        os.chmod(root, sharing.PRIVATE_DIR)


def job_dir(root: Path, job_id: str) -> Path:
    return root / check_job_id(job_id)


def write_json(path: Path, value: Any, *, durable: bool = True) -> None:
    """Atomic: a reader sees the old file or the whole new one, never half of it.
    `durable` also survives a crash of the node (fsync, a few ms); files that only
    describe a live process need not (after a crash the process is gone anyway, and a
    missing file reads as lost all the same)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = sharing.open_file(tmp, os.O_WRONLY | os.O_TRUNC)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump(value, handle, sort_keys=True)
        if durable:
            handle.flush()
            os.fsync(handle.fileno())
    os.replace(tmp, path)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
