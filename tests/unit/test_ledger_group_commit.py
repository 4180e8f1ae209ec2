"""Group commit: the sync after the unlock, the durable watermark, and what a crash may leave.

A durable ledger raises P.synced after each sync; damage above it is the unacknowledged
tail of a crash (cut, copied to the quarantine), damage below it is real (writes refused).
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, LedgerDamaged, fileio, journal, watermark
from gpupoolctl.ledger.paths import LedgerPaths
from gpupoolctl.sched import JobRequest

TS = "2025-01-01T00:00:00.000Z"


def make_slices(n: int = 6) -> list[dict]:
    return [
        {"id": f"n1/gpu{i}", "host": "n1", "kind": "gpu", "profile": None,
         "memory_mib": 1000 + i, "uuid": f"U{i}"}
        for i in range(n)
    ]  # fmt: skip


def durable(path: Path) -> Ledger:
    return Ledger(path, durable=True, actor="t@h", autocompact=0)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = durable(tmp_path / "ledger.jsonl")
    led.refresh_slices(["n1"], make_slices())
    for _ in range(3):
        hold(led, JobRequest(), owner="alice")
    return led  # seq 1..4, all synced


def mark_of(led: Ledger) -> watermark.Mark | None:
    return watermark.read(led.paths)


def unsynced(led: Ledger, *records: bytes) -> int:
    """Append records as a writer does before its sync (the watermark not raised); returns
    the offset where they start."""
    start = led.path.stat().st_size
    with open(led.path, "ab") as out:
        for record in records:
            out.write(record)
    return start


def release_record(seq: int, alloc_id: str) -> bytes:
    return journal.encode(seq, TS, "x@y", "release", {"id": alloc_id})


def corrupt_at(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset + 20] ^= 0x01  # inside the record's JSON: its checksum no longer matches
    path.write_bytes(bytes(data))


def test_every_durable_write_raises_the_watermark_to_the_journal_end(ledger):
    st_ = os.stat(ledger.path)
    assert mark_of(ledger) == watermark.Mark(st_.st_dev, st_.st_ino, 0, st_.st_size)
    hold(ledger, JobRequest(), owner="bob")
    assert mark_of(ledger).end == ledger.path.stat().st_size
    assert os.stat(ledger.paths.watermark).st_mode & 0o777 == 0o600


def test_a_ledger_that_is_not_durable_keeps_no_watermark(tmp_path):
    led = Ledger(tmp_path / "l.jsonl", durable=False, actor="t@h")
    led.refresh_slices(["n1"], make_slices())
    assert not led.paths.watermark.exists()


def test_damage_above_the_watermark_is_a_crash_tail_cut_at_its_first_damaged_record(ledger):
    before = ledger.path.read_bytes()
    first = release_record(5, "a-2")
    second = release_record(6, "a-3")
    start = unsynced(ledger, first, second)
    corrupt_at(ledger.path, start)  # the first unsynced record torn, the second whole
    reader = durable(ledger.path)
    view = reader.read()
    # Neither counts: the second was written after the first, so no sync ever covered it.
    assert {"a-2", "a-3"} <= set(view.state.allocations)
    assert any("never acknowledged" in w and "ignored" in w for w in view.warnings)
    assert [p.kind for p in reader.verify().problems] == ["torn"]
    done = hold(reader, JobRequest(), owner="bob")
    assert done.value.id == "a-5"  # seq 5 is free again: nothing of the tail survived
    warning = next(w for w in done.warnings if "never acknowledged" in w)
    assert f":5: {len(first) + len(second)} bytes" in warning and "removed" in warning
    assert ledger.path.read_bytes().startswith(before)
    assert durable(ledger.path).verify().ok
    kept = [json.loads(x) for x in ledger.paths.quarantine.read_text().splitlines()]
    assert [k["line"] for k in kept] == [5, 6]
    assert kept[1]["text"] == second.decode().rstrip("\n")


def test_history_leaves_out_a_crash_tail_but_not_the_whole_records_before_it(ledger):
    whole = release_record(5, "a-2")
    torn = release_record(6, "a-3")
    after = release_record(7, "a-4")
    start = unsynced(ledger, whole, torn, after)
    corrupt_at(ledger.path, start + len(whole))
    history = durable(ledger.path).history()
    releases = [r["data"]["id"] for r in history.records if r["op"] == "release"]
    assert releases == ["a-2"]  # a-4 is whole, but written after damage no sync covered
    assert any("left out" in w and "never acknowledged" in w for w in history.warnings)
    assert not any("skipped damaged record" in w for w in history.warnings)


def test_history_still_shows_real_damage_below_the_watermark(ledger):
    corrupt_at(ledger.path, 0)
    history = durable(ledger.path).history()
    assert any("skipped damaged record" in w for w in history.warnings)
    assert not any("left out" in w for w in history.warnings)
    assert [r["seq"] for r in history.records] == [2, 3, 4]


def test_damage_below_the_watermark_is_real_and_refuses_writes(ledger):
    offsets = [o for o, _, _ in journal.iter_buffer(ledger.path.read_bytes())]
    corrupt_at(ledger.path, offsets[2])
    with pytest.raises(LedgerDamaged, match=r":3: damaged record"):
        hold(durable(ledger.path), JobRequest(), owner="bob")


def test_a_missing_watermark_makes_every_damage_real(ledger):
    start = unsynced(ledger, release_record(5, "a-2"))
    corrupt_at(ledger.path, start)
    ledger.paths.watermark.unlink()
    with pytest.raises(LedgerDamaged, match=r":5: damaged record"):
        hold(durable(ledger.path), JobRequest(), owner="bob")


def test_a_watermark_of_another_journal_is_not_believed(ledger):
    start = unsynced(ledger, release_record(5, "a-2"))
    corrupt_at(ledger.path, start)
    mark = mark_of(ledger)
    other = watermark.Mark(mark.dev, mark.ino + 1, 0, mark.end)
    ledger.paths.watermark.write_bytes(watermark.encode(other))
    with pytest.raises(LedgerDamaged):
        hold(durable(ledger.path), JobRequest(), owner="bob")


def test_a_missing_record_above_the_watermark_cuts_from_the_record_after_the_hole(ledger):
    # Record 5 never reached the disk, record 6 did: 6 was never acknowledged either.
    lost = release_record(6, "a-2")
    unsynced(ledger, lost)
    done = hold(durable(ledger.path), JobRequest(), owner="bob")
    assert done.value.id == "a-5"
    seqs = [r["seq"] for r in durable(ledger.path).history().records]
    assert seqs == [1, 2, 3, 4, 5]
    (kept,) = [json.loads(x) for x in ledger.paths.quarantine.read_text().splitlines()]
    assert kept["text"] == lost.decode().rstrip("\n")


def test_compaction_and_repair_mark_their_new_journal_whole(ledger):
    ledger.compact()
    st_ = os.stat(ledger.path)
    assert mark_of(ledger) == watermark.Mark(st_.st_dev, st_.st_ino, 4, 0)
    hold(ledger, JobRequest(), owner="bob")
    offsets = [o for o, _, _ in journal.iter_buffer(ledger.path.read_bytes())]
    corrupt_at(ledger.path, offsets[0])
    with pytest.raises(LedgerDamaged):
        hold(durable(ledger.path), JobRequest(), owner="bob")
    ledger.repair()
    st_ = os.stat(ledger.path)
    assert mark_of(ledger) == watermark.Mark(st_.st_dev, st_.st_ino, 4, st_.st_size)


def test_the_watermark_is_never_lowered_nor_written_for_a_journal_no_longer_in_place(ledger):
    handle = watermark.Watermark(ledger.paths)
    high = mark_of(ledger)
    handle.advance(watermark.Mark(high.dev, high.ino, high.snapshot_seq, high.end - 10))
    assert mark_of(ledger) == high
    handle.advance(watermark.Mark(high.dev, high.ino + 7, high.snapshot_seq, high.end + 99))
    assert mark_of(ledger) == high
    handle.close()


def test_the_sync_happens_after_the_lock_is_let_go(ledger, monkeypatch):
    free: list[bool] = []
    real = fileio.sync

    def sync(fd: int) -> None:
        # Another writer can take the lock while this sync runs: that is group commit.
        probe = os.open(ledger.paths.lock, os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
            free.append(True)
        except BlockingIOError:
            free.append(False)
        finally:
            os.close(probe)
        real(fd)

    monkeypatch.setattr(fileio, "sync", sync)
    hold(ledger, JobRequest(), owner="bob")
    assert free[0] is True


@given(st.binary(max_size=300))
def test_any_bytes_in_the_watermark_file_read_as_a_mark_or_nothing(raw):
    mark = watermark.decode(raw)
    assert mark is None or watermark.decode(watermark.encode(mark)) == mark


def test_paths_name_the_watermark_beside_the_journal(tmp_path):
    assert LedgerPaths(tmp_path / "x.jsonl").watermark == tmp_path / "x.jsonl.synced"


def test_a_forked_child_takes_its_own_watermark_lock(ledger):
    """A child that shared the parent's open watermark file would share its flock, and two
    read-compare-writes at once could lower the mark."""
    parent_fd = ledger._watermark._open()
    fcntl.flock(parent_fd, fcntl.LOCK_EX)
    try:
        pid = os.fork()
        if pid == 0:  # the child: its handle must be a lock of its own, so this must block
            code = 1
            try:
                fcntl.flock(ledger._watermark._open(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                code = 0
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    finally:
        fcntl.flock(parent_fd, fcntl.LOCK_UN)
    assert os.waitstatus_to_exitcode(status) == 0
    assert ledger._watermark._open() == parent_fd  # the parent keeps its own


def test_a_writer_killed_in_its_batch_after_an_unnamed_compaction_is_only_a_torn_tail(ledger):
    """A compaction killed after putting its new journal in place, before naming it in the
    watermark, then a writer killed half-way through a batch (far ahead in seq, as the
    SIGKILL test's tearer writes it): `verify` reports the torn tail, not a gap (it once
    said ['gap', 'torn']), and the next writer cuts it."""
    ledger.compact()
    stale = watermark.Mark(0, 0, 0, 10)  # names no journal: the compaction's old one, say
    ledger.paths.watermark.write_bytes(watermark.encode(stale))
    batch = journal.encode(10**9, TS, "x@y", "release", {"id": "a-2"}, (1, 2))
    unsynced(ledger, batch, batch[:40])
    assert [p.kind for p in durable(ledger.path).verify().problems] == ["torn"]
    done = hold(durable(ledger.path), JobRequest(), owner="bob")
    assert any("interrupted writer" in w for w in done.warnings), done.warnings
    assert durable(ledger.path).verify().ok


def test_the_first_append_to_a_journal_nobody_named_names_it_first(ledger, monkeypatch):
    """A journal the watermark does not name (a compaction killed before naming it) gets a
    sync of the folder and of itself and its name in the watermark before anything is
    appended to it; a writer's late raise for another journal never names it."""
    ledger.compact()
    stale = watermark.Mark(0, 0, 0, 10)
    ledger.paths.watermark.write_bytes(watermark.encode(stale))
    calls: list[str] = []
    for name in ("sync_dir", "sync", "append"):
        real = getattr(fileio, name)
        monkeypatch.setattr(
            fileio, name, lambda *a, _n=name, _r=real: (calls.append(_n), _r(*a))[1]
        )
    writer = durable(ledger.path)
    hold(writer, JobRequest(), owner="bob")
    assert calls[:3] == ["sync_dir", "sync", "sync"]  # folder, journal, watermark
    assert calls[3] == "append"
    st_ = os.stat(ledger.path)
    mark = mark_of(ledger)
    assert (mark.dev, mark.ino, mark.snapshot_seq) == (st_.st_dev, st_.st_ino, 4)
    assert mark.end == st_.st_size
    calls.clear()
    hold(writer, JobRequest(), owner="bob")  # named now: no more folder syncs
    assert "sync_dir" not in calls
    handle = watermark.Watermark(ledger.paths)
    handle.advance(watermark.Mark(st_.st_dev, st_.st_ino + 1, 4, 10**6))
    assert mark_of(ledger).ino == st_.st_ino
    handle.close()
