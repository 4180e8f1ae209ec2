"""Automatic compaction, and the finished jobs a snapshot keeps."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.errors import UsageError
from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger
from gpupoolctl.ledger import snapshot as snapshot_module
from gpupoolctl.ledger.ledger import (
    AUTOCOMPACT_ENV,
    DEFAULT_AUTOCOMPACT,
    autocompact_from_env,
)
from gpupoolctl.sched import JobRequest

T0 = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
SLICES = [
    {"id": f"n1/gpu{i}", "host": "n1", "kind": "gpu", "memory_mib": 81920, "uuid": f"U-{i}"}
    for i in range(4)
]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now


def make_ledger(tmp_path: Path, clock: Clock, autocompact: int) -> Ledger:
    led = Ledger(
        tmp_path / "ledger.jsonl",
        durable=False,
        actor="t@box",
        clock=clock,
        autocompact=autocompact,
    )
    led.refresh_slices(["n1"], SLICES)
    return led


def archives(led: Ledger) -> list[Path]:
    folder = led.paths.archive_dir
    return sorted(folder.glob("*.jsonl.gz")) if folder.is_dir() else []


def test_a_writer_compacts_once_the_journal_holds_the_threshold(tmp_path: Path) -> None:
    led = make_ledger(tmp_path, Clock(), autocompact=5)
    for _ in range(6):  # 1 slices record + 12 alloc/release records
        led.release(hold(led, JobRequest(), owner="amy").value.id)
    # Compacted after records 5 and 10: two archives, the journal holds what came since.
    assert [p.name for p in archives(led)] == [
        "000000000001-000000000005.jsonl.gz",
        "000000000006-000000000010.jsonl.gz",
    ]
    assert len(led.path.read_text().splitlines()) == 3
    everything = led.history(everything=True).records
    assert [r["seq"] for r in everything] == list(range(1, 14))
    assert led.verify().ok
    fresh = Ledger(led.path, durable=False).read().state
    assert fresh.seq == 13 and not fresh.allocations and len(fresh.slices) == 4


def test_zero_never_compacts_by_itself(tmp_path: Path) -> None:
    led = make_ledger(tmp_path, Clock(), autocompact=0)
    for _ in range(20):
        led.release(hold(led, JobRequest(), owner="amy").value.id)
    assert archives(led) == [] and len(led.path.read_text().splitlines()) == 41


def test_a_failed_automatic_compaction_is_a_warning_and_the_write_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    led = make_ledger(tmp_path, Clock(), autocompact=2)

    def broken(*_args: object, **_kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(snapshot_module, "compact", broken)
    done = hold(led, JobRequest(), owner="amy")
    assert any("automatic compaction failed" in w for w in done.warnings)
    state = Ledger(led.path, durable=False).read().state
    assert done.value.id in state.allocations


def finish(led: Ledger, job_id: str) -> None:
    with led.transaction() as tx:
        tx.append("job", {"id": job_id, "state": "running", "owner": "amy"})
    with led.transaction() as tx:
        tx.append("job", {"id": job_id, "state": "done", "exit_code": 0})


def test_compaction_keeps_the_jobs_that_ended_in_the_last_week(tmp_path: Path) -> None:
    clock = Clock()
    led = make_ledger(tmp_path, clock, autocompact=0)
    finish(led, "j-old")
    clock.now = T0 + timedelta(days=8)
    finish(led, "j-new")
    led.compact()
    state = Ledger(led.path, durable=False).read().state
    assert list(state.finished) == ["j-new"]
    assert state.finished["j-new"]["exit_code"] == 0 and state.jobs == {}


def test_compaction_keeps_at_most_the_newest_finished_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(snapshot_module, "FINISHED_KEEP_MAX", 2)
    clock = Clock()
    led = make_ledger(tmp_path, clock, autocompact=0)
    for n in range(4):
        clock.now = T0 + timedelta(minutes=n)
        finish(led, f"j-{n}")
    led.compact()
    assert sorted(Ledger(led.path, durable=False).read().state.finished) == ["j-2", "j-3"]


def test_env_value() -> None:
    assert autocompact_from_env({}) == DEFAULT_AUTOCOMPACT
    assert autocompact_from_env({AUTOCOMPACT_ENV: " "}) == DEFAULT_AUTOCOMPACT
    assert autocompact_from_env({AUTOCOMPACT_ENV: "0"}) == 0


@given(st.integers(min_value=0, max_value=10**9))
def test_env_whole_numbers_are_taken(number: int) -> None:
    assert autocompact_from_env({AUTOCOMPACT_ENV: str(number)}) == number


@given(
    st.one_of(
        st.sampled_from(["²", "１２", "-1", "1.5", "1e3", "10k"]), st.text(min_size=1)
    ).filter(lambda t: t.strip() and not (t.strip().isascii() and t.strip().isdigit()))
)
def test_env_anything_else_is_a_usage_error_naming_the_variable(text: str) -> None:
    with pytest.raises(UsageError) as caught:
        autocompact_from_env({AUTOCOMPACT_ENV: text})
    assert AUTOCOMPACT_ENV in str(caught.value) and "whole number" in str(caught.value)


def test_a_writer_that_keeps_the_journal_open_follows_another_ones_compaction(
    tmp_path: Path,
) -> None:
    """A writer keeps the journal open between transactions; when another writer compacts
    (a new journal is put in place), its next record goes to the new journal, not to the
    old file it still has open, and nothing is lost."""
    clock = Clock()
    first = make_ledger(tmp_path, clock, autocompact=0)
    second = Ledger(first.path, durable=False, actor="u@box", clock=clock, autocompact=0)
    held = hold(first, JobRequest(), owner="ann").value
    before = first.path.stat().st_ino
    second.compact()
    assert first.path.stat().st_ino != before  # a new journal at the path
    first.release(held.id)
    again = hold(first, JobRequest(), owner="ann").value
    fresh = Ledger(first.path, durable=False)
    state = fresh.read().state
    assert held.id in state.closed and again.id in state.allocations
    assert fresh.verify().ok
    assert [r["op"] for r in fresh.history().records][-2:] == ["release", "alloc"]
