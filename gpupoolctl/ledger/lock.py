"""flock on P.lock: shared for readers, exclusive for writers, with a bounded wait.

The lock file is never replaced, unlike the journal (compaction and repair rename a new one
into place), so a writer that waited for the lock always appends to the current journal.
The kernel drops the lock when a holder dies, SIGKILL included.

A holder that is alive but stuck (stopped with Ctrl-Z, a hung NFS client, a debugger) would
stall every command forever, so the wait is bounded: GPUPOOL_LEDGER_LOCK_TIMEOUT seconds
(default 60; 0: try once; inf: no limit), then LedgerBusy naming the holder when this host
can see it. Linux has no timed flock, and signals and helper threads are off limits in a
library that runs in threads, so the wait polls LOCK_NB with sleeps that grow with the wait:
a free lock costs one system call, and a busy one is taken soon after it is let go.
"""

from __future__ import annotations

import fcntl
import math
import os
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, suppress
from pathlib import Path

from gpupoolctl.errors import UsageError
from gpupoolctl.hw import sharing
from gpupoolctl.ledger.errors import LedgerBusy, holders_text

TIMEOUT_ENV = "GPUPOOL_LEDGER_LOCK_TIMEOUT"
DEFAULT_TIMEOUT = 60.0

# Between LOCK_NB tries a waiter sleeps a fiftieth of what it has waited so far, within
# [0.03 ms, 50 ms]. A release then goes unnoticed for about 2% of the wait at most, so the
# short holds of busy writers (well under a millisecond) hand over nearly as fast as a
# blocking flock, while a slow or stuck holder costs each waiter ~20 wake-ups a second
# once it has waited 2.5 s (about 380 in its first second). A fixed back-off cannot do
# both: capped at 2 ms it left the lock idle between commits (throughput down by a third
# with 8 writers), capped at 0.2 ms it polls all the time. Since waiters read ahead
# between tries (Ledger), a twentieth within [0.1 ms, 50 ms] gave 2-14% fewer
# alloc+release a second with 8 writers than this (bench/ledger, six alternating pairs).
_SLEEP_SHARE = 0.02
_MIN_SLEEP = 0.00003
_MAX_SLEEP = 0.05
# A wait longer than this is worth telling a person about (once), through `on_wait`.
NOTICE_AFTER_S = 2.0


