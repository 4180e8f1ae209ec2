"""`ledger repair`: move damaged lines to P.quarantine, keep every good record, and record a
`repair` that declares the sequence numbers lost, so the journal verifies clean again.

A damaged snapshot is moved aside and rebuilt by replaying the archives.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.ledger import fileio, journal, snapshot
from gpupoolctl.ledger.errors import LedgerDamaged, LedgerError
from gpupoolctl.ledger.paths import FILE_MODE, LedgerPaths, write_atomic
from gpupoolctl.ledger.state import State


@dataclass
class RepairResult:
    repaired: bool = False
    quarantined: int = 0
    kept: int = 0
    torn_removed: bool = False
    snapshot_rebuilt: bool = False
    gaps: list[list[int]] = field(default_factory=list)
    quarantine: str | None = None
    # History problems (seq, message) that this repair recorded as known.
    acknowledged: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def rebuild_snapshot(paths: LedgerPaths, *, durable: bool, actor: str, now: str) -> None:
    """Replay every archive from seq 1 into a new snapshot; the damaged one is kept aside."""
    state = State()
    entries: list[dict[str, Any]] = []
    files = sorted(paths.archive_dir.glob("*.jsonl.gz")) if paths.archive_dir.is_dir() else []
    for target in files:
        with gzip.open(target, "rb") as stream:
            scan = journal.scan(
                journal.iter_lines(stream),
                last_seq=state.seq,
                on_record=lambda record, _l, _o: state.apply(record),
            )
        if (
            scan.bad
            or scan.torn
            or scan.undeclared_gaps()
            or scan.first_seq != (entries[-1]["last_seq"] + 1 if entries else 1)
        ):
            raise LedgerError(
                f"cannot rebuild {paths.snapshot}: archive {target} is damaged or out of order"
            )
        entries.append(
            {
                "file": target.name,
                "first_seq": scan.first_seq,
                "last_seq": scan.last_seq,
                "first_ts": scan.first_ts,
                "last_ts": scan.last_ts,
                "records": scan.records,
                "sha256": _sha256(target.read_bytes()),
            }
        )
    if paths.snapshot.exists():
        fileio.rename(paths.snapshot, paths.snapshot.with_name(paths.snapshot.name + ".damaged"))
    if entries:
        snapshot.write(
            paths,
            snapshot.Snapshot(state.seq, now, actor, state.to_dict(), entries),
            durable=durable,
        )


def _sha256(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def snapshot_readable(paths: LedgerPaths) -> bool:
    try:
        snapshot.read(paths)
    except LedgerDamaged:
        return False
    return True


def repair(
    paths: LedgerPaths, fd: int, loaded: Any, *, durable: bool, actor: str, now: str
) -> RepairResult:
    """Caller holds the write lock; `loaded` is a full load of the current files."""
    result = RepairResult()
    scan = loaded.scan
    gaps = loaded.undeclared_gaps()
    torn_size = loaded.size - scan.torn.offset if scan.torn else 0
    if not scan.bad and not gaps and not scan.torn:
        return result
    bad_lines = {bad.line: bad for bad in scan.bad}
    kept: list[bytes] = []
    quarantine: list[dict[str, Any]] = []
    with open(fd, "rb", closefd=False) as stream:
        stream.seek(0)
        for number, (offset, raw, terminated) in enumerate(journal.iter_lines(stream), 1):
            if scan.torn is not None and offset >= scan.torn.offset:
                quarantine.append(_entry(now, number, offset, raw, scan.torn.reason, None))
            elif number in bad_lines:
                bad = bad_lines[number]
                quarantine.append(_entry(now, number, offset, raw, bad.reason, bad.seq))
            elif terminated:
                kept.append(raw + b"\n")
    last_good = scan.last_seq
    hints = [b.seq for b in scan.bad if b.seq is not None and b.seq < 10**15]
    next_seq = max([last_good, *hints]) + 1
    # Declare what cannot come back: holes between good records, and seqs damaged lines may
    # have used after the last good one (so no id is ever handed out twice).
    declared = [[g.first, g.last] for g in gaps]
    if next_seq > last_good + 1:
        declared.append([last_good + 1, next_seq - 1])
    record = journal.encode(
        next_seq,
        now,
        actor,
        "repair",
        {
            "quarantined": len(quarantine),
            "lines": [q["line"] for q in quarantine],
            "file": paths.quarantine.name,
            "gaps": declared,
        },
    )
    if quarantine:
        _append_quarantine(paths, quarantine, durable=durable)
    write_atomic(paths.journal, b"".join(kept) + record, durable=durable)
    result.repaired = True
    result.quarantined = len(quarantine)
    result.kept = len(kept)
    result.torn_removed = scan.torn is not None and torn_size > 0
    result.gaps = declared
    result.quarantine = str(paths.quarantine) if quarantine else None
    return result


def set_aside(
    paths: LedgerPaths, fd: int, start: int, line0: int, reason: str, *, now: str, durable: bool
) -> int:
    """Copy the journal's lines from offset `start` (line `line0`) to P.quarantine before a
    writer cuts them: never acknowledged, but a person may want to see them."""
    entries = []
    with open(fd, "rb", closefd=False) as stream:
        stream.seek(start)
        for number, (offset, raw, _) in enumerate(journal.iter_lines(stream, start), line0):
            entries.append(_entry(now, number, offset, raw, reason, None))
    if entries:
        _append_quarantine(paths, entries, durable=durable)
    return len(entries)


def _entry(
    now: str, line: int, offset: int, raw: bytes, reason: str, seq: int | None
) -> dict[str, Any]:
    return {
        "quarantined_at": now,
        "line": line,
        "offset": offset,
        "reason": reason,
        "seq": seq,
        "text": raw.decode("utf-8", errors="replace"),
        "raw_b64": base64.b64encode(raw).decode("ascii"),
    }


def _append_quarantine(paths: LedgerPaths, entries: list[dict[str, Any]], *, durable: bool) -> None:
    data = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in entries).encode("utf-8")
    first_copy = not paths.quarantine.exists()
    fd = fileio.open_file(paths.quarantine, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        journal.append(fd, data, durable=durable)
    finally:
        os.close(fd)
    if first_copy and durable:  # the copy is kept only once its name is, before the cut
        fileio.sync_dir(paths.folder)
