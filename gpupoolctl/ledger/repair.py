"""`ledger repair`: move damaged lines to P.quarantine, keep every good record, and record a
`repair` that declares the sequence numbers lost, so the journal verifies clean again.

A damaged snapshot is moved aside and rebuilt by replaying the archives.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.hw import sharing
from gpupoolctl.ledger import fileio, journal, snapshot
from gpupoolctl.ledger.errors import LedgerDamaged, LedgerError
from gpupoolctl.ledger.paths import LedgerPaths, write_atomic
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
    # Live holds whose `alloc` record was among the quarantined lines ({id, owner, slices,
    # seq}): their slices stay out of placement until a pool admin releases them.
    holds: list[dict[str, Any]] = field(default_factory=list)

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
    holds = live_holds(
        [q["raw_b64"] for q in quarantine if q["line"] in bad_lines], loaded.state, now
    )
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
            **({"holds": holds} if holds else {}),
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
    result.holds = holds
    return result


def live_holds(damaged: list[str], state: State, now: str) -> list[dict[str, Any]]:
    """The holds among damaged lines (base64 of their bytes) that were live: an `alloc`
    record whose id, owner and slices can still be read, that no good record ended (a later
    release or expiry of it would be a replay problem naming it), not expired by `now`;
    its slices that no live allocation holds now. {id, owner, slices, seq} each."""
    ended = {str(p.get("alloc")) for p in state.problems if p.get("alloc")}
    found = []
    for text in damaged:
        hold = _salvage_alloc(base64.b64decode(text).decode("utf-8", errors="replace"))
        if hold is None or hold["id"] in ended or hold["id"] in state.allocations:
            continue
        if hold.get("expires") and str(hold["expires"]) <= now:
            continue
        if not re.fullmatch(r"a-\d+", hold["id"]):
            continue
        free = [s for s in hold["slices"] if s in state.slices and state.holder(s, now) is None]
        if free:
            # Read from a damaged line: one printable line, however it was damaged.
            owner = "".join(c if c.isprintable() else "?" for c in hold["owner"])[:64]
            kept = {"id": hold["id"], "owner": owner, "slices": free, "seq": hold["seq"]}
            found.append(kept)
    return found


_FIELD = r'"{}"\s*:\s*'


def _salvage_alloc(text: str) -> dict[str, Any] | None:
    """What a damaged line says of an `alloc` record, or None: as JSON when it still parses
    (a checksum that no longer matches), else read field by field."""
    try:
        record = json.loads(text)
    except ValueError:
        record = None
    if isinstance(record, dict) and isinstance(record.get("data"), dict):
        data = record["data"]
        if record.get("op") != "alloc" or not isinstance(data.get("slices"), list):
            return None
        return {
            "id": str(data.get("id") or f"a-{record.get('seq')}"),
            "owner": str(data.get("owner") or "?"),
            "slices": [str(s) for s in data["slices"]],
            "seq": record.get("seq") if isinstance(record.get("seq"), int) else None,
            "expires": data.get("expires"),
        }
    if not re.search(_FIELD.format("op") + r'"alloc"', text):
        return None
    found = {
        key: re.search(_FIELD.format(key) + pattern, text)
        for key, pattern in (
            ("id", r'"(a-\d+)"'),
            ("owner", r'"([^"\\]*)"'),
            ("slices", r"\[([^\]]*)\]"),
            ("seq", r"(\d+)"),
        )
    }
    if found["id"] is None or found["slices"] is None:
        return None
    slices = re.findall(r'"([^"\\]+)"', found["slices"].group(1))
    owner, seq = found["owner"], found["seq"]
    return {
        "id": found["id"].group(1),
        "owner": owner.group(1) if owner else "?",
        "slices": slices,
        "seq": int(seq.group(1)) if seq else None,
        "expires": None,
    }


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
    mode = sharing.file_mode(paths.folder)
    fd = fileio.open_file(paths.quarantine, os.O_WRONLY | os.O_APPEND | os.O_CREAT, mode)
    try:
        journal.append(fd, data, durable=durable)
    finally:
        os.close(fd)
    if first_copy and durable:  # the copy is kept only once its name is, before the cut
        fileio.sync_dir(paths.folder)
