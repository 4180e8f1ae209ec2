"""A ledger handle reads what is new before it takes the lock, and the lock confirms it.

A new handle's first read replays the whole journal: done under the lock, it stalled every
writer for as long (bench/slurm-vs-pool). It is now done before the lock is taken
(replay.catch_up); under the lock only what was appended meanwhile is read, after checking
that the last line read without the lock is still there: a writer whose append failed cuts
the journal back, and the next one may write other records of the same length there."""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, LedgerBusy, copies, replay
from gpupoolctl.ledger.lock import FileLock
from gpupoolctl.ledger.paths import LedgerPaths
from gpupoolctl.sched import JobRequest

SLICES = [
    {"id": f"n1/gpu{i}", "host": "n1", "gpu": i, "kind": "gpu", "memory_mib": 81920}
    for i in range(6)
]
T0 = datetime(2026, 12, 7, tzinfo=UTC)


def _ledger(path: Path, actor: str = "w@test") -> Ledger:
    return Ledger(path, durable=False, actor=actor, clock=lambda: T0)


def _pool_with_holds(path: Path, count: int) -> None:
    led = _ledger(path)
    led.refresh_slices(["n1"], SLICES)
    for _ in range(count):
        hold(led, JobRequest(), owner="p")


def _counting_loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Every full replay from here on (locked or not), by the seq it reached."""
    seen: list[int] = []
    original = replay._load

    def counted(*args: Any, **kwargs: Any) -> replay.Loaded:
        loaded = original(*args, **kwargs)
        seen.append(loaded.state.seq)
        return loaded

    monkeypatch.setattr(replay, "_load", counted)
    return seen


def test_a_new_handle_replays_the_journal_before_it_takes_the_lock(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    _pool_with_holds(path, 4)
    expected = _ledger(path).read().state
    reader = _ledger(path)
    reader._lock.timeout = 0  # try the lock once
    writer_holds = FileLock(LedgerPaths(path).lock, timeout=10).exclusive()
    with writer_holds, pytest.raises(LedgerBusy):
        reader.read()
    assert reader._loaded is not None and reader._loaded.state == expected
    loads = _counting_loads(monkeypatch)
    assert reader.read().state == expected
    assert loads == []  # under the lock nothing was replayed again


def test_a_new_writer_replays_the_journal_before_it_takes_the_lock(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    _pool_with_holds(path, 3)
    writer = _ledger(path)
    loads = _counting_loads(monkeypatch)
    replays_under_lock: list[int] = []
    original_refresh = replay.refresh

    def refresh(*args: Any, **kwargs: Any) -> replay.Loaded:
        before = len(loads)
        done = original_refresh(*args, **kwargs)
        replays_under_lock.extend(loads[before:])
        return done

    monkeypatch.setattr(replay, "refresh", refresh)
    held = hold(writer, JobRequest(), owner="w").value
    assert held.slices == ["n1/gpu3"]  # it saw the three holds before
    assert len(loads) == 1 and replays_under_lock == []


def _cut_and_rewrite(path: Path, end: int, owner: str) -> None:
    """What a writer whose append failed leaves, and the next writer then: the journal cut
    back to `end`, and a hold of the same length written there by someone else."""
    with open(path, "r+b") as f:
        f.truncate(end)
    hold(_ledger(path), JobRequest(), owner=owner)


ReadWithoutLock = Callable[[replay.Loaded, LedgerPaths, int], replay.Loaded | None]


def _by_read_ahead(loaded: replay.Loaded, paths: LedgerPaths, fd: int) -> replay.Loaded:
    replay.read_ahead(loaded, fd)
    return loaded


def _by_catch_up(loaded: replay.Loaded, paths: LedgerPaths, fd: int) -> replay.Loaded | None:
    return replay.catch_up(loaded, paths)


def _by_copy(loaded: replay.Loaded, paths: LedgerPaths, fd: int) -> replay.Loaded | None:
    replay.catch_up(None, paths)  # one new handle reads it all and keeps a copy (below)
    return replay.catch_up(None, paths)  # the next starts from that copy


def _by_whole_catch_up(loaded: replay.Loaded, paths: LedgerPaths, fd: int) -> replay.Loaded | None:
    return replay.catch_up(None, paths)  # a new handle: snapshot and journal read whole


@pytest.mark.parametrize(
    "read_without_lock", [_by_read_ahead, _by_catch_up, _by_whole_catch_up, _by_copy]
)
def test_records_cut_back_and_rewritten_after_an_unlocked_read_are_read_again(
    tmp_path, monkeypatch, read_without_lock: ReadWithoutLock
):
    monkeypatch.setattr(replay, "KEEP_AFTER", 0)
    path = tmp_path / "ledger.jsonl"
    _pool_with_holds(path, 2)
    paths = LedgerPaths(path)
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    try:
        loaded = replay.load(paths, fd)
        end = loaded.scan.end
        hold(_ledger(path), JobRequest(), owner="x")  # to be cut back: its append "failed"
        unlocked = read_without_lock(loaded, paths, fd)
        assert unlocked is not None
        assert unlocked.state.allocations["a-4"].owner == "x"  # it did read the hold
        _cut_and_rewrite(path, end, owner="y")
        assert path.stat().st_size == unlocked.scan.end  # the same length: no size tells
        refreshed = replay.refresh(unlocked, paths, fd)
        fresh = replay.load(paths, fd)
    finally:
        os.close(fd)
    assert refreshed.state.allocations["a-4"].owner == "y"
    assert refreshed.state == fresh.state


def test_a_writers_own_append_is_the_line_the_lock_checks_next(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    _pool_with_holds(path, 1)
    writer = _ledger(path)
    hold(writer, JobRequest(), owner="w")
    loaded = writer._loaded
    assert loaded is not None
    with open(path, "rb") as f:
        content = f.read()
    offset, crc = loaded.scan.tail or (0, "")
    assert content[offset:].count(b"\n") == 1 and content.endswith(b'"%s"}\n' % crc.encode())
    loads = _counting_loads(monkeypatch)
    hold(_ledger(path, actor="o@test"), JobRequest(), owner="o")
    hold(writer, JobRequest(), owner="w")  # catches up without the lock, checked under it
    assert loads == [3]  # only the other, new handle replayed (up to the hold before)
    assert writer._loaded is not None and writer._loaded.state == _ledger(path).read().state


def test_a_new_handle_starts_from_the_state_another_handle_of_the_process_read(
    tmp_path, monkeypatch
):
    path = tmp_path / "ledger.jsonl"
    _pool_with_holds(path, 3)
    monkeypatch.setattr(replay, "KEEP_AFTER", 4)  # the 4 records so far are enough
    first = _ledger(path)
    first.read()  # reads all of it, and keeps a copy
    hold(_ledger(path, actor="o@test"), JobRequest(), owner="o")  # from the copy, + 1 record
    loads = _counting_loads(monkeypatch)
    second = _ledger(path)
    view = second.read()
    assert loads == []  # no replay: the copy, and the one record after it
    assert view.state == Ledger(path).read().state
    assert view.state.allocations["a-5"].owner == "o"
    assert view.state is not first._loaded.state  # its own, to change as it writes
    hold(second, JobRequest(), owner="s")
    assert first.read().state == second.read().state


def test_a_follower_replays_rather_than_copy(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    _pool_with_holds(path, 3)
    monkeypatch.setattr(replay, "KEEP_AFTER", 0)
    _ledger(path).read()  # a copy is kept
    heard: list[int] = []
    follower = _ledger(path)
    follower.follow(lambda record, state: heard.append(record["seq"]))
    follower.read()
    assert heard == [1, 2, 3, 4]  # every record, as a follower is promised


def test_a_copy_of_files_since_replaced_is_not_used(tmp_path, monkeypatch):
    path = tmp_path / "ledger.jsonl"
    _pool_with_holds(path, 3)
    monkeypatch.setattr(replay, "KEEP_AFTER", 0)
    _ledger(path).read()
    _ledger(path).compact()  # a new snapshot and journal: the copy was of the old ones
    loads = _counting_loads(monkeypatch)
    newcomer = _ledger(path)
    hold(newcomer, JobRequest(), owner="n")
    assert loads == [4]  # read whole: the snapshot (at seq 4) and its empty journal
    assert newcomer.read().state == Ledger(path).read().state


def test_a_process_keeps_copies_of_the_ledgers_it_kept_last_only(tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "KEEP_AFTER", 0)
    monkeypatch.setattr(copies, "MAX_LEDGERS", 2)
    paths = [tmp_path / f"l{i}" / "ledger.jsonl" for i in range(3)]
    for path in paths:
        path.parent.mkdir()
        _pool_with_holds(path, 1)
        _ledger(path).read()  # read whole: a copy kept
    loads = _counting_loads(monkeypatch)
    for path in reversed(paths):
        _ledger(path).read()
    assert loads == [2]  # the first ledger's copy was dropped: it alone is replayed


@pytest.fixture(autouse=True)
def _no_copies_between_tests():
    copies.forget()
    yield
    copies.forget()
