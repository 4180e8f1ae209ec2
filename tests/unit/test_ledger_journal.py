"""Journal lines: encoding, checksums, and how a scan classifies damage."""

from __future__ import annotations

import io
import json
import zlib

import pytest

from gpupoolctl.ledger import journal
from gpupoolctl.ledger.units import parse_duration, parse_memory_mib, parse_ts


def _line(seq: int, op: str = "release", batch: tuple[int, int] | None = None) -> bytes:
    return journal.encode(
        seq, "2025-06-01T12:00:00.000Z", "alice@ws", op, {"id": f"a-{seq}"}, batch
    )


def _scan(data: bytes, **kw):
    seen: list[int] = []
    result = journal.scan(
        journal.iter_lines(io.BytesIO(data)),
        on_record=lambda r, _l, _o: seen.append(r["seq"]),
        **kw,
    )
    return result, seen


def test_encode_is_one_json_line_with_crc_last():
    line = _line(7)
    assert line.endswith(b"}\n") and line.count(b"\n") == 1
    record = json.loads(line)
    assert list(record) == ["v", "seq", "ts", "actor", "op", "data", "crc"]
    head = line[: line.rindex(b',"crc"')]
    assert record["crc"] == f"{zlib.crc32(head):08x}"
    assert journal.decode(line[:-1])["seq"] == 7


def test_decode_rejects_edits_and_truncation():
    line = _line(3)[:-1]
    with pytest.raises(journal.BadRecord, match="checksum"):
        journal.decode(line.replace(b"alice", b"mallo"))
    with pytest.raises(journal.BadRecord, match="no checksum"):
        journal.decode(line[:-5])
    with pytest.raises(journal.BadRecord):
        journal.decode(b"")


def test_clean_scan_hands_on_every_record():
    result, seen = _scan(b"".join(_line(s) for s in (1, 2, 3)))
    assert seen == [1, 2, 3]
    assert not result.bad and not result.gaps and result.torn is None
    assert result.last_seq == 3 and result.lines == 3


def test_unterminated_last_line_is_torn_not_damage():
    good = _line(1) + _line(2)
    result, seen = _scan(good + _line(3)[:25])
    assert seen == [1, 2]
    assert result.torn is not None and result.torn.line == 3 and result.torn.offset == len(good)
    assert not result.bad and result.end == len(good)


def test_incomplete_last_batch_is_torn_and_not_applied():
    data = _line(1) + _line(2, batch=(1, 2))
    result, seen = _scan(data)
    assert seen == [1]
    assert result.torn is not None and result.torn.reason == "incomplete last batch"
    assert result.end == len(_line(1))


@pytest.mark.parametrize("after", [b"", b'{"v":1,"seq":'], ids=["batch", "batch-then-cut"])
def test_a_seq_jump_inside_a_torn_tail_is_no_gap(after):
    """A writer that died in its batch never committed its seqs, whatever they are: the
    tail is torn, and the jump it shows is no hole in the history."""
    good = _line(1) + _line(2)
    result, seen = _scan(good + _line(10**9, batch=(1, 2)) + after)
    assert seen == [1, 2]
    assert result.torn is not None and result.torn.offset == len(good)
    assert not result.gaps and not result.undeclared_gaps() and not result.bad


def test_a_seq_jump_before_a_torn_tail_is_still_a_gap():
    result, _ = _scan(_line(1) + _line(5) + _line(6, batch=(1, 2)))
    assert [(g.first, g.last) for g in result.gaps] == [(2, 4)]
    assert result.torn is not None


def test_complete_batch_applies_together():
    result, seen = _scan(_line(1, batch=(1, 2)) + _line(2, batch=(2, 2)) + _line(3))
    assert seen == [1, 2, 3] and not result.bad and result.torn is None


def test_damage_in_the_middle_is_bad_not_torn():
    lines = [_line(s) for s in (1, 2, 3)]
    lines[1] = lines[1].replace(b"alice", b"eve!!")
    result, seen = _scan(b"".join(lines))
    assert seen == [1, 3]
    assert [b.line for b in result.bad] == [2] and result.bad[0].seq == 2
    assert result.torn is None


def test_terminated_bad_last_line_is_damage_not_torn():
    # A complete line may have been acknowledged: never cut it silently.
    result, _ = _scan(_line(1) + b'{"seq":2,"garbage"}\n')
    assert result.torn is None and [b.line for b in result.bad] == [2]


def test_gaps_duplicates_and_declared_gaps():
    result, seen = _scan(_line(1) + _line(1) + _line(4))
    assert seen == [1, 4]
    assert "out of sequence" in result.bad[0].reason
    assert [(g.first, g.last) for g in result.gaps] == [(2, 3)]
    assert result.undeclared_gaps() == result.gaps
    repair = journal.encode(5, "2025-06-01T12:00:00.000Z", "r@h", "repair", {"gaps": [[2, 3]]})
    declared, _ = _scan(_line(1) + _line(4) + repair)
    assert declared.gaps and not declared.undeclared_gaps()


def test_broken_batch_in_the_middle_is_bad():
    result, seen = _scan(_line(1, batch=(1, 2)) + _line(2) + _line(3))
    assert seen == [2, 3]
    assert [b.line for b in result.bad] == [1]


def test_records_already_in_the_snapshot_are_skipped():
    result, seen = _scan(b"".join(_line(s) for s in (4, 5, 6, 7)), last_seq=5, snapshot_seq=5)
    assert seen == [6, 7] and result.skipped == 2 and not result.bad and not result.gaps


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90s", 90), ("30m", 1800), ("8h", 28800), ("1h30m", 5400), ("2d", 172800)],
)
def test_durations(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "8", "8x", "h", "0s", "-1h"])
def test_bad_durations(text):
    from gpupoolctl.errors import UsageError

    with pytest.raises(UsageError):
        parse_duration(text)


def test_memory_sizes():
    assert parse_memory_mib("40GiB") == 40960
    assert parse_memory_mib("512mib") == 512
    assert parse_memory_mib("10gb") == 9537  # a 1g.10gb instance (9984 MiB) fits "10gb"
    assert parse_memory_mib("10") == 9537


def test_times_are_utc():
    assert parse_ts("2025-06-01T12:00:00Z").isoformat() == "2025-06-01T12:00:00+00:00"
    assert parse_ts("2025-06-01T14:00:00+02:00").hour == 12
