"""A real process that holds a real flock on a ledger's lock file, for lock-wait tests.

It runs under its own name (a symlink to the interpreter) so a test can check that a
LedgerBusy message names the holder's command as well as its pid.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

HOLDER_NAME = "gpupool-holder"

_SCRIPT = """
import fcntl, os, sys, time
path, mode, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX if mode == "ex" else fcntl.LOCK_SH)
print("held", flush=True)
if seconds >= 0:
    time.sleep(seconds)
else:
    sys.stdin.read()
fcntl.flock(fd, fcntl.LOCK_UN)
print("released", flush=True)
"""


@contextmanager
def holding(lock: Path, mode: str = "ex", seconds: float = -1) -> Iterator[subprocess.Popen[str]]:
    """Yield once a process holds `lock` (mode "ex" or "sh"); it lets go after `seconds`, or
    when its stdin closes (seconds < 0), and is killed on the way out."""
    exe = lock.parent / HOLDER_NAME
    if not exe.exists():
        exe.symlink_to(sys.executable)
    proc = subprocess.Popen(
        [str(exe), "-c", _SCRIPT, str(lock), mode, str(seconds)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "held\n"
        yield proc
    finally:
        proc.kill()
        proc.wait(timeout=10)
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()
