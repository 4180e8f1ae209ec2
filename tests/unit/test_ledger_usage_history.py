"""Usage read from a real ledger: archives and journal together, what happens when archives
are gone or records damaged, and the Prometheus counters made of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gpupoolctl.export.prometheus import render, usage_families
from gpupoolctl.ledger import Ledger
from gpupoolctl.ledger.units import format_ts
from gpupoolctl.ledger.usage import measure

T0 = datetime(2025, 6, 1, tzinfo=UTC)
SLICES = [
    {"id": f"h1/gpu{i}", "host": "h1", "kind": "gpu", "model": "H100", "memory_mib": 81920}
    for i in range(4)
]


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        return self.now

    def hours(self, n: float) -> None:
        self.now += timedelta(hours=n)


@pytest.fixture
def book(tmp_path: Path):
    clock = Clock()
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, actor="t@h", clock=clock)
    ledger.refresh_slices(["h1"], SLICES)

    def hold(slice_id: str, owner: str, team: str | None = None) -> str:
        request = {"team": team} if team else {}
        return ledger.alloc(lambda _s, _n: [slice_id], owner=owner, request=request).value.id

    ledger.hold = hold  # type: ignore[attr-defined]
    ledger.tick = clock.hours  # type: ignore[attr-defined]
    return ledger


def now_of(ledger: Ledger) -> str:
    return format_ts(ledger.clock())


def test_usage_survives_compactions(book):
    first = book.hold("h1/gpu0", "ann", "ml")
    book.tick(2)
    book.release(first)
    book.compact()
    second = book.hold("h1/gpu1", "bob")
    book.tick(1)
    book.compact()
    book.tick(1)  # bob's hold is still open: 2 hours so far
    found = measure(book, now=now_of(book))
    assert found.warnings == []
    assert {(r["team"], r["user"]): r["gpu_hours"] for r in found.rows} == {
        ("ml", "ann"): 2.0,
        ("-", "bob"): 2.0,
    }
    book.release(second)
    assert measure(book, now=now_of(book)).total["gpu_hours"] == 4.0


def test_when_the_oldest_archive_is_gone_usage_starts_at_the_snapshot(book):
    early = book.hold("h1/gpu0", "ann")
    book.tick(2)
    book.release(early)  # ended before the snapshot: lost with the archive
    kept = book.hold("h1/gpu1", "bob")  # open at the snapshot: its creation is known
    book.tick(1)
    book.compact()
    for archive in book.paths.archive_dir.glob("*.jsonl.gz"):
        archive.unlink()
    book.tick(1)
    book.release(kept)
    found = measure(book, now=now_of(book))
    assert [(r["user"], r["gpu_hours"]) for r in found.rows] == [("bob", 2.0)]
    assert found.known_after_seq == 4
    assert any("is gone" in w for w in found.warnings)
    assert any("usage before seq 5 is not known" in w for w in found.warnings)


def test_an_unreadable_archive_starts_over_from_the_snapshot(book):
    early = book.hold("h1/gpu0", "ann")
    book.tick(2)
    book.release(early)
    book.compact()
    (archive,) = book.paths.archive_dir.glob("*.jsonl.gz")
    archive.write_bytes(archive.read_bytes()[:-12])  # truncated: gzip cannot finish it
    found = measure(book, now=now_of(book))
    assert found.rows == []  # nothing half-counted from the part that could be read
    assert any("cannot read archive" in w for w in found.warnings)
    assert found.known_after_seq == 3


def test_a_damaged_journal_line_is_skipped_with_a_warning_as_ledger_show_does(book):
    first = book.hold("h1/gpu0", "ann")
    book.tick(1)
    book.release(first)
    lines = book.path.read_bytes().splitlines(keepends=True)
    lines[1] = lines[1].replace(b'"ann"', b'"eve"')  # the alloc, edited: its crc fails
    book.path.write_bytes(b"".join(lines))
    found = measure(book, now=now_of(book))
    assert found.rows == []
    assert [w for w in found.warnings if "skipped damaged record" in w]


def test_no_ledger_yet_is_no_usage(tmp_path):
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, clock=lambda: T0)
    found = measure(ledger, now=format_ts(T0))
    assert found.rows == [] and found.total["holds"] == 0 and found.warnings == []


def test_prometheus_counters_by_team_and_user(book):
    first = book.hold("h1/gpu0", "ann", "ml")
    book.tick(1.5)
    book.release(first)
    text = render(usage_families(book.read().state, now_of(book)))
    assert "# TYPE gpupoolctl_usage_gpu_hours_total counter" in text
    assert 'gpupoolctl_usage_gpu_hours_total{team="ml",user="ann"} 1.5\n' in text
    assert 'gpupoolctl_usage_gib_hours_total{team="ml",user="ann"} 120.0\n' in text


def test_the_counters_are_the_ledgers_running_totals_across_compactions(book):
    """The export reads no archive: the totals live in the state (and its snapshot), and
    they equal what `usage` sums from the whole history, open holds included."""
    first = book.hold("h1/gpu0", "ann", "ml")
    book.tick(1)
    book.release(first)
    book.compact()
    second = book.hold("h1/gpu0", "bob")
    book.tick(0.5)
    state = book.read().state
    counters = state.usage_counters(now_of(book))
    assert counters[("ml", "ann")] == pytest.approx((80 * 3600, 3600))
    assert counters[("-", "bob")] == pytest.approx((80 * 1800, 1800))
    found = measure(book, now=now_of(book), by=("team", "user"))
    by_key = {(r["team"], r["user"]): r for r in found.rows}
    for key, (gib_s, gpu_s) in counters.items():
        assert by_key[key]["gib_hours"] == pytest.approx(gib_s / 3600)
        assert by_key[key]["gpu_hours"] == pytest.approx(gpu_s / 3600)
    book.release(second)
