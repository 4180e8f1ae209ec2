"""Crash images: writers in real processes sharing syncs (group commit), compacting, some
SIGKILLed; a power cut or a SIGKILL of everyone after a recorded step (tests/crashimages.py:
the model), then the next writer.

The invariant, for every image: `ledger verify` finds at most a torn tail, the next writer
writes without a repair, verify is clean after it, every acknowledged record is in the
history as written, the history has no hole, and nothing is held twice. And real damage
below the watermark is still refused. The long run (10,000+ crash points) is
bench/ledger/crash.py; its results are in bench/ledger/README.md.
"""

from __future__ import annotations

import random
import signal

import pytest

from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, LedgerDamaged, journal, watermark
from gpupoolctl.sched import JobRequest
from tests.crashimages import (
    EventLog,
    Kill,
    Mix,
    Recorder,
    Run,
    Tally,
    check_image,
    crash_points,
    next_write,
    random_mix,
    recorded_run,
    replay,
    replays,
)

WRITERS = 3
ROUNDS = 8  # alloc + release each: 48 acknowledged writes, ~280 recorded steps
IMAGES_PER_STEP = 2


def every_step(run: Run) -> list[int]:
    return list(range(1, len(run.events) + 1))


def assert_all_ok(tally: Tally) -> None:
    assert not tally.writer_errors, tally.writer_errors[:3]
    assert not tally.failures, (len(tally.failures), tally.failures[:3])


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """Concurrent writers, no compaction, nobody killed."""
    return recorded_run(tmp_path_factory.mktemp("plain"), Mix(WRITERS, ROUNDS), seed=11)


@pytest.mark.parametrize("seed", [1, 2])
def test_every_crash_image_recovers_with_every_acknowledged_record(tmp_path, plain_run, seed):
    events = plain_run.events
    assert sum(len(e.records) for e in events if e.kind == "ack") == 1 + 2 * WRITERS * ROUNDS
    assert sum(e.kind == "sync-end" for e in events) >= 2 * WRITERS * ROUNDS
    rng = random.Random(seed)
    tally = Tally()
    for step, disk in replays(events, plain_run.root, every_step(plain_run)):
        for image_no in range(IMAGES_PER_STEP):
            paths = disk.crash(rng).write(tmp_path / f"img-{step}-{image_no}", "ledger.jsonl")
            tally.add(check_image(paths, disk.acks, next_write), f"step {step} #{image_no}")
    assert_all_ok(tally)
    assert tally.verdicts.get("torn", 0) > 0  # the images did tear records


