"""The Ledger: locked reads, all-or-nothing write transactions, and the operations on top.

Every write goes: exclusive flock -> bring the state up to date (reading only the new bytes)
-> refuse if the journal is damaged below its durable watermark -> cut a torn or crash-
damaged tail above it (with a warning) -> let the caller decide and append records -> write
them in one write() -> unlock -> fdatasync -> raise the watermark -> acknowledge. Syncing
after the unlock is group commit: writers that appended meanwhile share the next sync, and
an acknowledged record still implies every earlier one is durable (watermark.py says why
and what a crash may then leave). Warnings are returned, never printed.
"""

from __future__ import annotations

import functools
import os
import pwd
import socket
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.hw import sharing
from gpupoolctl.ledger import fileio, journal, replay, snapshot, watermark
from gpupoolctl.ledger.errors import LedgerDamaged, LedgerError
from gpupoolctl.ledger.history import History, archives_needed, matcher, read_archive
from gpupoolctl.ledger.lock import FileLock
from gpupoolctl.ledger.paths import LedgerPaths, default_path, ensure_folder
from gpupoolctl.ledger.repair import RepairResult, rebuild_snapshot, set_aside, snapshot_readable
from gpupoolctl.ledger.repair import repair as repair_journal
from gpupoolctl.ledger.state import Allocation, State
from gpupoolctl.ledger.units import format_ts, utc_now
from gpupoolctl.ledger.verify import Problem, Report, check
from gpupoolctl.policy.ownership import NotOwner, as_admin, refusal
from gpupoolctl.redact import looks_secret


def current_user() -> str:
    """Who is acting: the name of the process's uid, or the uid itself where it has no
    passwd entry (containers). Never LOGNAME or USER: anyone can set those, and the name
    decides who owns work and who is a pool admin."""
    return user_name(os.getuid())


@functools.cache
def user_name(uid: int) -> str:
    # Looked up once per process: with LDAP or sssd behind it, a lookup is a round trip.
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def default_actor() -> str:
    return f"{current_user()}@{socket.gethostname()}"


# Records use a few dozen field names over and over: each is judged once per process.
_looks_secret = functools.lru_cache(maxsize=4096)(looks_secret)


def check_no_secrets(value: Any, where: str = "data") -> None:
    """Refuse payload keys that look like secrets: the ledger is read with less and grep."""
    if isinstance(value, dict):
        for key, item in value.items():
            if _looks_secret(str(key)):
                raise LedgerError(
                    f"refusing to record {where}.{key}: secrets never go in the ledger"
                )
            check_no_secrets(item, f"{where}.{key}")
    elif isinstance(value, list):
        for item in value:
            check_no_secrets(item, where)


def _not_text(records: Sequence[dict[str, Any]]) -> str:
    """Why records could not be written: the first string in them that is not UTF-8 text
    (a byte that is not UTF-8 given on a command line arrives as a lone surrogate)."""
    for record in records:
        where = _first_non_text(record["data"], str(record["op"]))
        if where is None and _first_non_text(record["actor"], "actor"):
            where = "actor"
        if where is not None:
            return (
                f"cannot record {where}: it is not valid UTF-8 text (bytes such as 0xff in "
                "a command line or name); the ledger keeps text only"
            )
    return "cannot record the change: some of its text is not valid UTF-8"


def _first_non_text(value: Any, where: str) -> str | None:
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return where
        return None
    if isinstance(value, dict):
        for key, item in value.items():
            found = _first_non_text(str(key), f"{where} (a key)") or _first_non_text(
                item, f"{where}.{key}"
            )
            if found:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _first_non_text(item, f"{where}[{index}]")
            if found:
                return found
    return None


@dataclass
class View:
    """What a reader sees: the state, the time it was judged at, and any warnings."""

    state: State
    now: str
    warnings: list[str] = field(default_factory=list)


@dataclass
class Done:
    """A write's outcome: its value, the records it appended, and warnings for stderr."""

    value: Any
    records: list[dict[str, Any]]
    warnings: list[str]


