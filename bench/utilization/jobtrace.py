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
    vendor: str | None = None  # "nvidia" | "amd" | None (any)
    site: str | None = None  # where the job comes from (contended day)
    pinned: bool = False  # must run at its site (a host glob of the site's hosts)


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


# == The contended day =========================================================================
#
# GPU supply as it really is: short. Two sites, each with its own clock; inference by day,
# training by night, in each site's local time. Every number below says what it stands for;
# none was adjusted after looking at a benchmark result (the only ones chosen with the
# benchmark's cost in mind are the inference durations: see INFERENCE_MEDIAN_S).
#
# Time: t = 0 is 00:00 UTC (08:00 in Singapore, 04:00 in Dubai), the day window is
# [0, 24 h) of arrivals, and the pool starts empty (no work left over from a previous night).

HOUR = 3600

# UTC offsets of the bundled pool's two sites (inventories/sim.yaml: `site` group vars).
SITE_UTC_OFFSET_H = {"singapore": 8, "dubai": 4}

# What each site has, by vendor (inventories/sim.yaml): a job pinned to a site asks only for
# a vendor the site has (Singapore has no AMD card, so its pinned jobs never ask `amd`).
SITE_VENDORS = {"singapore": ("nvidia",), "dubai": ("nvidia", "amd")}

# Where the work comes from: the two sites' users in equal shares. The pool is split about
# 43% / 57% by memory (Singapore 1,440 GiB, Dubai 1,870 GiB); users are not where the cards
# are, which is why a pool spans sites at all.
SITE_SHARE = {"singapore": 0.5, "dubai": 0.5}

# Relative inference arrival rate per *local* hour (index 0 = 00:00-01:00 local): office
# hours 09:00-18:00 at the full rate; the hours around them (07:00-09:00 commute and early
# starts, 18:00-21:00 evening work) at half; the night at a sixth (on-call, scheduled jobs,
# other continents' users of the same services).
BUSINESS_CURVE = [1 / 6] * 7 + [0.5] * 2 + [1.0] * 9 + [0.5] * 3 + [1 / 6] * 3

# Relative training arrival rate per local hour: people launch training when they leave
# (18:00-24:00 local at the full rate) and queued or scheduled runs start through the
# night (00:00-06:00 at half); by day a few (a fifth) for debugging runs.
TRAINING_CURVE = [0.5] * 6 + [0.2] * 12 + [1.0] * 6

# Demand, as a share of the pool's physical GPU memory (the same denominator as the
# utilization): during its own office hours, one site's inference alone asks for
# INFERENCE_PEAK_LOAD of the *whole* pool (expected memory in use if every job ran the moment
# it arrived). Office hours of Singapore (01-10 UTC) and Dubai (05-14 UTC) overlap for five
# hours, when the two together ask for 1.6x the pool; with the night's training still
# running, demand is above capacity through both sites' business hours: supply is short.
INFERENCE_PEAK_LOAD = 0.8
# Each site's training at its evening rate asks for this share of the pool: the nights of
# the two sites overlap (Singapore 18:00 local = 10:00 UTC, Dubai 18:00 = 14:00 UTC), and
# the runs last hours, so by night the pool is about full of training.
TRAINING_PEAK_LOAD = 0.5

# Inference memory per job (one GPU): the model plus its KV cache or a notebook's working
# set. Most are small (3..20 GB: 1-8B parameter models in 16 bit, quantized 13-30B);
# INFERENCE_LARGE_SHARE of them are 20..40 GB (13B in 16 bit with a long context, 30B in
# 8 bit). Discrete sizes, as model sizes are (and as `--mem 12G` requests are).
INFERENCE_SMALL_GB = [(3, 20), (5, 20), (8, 20), (12, 15), (16, 15), (20, 10)]
INFERENCE_LARGE_GB = [(24, 40), (30, 35), (40, 25)]
INFERENCE_LARGE_SHARE = 0.2