def test_a_record_damaged_above_the_watermark_is_cut_not_refused(tmp_path, plain_run):
    """After every append of the run, the first included (no write is ever made before its
    journal has a watermark): the appended record, not yet synced, is damaged in its middle
    with its newline intact, so it is no torn last line but a broken record above the
    watermark. The next writer cuts it to quarantine and keeps every acknowledged record; it
    never refuses."""
    events = plain_run.events
    appends = [
        i + 1
        for i, e in enumerate(events)
        if e.kind == "write" and e.data.startswith(b'{"v":1,"seq":')
    ]
    assert len(appends) >= 2 * WRITERS * ROUNDS  # every write transaction appends
    for step, disk in replays(events, plain_run.root, appends):
        appended = events[step - 1]
        image = disk.killed()
        damaged = bytearray(image.files["ledger.jsonl"] or b"")
        start = appended.offset + len(appended.data) // 3
        damaged[start : start + len(appended.data) // 3] = b"\0" * (len(appended.data) // 3)
        image.files["ledger.jsonl"] = bytes(damaged)
        paths = image.write(tmp_path / f"torn-{step}", "ledger.jsonl")
        outcome = check_image(paths, disk.acks, next_write)
        assert outcome.ok, (step, outcome)
        assert paths.quarantine.exists(), step


def test_lines_cut_to_the_quarantine_are_kept_once_the_cut_is_durable(tmp_path, plain_run):
    """The next writer copies a crash's damaged tail to P.quarantine, then cuts it from the
    journal and syncs. A power cut after the cut may keep only what was synced; the copy
    must be among it (its file's name too), or the warning's "copied to" would be false."""
    events = plain_run.events
    step = next(
        i + 1
        for i, e in enumerate(events)
        if i > len(events) // 2 and e.kind == "write" and e.data.startswith(b'{"v":1,"seq":')
    )
    appended = events[step - 1]
    image = replay(events, plain_run.root, step).killed()
    torn = bytearray(image.files["ledger.jsonl"] or b"")
    torn[appended.offset + 40 : appended.offset + 60] = b"\0" * 20
    image.files["ledger.jsonl"] = bytes(torn)
    paths = image.write(tmp_path / "image", "ledger.jsonl")
    recorder = Recorder(EventLog(tmp_path / "recovery.log"))
    recorder.adopt(paths.folder)
    adopted = len(recorder.log.read())
    with recorder.installed():
        done = Ledger(paths.journal, actor="next@h", autocompact=0).write(next_write)
    assert any("copied to" in w for w in done.warnings), done.warnings
    recovery = recorder.log.read()
    cut_durable = 0
    for at, disk in replays(recovery, paths.folder, list(range(adopted, len(recovery) + 1))):
        files = disk.synced_only().files
        if len(files.get("ledger.jsonl") or b"") > appended.offset:
            continue  # the cut is not durable yet
        cut_durable += 1
        kept = files.get("ledger.jsonl.quarantine") or b""
        assert b'"line":' in kept, (at, sorted(files))
    assert cut_durable


def test_real_damage_below_the_watermark_is_still_refused(tmp_path, plain_run):
    rng = random.Random(3)
    events = plain_run.events
    checked = 0
    steps = list(range(len(events) // 2, len(events) + 1, 7))
    for step, disk in replays(events, plain_run.root, steps):
        image = disk.crash(rng)
        mark = watermark.decode(image.files.get("ledger.jsonl.synced") or b"")
        journal_bytes = bytearray(image.files["ledger.jsonl"] or b"")
        if mark is None or mark.end < 300:
            continue
        offsets = [o for o, _, _ in journal.iter_buffer(bytes(journal_bytes[: mark.end]))]
        victim = rng.choice(offsets[:-1] or offsets)
        journal_bytes[victim + 12] ^= 0x04  # a bit flipped on bytes a sync had covered
        image.files["ledger.jsonl"] = bytes(journal_bytes)
        paths = image.write(tmp_path / f"bad-{step}", "ledger.jsonl")
        with pytest.raises(LedgerDamaged, match="damaged record"):
            hold(Ledger(paths.journal, actor="next@h", autocompact=0), JobRequest(), owner="n")
        checked += 1
    assert checked >= 5


def test_a_compactor_killed_after_its_rename_loses_nothing_acknowledged(tmp_path):
    """A writer compacting by itself is SIGKILLed just after renaming the new, empty journal
    into place, before the folder's fsync that makes the rename durable; the writer after it
    appends there and acknowledges. After a power cut that keeps only what was synced, the
    folder may still name the old journal: every acknowledged record must survive that."""
    mix = Mix(writers=1, rounds=4, autocompact=3, kills=(Kill(1, "after", "rename ledger.jsonl"),))
    run = recorded_run(tmp_path / "rec", mix, seed=5)
    assert [e.status for e in run.exits] == [-signal.SIGKILL, 0]
    died = next(i for i, e in enumerate(run.events) if e.kind == "died")
    steps = [i + 1 for i, e in enumerate(run.events) if e.kind == "ack" and i > died]
    assert steps  # the replacement acknowledged writes
    tally = Tally()
    for step, disk in replays(run.events, run.root, steps):
        paths = disk.synced_only().write(tmp_path / f"img-{step}", "ledger.jsonl")
        tally.add(check_image(paths, disk.acks, next_write), f"step {step}")
    assert_all_ok(tally)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_compacting_writers_killed_at_random_keep_the_invariant(tmp_path, seed):
    """A short, seeded sample of the long run: random writer mixes (compacting by themselves
    and by `ledger compact`, SIGKILLed before, after or half-way through a call, replaced),
    random crash points of each."""
    rng = random.Random(seed)
    tally = Tally()
    for number in range(2):
        mix = random_mix(rng)
        folder = tmp_path / f"run-{number}"
        run = recorded_run(folder, mix, seed * 100 + number)
        crash_points(folder, run, rng, 60, tally, f"seed {seed} run {number} [{mix.describe()}]")
    assert_all_ok(tally)
