"""A writer waiting for the ledger lock reads ahead what the holders append.

The lock calls `on_poll` only between failed tries; a waiting writer's state takes in the
holder's records before the holder lets go, and the transaction it then makes is the one
it would have made without reading ahead. A hypothesis property: reading ahead at any cut
of the journal (inside a line or a batch included), then refreshing, gives the state a
fresh load gives."""

from __future__ import annotations

import fcntl
import os
import threading
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, replay
from gpupoolctl.ledger.lock import FileLock
from gpupoolctl.ledger.paths import LedgerPaths
from gpupoolctl.sched import JobRequest

SLICES = [
    {"id": f"n1/gpu{i}", "host": "n1", "gpu": i, "kind": "gpu", "memory_mib": 81920}
    for i in range(6)
]


def _pool(path: Path) -> None:
    Ledger(path, durable=False).refresh_slices(["n1"], SLICES)


def test_on_poll_runs_only_while_another_holds_the_lock(tmp_path):
    path = tmp_path / "l.lock"
    other = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(other, fcntl.LOCK_EX)
    polls: list[bool] = []

    def poll() -> None:
        probe = os.open(path, os.O_RDWR)
        try:
            fcntl.flock(probe, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            polls.append(True)  # still held elsewhere: a wait, as promised
        else:
            polls.append(False)
            fcntl.flock(probe, fcntl.LOCK_UN)
        finally:
            os.close(probe)
        if len(polls) == 3:
            fcntl.flock(other, fcntl.LOCK_UN)

    with FileLock(path, timeout=10).exclusive(poll):
        count = len(polls)
    assert count >= 3 and all(polls[:3])
    with FileLock(path, timeout=10).exclusive(poll):  # free: taken at once, no poll
        pass
    assert len(polls) == count
    os.close(other)


def test_a_waiting_writer_has_read_the_holders_records_before_it_lets_go(tmp_path):
    path = tmp_path / "ledger.jsonl"
    _pool(path)
    waiter, holder = Ledger(path, durable=False), Ledger(path, durable=False)
    hold(waiter, JobRequest(), owner="w")  # the waiter keeps its journal and state
    for _ in range(3):
        hold(holder, JobRequest(), owner="h")
    seen_while_waiting: list[int] = []
    original = waiter._read_ahead

    def watched() -> None:
        original()
        if waiter._loaded is not None:
            seen_while_waiting.append(waiter._loaded.scan.last_seq)

    waiter._read_ahead = watched  # type: ignore[method-assign]
    last_seq = holder.read().state.seq
    done: list[object] = []
    with holder._lock.exclusive():
        thread = threading.Thread(target=lambda: done.append(hold(waiter, JobRequest(), owner="w")))
        thread.start()
        deadline = time.monotonic() + 10
        while last_seq not in seen_while_waiting and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not done, "the waiter wrote while the lock was held"
    thread.join(10)
    assert last_seq in seen_while_waiting
    assert done and done[0].value.slices == ["n1/gpu4"]  # it saw the holder take gpu1..3
    fresh = Ledger(path).read().state
    assert waiter._loaded is not None and waiter._loaded.state == fresh
    assert Ledger(path).verify().ok


def test_reading_ahead_leaves_a_replaced_journal_to_the_refresh(tmp_path):
    path = tmp_path / "ledger.jsonl"
    _pool(path)
    writer, other = Ledger(path, durable=False), Ledger(path, durable=False)
    held = hold(writer, JobRequest(), owner="w").value
    loaded = writer._loaded
    assert loaded is not None and writer._journal is not None
    other.compact()  # a new journal at P: the kept descriptor is the old one
    hold(other, JobRequest(), owner="o")
    before = loaded.scan.last_seq
    replay.read_ahead(loaded, writer._journal.fd)
    assert loaded.scan.last_seq == before  # nothing read from the old file
    writer.release(held.id)  # the refresh under the lock reloads and writes on the new one
    assert Ledger(path).verify().ok
    assert set(Ledger(path).read().state.allocations) == set(other.read().state.allocations)


def _journal_bytes(tmp_path: Path, ops: list[int]) -> tuple[bytes, Path]:
    """A journal of allocs and releases (0: alloc, 1: release the oldest), some batched."""
    path = tmp_path / "source" / "ledger.jsonl"
    path.parent.mkdir()
    _pool(path)
    led = Ledger(path, durable=False)
    held: list[str] = []
    for op in ops:
        if op == 0 and len(held) < len(SLICES):
            held.append(hold(led, JobRequest(), owner="p").value.id)
        elif held:
            led.release(held.pop(0))
    return path.read_bytes(), path


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(st.integers(0, 1), min_size=1, max_size=12), cut=st.floats(0, 1), data=st.data()
)
def test_reading_ahead_at_any_cut_then_refreshing_is_a_fresh_load(tmp_path_factory, ops, cut, data):
    tmp_path = tmp_path_factory.mktemp("cut")
    content, _ = _journal_bytes(tmp_path, ops)
    path = tmp_path / "ledger.jsonl"
    head = data.draw(st.integers(0, content.index(b"\n") + 1), label="first read")
    first = min(head, len(content))
    path.write_bytes(content[:first])
    paths = LedgerPaths(path)
    fd = os.open(path, os.O_RDWR | os.O_APPEND)
    try:
        loaded = replay.load(paths, fd)
        middle = max(first, int(len(content) * cut))
        os.write(fd, content[first:middle])
        replay.read_ahead(loaded, fd)  # may stop inside a line: the holder is mid-append
        os.write(fd, content[middle:])
        refreshed = replay.refresh(loaded, paths, fd)
        fresh = replay.load(paths, fd)
    finally:
        os.close(fd)
    assert refreshed.state == fresh.state
    assert refreshed.scan.end == fresh.scan.end == len(content)
    assert not refreshed.damaged and refreshed.scan.torn is None
