"""Reading history: the live journal, and the archives when asked or when --since reaches
back before the last compaction."""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpupoolctl.ledger import journal
from gpupoolctl.ledger.paths import LedgerPaths
from gpupoolctl.ledger.snapshot import Snapshot, archive_path


@dataclass
class History:
    records: list[dict[str, Any]]
    archived: int  # records in archives that were not read
    warnings: list[str] = field(default_factory=list)


def matcher(
    since_seq: int | None, since_ts: str | None, ops: set[str] | None
) -> Callable[[dict[str, Any]], bool]:
    def keep(record: dict[str, Any]) -> bool:
        if since_seq is not None and record["seq"] < since_seq:
            return False
        if since_ts is not None and record["ts"] < since_ts:
            return False
        return ops is None or record["op"] in ops

    return keep


def archives_needed(
    snap: Snapshot | None, since_seq: int | None, since_ts: str | None, everything: bool
) -> list[dict[str, Any]]:
    if snap is None:
        return []
    if everything:
        return list(snap.archives)
    by_seq = since_seq is not None
    return [
        entry
        for entry in snap.archives
        if (by_seq and entry["last_seq"] >= since_seq)
        or (since_ts is not None and (entry.get("last_ts") or "") >= since_ts)
    ]


def read_archive(
    paths: LedgerPaths,
    entry: dict[str, Any],
    keep: Callable[[dict[str, Any]], bool],
    out: list[dict[str, Any]],
    warnings: list[str],
) -> journal.Scan | None:
    return scan_archive(paths, entry, lambda r: out.append(r) if keep(r) else None, warnings)


def scan_archive(
    paths: LedgerPaths,
    entry: dict[str, Any],
    on_record: Callable[[dict[str, Any]], None],
    warnings: list[str],
) -> journal.Scan | None:
    """Hand each good record of one archive to `on_record`; None when it cannot be read
    (the records before the failure were handed on)."""
    target = archive_path(paths, entry)
    try:
        with gzip.open(target, "rb") as stream:
            scan = journal.scan(
                journal.iter_lines(stream),
                last_seq=int(entry["first_seq"]) - 1,
                on_record=lambda record, _l, _o: on_record(record),
            )
    except (OSError, EOFError) as exc:
        warnings.append(f"{target}: cannot read archive: {exc}")
        return None
    for bad in scan.bad:
        warnings.append(f"{target}:{bad.line}: skipped damaged record: {bad.reason}")
    return scan


class Sink(Protocol):
    """What `replay_all` feeds: `start(state, seq)` (again, when history turns out to be
    incomplete: from the snapshot's state), then each record in seq order."""

    def start(self, state: dict[str, Any] | None, seq: int) -> None: ...

    def feed(self, record: dict[str, Any]) -> None: ...


def complete_archives(paths: LedgerPaths, snap: Snapshot) -> tuple[list[dict[str, Any]], str]:
    """The archives in seq order, and "" when they hold every record from seq 1 up to the
    snapshot; otherwise why not (an archive never kept, or its file gone)."""
    entries = sorted(snap.archives, key=lambda e: int(e["first_seq"]))
    if not entries or int(entries[0]["first_seq"]) != 1:
        return entries, "the archive of the oldest records was not kept"
    for entry in entries:
        if not archive_path(paths, entry).is_file():
            return entries, f"{archive_path(paths, entry)} is gone"
    return entries, ""


def replay_all(
    paths: LedgerPaths, snap: Snapshot | None, journal_fd: int | None, sink: Sink
) -> list[str]:
    """Every record the ledger still has, oldest first, into `sink`: the archives from seq 1,
    then the live journal, streamed (nothing is kept here). When the archives do not reach
    back to seq 1, or one cannot be read, the sink starts (over) from the snapshot's state
    and only the journal follows. Damaged records are skipped with a warning, as `ledger
    show` does. Returns the warnings. The caller holds the shared lock."""
    warnings: list[str] = []
    base = snap.seq if snap else 0
    entries, missing = complete_archives(paths, snap) if snap else ([], "")
    if snap is not None and missing:
        warnings.append(f"history before seq {base + 1} is incomplete: {missing}")
        sink.start(snap.state, base)
    else:
        sink.start(None, 0)
        previous = 0
        for entry in entries:
            first = int(entry["first_seq"])
            if first > previous + 1:
                warnings.append(
                    f"records {previous + 1}..{first - 1} are in no archive (lost to damage)"
                )
            scan = scan_archive(paths, entry, sink.feed, warnings)
            if scan is None or scan.torn is not None:
                if scan is not None:
                    warnings.append(f"{archive_path(paths, entry)}: ends in a torn record")
                assert snap is not None
                warnings.append(f"history before seq {base + 1} is incomplete")
                sink.start(snap.state, base)
                break
            previous = int(entry["last_seq"])
    if journal_fd is not None:
        with open(journal_fd, "rb", closefd=False) as stream:
            scan = journal.scan(
                journal.iter_lines(stream),
                last_seq=base,
                snapshot_seq=base,
                on_record=lambda r, _l, _o: sink.feed(r),
            )
        for bad in scan.bad:
            warnings.append(f"{paths.journal}:{bad.line}: skipped damaged record")
    return warnings


def replay_ledger(ledger: Any, sink: Sink) -> list[str]:
    """`replay_all` for a Ledger, under its shared lock (as `Ledger.history` reads): every
    record still kept into `sink`. A ledger not written yet is empty. Returns warnings."""
    from gpupoolctl.ledger.snapshot import read as read_snapshot

    if not ledger.paths.exists():
        ledger._check_can_exist()
        sink.start(None, 0)
        return []
    with ledger._lock.shared():
        snap = read_snapshot(ledger.paths)
        fd = ledger._open_journal(create=False)
        try:
            return replay_all(ledger.paths, snap, fd, sink)
        finally:
            if fd is not None:
                os.close(fd)