class Transaction:
    """Appends records to an all-or-nothing batch; each is applied to the state at once, so
    later decisions in the same transaction see earlier ones."""

    def __init__(self, ledger: Ledger, state: State, now: datetime) -> None:
        self.ledger = ledger
        self.state = state
        self.moment = now
        self.now = format_ts(now)
        self.records: list[dict[str, Any]] = []
        self.warnings: list[str] = []
        self._expired = state.expired(self.now)

    @property
    def next_seq(self) -> int:
        """The seq the next append() gets (after the expiry record it may add first)."""
        return self.state.seq + (2 if self._expired and not self.records else 1)

    def append(self, op: str, data: dict[str, Any]) -> dict[str, Any]:
        if not self.records and self._expired:
            # Expired holds are free at read time already; the first write records it.
            self._add("expire", {"ids": self._expired})
        check_no_secrets(data)
        return self._add(op, data)

    def release(self, alloc_id: str) -> bool:
        """Record the end of `alloc_id` when it is still held (a hold `ledger repair`
        quarantined included: a job ending ends it); False (nothing written) when it is not
        (it expired in this very transaction, or an older version let it go early): a
        release of what is not held would leave a history that never verifies."""
        expiring = not self.records and alloc_id in self._expired  # the first append ends it
        if alloc_id in self.state.quarantined and alloc_id not in self.state.allocations:
            self.append("release", {"id": alloc_id})
            return True
        if alloc_id not in self.state.allocations or expiring:
            return False
        self.append("release", {"id": alloc_id})
        return True

    def _add(self, op: str, data: dict[str, Any]) -> dict[str, Any]:
        record = {
            "v": journal.FORMAT_VERSION,
            "seq": self.state.seq + 1,
            "ts": self.now,
            "actor": self.ledger.actor,
            "op": op,
            "data": data,
        }
        self.state.apply(record)
        self.records.append(record)
        return record

    def encoded(self) -> bytes:
        count = len(self.records)
        lines = []
        for index, record in enumerate(self.records, 1):
            batch = (index, count) if count > 1 else None
            if batch:
                record["batch"] = [index, count]
            lines.append(
                journal.encode(
                    record["seq"],
                    record["ts"],
                    record["actor"],
                    record["op"],
                    record["data"],
                    batch,
                )
            )
        return b"".join(lines)


# History problems an older gpupoolctl could write and `ledger repair` may record as known:
# ending what was not held, leaving a queue it was not in. Records this version cannot read
# (a newer op, a malformed record) stay reported: they may hold slices.
KNOWABLE_PROBLEMS = ("which is not held", "which is not queued")

NO_FSYNC_ENV = "GPUPOOL_LEDGER_NO_FSYNC"
AUTOCOMPACT_ENV = "GPUPOOL_LEDGER_AUTOCOMPACT"
# Records in the live journal that make a writer compact it: reading (every command does)
# then never replays more than ~0.1 s of history; each compaction archives this many.
DEFAULT_AUTOCOMPACT = 10_000


def durable_from_env(environ: Mapping[str, str] | None = None) -> bool:
    """False when GPUPOOL_LEDGER_NO_FSYNC is 1, true or yes (any case): writes then skip
    fdatasync, for tests and throwaway ledgers. True otherwise (the default: durable)."""
    env = os.environ if environ is None else environ
    return env.get(NO_FSYNC_ENV, "").strip().lower() not in {"1", "true", "yes"}


def autocompact_from_env(environ: Mapping[str, str] | None = None) -> int:
    """GPUPOOL_LEDGER_AUTOCOMPACT: compact once the live journal holds this many records;
    0 never compacts by itself. Unset or empty: DEFAULT_AUTOCOMPACT."""
    env = os.environ if environ is None else environ
    text = env.get(AUTOCOMPACT_ENV, "").strip()
    if not text:
        return DEFAULT_AUTOCOMPACT
    if not (text.isascii() and text.isdigit()):  # "²".isdigit() is true, int("²") fails
        raise UsageError(
            f"{AUTOCOMPACT_ENV}={text!r}: expected a whole number of records (0 to never "
            "compact by itself)"
        )
    return int(text)


class _OpenJournal:
    """A journal descriptor a writer keeps between transactions; closed when forgotten or
    when the Ledger goes away (never in a forked child, which opens its own)."""

    def __init__(self, fd: int, pid: int, dev: int, ino: int) -> None:
        self.fd, self.pid, self.dev, self.ino = fd, pid, dev, ino

    def is_at(self, st: os.stat_result) -> bool:
        """Whether this is the journal `st` describes, opened by this process."""
        return (self.pid, self.dev, self.ino) == (os.getpid(), st.st_dev, st.st_ino)

    def close(self) -> None:
        if self.fd >= 0 and self.pid == os.getpid():
            with suppress(OSError):
                os.close(self.fd)
        self.fd = -1

    def __del__(self) -> None:
        with suppress(Exception):  # at interpreter exit there is nothing left to tell
            self.close()