# Inference durations: log-normal, median INFERENCE_MEDIAN_S, clipped to [2 min, 8 h]. They
# stand for serving replicas scaled up for the day and interactive sessions, which run for
# an hour or so, not for single requests. This is the one constant with the benchmark's
# cost in view: for the same memory demand, shorter jobs mean proportionally more of them
# (20-minute jobs would mean ~11,000 a day and a replay too slow for the 2-minute budget).
INFERENCE_MEDIAN_S = 3600
INFERENCE_SIGMA = 0.9  # the reference day's spread: about 1 in 6 runs over 2.5x the median
INFERENCE_CLIP_S = (120, 8 * HOUR)

# Training: GPUs on one node (8 = a whole DGX or the whole MI300X node), weights from a pool
# where most runs are fine-tunes on 1-2 GPUs and a few are big.
TRAINING_GPUS = [(1, 30), (2, 30), (4, 25), (8, 15)]
# Memory per GPU: TRAINING_WHOLE_SHARE need a whole 80 GB-class card (60..78 GB: full
# fine-tunes of 7-13B models, large batches); the rest 20..40 GB (LoRA, small models).
TRAINING_WHOLE_SHARE = 0.5
TRAINING_WHOLE_GB = (60, 78)
TRAINING_SMALL_GB = [(20, 30), (30, 40), (40, 30)]
# Durations log-uniform between 1 h and 10 h: an overnight run ends by the next morning.
TRAINING_HOURS = (1.0, 10.0)

# Vendor: most jobs run anywhere (PyTorch on CUDA or ROCm); some need CUDA-only kernels
# (nvidia) and some are tuned for or booked on ROCm (amd).
VENDOR_SHARES = [(None, 60), ("nvidia", 25), ("amd", 15)]

# Inference that must stay at its site (latency to users, data residency): host-pinned.
INFERENCE_PINNED_SHARE = 0.4

# The bundled pool's physical GPU memory: every card whole (what simpool.pool_slices
# ("training") returns); loads above are shares of this.
POOL_MEMORY_MIB = 3_389_632


def mean_lognormal_clipped(median: float, sigma: float, low: float, high: float) -> float:
    """Mean of min(high, max(low, X)), X log-normal (numerically: 4,000 quantiles)."""
    from statistics import NormalDist

    normal = NormalDist(math.log(median), sigma)
    n = 4000
    return sum(min(high, max(low, math.exp(normal.inv_cdf((i + 0.5) / n)))) for i in range(n)) / n


def _mean(table: list[tuple[int, int]]) -> float:
    return sum(v * w for v, w in table) / sum(w for _, w in table)


def inference_jobs_per_site(capacity_mib: int = POOL_MEMORY_MIB) -> int:
    """How many inference jobs a site sends in a day: the rate at which, at the full office
    hours rate, memory in use would be INFERENCE_PEAK_LOAD x the pool (Little's law)."""
    mean_gb = (1 - INFERENCE_LARGE_SHARE) * _mean(INFERENCE_SMALL_GB)
    mean_gb += INFERENCE_LARGE_SHARE * _mean(INFERENCE_LARGE_GB)
    mean_s = mean_lognormal_clipped(INFERENCE_MEDIAN_S, INFERENCE_SIGMA, *INFERENCE_CLIP_S)
    peak_per_s = INFERENCE_PEAK_LOAD * capacity_mib / (mean_gb * GB * mean_s)
    return round(peak_per_s * HOUR * sum(BUSINESS_CURVE))


def training_jobs_per_site(capacity_mib: int = POOL_MEMORY_MIB) -> int:
    """Training jobs a site sends in a day, at TRAINING_PEAK_LOAD of the pool at the
    evening rate (Little's law, as for inference)."""
    per_gpu_gb = TRAINING_WHOLE_SHARE * sum(TRAINING_WHOLE_GB) / 2
    per_gpu_gb += (1 - TRAINING_WHOLE_SHARE) * _mean(TRAINING_SMALL_GB)
    low, high = TRAINING_HOURS
    mean_s = (high - low) / math.log(high / low) * HOUR  # mean of a log-uniform
    memory = _mean(TRAINING_GPUS) * per_gpu_gb * GB
    peak_per_s = TRAINING_PEAK_LOAD * capacity_mib / (memory * mean_s)
    return round(peak_per_s * HOUR * sum(TRAINING_CURVE))


