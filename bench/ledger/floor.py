"""The floor of a durable flat-file ledger in Python, against SQLite, on this machine.

    python bench/ledger/floor.py [--procs 8] [--txns 500] [--rounds 3]

Not the ledger: the least a correct writer of an append-only JSON-lines journal must do per
record, so that bench/ledger's ratio can be read against what the design allows. Each of
`--procs` processes runs `--txns` alloc+release pairs on a 64-slice pool, one record each:
take the exclusive flock, catch up on the records others appended (check each line's CRC,
parse its JSON, apply it to a set of free slices), pick the best-fitting free slice, append
one line with its CRC, let the lock go, fdatasync (group commit: writers queued behind a
sync share it, as the ledger does). Left out, on purpose: the pool view and placement
policy, the watermark file, the secret scan, expiry, the journal's re-open per transaction.
The peer is bench/ledger's own SQLite side (WAL, synchronous=FULL, BEGIN IMMEDIATE), in the
same run, rounds alternating; a round without any fdatasync shows what the syncs cost.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import statistics
import sys
import tempfile
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import pool_slices, run_procs, sqlite_setup, sqlite_worker  # noqa: E402

TS = "2026-12-05T00:00:00.000Z"


def encode(record: dict[str, Any]) -> bytes:
    body = json.dumps(record, separators=(",", ":")).encode()
    return b"%s %08x\n" % (body, zlib.crc32(body))


class Writer:
    """One process's view of the journal: the free slices and where it has read up to."""

    def __init__(self, path: str, owner: str) -> None:
        self.owner = owner
        self.lock = os.open(path + ".lock", os.O_RDWR | os.O_CREAT, 0o600)
        self.fd = os.open(path, os.O_RDWR | os.O_APPEND)
        self.order = [
            s["id"] for s in sorted(pool_slices(), key=lambda s: (s["memory_mib"], s["id"]))
        ]
        self.free = set(self.order)
        self.held: dict[str, str] = {}
        self.read_to = 0
        self.partial = b""
        self.seq = 0

    def catch_up(self) -> None:
        end = os.fstat(self.fd).st_size
        if end <= self.read_to:
            return
        data = self.partial + os.pread(self.fd, end - self.read_to, self.read_to)
        self.read_to = end
        lines = data.split(b"\n")
        self.partial = lines.pop()
        for line in lines:
            body, crc = line.rsplit(b" ", 1)
            if int(crc, 16) != zlib.crc32(body):
                raise SystemExit(f"{self.owner}: damaged record")
            self.apply(json.loads(body))

    def apply(self, record: dict[str, Any]) -> None:
        self.seq = record["seq"]
        if record["op"] == "alloc":
            self.free.discard(record["slice"])
            self.held[record["id"]] = record["slice"]
        else:
            self.free.add(self.held.pop(record["id"]))

    def commit(self, op: str, alloc_id: str, sync: bool) -> None:
        fcntl.flock(self.lock, fcntl.LOCK_EX)
        try:
            self.catch_up()
            record: dict[str, Any] = {"v": 1, "seq": self.seq + 1, "ts": TS, "actor": self.owner}
            if op == "alloc":
                chosen = next(s for s in self.order if s in self.free)
                record.update(op="alloc", id=alloc_id, slice=chosen)
            else:
                record.update(op="release", id=alloc_id)
            data = encode(record)
            os.write(self.fd, data)
            self.read_to += len(data)
            self.apply(record)
        finally:
            fcntl.flock(self.lock, fcntl.LOCK_UN)
        if sync:
            os.fdatasync(self.fd)


def writer(path: str, owner: str, txns: int, barrier: Any, sync: bool = True) -> None:
    w = Writer(path, owner)
    barrier.wait()
    for i in range(txns):
        w.commit("alloc", f"{owner}-{i}", sync)
        w.commit("release", f"{owner}-{i}", sync)


def check(path: Path, procs: int, txns: int) -> None:
    """Every alloc released, every line whole: the floor is a correct writer too."""
    lines = path.read_bytes().splitlines()
    ops = [json.loads(line.rsplit(b" ", 1)[0])["op"] for line in lines]
    if ops.count("alloc") != procs * txns or ops.count("release") != procs * txns:
        raise SystemExit(f"floor check failed: {len(lines)} records")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--procs", type=int, default=8)
    parser.add_argument("--txns", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    runs: dict[str, list[float]] = {"floor": [], "floor, no fdatasync": [], "sqlite": []}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            folder = Path(tmp) / str(index)
            folder.mkdir()
            for name, sync in (("floor", True), ("floor, no fdatasync", False)):
                journal = folder / f"{'sync' if sync else 'nosync'}.jsonl"
                journal.touch()
                runs[name].append(run_procs(writer, str(journal), args.procs, args.txns, sync))
                check(journal, args.procs, args.txns)
            database = str(folder / "pool.sqlite")
            sqlite_setup(database)
            runs["sqlite"].append(run_procs(sqlite_worker, database, args.procs, args.txns))
    n = args.procs * args.txns
    print(f"{args.procs} procs x {args.txns} alloc+release, median of {args.rounds} rounds:")
    for name, times in runs.items():
        rate = n / statistics.median(times)
        print(f"  {name:20s} {rate:8.0f} txn/s  runs {[round(t, 2) for t in times]}")
    ratio = statistics.median(runs["sqlite"]) / statistics.median(runs["floor"])
    print(f"  floor/sqlite = {ratio:.2f}")


if __name__ == "__main__":
    main()