def _release_quarantined(
    tx: Transaction, alloc_id: str, user: str | None, admin: bool
) -> Allocation:
    """Release a hold whose record `ledger repair` quarantined: a pool admin's call (who it
    was is read from a damaged line), or a library caller's (`user` None)."""
    hold = tx.state.quarantined[alloc_id]
    if user is not None and not admin:
        raise NotOwner(
            f"release {alloc_id}: its record was quarantined by `ledger repair` (it named "
            f"{hold.get('owner')}); only a pool admin may release it"
        )
    data: dict[str, Any] = {"id": alloc_id, "quarantined": True}
    if user is not None:
        data["as_admin"] = True
    tx.append("release", data)
    slices = [str(s) for s in hold.get("slices") or ()]
    return Allocation(
        id=alloc_id,
        owner=str(hold.get("owner") or "?"),
        slices=slices,
        uuids=[None] * len(slices),
        created=str(hold.get("ts") or tx.now),
        expires=None,
        seq=int(hold.get("seq") or 0),
        actor=tx.ledger.actor,
    )


class Ledger:
    @classmethod
    def from_env(
        cls, path: Path | None = None, *, on_lock_wait: Callable[[str], None] | None = None
    ) -> Ledger:
        """A Ledger at `path` (None: the default path), durable unless the environment
        says GPUPOOL_LEDGER_NO_FSYNC (see `durable_from_env`), compacting itself as
        GPUPOOL_LEDGER_AUTOCOMPACT says (see `autocompact_from_env`)."""
        return cls(
            path,
            durable=durable_from_env(),
            autocompact=autocompact_from_env(),
            on_lock_wait=on_lock_wait,
        )

    def __init__(
        self,
        path: Path | None = None,
        *,
        durable: bool = True,
        actor: str | None = None,
        clock: Callable[[], datetime] = utc_now,
        autocompact: int = DEFAULT_AUTOCOMPACT,
        on_lock_wait: Callable[[str], None] | None = None,
    ) -> None:
        self.is_default = path is None
        if path is not None and Path(path).is_dir():
            raise UsageError(f"ledger {path} is a folder; give the ledger file's path")
        self.paths = LedgerPaths(Path(path) if path is not None else default_path())
        self.durable = durable
        self.actor = actor or default_actor()
        self.clock = clock
        self.autocompact = autocompact
        # Told once, in words for a person, when the lock is slow to come (see FileLock).
        self._lock = FileLock(self.paths.lock, on_wait=on_lock_wait)
        self._watermark = watermark.Watermark(self.paths)
        # The journal (dev, ino, snapshot seq) this process saw the watermark name.
        self._named: tuple[int, int, int] | None = None
        self._loaded: replay.Loaded | None = None
        # The journal a writer appends to, kept open between transactions while it is the
        # file at P (compaction and repair put a new one there).
        self._journal: _OpenJournal | None = None
        # Set by follow() for a reader that follows the ledger; None for everyone else.
        self.observe: replay.Observer | None = None

    @property
    def path(self) -> Path:
        return self.paths.journal

    def follow(self, observe: replay.Observer) -> None:
        """Tell `observe` of every record from the next read on: that read replays the
        snapshot and journal (the observer hears all of the journal), later ones only what
        was appended since."""
        self.observe = observe
        self._loaded = None

    def close(self) -> None:
        self._lock.close()
        self._watermark.close()
        self._forget_journal()

    def _forget_journal(self) -> None:
        if self._journal is not None:
            self._journal.close()
        self._journal = None

    # -- plumbing -------------------------------------------------------------------------

    def _open_journal(self, *, create: bool) -> int | None:
        flags = os.O_RDWR | os.O_APPEND | os.O_CLOEXEC
        try:
            if create:
                ensure_folder(self.paths.folder, create=self.is_default)
                mode = sharing.file_mode(self.paths.folder)
                return fileio.open_file(self.paths.journal, flags | os.O_CREAT, mode)
            return fileio.open_file(self.paths.journal, flags, 0)
        except FileNotFoundError:
            return None
        except PermissionError:
            if create:
                raise LedgerError(f"cannot write {self.paths.journal}: permission denied") from None
            return os.open(self.paths.journal, os.O_RDONLY | os.O_CLOEXEC)

    def _catch_up(self) -> None:
        """Before waiting for the lock, read outside it what is new (replay.catch_up): a new
        handle's replay of the whole journal, or of a compaction's new files, then never
        holds the lock that every writer waits for, and under it only the records appended
        meanwhile are left to read."""
        try:
            self._loaded = replay.catch_up(self._loaded, self.paths, self.observe)
        except BaseException:
            self._loaded = None  # interrupted half-way: the state may not match its scan
            raise

    def _refresh(self, fd: int | None, st: os.stat_result | None = None) -> replay.Loaded:
        try:
            self._loaded = replay.refresh(self._loaded, self.paths, fd, self.observe, st)
        except BaseException:
            self._loaded = None
            raise
        return self._loaded

    def damage_error(self, loaded: replay.Loaded) -> LedgerDamaged:
        where = str(self.paths.journal)
        hint = "writes are refused until `gpupoolctl ledger repair`"
        if loaded.scan.bad:
            # Name the line that is itself broken, not a batch neighbour left incomplete by it.
            causes = [b for b in loaded.scan.bad if "incomplete batch" not in b.reason]
            bad = (causes or loaded.scan.bad)[0]
            more = len(loaded.scan.bad) - 1
            extra = f" ({more} more damaged line(s))" if more else ""
            return LedgerDamaged(where, bad.line, f"damaged record: {bad.reason}{extra}; {hint}")
        gap = loaded.undeclared_gaps()[0]
        return LedgerDamaged(
            where, gap.line, f"records {gap.first}..{gap.last} are missing before this line; {hint}"
        )

    def _torn_warning(self, loaded: replay.Loaded, *, removed: bool) -> str:
        torn = loaded.scan.torn
        assert torn is not None
        size = loaded.size - torn.offset
        what = "removed" if removed else "ignored (the next write removes it)"
        if torn.reason == replay.CRASH_TAIL:
            kept = f"; copied to {self.paths.quarantine}" if removed else ""
            return f"{self.paths.journal}:{torn.line}: {size} bytes {torn.reason}: {what}{kept}"
        return (
            f"{self.paths.journal}:{torn.line}: {torn.reason} ({size} bytes, left by an "
            f"interrupted writer) {what}"
        )

    def _mode_warning(self, fd: int, st: os.stat_result) -> str | None:
        """Take away what the journal's mode gives beyond its folder's rule (0600, or 0660
        in a folder shared with its group): only its owner can."""
        mode = st.st_mode & 0o777
        if not mode & 0o077:
            return None
        allowed = sharing.file_mode(self.paths.folder)
        if not mode & ~allowed or os.geteuid() not in (0, st.st_uid):
            return None
        os.fchmod(fd, mode & allowed)
        return f"{self.paths.journal}: mode {mode:o} was too open; set to {mode & allowed:o}"

    # -- reading --------------------------------------------------------------------------

    def _check_can_exist(self) -> None:
        """A ledger not written yet reads as empty only where it could be written: the
        default state folder is created (an unusable XDG_STATE_HOME is one error, not "no
        jobs"), a folder the user named must exist."""
        ensure_folder(self.paths.folder, create=self.is_default)

    def _missing(self, what: str) -> LedgerError:
        return LedgerError(f"ledger {self.paths.journal} does not exist: {what}")

    def read(self) -> View:
        """The current state under a shared lock; never writes (a torn tail is only noted)."""
        now = format_ts(self.clock())
        if not self.paths.exists():
            self._check_can_exist()
            return View(State(), now)
        self._catch_up()
        with self._lock.shared():
            fd = self._open_journal(create=False)
            try:
                loaded = self._refresh(fd)
            finally:
                if fd is not None:
                    os.close(fd)
        warnings = []
        if loaded.damaged:
            warnings.append(
                str(self.damage_error(loaded)).replace("writes are refused", "writes refused")
            )
        if loaded.scan.torn:
            warnings.append(self._torn_warning(loaded, removed=False))
        return View(loaded.state, now, warnings)

    # -- writing --------------------------------------------------------------------------

    def _journal_for_writing(self) -> tuple[int, os.stat_result]:
        """Under the write lock: the journal open for appending (created if need be: its
        name is made durable before the first append, see `_name_journal`) and its status.
        One stat of P per transaction says whether the descriptor kept from the last one
        is still the journal there (a forked child opens its own)."""
        try:
            st = os.stat(self.paths.journal)
        except FileNotFoundError:
            st = None
        kept = self._journal
        if st is not None and kept is not None and kept.is_at(st):
            return kept.fd, st
        self._forget_journal()
        fd = self._open_journal(create=True)
        assert fd is not None
        opened = os.fstat(fd)
        self._journal = _OpenJournal(fd, os.getpid(), opened.st_dev, opened.st_ino)
        return fd, opened

    @contextmanager
    def _exclusive(self) -> Iterator[tuple[int, replay.Loaded, list[str]]]:
        """Hold the write lock with the journal open, the state current and the tail clean."""
        if self._journal is None:  # the first write of this process: the folder may be new
            ensure_folder(self.paths.folder, create=self.is_default)
        self._catch_up()
        with self._lock.exclusive(self._read_ahead):
            try:
                fd, st = self._journal_for_writing()
                warnings: list[str] = []
                mode_note = self._mode_warning(fd, st)
                if mode_note:
                    warnings.append(mode_note)
                loaded = self._refresh(fd, st)
                if loaded.scan.torn is not None:
                    warnings.append(self._torn_warning(loaded, removed=True))
                    if loaded.scan.torn.reason == replay.CRASH_TAIL:
                        set_aside(
                            self.paths,
                            fd,
                            loaded.scan.end,
                            loaded.scan.torn.line,
                            replay.CRASH_TAIL,
                            now=format_ts(self.clock()),
                            durable=self.durable,
                        )
                    fileio.truncate(fd, loaded.scan.end)
                    if self.durable:
                        fileio.sync(fd)
                    loaded.scan.torn = None
                    loaded = self._refresh(fd)
                yield fd, loaded, warnings
            except BaseException:
                # Whatever went wrong (a full disk, a journal swapped underneath), the next
                # transaction opens the journal afresh.
                self._forget_journal()
                raise

    def _read_ahead(self) -> None:
        """Between tries for the write lock: read what the holders appended meanwhile, so
        that this writer's turn (which every other writer waits for) has only the last
        holder's records left to read. With eight busy writers that was most of the time a
        writer held the lock (bench/ledger). Any doubt (a failed read) leaves it all to the
        refresh under the lock, which reloads from nothing."""
        kept, loaded = self._journal, self._loaded
        if kept is None or loaded is None or kept.pid != os.getpid():
            return
        try:
            replay.read_ahead(loaded, kept.fd, self.observe)
        except OSError:
            self._loaded = None

    @contextmanager
    def transaction(self) -> Iterator[Transaction]:
        """An all-or-nothing batch: records appended inside are written together on exit, or
        not at all if the block raises. Raises LedgerDamaged when the journal is damaged.
        When it returns, the records are durable (unless the ledger is not `durable`)."""
        pending: list[tuple[int, watermark.Mark]] = []
        try:
            with self._written(pending) as tx:
                yield tx
        finally:
            for fd, mark in pending:  # the lock is let go: other writers share this sync
                self._confirm(fd, mark)

    def _confirm(self, fd: int, mark: watermark.Mark) -> None:
        try:
            fileio.sync(fd)
        except OSError as exc:
            self._loaded = None
            # A failed sync's error is reported once per open file: open afresh, so that a
            # later sync on it cannot succeed over the lost pages.
            self._forget_journal()
            raise LedgerError(
                f"cannot confirm that the write to {self.paths.journal} is durable: "
                f"{exc.strerror}; run `gpupoolctl ledger verify`"
            ) from None
        # Left low, damage just above it would be cut to quarantine rather than refused:
        # the window a power cut leaves anyway (watermark.SYNC_SPAN), not a lost write.
        with suppress(OSError):
            self._watermark.advance(mark)

    @contextmanager
    def _written(self, pending: list[tuple[int, watermark.Mark]]) -> Iterator[Transaction]:
        with self._exclusive() as (fd, loaded, warnings):
            if loaded.damaged:
                raise self.damage_error(loaded)
            tx = Transaction(self, loaded.state, self.clock())
            tx.warnings.extend(warnings)
            try:
                yield tx
            except BaseException:
                if tx.records:  # the cached state already has them: forget it
                    self._loaded = None
                raise
            if not tx.records:
                return
            try:
                data = tx.encoded()
            except UnicodeEncodeError:
                self._loaded = None  # the cached state already has the records
                raise UsageError(_not_text(tx.records)) from None
            try:
                if self.durable:
                    self._name_journal(fd, loaded)
                fileio.append(fd, data)
            except OSError as exc:
                self._loaded = None
                with suppress(OSError):
                    fileio.truncate(fd, loaded.scan.end)
                raise LedgerError(f"cannot write {self.paths.journal}: {exc.strerror}") from None
            scan = loaded.scan
            if scan.first_offset is None:
                first = tx.records[0]
                scan.first_offset, scan.first_seq, scan.first_ts = scan.end, first["seq"], tx.now
            scan.last_ts = tx.now
            scan.tail = journal.last_line(data, scan.end)
            scan.end += len(data)
            scan.lines += len(tx.records)
            scan.records += len(tx.records)
            scan.last_seq = tx.records[-1]["seq"]
            loaded.size = scan.end  # the files' identity (loaded.ident) is as it was
            if self.autocompact and scan.records >= self.autocompact:
                if self.durable:  # compaction copies the journal: make it whole first
                    fileio.sync(fd)
                tx.warnings.extend(self._compact_after_write(fd, loaded))
            elif self.durable:
                dev, ino = loaded.ident[0], loaded.ident[1]
                pending.append((fd, watermark.Mark(dev, ino, loaded.snapshot_seq, scan.end)))

    def _name_journal(self, fd: int, loaded: replay.Loaded) -> None:
        """Under the write lock, before the first append to a journal the watermark does not
        name (one just created, or put in place by a compaction or repair killed before it
        named it): make the folder's names durable (the journal's, the snapshot's, the
        watermark's), sync what the journal holds, and name it in the watermark with all of
        that synced. Appending first would let a power cut take the journal's name away with
        records acknowledged in it, or leave damage in its unsynced records that no
        watermark tells from real damage (writes refused until `ledger repair`). Each
        process asks once per journal; the watermark names it until the next compaction or
        repair, which names the journal it puts in place."""
        journal_at = (loaded.ident[0], loaded.ident[1], loaded.snapshot_seq)
        if self._named == journal_at:
            return
        if not self._watermark.names(*journal_at):
            fileio.sync_dir(self.paths.folder)
            fileio.sync(fd)
            with suppress(OSError):  # left unnamed (an unwritable P.synced): only stricter
                self._watermark.reset(watermark.Mark(*journal_at, loaded.scan.end))
        self._named = journal_at

    def _compact_after_write(self, fd: int, loaded: replay.Loaded) -> list[str]:
        """Compact while still holding the write lock, once the live journal holds
        `autocompact` records, so that reading never has to replay more than that. The
        transaction is already durable: a failure here is a warning, and the ledger stays
        readable whichever step it stopped at (see snapshot.compact)."""
        try:
            result = snapshot.compact(
                self.paths,
                fd,
                loaded,
                durable=self.durable,
                actor=self.actor,
                now=format_ts(self.clock()),
            )
            self._mark_whole(result["seq"] if result["compacted"] else loaded.snapshot_seq)
        except (OSError, LedgerError) as exc:
            return [
                f"{self.paths.journal}: automatic compaction failed ({exc}); the write itself "
                "is recorded; run `gpupoolctl ledger compact`"
            ]
        finally:
            self._loaded = None
        return []

    def write(self, build: Callable[[Transaction], Any]) -> Done:
        """Run `build` inside a transaction; returns its value, the records and warnings."""
        with self.transaction() as tx:
            value = build(tx)
        return Done(value, tx.records, tx.warnings)

    # -- operations -----------------------------------------------------------------------

    def refresh_slices(
        self,
        hosts: list[str],
        slices: list[dict[str, Any]],
        pids: dict[str, list[int]] | None = None,
    ) -> Done:
        """Replace the slices of `hosts` with `slices`; writes only when something changed.
        The hosts answered (their facts are these): one recorded silent answers again. A
        card read as lost keeps the slices known of it, marked lost. `pids` (slice id ->
        the pids the nodes show there): the slices where some process is not the ledger's
        (ledger.slices.accounted_by, decided under the lock) are marked `stray_pids`."""
        from gpupoolctl.ledger.slices import accounted_by, keep_lost_cards, mark_strays

        def build(tx: Transaction) -> bool:
            wanted = set(hosts)
            answering = sorted(wanted & set(tx.state.silent))
            for host in answering:
                tx.append("host", {"host": host, "state": "answering"})
            current = [s for s in tx.state.slices.values() if s["host"] in wanted]
            fresh = keep_lost_cards(slices, current)
            if pids is not None:
                fresh = mark_strays(fresh, pids, accounted_by(tx.state, tx.now))
            if sorted(current, key=lambda s: s["id"]) == sorted(fresh, key=lambda s: s["id"]):
                return bool(answering)
            tx.append("slices", {"hosts": sorted(wanted), "slices": fresh})
            return True

        return self.write(build)

    def refresh_from_facts(self, results: Iterable[Any]) -> Done:
        """Record the slices of every host whose facts came back (HostResult-like: .name,
        .ok, .data), with the processes the nodes show on them; hosts that failed keep the
        slices recorded before."""
        from gpupoolctl.ledger.slices import slices_and_pids

        good = [r for r in results if r.ok]
        slices: list[dict[str, Any]] = []
        pids: dict[str, list[int]] = {}
        for result in good:  # each host's facts read once for both
            host_slices, host_pids = slices_and_pids(result.name, result.data)
            slices.extend(host_slices)
            pids.update(host_pids)
        return self.refresh_slices([r.name for r in good], slices, pids)

    def alloc(
        self,
        choose: Callable[[State, str], Sequence[str]],
        *,
        owner: str,
        ttl: timedelta | None = None,
        request: Mapping[str, Any] | None = None,
    ) -> Done:
        """Hold the slices `choose(state, now)` names: one record. Placement is sched's
        (gpupoolctl.sched.alloc.choose); it runs here, under the lock, so that two allocs at once
        never pick the same slice, and whatever it raises (NothingFits, exit 5) aborts the
        write. `request` is kept in the record as given."""

        def build(tx: Transaction) -> Allocation:
            chosen = self._free_slices(tx, choose(tx.state, tx.now))
            alloc_id = f"a-{tx.next_seq}"
            expires = format_ts(tx.moment + ttl) if ttl else None
            tx.append(
                "alloc",
                {
                    "id": alloc_id,
                    "owner": owner,
                    "slices": [s["id"] for s in chosen],
                    "uuids": [s.get("uuid") for s in chosen],
                    "expires": expires,
                    "request": dict(request or {}),
                },
            )
            return tx.state.allocations[alloc_id]

        return self.write(build)

    @staticmethod
    def _free_slices(tx: Transaction, ids: Sequence[str]) -> list[dict[str, Any]]:
        # The ledger's own invariant, whoever chose: no slice is held beyond its capacity.
        if not ids:
            raise LedgerError("alloc: no slice chosen")
        if len(set(ids)) != len(ids):
            raise LedgerError(f"alloc: a slice chosen twice ({', '.join(ids)})")
        chosen = []
        for slice_id in ids:
            entry = tx.state.slices.get(slice_id)
            if entry is None:
                raise LedgerError(f"alloc: unknown slice {slice_id!r}")
            if not tx.state.has_room(slice_id, tx.now):
                held = tx.state.holders_of(slice_id, tx.now)
                named = ", ".join(f"{a} ({tx.state.allocations[a].owner})" for a in held)
                raise LedgerError(f"alloc: {slice_id} is held by {named}")
            if tx.state.slice_state(slice_id, tx.now) == "re-cutting":
                raise LedgerError(f"alloc: {slice_id} is on a card being re-cut")
            if tx.state.drained(entry) is not None:
                raise LedgerError(f"alloc: {slice_id} is drained")
            chosen.append(entry)
        return chosen

    def release(self, alloc_id: str, *, user: str | None = None, admin: bool = False) -> Done:
        """End an allocation taken by hand (`alloc`). A job's allocation is refused: it ends
        with the job (reaped or cancelled), or the slice would run two jobs at once.

        With `user` (who acts), only the allocation's owner or a pool admin (`admin`) may
        end it, checked in the transaction that records the release (policy.ownership);
        an admin's release of another user's allocation is recorded `"as_admin": true`.
        None: no check (library callers that end what they hold)."""

        def build(tx: Transaction) -> Allocation:
            alloc = tx.state.allocations.get(alloc_id)
            if alloc is None and alloc_id in tx.state.quarantined:
                return _release_quarantined(tx, alloc_id, user, admin)
            if alloc is None or alloc.expired(tx.now):
                raise LedgerError(self._not_held(tx.state, alloc_id, alloc))
            job = tx.state.job_holding(alloc_id)
            if job is not None:
                raise LedgerError(
                    f"{alloc_id} is the allocation of {job['state']} job {job['id']}: it is "
                    f"released when the job ends; to stop the job, `gpupoolctl cancel {job['id']}` "
                    "(`cancel --forget` when its node is gone for good)"
                )
            data: dict[str, Any] = {"id": alloc_id}
            if user is not None:
                refused = refusal(
                    "release", "allocation", alloc_id, alloc.owner, user=user, admin=admin
                )
                if refused:
                    raise NotOwner(refused)
                if as_admin(alloc.owner, user=user, admin=admin):
                    data["as_admin"] = True
            tx.append("release", data)
            return alloc

        return self.write(build)

    def _not_held(self, state: State, alloc_id: str, alloc: Allocation | None) -> str:
        if alloc is not None:
            return f"{alloc_id} has expired (at {alloc.expires}); its slices are free already"
        how = state.closed.get(alloc_id)
        if how == "release":
            return f"{alloc_id} was already released"
        if how == "expiry":
            return f"{alloc_id} has expired; its slices are free already"
        snap_seq = self._loaded.snapshot_seq if self._loaded else 0
        number = alloc_id[2:] if alloc_id.startswith("a-") else ""
        if number.isdigit() and 0 < int(number) <= snap_seq:
            return (
                f"{alloc_id} is not held: released or expired before the last compaction "
                "(see `gpupoolctl ledger show --all`)"
            )
        return f"unknown allocation {alloc_id!r} (see `gpupoolctl pool` for current holds)"

    # -- history, checks, maintenance ------------------------------------------------------

    def history(
        self,
        *,
        since_seq: int | None = None,
        since_ts: str | None = None,
        ops: set[str] | None = None,
        everything: bool = False,
    ) -> History:
        """Records, oldest first. Archives are read when `everything` or when `since` reaches
        back before the last compaction; otherwise only the live journal."""
        keep = matcher(since_seq, since_ts, ops)
        out: list[dict[str, Any]] = []
        warnings: list[str] = []
        if not self.paths.exists():
            self._check_can_exist()
            return History(out, 0, warnings)
        with self._lock.shared():
            snap = snapshot.read(self.paths)
            base = snap.seq if snap else 0
            chosen = archives_needed(snap, since_seq, since_ts, everything)
            for entry in chosen:
                read_archive(self.paths, entry, keep, out, warnings)
            fd = self._open_journal(create=False)
            if fd is not None:
                live: list[tuple[int, dict[str, Any]]] = []  # (offset, record)
                try:
                    with open(fd, "rb", closefd=False) as stream:
                        scan = journal.scan(
                            journal.iter_lines(stream),
                            last_seq=base,
                            snapshot_seq=base,
                            on_record=lambda r, _l, o: live.append((o, r)) if keep(r) else None,
                        )
                    # A crash's unsynced tail was never acknowledged: not history.
                    cut = replay.crash_tail_start(self.paths, fd, scan, base)
                finally:
                    os.close(fd)
                if cut is not None:
                    live = [(offset, record) for offset, record in live if offset < cut]
                    warnings.append(
                        f"{self.paths.journal}: records from byte {cut} on left out: "
                        f"{replay.CRASH_TAIL} (the next write removes them)"
                    )
                out.extend(record for _, record in live)
                for bad in scan.bad:
                    if cut is None or bad.offset < cut:
                        warnings.append(f"{self.paths.journal}:{bad.line}: skipped damaged record")
        skipped = sum(int(e.get("records", 0)) for e in (snap.archives if snap else []))
        skipped -= sum(int(e.get("records", 0)) for e in chosen)
        return History(out, skipped, warnings)

    def verify(self, *, deep: bool = False) -> Report:
        """Check everything under a shared lock; never writes. A ledger named explicitly
        that is not there is an error, never "ok" (a mistyped path must not pass a check);
        the default one not written yet is reported as such (`Report.exists`)."""
        if not self.paths.exists():
            if not self.is_default:
                raise self._missing("nothing to verify")
            self._check_can_exist()
            return Report(path=str(self.paths.journal), exists=False)
        with self._lock.shared():
            fd = self._open_journal(create=False)
            try:
                try:
                    loaded = replay.load(self.paths, fd)
                except LedgerDamaged as exc:
                    report = Report(path=str(self.paths.journal))
                    report.problems.append(
                        Problem("snapshot", str(self.paths.snapshot), exc.detail)
                    )
                    return report
                torn = loaded.size - loaded.scan.torn.offset if loaded.scan.torn else 0
                return check(self.paths, loaded, torn, deep=deep)
            finally:
                if fd is not None:
                    os.close(fd)

    def compact(self) -> Done:
        """Snapshot + archive; refuses a damaged journal (repair first)."""
        with self._exclusive() as (fd, loaded, warnings):
            if loaded.damaged:
                raise self.damage_error(loaded)
            now = format_ts(self.clock())
            result = snapshot.compact(
                self.paths, fd, loaded, durable=self.durable, actor=self.actor, now=now
            )
            self._mark_whole(result["seq"] if result["compacted"] else loaded.snapshot_seq)
            self._loaded = None
        return Done(result, [], warnings)

    def _mark_whole(self, snapshot_seq: int) -> None:
        """The journal now at P was written whole and synced (compaction, repair): tell the
        watermark, so that damage anywhere in it later counts as real. Under the lock."""
        if not self.durable:
            return
        with suppress(OSError):  # left unknown, recovery is only stricter
            st = os.stat(self.paths.journal)
            self._watermark.reset(watermark.Mark(st.st_dev, st.st_ino, snapshot_seq, st.st_size))

    def repair(self) -> Done:
        """Quarantine damaged lines (and a torn tail), keep every good record."""
        ensure_folder(self.paths.folder, create=self.is_default)
        if not self.paths.exists():
            return Done(RepairResult(), [], [])
        with self._lock.exclusive():
            now = format_ts(self.clock())
            rebuilt = False
            if not snapshot_readable(self.paths):
                rebuild_snapshot(self.paths, durable=self.durable, actor=self.actor, now=now)
                rebuilt = True
            fd = self._open_journal(create=True)
            assert fd is not None
            try:
                loaded = replay.load(self.paths, fd)
                result = repair_journal(
                    self.paths, fd, loaded, durable=self.durable, actor=self.actor, now=now
                )
                if result.repaired:
                    self._mark_whole(loaded.snapshot_seq)
            finally:
                os.close(fd)
                self._loaded = None
        result.snapshot_rebuilt = rebuilt
        done = self.write(self._acknowledge_history)
        result.acknowledged = done.value
        result.repaired = result.repaired or rebuilt or bool(done.value)
        return Done(result, done.records, done.warnings)

    @staticmethod
    def _acknowledge_history(tx: Transaction) -> list[dict[str, Any]]:
        """Record that the history problems replay found are known (a release of what was
        not held, say, that older versions could write): verify is clean again and the
        journal keeps both the records and this repair naming them."""
        problems = [
            {"seq": p["seq"], "message": p["message"]}
            for p in tx.state.problems
            if any(p["message"].endswith(end) for end in KNOWABLE_PROBLEMS)
        ]
        if problems:
            tx.append("repair", {"acknowledged": problems})
        return problems
