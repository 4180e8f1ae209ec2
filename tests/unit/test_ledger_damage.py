"""Injected damage: torn tails, corrupted and missing lines, damaged snapshots; compaction."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, LedgerDamaged, journal
from gpupoolctl.ledger.snapshot import Snapshot
from gpupoolctl.ledger.snapshot import write as write_snapshot
from gpupoolctl.sched import JobRequest


def make_slices(n: int = 6) -> list[dict]:
    return [
        {
            "id": f"n1/gpu{i}",
            "host": "n1",
            "kind": "gpu",
            "profile": None,
            "memory_mib": 1000 + i,
            "uuid": f"U{i}",
        }
        for i in range(n)
    ]


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    led = Ledger(tmp_path / "ledger.jsonl", durable=False, actor="t@h")
    led.refresh_slices(["n1"], make_slices())
    for _ in range(4):
        hold(led, JobRequest(), owner="alice")
    led.release("a-3")
    return led  # seq 1..6


def fresh(led: Ledger) -> Ledger:
    return Ledger(led.path, durable=False, actor="t@h")


def records(led: Ledger, **kw) -> list[dict]:
    return fresh(led).history(**kw).records


def damage_line(path: Path, number: int) -> None:
    rows = path.read_bytes().split(b"\n")
    rows[number - 1] = rows[number - 1].replace(b'"data":{', b'"data":{"x":1,')
    path.write_bytes(b"\n".join(rows))


def test_torn_tail_is_cut_by_the_next_writer_with_a_warning(ledger):
    good = ledger.path.read_bytes()
    partial = journal.encode(7, "2025-01-01T00:00:00.000Z", "x@y", "release", {"id": "a-2"})[:30]
    with open(ledger.path, "ab") as out:
        out.write(partial)
    reader = fresh(ledger)
    view = reader.read()
    assert any("ignored" in w for w in view.warnings)  # readers never write
    assert ledger.path.read_bytes() == good + partial
    assert [p.kind for p in reader.verify().problems] == ["torn"]
    done = hold(reader, JobRequest(), owner="bob")
    assert any(
        ":7: unterminated last line (30 bytes" in w and "removed" in w for w in done.warnings
    )
    assert ledger.path.read_bytes().startswith(good)
    assert fresh(ledger).verify().ok
    assert done.value.id == "a-7"


def test_torn_batch_is_cut_whole(ledger):
    first = journal.encode(7, "2025-01-01T00:00:00.000Z", "x@y", "release", {"id": "a-2"}, (1, 2))
    with open(ledger.path, "ab") as out:
        out.write(first)  # the second line of the batch never made it
    done = fresh(ledger).release("a-2")
    assert any("incomplete last batch" in w for w in done.warnings)
    assert [r["op"] for r in records(ledger)][-1] == "release"
    assert fresh(ledger).verify().ok


def test_middle_damage_blocks_writers_until_repair(ledger, tmp_path):
    damage_line(ledger.path, 3)
    writer = fresh(ledger)
    with pytest.raises(LedgerDamaged) as caught:
        hold(writer, JobRequest(), owner="bob")
    message = str(caught.value)
    assert message.startswith(f"{ledger.path}:3: damaged record: checksum mismatch")
    assert "ledger repair" in message and "\n" not in message
    report = writer.verify()
    # the damaged alloc a-3 is also why releasing it later looks wrong; no separate gap
    assert [p.kind for p in report.problems] == ["damaged", "history"]
    assert any("skipped damaged" in w for w in writer.history().warnings)

    result = writer.repair().value
    assert result.repaired and result.quarantined == 1 and result.kept == 5
    assert result.gaps == [[3, 3]]
    quarantined = [json.loads(x) for x in ledger.paths.quarantine.read_text().splitlines()]
    assert quarantined[0]["line"] == 3 and '"x":1' in quarantined[0]["text"]
    assert oct(ledger.paths.quarantine.stat().st_mode & 0o777) == "0o600"
    assert fresh(ledger).verify().ok
    assert [r["seq"] for r in records(ledger)] == [1, 2, 4, 5, 6, 7]
    assert records(ledger)[-1]["op"] == "repair"
    assert hold(writer, JobRequest(), owner="bob").value.id == "a-8"
    assert writer.repair().value.repaired is False


def test_damaged_last_complete_line_is_not_silently_dropped(ledger):
    damage_line(ledger.path, 6)
    with pytest.raises(LedgerDamaged, match=":6: "):
        hold(fresh(ledger), JobRequest(), owner="bob")
    result = fresh(ledger).repair().value
    # seq 6 may have been acknowledged: the repair record takes 7, never reusing 6
    assert result.gaps == [[6, 6]]
    assert records(ledger)[-1]["seq"] == 7


def test_missing_line_is_a_gap_until_repair(ledger):
    rows = ledger.path.read_bytes().split(b"\n")
    del rows[2]
    ledger.path.write_bytes(b"\n".join(rows))
    with pytest.raises(LedgerDamaged, match=r"records 3\.\.3 are missing"):
        hold(fresh(ledger), JobRequest(), owner="bob")
    assert [p.kind for p in fresh(ledger).verify().problems] == ["gap", "history"]
    assert fresh(ledger).repair().value.gaps == [[3, 3]]
    assert fresh(ledger).verify().ok


def test_garbage_lines_never_traceback(ledger):
    with open(ledger.path, "ab") as out:
        out.write(b"\x00\xff not json\n")
        out.write(journal.encode(7, "2025-01-01T00:00:00.000Z", "x@y", "release", {"id": "a-2"}))
    with pytest.raises(LedgerDamaged, match=":7: damaged record"):
        fresh(ledger).release("a-2")
    assert fresh(ledger).repair().value.quarantined == 1
    assert fresh(ledger).read().state.holders.get("n1/gpu1") is None  # a-2 released


def test_compaction_keeps_history_and_verify_agrees(ledger):
    before_all = records(ledger, everything=True)
    before_state = fresh(ledger).read().state
    before_report = fresh(ledger).verify().to_dict()
    result = fresh(ledger).compact().value
    assert result["compacted"] and result["records"] == 6
    assert ledger.path.read_bytes() == b""
    assert records(ledger, everything=True) == before_all
    assert records(ledger, since_seq=5) == before_all[4:]
    history = fresh(ledger).history()
    assert history.records == [] and history.archived == 6
    assert fresh(ledger).read().state == before_state
    after = fresh(ledger).verify(deep=True).to_dict()
    for key in ("ok", "seq", "slices", "allocations", "problems"):
        assert after[key] == before_report[key]
    hold(fresh(ledger), JobRequest(), owner="bob")
    fresh(ledger).compact()
    assert [r["seq"] for r in records(ledger, everything=True)] == list(range(1, 8))
    assert fresh(ledger).verify(deep=True).ok


def test_interrupted_compaction_leaves_a_readable_ledger(ledger):
    # Crash after the snapshot rename but before the empty journal replaced the old one.
    state = fresh(ledger).read().state
    write_snapshot(
        ledger.paths,
        Snapshot(state.seq, "2025-01-01T00:00:00.000Z", "t@h", state.to_dict()),
        durable=False,
    )
    again = fresh(ledger)
    assert again.read().state == state
    assert again.verify().ok
    assert hold(again, JobRequest(), owner="bob").value.id == "a-7"
    assert fresh(ledger).compact().value["records"] == 1


def test_damaged_snapshot_is_rebuilt_from_archives(ledger):
    fresh(ledger).compact()
    hold(fresh(ledger), JobRequest(), owner="bob")
    state = fresh(ledger).read().state
    raw = ledger.paths.snapshot.read_bytes()
    ledger.paths.snapshot.write_bytes(raw.replace(b"alice", b"mallo"))
    with pytest.raises(LedgerDamaged, match="snapshot checksum"):
        fresh(ledger).read()
    assert [p.kind for p in fresh(ledger).verify().problems] == ["snapshot"]
    result = fresh(ledger).repair().value
    assert result.snapshot_rebuilt
    assert fresh(ledger).read().state == state
    assert fresh(ledger).verify(deep=True).ok
    assert os.path.exists(str(ledger.paths.snapshot) + ".damaged")


def test_archive_damage_found_by_deep_verify(ledger):
    fresh(ledger).compact()
    archive = next(ledger.paths.archive_dir.iterdir())
    archive.write_bytes(archive.read_bytes()[:-8])
    assert fresh(ledger).verify().ok  # the everyday check does not read history
    kinds = {p.kind for p in fresh(ledger).verify(deep=True).problems}
    assert kinds == {"archive"}
