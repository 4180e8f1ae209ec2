"""Ledger benchmark: durable alloc+release throughput against SQLite, and read latency after
a long history.

    python bench/ledger/run.py [--procs 8] [--txns 500] [--records 1000000] [--json FILE]

1. Throughput, same workload on both, in one run: --procs processes each do --txns
   transactions of (alloc the best-fitting free slice, then release it) on a 64-slice pool,
   every commit durable.
   * gpupoolctl ledger: flock + append + fdatasync per commit (the library's normal path).
   * SQLite: WAL, synchronous=FULL, BEGIN IMMEDIATE per commit, busy_timeout 60 s; the same
     best-fit SELECT ... ORDER BY memory, id LIMIT 1, an UPDATE and an INSERT.
   Rounds alternate (ledger, SQLite, ledger, ...) and medians are compared, because fsync
   latency on a shared disk drifts. Both are checked afterwards (ledger verify clean;
   SQLite: nothing left held, every allocation released) and the ratio ledger/SQLite is
   printed (target >= 1.0).
2. History: --records lifetime records are written in bulk straight through the journal API
   (journal.encode, no fsync: this is set-up, not the thing measured), then:
   * replay time of the full journal without compaction (a cold Ledger.read()),
   * `ledger compact` time,
   * `gpupoolctl ledger show` wall time after compaction (the CLI in a subprocess, median of
     5; 100 ordinary records written after the compaction so it has something to show),
     with `pool --no-refresh` and `ledger verify` beside it (target for show: < 0.3 s).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from gpupoolctl.jobs.alloc import alloc as hold  # noqa: E402
from gpupoolctl.ledger import Ledger, journal  # noqa: E402
from gpupoolctl.ledger.units import format_ts, utc_now  # noqa: E402
from gpupoolctl.sched import JobRequest  # noqa: E402

POOL = 64
SHOW_TARGET_S = 0.3


def pool_slices(count: int = POOL) -> list[dict[str, Any]]:
    return [
        {
            "id": f"node{i // 8:02d}/gpu{i % 8}",
            "host": f"node{i // 8:02d}",
            "kind": "gpu",
            "profile": None,
            "memory_mib": 81559,
            "uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000",
            "devices": [f"GPU-{i:08x}-0000-0000-0000-000000000000"],
            "vendor": "nvidia",
            "model": "NVIDIA H100 80GB HBM3",
            "bandwidth_class": "ultra",
            "gpu": i % 8,
            "gpu_uuid": f"GPU-{i:08x}-0000-0000-0000-000000000000",
        }
        for i in range(count)
    ]


# -- throughput -------------------------------------------------------------------------------


def ledger_worker(path: str, owner: str, txns: int, barrier: Any) -> None:
    led = Ledger(Path(path), durable=True, actor=f"{owner}@bench")
    led.read()
    barrier.wait()
    for _ in range(txns):
        held = hold(led, JobRequest(), owner=owner).value
        led.release(held.id)


def sqlite_setup(path: str) -> None:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.executescript(
        """
        CREATE TABLE slices (id TEXT PRIMARY KEY, memory_mib INTEGER, holder INTEGER);
        CREATE INDEX slices_fit ON slices (holder, memory_mib, id);
        CREATE TABLE allocations (id INTEGER PRIMARY KEY AUTOINCREMENT, owner TEXT,
            slice TEXT, created TEXT, released TEXT);
        """
    )
    db.executemany(
        "INSERT INTO slices VALUES (?, ?, NULL)",
        [(s["id"], s["memory_mib"]) for s in pool_slices()],
    )
    db.close()


def sqlite_worker(path: str, owner: str, txns: int, barrier: Any) -> None:
    db = sqlite3.connect(path, isolation_level=None, timeout=60)
    db.execute("PRAGMA synchronous=FULL")  # per connection; WAL mode persists in the file
    barrier.wait()
    for _ in range(txns):
        db.execute("BEGIN IMMEDIATE")
        row = db.execute(
            "SELECT id FROM slices WHERE holder IS NULL ORDER BY memory_mib, id LIMIT 1"
        ).fetchone()
        cur = db.execute(
            "INSERT INTO allocations (owner, slice, created) VALUES (?, ?, ?)",
            (owner, row[0], format_ts(utc_now())),
        )
        alloc_id = cur.lastrowid
        db.execute("UPDATE slices SET holder = ? WHERE id = ?", (alloc_id, row[0]))
        db.execute("COMMIT")
        db.execute("BEGIN IMMEDIATE")
        db.execute("UPDATE slices SET holder = NULL WHERE holder = ?", (alloc_id,))
        db.execute(
            "UPDATE allocations SET released = ? WHERE id = ?", (format_ts(utc_now()), alloc_id)
        )
        db.execute("COMMIT")
    db.close()


def run_procs(target: Any, path: str, procs: int, txns: int, *extra: Any) -> float:
    """Seconds for `procs` processes of target(path, owner, txns, barrier, *extra), timed
    from the barrier they all pass once ready."""
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(procs + 1)
    workers = [
        ctx.Process(target=target, args=(path, f"w{i}", txns, barrier, *extra))
        for i in range(procs)
    ]
    for proc in workers:
        proc.start()
    barrier.wait()
    start = time.perf_counter()
    for proc in workers:
        proc.join()
    elapsed = time.perf_counter() - start
    failed = [p.exitcode for p in workers if p.exitcode != 0]
    if failed:
        raise SystemExit(f"{target.__name__}: workers failed with {failed}")
    return elapsed


def ledger_round(folder: Path, procs: int, txns: int) -> float:
    ledger_path = folder / "ledger.jsonl"
    folder.mkdir()
    Ledger(ledger_path).refresh_slices(sorted({s["host"] for s in pool_slices()}), pool_slices())
    elapsed = run_procs(ledger_worker, str(ledger_path), procs, txns)
    report = Ledger(ledger_path).verify()
    records = Ledger(ledger_path).history().records
    allocs = sum(r["op"] == "alloc" for r in records)
    releases = sum(r["op"] == "release" for r in records)
    if not report.ok or allocs != procs * txns or releases != allocs:
        raise SystemExit(f"ledger check failed: ok={report.ok} allocs={allocs} rel={releases}")
    return elapsed


def sqlite_round(folder: Path, procs: int, txns: int) -> float:
    folder.mkdir()
    db_path = str(folder / "pool.sqlite")
    sqlite_setup(db_path)
    elapsed = run_procs(sqlite_worker, db_path, procs, txns)
    db = sqlite3.connect(db_path)
    held = db.execute("SELECT count(*) FROM slices WHERE holder IS NOT NULL").fetchone()[0]
    total, open_ = db.execute("SELECT count(*), sum(released IS NULL) FROM allocations").fetchone()
    db.close()
    if held or open_ or total != procs * txns:
        raise SystemExit(f"sqlite check failed: held={held} open={open_} total={total}")
    return elapsed


def throughput(folder: Path, procs: int, txns: int, rounds: int) -> dict[str, Any]:
    """Alternate ledger and SQLite rounds: fsync latency on shared disks drifts, and both
    should see the same weather. Medians are compared."""
    ledger_runs, sqlite_runs = [], []
    for index in range(rounds):
        ledger_runs.append(ledger_round(folder / f"ledger-{index}", procs, txns))
        sqlite_runs.append(sqlite_round(folder / f"sqlite-{index}", procs, txns))
    n = procs * txns
    ledger_s, sqlite_s = statistics.median(ledger_runs), statistics.median(sqlite_runs)
    return {
        "procs": procs,
        "txns_per_proc": txns,
        "rounds": rounds,
        "transactions": n,
        "commits": 2 * n,
        "ledger_s": round(ledger_s, 3),
        "sqlite_s": round(sqlite_s, 3),
        "ledger_runs_s": [round(x, 3) for x in ledger_runs],
        "sqlite_runs_s": [round(x, 3) for x in sqlite_runs],
        "ledger_txn_per_s": round(n / ledger_s, 1),
        "sqlite_txn_per_s": round(n / sqlite_s, 1),
        "ratio": round(sqlite_s / ledger_s, 3),
    }


# -- history ----------------------------------------------------------------------------------


def bulk_history(path: Path, records: int) -> float:
    """Write `records` records straight through journal.encode: slices, then alloc/release."""
    start = time.perf_counter()
    slices = pool_slices()
    hosts = sorted({s["host"] for s in slices})
    ts = format_ts(utc_now())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        buf: list[bytes] = [
            journal.encode(1, ts, "bench@setup", "slices", {"hosts": hosts, "slices": slices})
        ]
        seq = 1
        while seq < records:
            seq += 1
            index = (seq // 2) % POOL
            if seq % 2 == 0:
                alloc_id = f"a-{seq}"
                data = {
                    "id": alloc_id,
                    "owner": f"user{seq % 17}",
                    "slices": [slices[index]["id"]],
                    "uuids": [slices[index]["uuid"]],
                    "expires": None,
                    "request": {"count": 1},
                }
                buf.append(journal.encode(seq, ts, "bench@setup", "alloc", data))
            else:
                buf.append(
                    journal.encode(seq, ts, "bench@setup", "release", {"id": f"a-{seq - 1}"})
                )
            if len(buf) >= 20000:
                os.write(fd, b"".join(buf))
                buf.clear()
        os.write(fd, b"".join(buf))
    finally:
        os.close(fd)
    return time.perf_counter() - start


def cli_time(args: list[str], runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, "-m", "gpupoolctl.cli.main", *args],
            capture_output=True,
            text=True,
            cwd=REPO_ROOT,
            timeout=120,
        )
        times.append(time.perf_counter() - start)
        if proc.returncode != 0:
            raise SystemExit(f"gpupoolctl {' '.join(args)} failed: {proc.stderr.strip()}")
    return statistics.median(times)


def history(folder: Path, records: int) -> dict[str, Any]:
    path = folder / "hist" / "ledger.jsonl"
    path.parent.mkdir()
    setup_s = bulk_history(path, records)
    size = path.stat().st_size

    start = time.perf_counter()
    state = Ledger(path).read().state
    replay_s = time.perf_counter() - start
    if state.seq != records:
        raise SystemExit(f"replay ended at seq {state.seq}, expected {records}")

    start = time.perf_counter()
    result = Ledger(path).compact().value
    compact_s = time.perf_counter() - start
    archive_size = Path(result["archive"]).stat().st_size

    led = Ledger(path)
    for _ in range(50):
        held = hold(led, JobRequest(), owner="after").value
        led.release(held.id)
    base = ["--ledger", str(path)]
    start = time.perf_counter()
    state_after = Ledger(path).read().state
    read_after_s = time.perf_counter() - start
    show_s = cli_time([*base, "ledger", "show", "-o", "json"])
    show_table_s = cli_time([*base, "ledger", "show"])
    pool_s = cli_time([*base, "pool", "--no-refresh", "-o", "json"])
    verify_s = cli_time([*base, "ledger", "verify"])
    baseline_s = cli_time(["--version"])
    return {
        "records": records,
        "journal_mb": round(size / 1e6, 1),
        "setup_bulk_nofsync_s": round(setup_s, 2),
        "replay_without_compaction_s": round(replay_s, 3),
        "compact_s": round(compact_s, 2),
        "archive_mb": round(archive_size / 1e6, 1),
        "library_read_after_compaction_s": round(read_after_s, 4),
        "lifetime_records_after": state_after.seq,
        "cli_ledger_show_json_s": round(show_s, 3),
        "cli_ledger_show_table_s": round(show_table_s, 3),
        "cli_pool_no_refresh_s": round(pool_s, 3),
        "cli_ledger_verify_s": round(verify_s, 3),
        "cli_version_s": round(baseline_s, 3),
        "show_target_s": SHOW_TARGET_S,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--txns", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3, help="alternating throughput rounds")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--dir", type=Path, default=None, help="work folder (default: a temp)")
    parser.add_argument("--json", type=Path, default=None, help="also write results here")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir, prefix="ledger-bench-") as tmp:
        folder = Path(tmp)
        tp = throughput(folder, args.procs, args.txns, args.rounds)
        print(
            f"throughput ({tp['procs']} procs x {tp['txns_per_proc']} alloc+release, durable, "
            f"median of {tp['rounds']} alternating rounds):\n"
            f"  ledger  {tp['ledger_txn_per_s']:>8} txn/s  (runs {tp['ledger_runs_s']} s)\n"
            f"  sqlite  {tp['sqlite_txn_per_s']:>8} txn/s  (runs {tp['sqlite_runs_s']} s)\n"
            f"  ratio ledger/sqlite = {tp['ratio']}  (target >= 1.0: "
            f"{'met' if tp['ratio'] >= 1.0 else 'NOT met'})",
            flush=True,
        )
        hist = history(folder, args.records)
        print(
            f"history ({hist['records']} records, {hist['journal_mb']} MB journal; set-up written "
            f"in bulk through journal.encode without fsync in {hist['setup_bulk_nofsync_s']} s):\n"
            f"  replay without compaction   {hist['replay_without_compaction_s']} s\n"
            f"  ledger compact              {hist['compact_s']} s "
            f"(archive {hist['archive_mb']} MB gzip)\n"
            f"  read after compaction (lib) {hist['library_read_after_compaction_s']} s\n"
            f"  CLI ledger show -o json     {hist['cli_ledger_show_json_s']} s  (target < "
            f"{SHOW_TARGET_S}: "
            f"{'met' if hist['cli_ledger_show_json_s'] < SHOW_TARGET_S else 'NOT met'})\n"
            f"  CLI ledger show (table)     {hist['cli_ledger_show_table_s']} s\n"
            f"  CLI pool --no-refresh       {hist['cli_pool_no_refresh_s']} s\n"
            f"  CLI ledger verify           {hist['cli_ledger_verify_s']} s\n"
            f"  CLI --version (start-up)    {hist['cli_version_s']} s",
            flush=True,
        )
    results = {
        "machine": {
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
        },
        "throughput": tp,
        "history": hist,
    }
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
