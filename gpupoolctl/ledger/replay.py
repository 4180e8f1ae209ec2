"""Snapshot + journal -> State, and keeping that up to date cheaply.

A long-lived process (a scheduler, the benchmark) re-reads only the bytes appended since its
last look; a full reload happens when the journal or snapshot was replaced (compaction,
repair) or when damage was seen.

Most of the reading happens without the lock (`catch_up`, `read_ahead`): a new reader's
replay of the whole journal would otherwise hold the lock every writer waits for. What was
read that way is a guess that the refresh under the lock confirms or throws away: the same
files (identity), at least as long, and the last line read still there, byte for byte (a
writer whose append failed cuts the journal back, and the next may write other records
where those were).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gpupoolctl.ledger import copies, journal, snapshot, watermark
from gpupoolctl.ledger.errors import LedgerDamaged
from gpupoolctl.ledger.paths import LedgerPaths
from gpupoolctl.ledger.state import State

Ident = tuple[Any, ...]
# Told of every record just before it is applied, with the state as it was then: how a live
# view (`gpupoolctl top`) follows the ledger without parsing the journal a second time. A
# full reload (compaction, repair, a cut tail) starts again from a new State and tells again.
Observer = Callable[[dict[str, Any], State], None]

CRASH_TAIL = (
    "damaged after the last write known to be synced: left by an interrupted writer before "
    "its sync, so never acknowledged"
)


@dataclass
class Loaded:
    state: State
    snap: snapshot.Snapshot | None
    scan: journal.Scan
    ident: Ident
    size: int
    # Some of `scan` was read without the lock: the refresh under the lock checks its last
    # line (scan.tail) before trusting it.
    unlocked: bool = False

    @property
    def snapshot_seq(self) -> int:
        return self.snap.seq if self.snap else 0

    def undeclared_gaps(self) -> list[journal.Gap]:
        return self.scan.undeclared_gaps()

    @property
    def damaged(self) -> bool:
        return bool(self.scan.bad or self.undeclared_gaps())


def _ident(
    paths: LedgerPaths, fd: int | None, st: os.stat_result | None = None
) -> tuple[Ident, int]:
    """The files' identity and the journal's size; `st`: the journal's status if the
    caller has it already (under the write lock nothing else changes it)."""
    if fd is None:
        journal_part: Ident = (None,)
        size = 0
    else:
        st = st if st is not None else os.fstat(fd)
        journal_part, size = (st.st_dev, st.st_ino), st.st_size
    try:
        snap = os.stat(paths.snapshot)
        snap_part: Ident = (snap.st_ino, snap.st_mtime_ns, snap.st_size)
    except FileNotFoundError:
        snap_part = (None,)
    return (*journal_part, *snap_part), size


def load(paths: LedgerPaths, fd: int | None, observe: Observer | None = None) -> Loaded:
    """Read everything: the snapshot (LedgerDamaged if its checksum fails) and the journal.

    Damage above the durable watermark (see watermark.py) is the unacknowledged tail a
    crash left: it comes back as `scan.torn`, with the state of the records before it."""
    return _settled(_load(paths, fd, observe=observe), paths, fd, observe)


def _applier(state: State, observe: Observer | None) -> Callable[[dict[str, Any], int, int], None]:
    if observe is None:
        return lambda record, _line, _offset: state.apply(record)

    def apply(record: dict[str, Any], _line: int, _offset: int) -> None:
        observe(record, state)
        state.apply(record)

    return apply


def _load(
    paths: LedgerPaths,
    fd: int | None,
    stop: int | None = None,
    observe: Observer | None = None,
) -> Loaded:
    ident, size = _ident(paths, fd)
    snap = snapshot.read(paths)
    state = State.from_dict(snap.state) if snap else State()
    base = snap.seq if snap else 0
    if fd is None:
        scan = journal.Scan(end=0, lines=0, last_seq=base)
    else:
        with open(fd, "rb", closefd=False) as stream:
            stream.seek(0)
            scan = journal.scan(
                journal.iter_lines(stream, 0, stop),
                last_seq=base,
                snapshot_seq=base,
                on_record=_applier(state, observe),
            )
    return Loaded(state=state, snap=snap, scan=scan, ident=ident, size=size)


def crash_tail_start(
    paths: LedgerPaths, fd: int, scan: journal.Scan, snapshot_seq: int
) -> int | None:
    """Where the unacknowledged tail a crash left begins: the offset of the first damage in
    `scan` when it lies at or above the durable watermark; None when nothing is damaged or
    the damage is on bytes a completed sync covered (real damage)."""
    starts = [bad.offset for bad in scan.bad] + [gap.offset for gap in scan.undeclared_gaps()]
    if not starts:
        return None
    first = min(starts)
    ident = _ident(paths, fd)[0]
    durable = watermark.durable_end(paths, ident[0], ident[1], snapshot_seq)
    return None if durable is None or first < durable else first


def _settled(
    loaded: Loaded, paths: LedgerPaths, fd: int | None, observe: Observer | None = None
) -> Loaded:
    """`loaded`, or where its first damage lies above the watermark, the journal read up to
    that damage with the rest as a torn tail (the next writer cuts it)."""
    if fd is None or not loaded.damaged:
        return loaded
    first = crash_tail_start(paths, fd, loaded.scan, loaded.snapshot_seq)
    if first is None:
        return loaded
    cut = _load(paths, fd, stop=first, observe=observe)
    scan = cut.scan
    scan.torn = journal.Torn(scan.lines + 1, scan.end, -1, CRASH_TAIL)
    return cut


def refresh(
    loaded: Loaded | None,
    paths: LedgerPaths,
    fd: int | None,
    observe: Observer | None = None,
    st: os.stat_result | None = None,
) -> Loaded:
    """Bring `loaded` up to date with the files, reading only what was appended if possible
    (`st`: the journal's status, when the caller has just taken it under the write lock)."""
    ident, size = _ident(paths, fd, st)
    if (
        loaded is None
        or fd is None
        or ident != loaded.ident
        or size < loaded.scan.end
        or loaded.damaged
        or (loaded.unlocked and not _tail_intact(loaded, fd))
    ):
        return load(paths, fd, observe)
    loaded.unlocked = False
    if size == loaded.scan.end:
        loaded.scan.torn = None
        loaded.size = size
        return loaded
    _scan_appended(loaded, fd, size, observe)
    return _settled(loaded, paths, fd, observe)


def _tail_intact(loaded: Loaded, fd: int) -> bool:
    """Whether the journal still holds the last line `loaded` read, where it read it."""
    tail = loaded.scan.tail
    if tail is None:
        return loaded.scan.end == 0
    offset, crc = tail
    return journal.ends_with_line(os.pread(fd, loaded.scan.end - offset, offset), crc)


# Tries at an unlocked full read before leaving it to the lock: each fails only when a
# compaction or repair replaced a file while it read.
CATCH_UP_TRIES = 3


def catch_up(
    loaded: Loaded | None, paths: LedgerPaths, observe: Observer | None = None
) -> Loaded | None:
    """Before taking the lock: bring `loaded` (None: nothing read yet) up to what the files
    hold now, without the lock, and return the state to keep. The same files grown: only
    the new bytes are read. A first read, or files replaced (compaction, repair): snapshot
    and journal are read whole, then again if either was replaced meanwhile. The refresh
    under the lock then reads only what was appended since, and reloads if the files are
    not those read here (see the module's note). Damage, a missing or unreadable file, or a
    race lost CATCH_UP_TRIES times: `loaded` as it was, for the locked path to decide."""
    for _ in range(CATCH_UP_TRIES):
        try:
            fd = os.open(paths.journal, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return loaded
        try:
            ident, size = _ident(paths, fd)
            if loaded is not None and ident == loaded.ident:
                if size <= loaded.scan.end or loaded.damaged:
                    return loaded
                _scan_appended(loaded, fd, size, observe)
                loaded.unlocked = True
                if _still_current(paths, fd, ident):
                    return loaded
                continue  # compacted meanwhile: read the new files whole
            fresh, applied = _whole(paths, fd, ident, size, observe)
            if fresh.damaged:
                return loaded
            if _still_current(paths, fd, fresh.ident):
                fresh.unlocked = True
                if observe is None and applied >= KEEP_AFTER:
                    copies.keep(str(paths.journal), fresh.ident, fresh)
                return fresh
        except (OSError, LedgerDamaged):
            return loaded
        finally:
            os.close(fd)
    return loaded


# A handle that read this many records (a whole replay, or the tail after a copy) keeps a
# copy for the next new one: pickling costs about what applying a few hundred records does.
KEEP_AFTER = 500


def _whole(
    paths: LedgerPaths, fd: int, ident: Ident, size: int, observe: Observer | None
) -> tuple[Loaded, int]:
    """A new handle's first read of the files `ident` names, without the lock: a copy of
    the state another handle of this process read of them (copies) and the journal's bytes
    after it, or snapshot and journal whole; and how many records it applied. A follower
    (`observe`) hears every record, so it replays."""
    copied = None if observe is not None else copies.take(str(paths.journal), ident)
    if copied is not None and copied.scan.end <= size and not copied.damaged:
        seq = copied.state.seq
        if size > copied.scan.end:
            _scan_appended(copied, fd, size, None)
        return copied, copied.state.seq - seq
    fresh = _load(paths, fd, stop=size, observe=observe)
    return fresh, fresh.scan.records


def _still_current(paths: LedgerPaths, fd: int, ident: Ident) -> bool:
    """After a read without the lock: whether the files are still those `ident` names
    (the snapshot as it was, the journal `fd` still the file at P), so that neither was
    replaced while it was read."""
    st = os.stat(paths.journal)
    return _ident(paths, fd)[0] == ident and (st.st_dev, st.st_ino) == ident[:2]


def read_ahead(loaded: Loaded, fd: int, observe: Observer | None = None) -> None:
    """Outside the write lock, while a writer waits for it: apply the whole records appended
    to this journal since `loaded` last read it, so that under the lock only the last
    holder's are left to read. Only the plain case (the same file, grown, nothing damaged so
    far); anything else, a journal replaced or damage, is left to `refresh` under the lock,
    which checks the files' identity again and reloads when they changed. A record half
    written by the holder is not read: the scan stops before an unterminated line or an
    unfinished batch, and the next read starts there."""
    if loaded.damaged:
        return
    st = os.fstat(fd)
    if (st.st_dev, st.st_ino) != loaded.ident[:2] or st.st_size <= loaded.scan.end:
        return
    _scan_appended(loaded, fd, st.st_size, observe)
    loaded.unlocked = True


def _scan_appended(loaded: Loaded, fd: int, size: int, observe: Observer | None) -> None:
    """Apply the records between what `loaded` has read and `size` to its state and scan."""
    state = loaded.state
    fresh = os.pread(fd, size - loaded.scan.end, loaded.scan.end)
    more = journal.scan(
        journal.iter_buffer(fresh, loaded.scan.end),
        start=loaded.scan.end,
        line0=loaded.scan.lines,
        last_seq=loaded.scan.last_seq,
        snapshot_seq=loaded.snapshot_seq,
        on_record=_applier(state, observe),
    )
    old = loaded.scan
    old.declared.extend(more.declared)
    old.bad.extend(more.bad)
    old.gaps.extend(more.gaps)
    old.torn = more.torn
    old.tail = more.tail or old.tail
    old.records += more.records
    if old.first_offset is None:
        old.first_offset, old.first_seq, old.first_ts = (
            more.first_offset,
            more.first_seq,
            more.first_ts,
        )
    old.last_ts = more.last_ts or old.last_ts
    old.end, old.lines, old.last_seq = more.end, more.lines, more.last_seq
    loaded.size = size
