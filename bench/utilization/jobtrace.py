"""The fixed job trace: one day of mixed work, generated from a seed (same seed, same trace).

- Inference / notebooks (the many): arrivals all day, three times denser 08:00-20:00; one
  GPU each, durations log-normal (median 20 min, 2 min..4 h), priority normal.
- Training (the few): 1, 2 or 4 GPUs on one node, 1..6 h, priority low, arrivals spread
  over the day.

Two job mixes (memory is what a job really uses, per GPU; a slice must have at least that):

- "issue" (default), as the issue describes the day: *small* inference jobs (3..20 GB) and
  *whole-card* training jobs (60..78 GB per GPU: an 80 GB class card or more).
- "broad": the first cut of this benchmark: inference 3..60 GB (15% of them 30 or 60 GB),
  training 30..75 GB per GPU. Kept because it was measured first (see README).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

GB = 10**9 / 2**20  # MiB per decimal GB, as `--mem 10G` means
DAY = 24 * 3600

MIXES: dict[str, dict[str, object]] = {
    "issue": {
        "inference_gb": [(3, 25), (5, 25), (8, 20), (12, 15), (16, 10), (20, 5)],
        "training_gb": (60, 78),
    },
    "broad": {
        "inference_gb": [(3, 20), (5, 20), (8, 20), (12, 15), (18, 10), (30, 10), (60, 5)],
        "training_gb": (30, 75),
    },
}


@dataclass(frozen=True)
class Job:
    id: str
    kind: str  # "inference" | "training"
    arrival: float  # seconds from the start of the day
    duration: float  # seconds of run time
    gpus: int
    memory_mib: int  # per GPU
    priority: int


def make_trace(
    seed: int = 2025, inference: int = 1800, training: int = 48, mix: str = "issue"
) -> list[Job]:
    rng = random.Random(seed)
    inference_gb: list[tuple[int, int]] = MIXES[mix]["inference_gb"]  # type: ignore[assignment]
    low, high = MIXES[mix]["training_gb"]  # type: ignore[misc]
    jobs: list[Job] = []
    for n in range(inference):
        jobs.append(
            Job(
                id=f"inf-{n:04d}",
                kind="inference",
                arrival=_diurnal(rng),
                duration=min(4 * 3600, max(120, rng.lognormvariate(math.log(1200), 0.9))),
                gpus=1,
                memory_mib=math.ceil(_weighted(rng, inference_gb) * GB),
                priority=50,
            )
        )
    for n in range(training):
        jobs.append(
            Job(
                id=f"train-{n:03d}",
                kind="training",
                arrival=rng.uniform(0, DAY - 3600),
                duration=rng.uniform(3600, 6 * 3600),
                gpus=rng.choice([1, 2, 2, 4, 4]),
                memory_mib=math.ceil(rng.uniform(low, high) * GB),
                priority=10,
            )
        )
    jobs.sort(key=lambda j: (j.arrival, j.id))
    return jobs


def _diurnal(rng: random.Random) -> float:
    """An arrival time: 08:00-20:00 three times as likely as the night hours."""
    while True:
        t = rng.uniform(0, DAY)
        busy = 8 * 3600 <= t < 20 * 3600
        if rng.random() < (1.0 if busy else 1 / 3):
            return t


def _weighted(rng: random.Random, table: list[tuple[int, int]]) -> int:
    total = sum(w for _, w in table)
    pick = rng.uniform(0, total)
    for value, weight in table:
        pick -= weight
        if pick <= 0:
            return value
    return table[-1][0]