def timeout_from_env(environ: Mapping[str, str] | None = None) -> float:
    """Seconds to wait for the lock: GPUPOOL_LEDGER_LOCK_TIMEOUT, or 60 when unset or empty.

    A number >= 0 (0: try once; inf: wait without limit); anything else is a UsageError.
    """
    env = os.environ if environ is None else environ
    text = env.get(TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_TIMEOUT
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isnan(value) or value < 0:
        raise UsageError(
            f"{TIMEOUT_ENV}={text!r}: expected seconds to wait for the ledger lock, "
            "a number >= 0 (0: try once, inf: no limit)"
        )
    return value


def _try(fd: int, mode: int) -> bool:
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _wait(
    fd: int,
    mode: int,
    timeout: float,
    on_long_wait: Callable[[], None] | None = None,
    on_poll: Callable[[], None] | None = None,
) -> float | None:
    """Take the lock within `timeout` seconds: None when taken, else the seconds waited.
    `on_long_wait` is called once if the wait passes NOTICE_AFTER_S; `on_poll` after each
    try that found the lock busy (never while this process holds it)."""
    if _try(fd, mode):
        return None
    if math.isinf(timeout) and on_long_wait is None:
        fcntl.flock(fd, mode)  # no limit asked for: the kernel wakes us on release
        return None
    start = time.monotonic()
    deadline = start + timeout
    noticed = on_long_wait is None or timeout <= NOTICE_AFTER_S
    while True:
        now = time.monotonic()
        if now >= deadline:
            return now - start
        if not noticed and now - start >= NOTICE_AFTER_S:
            noticed = True
            assert on_long_wait is not None
            on_long_wait()
            if math.isinf(timeout):
                fcntl.flock(fd, mode)  # no limit asked for: the kernel wakes us on release
                return None
        if on_poll is not None:
            on_poll()
            if _try(fd, mode):  # the poll's work took time: the holder may be gone
                return None
        pause = min(_MAX_SLEEP, max(_MIN_SLEEP, (now - start) * _SLEEP_SHARE))
        time.sleep(min(pause, deadline - now))
        if _try(fd, mode):
            return None


def holders(path: Path) -> tuple[tuple[tuple[int, str | None], ...], str]:
    """Who holds a flock on `path` as /proc/locks shows it: ((pid, command), ...), and why
    nobody is named when the tuple is empty. Best effort: it never raises."""
    try:
        st = os.stat(path)
        with open("/proc/locks", encoding="ascii", errors="replace") as f:
            table = f.read()
    except OSError:
        return (), "/proc/locks is not readable here"
    where = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    pids: list[int] = []
    for line in table.splitlines():
        # "1: FLOCK  ADVISORY  WRITE 4242 fe:00:2146320 0 EOF"; waiters carry "->": skip them.
        fields = line.split()
        if len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != where:
            continue
        try:
            pid = int(fields[4])
        except ValueError:
            continue
        if pid > 0 and pid not in pids:  # 0: a holder gone or outside this pid namespace
            pids.append(pid)
    if not pids:
        return (), "not listed in /proc/locks: another host over NFS, or another container"
    return tuple((pid, _command(pid)) for pid in pids), ""


def _command(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as f:
            return f.read().strip() or None
    except OSError:
        return None


def waiting_message(path: Path, timeout: float) -> str:
    """What a person waiting for the lock should read: who holds it and for how long we wait."""
    found, why = holders(path)
    who = holders_text(found) or why
    limit = "without limit" if math.isinf(timeout) else f"up to {timeout:g} s"
    return f"waiting for the ledger lock {path} held by {who}; {limit} ({TIMEOUT_ENV})"


class FileLock:
    """`timeout`: seconds to wait for the lock; None reads GPUPOOL_LEDGER_LOCK_TIMEOUT at each
    wait, so a bad value fails the command that locks, as a UsageError. `on_wait` hears
    `waiting_message` once when a wait passes NOTICE_AFTER_S (the CLI prints it)."""

    def __init__(
        self,
        path: Path,
        timeout: float | None = None,
        on_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.path = path
        self.timeout = timeout
        self.on_wait = on_wait
        self._fd: int | None = None
        self._pid = 0

    def _descriptor(self) -> int:
        # A forked child must not share its parent's open file description: flock would then
        # treat both as one holder.
        if self._fd is None or self._pid != os.getpid():
            try:
                fd = sharing.open_file(self.path, os.O_RDWR | os.O_CLOEXEC)
            except PermissionError:  # a read-only user of someone else's ledger
                fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
            self._fd, self._pid = fd, os.getpid()
        return self._fd

    @contextmanager
    def _held(self, mode: int, on_poll: Callable[[], None] | None = None) -> Iterator[None]:
        timeout = timeout_from_env() if self.timeout is None else self.timeout
        fd = self._descriptor()
        on_wait = self.on_wait
        tell = None if on_wait is None else lambda: on_wait(waiting_message(self.path, timeout))
        waited = _wait(fd, mode, timeout, tell, on_poll)
        if waited is not None:
            found, why = holders(self.path)
            raise LedgerBusy(
                str(self.path),
                waited=waited,
                timeout=timeout,
                env=TIMEOUT_ENV,
                holders=found,
                unknown_why=why,
            )
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)

    def shared(self) -> contextmanager[None]:  # type: ignore[valid-type]
        return self._held(fcntl.LOCK_SH)

    def exclusive(self, on_poll: Callable[[], None] | None = None) -> contextmanager[None]:  # type: ignore[valid-type]
        """`on_poll`: work to do between tries while another process holds the lock (a
        writer reads ahead what the holders append; see Ledger)."""
        return self._held(fcntl.LOCK_EX, on_poll)

    def close(self) -> None:
        if self._fd is not None and self._pid == os.getpid():
            os.close(self._fd)
        self._fd = None

    def __del__(self) -> None:
        # A handle dropped without close() (a library caller's, a test's) must not keep its
        # descriptor for the life of the process: a long-running one would run out, and
        # select() (paramiko's) refuses descriptors above 1023.
        with suppress(Exception):  # at interpreter exit there is nothing left to tell
            self.close()
