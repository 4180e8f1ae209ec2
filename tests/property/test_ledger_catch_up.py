"""Reading without the lock, then the tail under it, is a full replay under the lock.

`replay.catch_up` reads snapshot and journal before the lock is taken; the refresh under the
lock then reads only what was appended since, or reloads when the files are not those read.
Whatever happened meanwhile, the state a handle ends with must be exactly the state a full
replay under the lock gives:

- a journal cut anywhere (inside a line or a batch: a writer mid-append) when it was read;
- writes, and compactions, between the unlocked read and the locked refresh;
- a compaction or writes at any point inside the unlocked read itself (between its steps:
  deterministic interleavings, no timing);
- and real threads, each with its own handles, writing and compacting while others read;

each with and without copies: a new handle starting from the state another handle of the
process read (copies) rather than from the files.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, NothingFits, copies, replay, snapshot
from gpupoolctl.ledger.lock import FileLock
from gpupoolctl.ledger.paths import LedgerPaths
from gpupoolctl.sched import JobRequest

SLICES = [
    {"id": f"n1/gpu{i}", "host": "n1", "gpu": i, "kind": "gpu", "memory_mib": 81920}
    for i in range(6)
]
SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
OPS = st.lists(st.integers(0, 2), max_size=10)  # 0: hold one, 1: hold two, 2: release


class Writer:
    """One ledger handle doing holds and releases of its own (a separate process would)."""

    def __init__(self, path: Path, owner: str, autocompact: int = 0) -> None:
        self.led = Ledger(path, durable=False, actor=f"{owner}@test", autocompact=autocompact)
        self.owner = owner
        self.held: list[str] = []

    def do(self, ops: list[int]) -> None:
        for op in ops:
            if op == 2 and self.held:
                self.led.release(self.held.pop(0))
                continue
            try:
                done = hold(self.led, JobRequest(gpus=1 + (op == 1)), owner=self.owner)
            except NothingFits:
                continue
            self.held.append(done.value.id)


def _new_ledger(path: Path) -> Writer:
    writer = Writer(path, "w")
    writer.led.refresh_slices(["n1"], SLICES)
    return writer


@contextmanager
def _copies_kept(kept: bool) -> Iterator[None]:
    """With `kept`, every handle's read that applied any record keeps a copy for the next
    new handle of the process (copies), which then starts from it; else none is kept."""
    copies.forget()
    saved = replay.KEEP_AFTER
    replay.KEEP_AFTER = 0 if kept else 10**12
    try:
        yield
    finally:
        replay.KEEP_AFTER = saved
        copies.forget()


def _locked_refresh(loaded: replay.Loaded | None, paths: LedgerPaths) -> tuple[Any, Any]:
    """Under the shared lock: `loaded` refreshed as a read does it, and a full replay."""
    with FileLock(paths.lock, timeout=30).shared():
        fd = os.open(paths.journal, os.O_RDONLY)
        try:
            return replay.refresh(loaded, paths, fd), replay.load(paths, fd)
        finally:
            os.close(fd)


def _assert_same(
    refreshed: replay.Loaded, fresh: replay.Loaded, tail_of: replay.Loaded | None = None
) -> None:
    """The same state; with `tail_of`, reached by reading only the tail after that read
    (no files were replaced since it, so nothing had to be read again)."""
    if tail_of is not None:
        assert refreshed is tail_of
    assert refreshed.state == fresh.state
    assert refreshed.state.finished == fresh.state.finished
    assert refreshed.state.closed == fresh.state.closed
    assert refreshed.scan.end == fresh.scan.end and refreshed.ident == fresh.ident
    assert not refreshed.unlocked and not refreshed.damaged


@SETTINGS
@given(ops=st.lists(st.integers(0, 2), min_size=1, max_size=12), cut=st.floats(0, 1))
def test_a_whole_read_of_a_journal_being_appended_then_the_tail_is_a_full_replay(
    tmp_path_factory, ops, cut
):
    source = tmp_path_factory.mktemp("source") / "ledger.jsonl"
    _new_ledger(source).do(ops)
    content = source.read_bytes()
    path = tmp_path_factory.mktemp("cut") / "ledger.jsonl"
    path.write_bytes(content[: int(len(content) * cut)])  # a writer half-way through
    paths = LedgerPaths(path)
    loaded = replay.catch_up(None, paths)
    assert loaded is not None and loaded.unlocked and not loaded.damaged
    with open(path, "ab") as f:
        f.write(content[int(len(content) * cut) :])
    _assert_same(*_locked_refresh(loaded, paths), tail_of=loaded)


@SETTINGS
@given(
    before=OPS,
    between=OPS,
    after=OPS,
    first_read=st.sampled_from(["none", "stale", "stale-compacted"]),
    compact=st.sampled_from(["no", "before", "between"]),
    kept=st.booleans(),
)
def test_writes_and_compactions_around_an_unlocked_read_end_in_a_full_replay(
    tmp_path_factory, before, between, after, first_read, compact, kept
):
    path = tmp_path_factory.mktemp("ledger") / "ledger.jsonl"
    paths = LedgerPaths(path)
    writer = _new_ledger(path)
    loaded: replay.Loaded | None = None
    with _copies_kept(kept):
        if first_read != "none":  # a handle that read once, long ago
            loaded = replay.catch_up(None, paths)
            loaded = _locked_refresh(loaded, paths)[0]
            writer.do([0, 1])
            if first_read == "stale-compacted":
                writer.led.compact()
        writer.do(before)
        if compact == "before":
            writer.led.compact()
        loaded = replay.catch_up(loaded, paths)
        writer.do(between)
        if compact == "between":
            writer.led.compact()
        writer.do(after)
        refreshed, fresh = _locked_refresh(loaded, paths)
    _assert_same(refreshed, fresh, tail_of=None if compact == "between" else loaded)


# The steps of an unlocked read where another process may act: each call of these.
_STEPS = (("replay", "_ident"), ("snapshot", "read"), ("journal", "scan"), ("os", "stat"))


@SETTINGS
@given(
    before=OPS,
    stale=st.booleans(),
    step=st.integers(0, 12),
    act=st.sampled_from(["compact", "write", "write+compact", "compact+write"]),
    ops=st.lists(st.integers(0, 2), min_size=1, max_size=4),
    after=OPS,
    kept=st.booleans(),
)
def test_a_compaction_or_writes_inside_an_unlocked_read_end_in_a_full_replay(
    tmp_path_factory, monkeypatch, before, stale, step, act, ops, after, kept
):
    path = tmp_path_factory.mktemp("ledger") / "ledger.jsonl"
    paths = LedgerPaths(path)
    writer = _new_ledger(path)
    monkeypatch.setattr(replay, "KEEP_AFTER", 0 if kept else 10**12)
    copies.forget()
    first = replay.catch_up(None, paths)  # with `kept`, a copy for the next new handle
    loaded = _locked_refresh(first, paths)[0] if stale else None
    writer.do(before)

    def interfere() -> None:
        for part in act.split("+"):
            if part == "compact":
                writer.led.compact()
            else:
                writer.do(ops)

    calls = [0]
    acting = [False]  # the writer's own calls of the same functions are not the read's

    def hooked(original: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            if not acting[0]:
                calls[0] += 1
                if calls[0] - 1 == step:  # another process acts just before this step
                    acting[0] = True
                    try:
                        interfere()
                    finally:
                        acting[0] = False
            return original(*args, **kwargs)

        return call

    modules = {"replay": replay, "snapshot": snapshot, "journal": replay.journal, "os": replay.os}
    with monkeypatch.context() as patch:
        for module, name in _STEPS:
            patch.setattr(modules[module], name, hooked(getattr(modules[module], name)))
        caught_up = replay.catch_up(loaded, paths)
    copies.forget()
    writer.do(after)
    # One interference at most: a read it spoilt was read again, and up to date.
    _assert_same(*_locked_refresh(caught_up, paths), tail_of=caught_up)


@pytest.mark.parametrize("seed", range(4))
def test_threads_writing_and_compacting_while_new_handles_read_agree_with_full_replays(
    tmp_path, monkeypatch, seed
):
    copies.forget()
    monkeypatch.setattr(replay, "KEEP_AFTER", 0 if seed % 2 else 10**12)  # copies kept, or not
    path = tmp_path / "ledger.jsonl"
    paths = LedgerPaths(path)
    _new_ledger(path)
    writers = [Writer(path, f"w{i}", autocompact=7 + i) for i in range(2)]
    done = threading.Event()
    failures: list[BaseException] = []
    compared = [0]

    def write(writer: Writer, index: int) -> None:
        try:
            for step in range(60):
                writer.do([(seed + index + step) % 3])
        except BaseException as exc:  # reported by the test below
            failures.append(exc)

    def read(index: int) -> None:
        loaded: replay.Loaded | None = None
        round_no = 0
        try:
            while round_no < 20 or (not done.is_set() and round_no < 2000):
                round_no += 1
                if (round_no + index + seed) % 3 == 0:
                    loaded = None  # a new handle
                loaded = replay.catch_up(loaded, paths)
                refreshed, fresh = _locked_refresh(loaded, paths)
                _assert_same(refreshed, fresh)
                loaded = refreshed
                compared[0] += 1
        except BaseException as exc:  # reported by the test below
            failures.append(exc)

    threads = [threading.Thread(target=write, args=(w, i)) for i, w in enumerate(writers)]
    readers = [threading.Thread(target=read, args=(i,)) for i in range(2)]
    for thread in threads + readers:
        thread.start()
    for thread in threads:
        thread.join(120)
    done.set()
    for thread in readers:
        thread.join(120)
    assert not failures, failures[0]
    assert compared[0] > 0
    _assert_same(*_locked_refresh(replay.catch_up(None, paths), paths))
    copies.forget()
