"""Crash points of concurrent, compacting, SIGKILLed ledger writers, by the thousand.

    python bench/ledger/crash.py [--points 10000] [--per-run 100] [--seed 1] [--json FILE]

Each run records a random mix of writers (tests/crashimages.py: `random_mix`, `Mix`) in
forked processes, then checks `--per-run` random crash points of it (a power cut after a
recorded step, or one time in ten a SIGKILL of every writer, and the run's end), until
`--points` are checked. Prints what the runs covered and the verdicts, and every crash point
that broke the invariant (verify finds more than a torn tail, the next writer is refused or
fails, an acknowledged record is lost or changed, a hole in the seqs, a slice held twice),
with its run's folder kept for a look. Exit 1 when any did. The suite runs a short, seeded
sample of the same (tests/integration/test_ledger_crash_images.py).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from tests.crashimages import Run, Tally, crash_points, random_mix, recorded_run  # noqa: E402


def covered(run: Run, counts: Counter[str]) -> None:
    """What the run did: writes acknowledged, compactions (journal swaps), kills by kind."""
    journal = run.paths.journal.name
    for event in run.events:
        if event.kind == "ack":
            counts["acknowledged writes"] += 1
        elif event.kind == "rename" and event.name2 == journal:
            counts["journal swaps (compactions)"] += 1
        elif event.kind == "rename" and event.name2 == run.paths.snapshot.name:
            counts["snapshots written"] += 1
        elif event.kind == "killed":
            counts["writers SIGKILLed"] += 1
            counts["  " + re.sub(r"\d{12}-\d{12}", "FIRST-LAST", event.name)] += 1
    counts["recorded steps"] += len(run.events)
    counts["writer processes"] += len(run.exits)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--per-run", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    tally = Tally()
    counts: Counter[str] = Counter()
    started = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="ledger-crash-"))
    run_no = 0
    while tally.points < args.points:
        mix = random_mix(rng)
        folder = work / f"run-{run_no}"
        run = recorded_run(folder, mix, args.seed * 100_000 + run_no)
        covered(run, counts)
        before = len(tally.failures) + len(tally.writer_errors)
        points = min(args.per_run, args.points - tally.points)
        crash_points(folder, run, rng, points, tally, f"run {run_no} [{mix.describe()}]")
        if len(tally.failures) + len(tally.writer_errors) == before:
            shutil.rmtree(folder)
        run_no += 1
        if run_no % 10 == 0:
            print(
                f"{tally.points} points, {run_no} runs, {len(tally.failures)} failed, "
                f"{time.monotonic() - started:.0f} s",
                flush=True,
            )
    elapsed = time.monotonic() - started
    summary = {
        "seed": args.seed,
        "points": tally.points,
        "runs": run_no,
        "seconds": round(elapsed, 1),
        "covered": dict(counts),
        "verdicts as found": tally.verdicts,
        "next writer": tally.recoveries,
        "failures": len(tally.failures),
        "writer errors": len(tally.writer_errors),
    }
    print(json.dumps(summary, indent=2))
    for line in (tally.failures + tally.writer_errors)[:20]:
        print(line)
    if args.json:
        args.json.write_text(json.dumps(summary | {"first failures": tally.failures[:50]}))
    if not tally.failures and not tally.writer_errors:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if tally.failures or tally.writer_errors else 0


if __name__ == "__main__":
    sys.exit(main())
