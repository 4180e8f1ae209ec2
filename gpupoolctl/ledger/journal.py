"""The journal: one JSON object per line, each ending in a checksum of the bytes before it.

    {"v":1,"seq":12,"ts":"2025-06-01T12:00:00.123Z","actor":"alice@ws1","op":"alloc",
     "data":{...},"crc":"1c291ca3"}

`crc` is CRC-32 (zlib) of the line's bytes up to, not including, `,"crc":`, as 8 lower-case
hex digits; it is always the last key, so a reader checks a line without re-serialising it.
Records written by one command share `"batch":[i,n]` (1-based) and count only when all n are
present: a command's changes land all together or not at all.

This module knows bytes and lines only; what the records mean is state.py's business.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

from gpupoolctl.ledger import fileio

FORMAT_VERSION = 1
_CRC_KEY = b',"crc":"'
_CHUNK = 4 << 20

Record = dict[str, Any]


class BadRecord(ValueError):
    """A line that is not a well-formed, checksummed record."""


def encode(
    seq: int,
    ts: str,
    actor: str,
    op: str,
    data: dict[str, Any],
    batch: tuple[int, int] | None = None,
) -> bytes:
    body: dict[str, Any] = {"v": FORMAT_VERSION, "seq": seq, "ts": ts, "actor": actor, "op": op}
    if batch is not None:
        body["batch"] = [batch[0], batch[1]]
    body["data"] = data
    # allow_nan=False: Infinity/NaN are not JSON, and jq or another reader would choke.
    text = json.dumps(body, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    head = text[:-1].encode("utf-8")  # without the closing brace
    return b'%s,"crc":"%08x"}\n' % (head, zlib.crc32(head))


def decode(line: bytes) -> Record:
    """One line (without its newline) -> the record, or BadRecord saying what is wrong."""
    cut = line.rfind(_CRC_KEY)
    if cut < 0 or len(line) != cut + len(_CRC_KEY) + 10 or not line.endswith(b'"}'):
        raise BadRecord("no checksum at the end of the line (torn or edited)")
    want = line[cut + len(_CRC_KEY) : cut + len(_CRC_KEY) + 8]
    if b"%08x" % zlib.crc32(line[:cut]) != want:
        raise BadRecord("checksum mismatch (damaged or edited)")
    try:
        record = json.loads(line)
    except ValueError as exc:
        raise BadRecord(f"not JSON: {exc}") from None
    if not isinstance(record, dict):
        raise BadRecord("not a JSON object")
    if not isinstance(record.get("seq"), int) or record["seq"] < 1:
        raise BadRecord("seq missing or not a positive integer")
    for key in ("ts", "actor", "op"):
        if not isinstance(record.get(key), str):
            raise BadRecord(f"{key} missing or not a string")
    if not isinstance(record.get("data"), dict):
        raise BadRecord("data missing or not an object")
    batch = record.get("batch")
    if batch is not None and not (
        isinstance(batch, list)
        and len(batch) == 2
        and all(isinstance(x, int) for x in batch)
        and 1 <= batch[0] <= batch[1]
    ):
        raise BadRecord("batch must be [i, n] with 1 <= i <= n")
    return record


@dataclass
class BadLine:
    line: int  # 1-based line number in the file
    offset: int
    length: int  # bytes, without the newline
    reason: str
    seq: int | None = None  # read from the damaged text when possible (may be wrong)


@dataclass
class Torn:
    """The unfinished end of the file: an unterminated last line and/or an incomplete batch."""

    line: int
    offset: int
    length: int
    reason: str


@dataclass
class Gap:
    first: int  # missing seqs first..last, noticed at `line` (which starts at `offset`)
    last: int
    line: int
    offset: int = -1


@dataclass
class Scan:
    end: int  # offset just after the last committed record
    lines: int  # lines up to `end`
    last_seq: int
    records: int = 0
    skipped: int = 0  # records already in the snapshot (left by an interrupted compaction)
    first_offset: int | None = None  # where the first record after the snapshot starts
    first_seq: int | None = None
    first_ts: str | None = None
    last_ts: str | None = None
    bad: list[BadLine] = field(default_factory=list)
    gaps: list[Gap] = field(default_factory=list)
    declared: list[tuple[int, int]] = field(default_factory=list)  # from `repair` records
    torn: Torn | None = None
    # (offset, crc) of the line that ends at `end`: lets a reader check that the bytes it
    # read without the lock are still there (replay.refresh).
    tail: tuple[int, str] | None = None

    def undeclared_gaps(self, declared: Iterable[tuple[int, int]] = ()) -> list[Gap]:
        ranges = [*self.declared, *declared]
        return [g for g in self.gaps if not any(a <= g.first and g.last <= b for a, b in ranges)]


def iter_lines(
    stream: BinaryIO, start: int = 0, stop: int | None = None
) -> Iterator[tuple[int, bytes, bool]]:
    """(offset, line without newline, terminated) for every line from `start` (the stream's
    position) up to offset `stop` (None: the end of the stream)."""
    offset = start
    left = None if stop is None else stop - start
    rest = b""
    while left is None or left > 0:
        chunk = stream.read(_CHUNK if left is None else min(_CHUNK, left))
        if not chunk:
            break
        if left is not None:
            left -= len(chunk)
        buf = rest + chunk if rest else chunk
        pos = 0
        while True:
            nl = buf.find(b"\n", pos)
            if nl < 0:
                break
            yield offset, buf[pos:nl], True
            offset += nl - pos + 1
            pos = nl + 1
        rest = buf[pos:]
    if rest:
        yield offset, rest, False


def iter_buffer(data: bytes, start: int = 0) -> Iterator[tuple[int, bytes, bool]]:
    """iter_lines over bytes already read (the few records appended since the last look)."""
    pos = 0
    while True:
        nl = data.find(b"\n", pos)
        if nl < 0:
            break
        yield start + pos, data[pos:nl], True
        pos = nl + 1
    if pos < len(data):
        yield start + pos, data[pos:], False


def last_line(data: bytes, start: int) -> tuple[int, str]:
    """(offset, crc) of the last of the encoded records `data`, written at offset `start`:
    the `Scan.tail` of a journal that ends with them."""
    begin = data.rfind(b"\n", 0, len(data) - 1) + 1
    return start + begin, data[-11:-3].decode("ascii")


def ends_with_line(raw: bytes, crc: str) -> bool:
    """Whether `raw` is one whole line with checksum `crc` (the bytes of a `Scan.tail`)."""
    return raw.endswith(_CRC_KEY + crc.encode() + b'"}\n') and raw.find(b"\n") == len(raw) - 1


def _seq_hint(line: bytes) -> int | None:
    import re

    match = re.search(rb'"seq":(\d{1,18})[,}]', line)
    return int(match.group(1)) if match else None


def scan(
    lines: Iterable[tuple[int, bytes, bool]],
    *,
    start: int = 0,
    line0: int = 0,
    last_seq: int = 0,
    snapshot_seq: int = 0,
    on_record: Callable[[Record, int, int], None] | None = None,
) -> Scan:
    """Check every line and hand each committed record (record, line, offset) to on_record.

    `last_seq` is the seq before the first line; records at or below `snapshot_seq` are
    checked but not handed on. Damage is collected, not raised: the caller decides whether it
    blocks (writers), is reported (verify) or is moved aside (repair).
    """
    result = Scan(end=start, lines=line0, last_seq=last_seq)
    seen = last_seq  # highest seq read so far, committed or not
    pending: list[tuple[Record, int, int, int]] = []  # open batch: record, line, offset, len
    line_no = line0

    def drop_pending(reason: str) -> None:
        for record, number, offset, length in pending:
            result.bad.append(BadLine(number, offset, length, reason, record["seq"]))
        pending.clear()

    def commit(entries: list[tuple[Record, int, int, int]]) -> None:
        for record, number, offset, length in entries:
            seq = record["seq"]
            if seq <= snapshot_seq:
                result.skipped += 1
            else:
                if result.first_offset is None:
                    result.first_offset = offset
                    result.first_seq = seq
                    result.first_ts = record["ts"]
                result.last_ts = record["ts"]
                result.records += 1
                result.last_seq = seq
                if record["op"] == "repair":
                    for pair in record["data"].get("gaps", []):
                        result.declared.append((int(pair[0]), int(pair[1])))
                if on_record is not None:
                    on_record(record, number, offset)
            result.end = offset + length + 1
            result.lines = number
            result.tail = (offset, str(record.get("crc", "")))

    for offset, raw, terminated in lines:
        line_no += 1
        if not terminated:
            if pending:
                _, number, first, _ = pending[0]
                result.torn = Torn(number, first, -1, "incomplete last batch")
            else:
                result.torn = Torn(line_no, offset, len(raw), "unterminated last line")
            pending.clear()
            break
        try:
            record = decode(raw)
        except BadRecord as exc:
            drop_pending("part of an incomplete batch")
            result.bad.append(BadLine(line_no, offset, len(raw), str(exc), _seq_hint(raw)))
            continue
        seq = record["seq"]
        if seq <= seen and seq > snapshot_seq:
            drop_pending("part of an incomplete batch")
            result.bad.append(
                BadLine(line_no, offset, len(raw), f"out of sequence: seq {seq} after {seen}", seq)
            )
            continue
        if seq > seen + 1 and seen >= snapshot_seq:
            result.gaps.append(Gap(seen + 1, seq - 1, line_no, offset))
        seen = max(seen, seq)
        batch = record.get("batch")
        entry = (record, line_no, offset, len(raw))
        if batch is None:
            drop_pending("part of an incomplete batch")
            commit([entry])
            continue
        index, count = batch
        if index == 1:
            drop_pending("part of an incomplete batch")
        elif not pending or index != len(pending) + 1 or pending[0][0]["batch"][1] != count:
            drop_pending("part of an incomplete batch")
            result.bad.append(
                BadLine(line_no, offset, len(raw), "part of an incomplete batch", seq)
            )
            continue
        pending.append(entry)
        if index == count:
            commit(pending)
            pending.clear()
    if pending:  # the file ends inside a batch: never acknowledged, so it is a torn tail
        _, number, first, _ = pending[0]
        result.torn = Torn(number, first, -1, "incomplete last batch")
    if result.torn is not None:
        # A jump in seq seen inside the torn tail is the tail's (never committed), not a
        # hole in the history.
        result.gaps = [gap for gap in result.gaps if gap.offset < result.torn.offset]
    return result


def append(fd: int, data: bytes, *, durable: bool) -> None:
    """Write all of `data` at the end (fd opened O_APPEND) and, if durable, fdatasync it.

    The caller holds the exclusive lock and truncates back on failure."""
    fileio.append(fd, data)
    if durable:
        fileio.sync(fd)