def make_contended_trace(seed: int = 2025, capacity_mib: int = POOL_MEMORY_MIB) -> list[Job]:
    rng = random.Random(seed)
    jobs: list[Job] = []
    n_inference = inference_jobs_per_site(capacity_mib)
    n_training = training_jobs_per_site(capacity_mib)
    for site in sorted(SITE_SHARE):
        offset = SITE_UTC_OFFSET_H[site]
        count = round(2 * SITE_SHARE[site] * n_inference)
        for n in range(count):
            pinned = rng.random() < INFERENCE_PINNED_SHARE
            vendor = _vendor(rng, SITE_VENDORS[site] if pinned else None)
            table = (
                INFERENCE_LARGE_GB if rng.random() < INFERENCE_LARGE_SHARE else INFERENCE_SMALL_GB
            )
            duration = rng.lognormvariate(math.log(INFERENCE_MEDIAN_S), INFERENCE_SIGMA)
            jobs.append(
                Job(
                    id=f"inf-{site[:2]}-{n:05d}",
                    kind="inference",
                    arrival=_local_curve(rng, BUSINESS_CURVE, offset),
                    duration=min(INFERENCE_CLIP_S[1], max(INFERENCE_CLIP_S[0], duration)),
                    gpus=1,
                    memory_mib=math.ceil(_weighted(rng, table) * GB),
                    priority=50,
                    vendor=vendor,
                    site=site,
                    pinned=pinned,
                )
            )
        count = round(2 * SITE_SHARE[site] * n_training)
        for n in range(count):
            if rng.random() < TRAINING_WHOLE_SHARE:
                memory_gb: float = rng.uniform(*TRAINING_WHOLE_GB)
            else:
                memory_gb = _weighted(rng, TRAINING_SMALL_GB)
            low, high = TRAINING_HOURS
            jobs.append(
                Job(
                    id=f"train-{site[:2]}-{n:03d}",
                    kind="training",
                    arrival=_local_curve(rng, TRAINING_CURVE, offset),
                    duration=math.exp(rng.uniform(math.log(low), math.log(high))) * HOUR,
                    gpus=_weighted(rng, TRAINING_GPUS),
                    memory_mib=math.ceil(memory_gb * GB),
                    priority=10,
                    vendor=_vendor(rng, None),
                    site=site,
                )
            )
    jobs.sort(key=lambda j: (j.arrival, j.id))
    return jobs


def _vendor(rng: random.Random, allowed: tuple[str, ...] | None) -> str | None:
    """A vendor from VENDOR_SHARES; a pinned job re-draws until its site has the vendor
    (or none is asked)."""
    while True:
        pick = rng.uniform(0, sum(w for _, w in VENDOR_SHARES))
        vendor = VENDOR_SHARES[-1][0]
        for value, weight in VENDOR_SHARES:
            pick -= weight
            if pick <= 0:
                vendor = value
                break
        if allowed is None or vendor is None or vendor in allowed:
            return vendor


def _local_curve(rng: random.Random, curve: list[float], utc_offset_h: int) -> float:
    """An arrival time in [0, DAY) UTC whose local hour follows `curve` (rejection sampling)."""
    top = max(curve)
    while True:
        t = rng.uniform(0, DAY)
        local_hour = int((t / HOUR + utc_offset_h) % 24)
        if rng.random() * top < curve[local_hour]:
            return t


def local_hour(t: float, site: str) -> int:
    return int((t / HOUR + SITE_UTC_OFFSET_H[site]) % 24)


def offered_load(jobs: list[Job], t: float) -> int:
    """MiB the jobs would use at time t if each ran the moment it arrived."""
    return sum(j.memory_mib * j.gpus for j in jobs if j.arrival <= t < j.arrival + j.duration)
