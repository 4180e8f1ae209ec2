"""The snapshot: the state at one seq plus the list of archived journals, in one checksummed
JSON line, replaced atomically (temp, fsync, rename, fsync folder).

Compaction: archive the journal's records (gzip, written atomically), write the snapshot,
then swap in an empty journal. A crash between steps leaves a readable ledger: records that
are already in the snapshot are skipped when the old journal is still there.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import zlib
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

from gpupoolctl.hw import sharing
from gpupoolctl.ledger import fileio
from gpupoolctl.ledger.errors import LedgerDamaged
from gpupoolctl.ledger.paths import LedgerPaths, write_atomic
from gpupoolctl.ledger.units import format_ts, parse_ts

SNAPSHOT_FORMAT = 1
_CRC_KEY = b',"crc":"'
# Finished jobs a snapshot keeps: those of the last week, at most this many (the newest).
FINISHED_KEEP = timedelta(days=7)
FINISHED_KEEP_MAX = 10_000


@dataclass
class Snapshot:
    seq: int
    ts: str
    actor: str
    state: dict[str, Any]
    archives: list[dict[str, Any]] = field(default_factory=list)


def read(paths: LedgerPaths) -> Snapshot | None:
    try:
        raw = paths.snapshot.read_bytes()
    except FileNotFoundError:
        return None
    line = raw.rstrip(b"\n")
    cut = line.rfind(_CRC_KEY)
    ok = cut >= 0 and line[cut + len(_CRC_KEY) : -2] == b"%08x" % zlib.crc32(line[:cut])
    if not ok:
        raise LedgerDamaged(
            str(paths.snapshot),
            1,
            "snapshot checksum mismatch; `gpupoolctl ledger repair` "
            "rebuilds it from the archive and the journal",
        )
    try:
        body = json.loads(line)
        return Snapshot(
            seq=int(body["seq"]),
            ts=str(body["ts"]),
            actor=str(body["actor"]),
            state=body["state"],
            archives=list(body.get("archives", [])),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise LedgerDamaged(str(paths.snapshot), 1, f"snapshot unreadable: {exc}") from None


def write(paths: LedgerPaths, snap: Snapshot, *, durable: bool) -> None:
    body = {
        "format": SNAPSHOT_FORMAT,
        "seq": snap.seq,
        "ts": snap.ts,
        "actor": snap.actor,
        "archives": snap.archives,
        "state": snap.state,
    }
    head = json.dumps(body, separators=(",", ":"), ensure_ascii=False)[:-1].encode("utf-8")
    write_atomic(paths.snapshot, b'%s,"crc":"%08x"}\n' % (head, zlib.crc32(head)), durable=durable)


def write_archive(
    paths: LedgerPaths, fd: int, start: int, end: int, first: int, last: int, *, durable: bool
) -> dict[str, Any]:
    """Copy journal bytes [start, end) into P.archive/<first>-<last>.jsonl.gz, atomically."""
    folder = paths.archive_dir
    if not folder.is_dir():
        with suppress(FileExistsError):
            fileio.make_dir(folder, sharing.dir_mode(folder.parent))
        if durable:
            fileio.sync_dir(folder.parent)
    name = f"{first:012d}-{last:012d}.jsonl.gz"
    target = folder / name
    digest = hashlib.sha256()
    out_fd, tmp = fileio.create_temp(folder, f".{name}.")
    os.fchmod(out_fd, sharing.file_mode(folder))  # as replace_file does: mkstemp makes 0600
    try:
        try:
            with gzip.GzipFile(
                filename="", mode="wb", fileobj=fileio.Appender(out_fd), compresslevel=3, mtime=0
            ) as packed:
                offset = start
                while offset < end:
                    chunk = os.pread(fd, min(4 << 20, end - offset), offset)
                    if not chunk:
                        break
                    packed.write(chunk)
                    offset += len(chunk)
            if durable:
                fileio.sync(out_fd)
        finally:
            os.close(out_fd)
        fileio.rename(tmp, target)
    except BaseException:
        with suppress(OSError):
            fileio.unlink(tmp)
        raise
    if durable:
        fileio.sync_dir(folder)
    with open(target, "rb") as packed_file:
        for block in iter(lambda: packed_file.read(1 << 20), b""):
            digest.update(block)
    return {"file": name, "first_seq": first, "last_seq": last, "sha256": digest.hexdigest()}


def archive_path(paths: LedgerPaths, entry: dict[str, Any]) -> Path:
    return paths.archive_dir / str(entry["file"])


def compact(
    paths: LedgerPaths, fd: int, loaded: Any, *, durable: bool, actor: str, now: str
) -> dict[str, Any]:
    """Fold the journal into a new snapshot and archive its records. Caller holds the write
    lock, and the journal is undamaged with its torn tail (if any) already cut."""
    scan = loaded.scan
    archives = list(loaded.snap.archives) if loaded.snap else []
    result: dict[str, Any] = {
        "compacted": False,
        "records": scan.records,
        "seq": loaded.state.seq,
        "archive": None,
        "snapshot": str(paths.snapshot),
    }
    if scan.records:
        entry = write_archive(
            paths,
            fd,
            scan.first_offset,
            scan.end,
            scan.first_seq,
            scan.last_seq,
            durable=durable,
        )
        entry.update(first_ts=scan.first_ts, last_ts=scan.last_ts, records=scan.records)
        archives.append(entry)
        state = loaded.state.to_dict()
        since = format_ts(parse_ts(now) - FINISHED_KEEP)
        state["finished"] = loaded.state.recent_finished(since, FINISHED_KEEP_MAX)
        write(
            paths,
            Snapshot(seq=loaded.state.seq, ts=now, actor=actor, state=state, archives=archives),
            durable=durable,
        )
        result.update(compacted=True, archive=str(archive_path(paths, entry)))
    if scan.records or scan.skipped:
        # Last step: until this rename the old journal is still there, and a reader skips
        # the records the snapshot already holds.
        write_atomic(paths.journal, b"", durable=durable)
    return result
