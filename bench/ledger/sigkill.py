"""Real SIGKILLs of concurrent, compacting ledger writers, round after round.

    python bench/ledger/sigkill.py [--rounds 300] [--workers 4] [--autocompact 7] [--seed 1]

`--workers` processes alloc and release on one durable ledger, compacting by themselves every
`--autocompact` records. Each round SIGKILLs one of them at a random moment (it may be
appending, syncing, raising the watermark or compacting), every third round a tearer dies
holding the lock half-way through a record (a batch line, or part of a line), then
`Ledger.verify` runs while the others write, and the victim is started again. At the end:
everyone killed, a last tearer, `gpupoolctl ledger verify --all` (expected: exit 4, the torn
tail only), one more write (it cuts the tail), `ledger verify --all` again (expected: exit
0), and every acknowledged alloc and release checked in the whole history (archives
included). Prints the verdicts seen and exits 1 on any other.
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from gpupoolctl.jobs.alloc import alloc as hold  # noqa: E402
from gpupoolctl.ledger import Ledger  # noqa: E402
from gpupoolctl.sched import JobRequest  # noqa: E402
from tests.ledgerwriters import (  # noqa: E402
    TEARER,
    WORKER,
    acknowledged,
    check_history,
    env,
    gpu_pool,
    start,
)


def cli_verify(path: Path) -> tuple[int, str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gpupoolctl.cli.main",
            "--ledger",
            str(path),
            "-o",
            "json",
            "ledger",
            "verify",
            "--all",
        ],
        capture_output=True,
        text=True,
        env=env(),
        cwd=REPO_ROOT,
        timeout=120,
    )
    kinds = sorted(p["kind"] for p in json.loads(done.stdout)["problems"]) if done.stdout else []
    return done.returncode, ",".join(kinds) or "ok"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=300)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--autocompact", type=int, default=7)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    path = Path(tempfile.mkdtemp(prefix="ledger-sigkill-")) / "ledger.jsonl"
    Ledger(path).refresh_slices([f"n{i}" for i in range(8)], gpu_pool(64))
    compact = str(args.autocompact)

    def worker(owner: str, seed: int) -> subprocess.Popen[str]:
        return start(WORKER, str(path), owner, str(seed), "-1", "1", compact)

    started = time.monotonic()
    slots = {f"w{i}": worker(f"w{i}", i) for i in range(args.workers)}
    outputs: list[str] = []
    verdicts: Counter[str] = Counter()
    tearers = 0
    for round_no in range(1, args.rounds + 1):
        time.sleep(rng.uniform(0.01, 0.15))
        owner = rng.choice(sorted(slots))
        slots[owner].send_signal(signal.SIGKILL)
        outputs.append(slots[owner].communicate()[0])
        if round_no % 3 == 0:
            mode = "batch" if round_no % 2 else "cut"
            start(TEARER, str(path), str(round_no), mode).communicate(timeout=60)
            tearers += 1
        report = Ledger(path).verify()
        verdicts[",".join(sorted({p.kind for p in report.problems})) or "ok"] += 1
        slots[owner] = worker(owner, 1000 + round_no)
        if round_no % 50 == 0:
            print(f"{round_no} rounds, {time.monotonic() - started:.0f} s", flush=True)
    for proc in slots.values():
        proc.send_signal(signal.SIGKILL)
        outputs.append(proc.communicate()[0])
    start(TEARER, str(path), "0", "cut").communicate(timeout=60)
    final_torn = cli_verify(path)
    done = hold(Ledger(path), JobRequest(), owner="final")
    final_clean = cli_verify(path)
    allocs, releases, warnings = acknowledged(outputs)
    allocs[done.value.id] = done.value.slices
    history = "ok"
    try:
        check_history(path, allocs, releases)
    except AssertionError as exc:
        history = f"FAILED: {exc}"
    snap = json.loads(path.with_name(path.name + ".snapshot").read_text())
    summary = {
        "seed": args.seed,
        "rounds (SIGKILLs)": args.rounds,
        "tearers": tearers,
        "workers": args.workers,
        "autocompact": args.autocompact,
        "seconds": round(time.monotonic() - started, 1),
        "records": snap["seq"] + Ledger(path).verify().journal_records,
        "archives (compactions)": len(snap["archives"]),
        "acknowledged allocs / releases": [len(allocs), len(releases)],
        "torn tails cut by workers (warnings)": sum("interrupted writer" in w for w in warnings),
        "verify after each round": dict(verdicts),
        "ledger verify --all after the last tearer": final_torn,
        "ledger verify --all after one more write": final_clean,
        "acknowledged history": history,
    }
    print(json.dumps(summary, indent=2))
    allowed = set(verdicts) <= {"ok", "torn"}
    good = allowed and final_torn == (4, "torn") and final_clean == (0, "ok") and history == "ok"
    return 0 if good else 1


if __name__ == "__main__":
    sys.exit(main())
