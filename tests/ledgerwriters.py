"""Real writer processes on one ledger, for the tests and bench/ledger/sigkill.py: a worker
that allocs and releases and says what was acknowledged, a tearer that dies half-way
through a record while holding the lock, and the check of a history against what the
workers were told."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpupoolctl.ledger import Ledger

REPO = Path(__file__).resolve().parents[1]

# A writer: random alloc/release of its own holds; prints ACK/REL only after the commit
# (fsync) returned, so every printed line is an acknowledged operation.
WORKER = r"""
import random, sys
from gpupoolctl.ledger import Ledger, NothingFits
from gpupoolctl.sched import JobRequest
from gpupoolctl.jobs.alloc import alloc as hold
path, owner, seed, steps, durable, autocompact = sys.argv[1:7]
rng = random.Random(int(seed))
led = Ledger(path, durable=durable == "1", actor=f"{owner}@test", autocompact=int(autocompact))
out = sys.stdout
def say(text):
    out.write(text + "\n"); out.flush()
mine = [a.id for a in led.read().state.allocations.values() if a.owner == owner]
step = 0
while int(steps) < 0 or step < int(steps):
    step += 1
    if mine and (rng.random() < 0.5 or len(mine) > 2):
        alloc_id = mine.pop(rng.randrange(len(mine)))
        done = led.release(alloc_id)
        say(f"REL {alloc_id}")
    else:
        try:
            done = hold(led, JobRequest(gpus=rng.choice([1, 1, 2])), owner=owner)
        except NothingFits:
            say("FULL")
            continue
        mine.append(done.value.id)
        say(f"ACK {done.value.id} {' '.join(done.value.slices)}")
    for warning in done.warnings:
        say(f"WARN {warning}")
"""

# Dies holding the write lock after writing part of a record (or one line of a 2-line batch).
TEARER = r"""
import os, random, signal, sys
from gpupoolctl.ledger import journal
from gpupoolctl.ledger.lock import FileLock
from gpupoolctl.ledger.paths import LedgerPaths
path, seed, mode = sys.argv[1:4]
paths = LedgerPaths(__import__("pathlib").Path(path))
rng = random.Random(int(seed))
lock = FileLock(paths.lock)
with lock.exclusive():
    line = journal.encode(10**9, "2025-01-01T00:00:00.000Z", "tearer@test", "release",
                          {"id": "a-1"}, (1, 2) if mode == "batch" else None)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND)
    os.write(fd, line if mode == "batch" else line[: rng.randrange(1, len(line))])
    os.kill(os.getpid(), signal.SIGKILL)
"""


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}


def gpu_pool(count: int) -> list[dict]:
    return [
        {
            "id": f"n{i // 8}/gpu{i % 8}",
            "host": f"n{i // 8}",
            "kind": "gpu",
            "profile": None,
            "memory_mib": 40960,
            "uuid": f"U{i}",
        }
        for i in range(count)
    ]


def start(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env(),
        cwd=REPO,
    )


def acknowledged(outputs: list[str]) -> tuple[dict[str, list[str]], set[str], list[str]]:
    allocs: dict[str, list[str]] = {}
    releases: set[str] = set()
    warnings: list[str] = []
    for text in outputs:
        complete = text if text.endswith("\n") else text[: text.rfind("\n") + 1]
        for line in complete.splitlines():
            kind, _, rest = line.partition(" ")
            if kind == "ACK":
                alloc_id, *slices = rest.split()
                allocs[alloc_id] = slices
            elif kind == "REL":
                releases.add(rest)
            elif kind == "WARN":
                warnings.append(rest)
    return allocs, releases, warnings


def check_history(path: Path, allocs: dict[str, list[str]], releases: set[str]) -> None:
    ledger = Ledger(path, durable=False)
    report = ledger.verify(deep=True)
    assert report.ok, [p.to_dict() for p in report.problems]
    records = ledger.history(everything=True).records
    seqs = [r["seq"] for r in records]
    assert seqs == list(range(1, len(seqs) + 1))
    recorded = {r["data"]["id"]: r["data"]["slices"] for r in records if r["op"] == "alloc"}
    assert len(recorded) == sum(1 for r in records if r["op"] == "alloc")  # no id twice
    for alloc_id, slices in allocs.items():
        assert recorded.get(alloc_id) == slices, alloc_id
    released = [r["data"]["id"] for r in records if r["op"] == "release"]
    assert len(released) == len(set(released))
    assert releases <= set(released)
    # Independent of the library's own checks: replay holds by hand, no slice taken twice.
    held: dict[str, str] = {}
    for record in records:
        data = record["data"]
        if record["op"] == "alloc":
            for slice_id in data["slices"]:
                assert slice_id not in held, (record["seq"], slice_id, held[slice_id])
                held[slice_id] = data["id"]
        elif record["op"] in ("release", "expire"):
            for alloc_id in data.get("ids", [data.get("id")]):
                held = {k: v for k, v in held.items() if v != alloc_id}
