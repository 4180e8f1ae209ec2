"""bench/utilization: the contended day's trace, the day-window measures and bound, the
replay's re-cut plumbing (the elastic extension point) and its queue trimming.

The bench modules are scripts, not a package: they are imported as the bench's own
scripts import each other, with bench/utilization on sys.path.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tests.benchpath  # noqa: F401  # bench/utilization's scripts on sys.path

# isort: split
import jobtrace
import window
from jobtrace import HOUR, Job, local_hour, make_contended_trace, offered_load
from replay import PassContext, Recut, Run, replay

from gpupoolctl.sched import JobRequest

GIB = 1024


@pytest.fixture(scope="module")
def trace() -> list[Job]:
    return make_contended_trace(2025)


# -- the trace ---------------------------------------------------------------------------------


def test_contended_trace_is_seeded() -> None:
    first, again = make_contended_trace(11), make_contended_trace(11)
    assert first == again
    assert first != make_contended_trace(12)


def _per_hour(jobs: list[Job], site: str, hours: range) -> float:
    return sum(1 for j in jobs if local_hour(j.arrival, site) in hours) / len(hours)


@pytest.mark.parametrize("site", ["singapore", "dubai"])
def test_inference_by_local_day_training_by_local_night(trace: list[Job], site: str) -> None:
    inference = [j for j in trace if j.kind == "inference" and j.site == site]
    training = [j for j in trace if j.kind == "training" and j.site == site]
    office, night, evening = range(9, 18), range(0, 6), range(18, 24)
    # office hours at the full rate, the night at a sixth: at least 3x, whatever the seed
    assert _per_hour(inference, site, office) > 3 * _per_hour(inference, site, night)
    # training: the local evening at full rate, office hours at a fifth
    assert _per_hour(training, site, evening) > 2 * _per_hour(training, site, office)


def test_time_zones_shift_the_peaks(trace: list[Job]) -> None:
    """In UTC, Singapore's office hours (01-10) come before Dubai's (05-14)."""

    def busiest_utc_hour(site: str) -> int:
        counts = [0] * 24
        for job in trace:
            if job.kind == "inference" and job.site == site:
                counts[int(job.arrival // HOUR)] += 1
        return counts.index(max(counts))

    assert 1 <= busiest_utc_hour("singapore") < 10
    assert 5 <= busiest_utc_hour("dubai") < 14


def test_demand_above_capacity_in_business_hours(trace: list[Job]) -> None:
    capacity = jobtrace.POOL_MEMORY_MIB
    # both sites in office hours (05-10 UTC) and Dubai's afternoon (to 14 UTC)
    for hour in range(5, 14):
        assert offered_load(trace, hour * HOUR + 1800) > capacity, hour
    assert offered_load(trace, 23 * HOUR + 1800) < capacity  # both sites' late night


def test_mix_of_vendors_sizes_and_gpus(trace: list[Job]) -> None:
    vendors = [j.vendor for j in trace]
    assert vendors.count(None) > len(trace) / 2
    assert vendors.count("nvidia") > 0 and vendors.count("amd") > 0
    # Singapore has no AMD card: its pinned jobs never ask for one
    assert not [j for j in trace if j.pinned and j.site == "singapore" and j.vendor == "amd"]
    inference = [j for j in trace if j.kind == "inference"]
    assert all(j.gpus == 1 for j in inference)
    gb = [j.memory_mib / jobtrace.GB for j in inference]
    assert min(gb) >= 2.9 and max(gb) <= 40.1
    assert 0.1 < sum(1 for g in gb if g > 20.1) / len(gb) < 0.3  # some 20..40 GB
    training = [j for j in trace if j.kind == "training"]
    assert {j.gpus for j in training} == {1, 2, 4, 8}
    assert any(j.memory_mib > 60 * jobtrace.GB for j in training)  # whole 80 GB cards


# -- the day-window measures -------------------------------------------------------------------


def _job(name: str, kind: str, arrival: float, duration: float, mib: int, gpus: int = 1) -> Job:
    return Job(name, kind, arrival, duration, gpus, mib, 50)


def test_window_metrics_known_answer() -> None:
    """A pool of 100 MiB, a window of 100 s."""
    jobs = [
        _job("a", "inference", 0, 50, 40),  # runs 10..60: 50 s inside, finished
        _job("b", "training", 20, 100, 10, gpus=2),  # runs 30..130: 70 s inside
        _job("c", "inference", 50, 10, 30),  # still queued at 100: waited >= 50 s
        _job("d", "inference", 60, 10, 500),  # refused
        _job("e", "inference", 120, 10, 10),  # after the window: not counted
    ]
    run = Run("t", total_mib=100)
    run.starts.update({"a": 10, "b": 30, "e": 120})
    run.ends.update({"a": 60, "b": 130, "e": 130})
    run.held_mib.update({"a": 50, "b": 40, "e": 10})
    run.refused.append("d")
    run.waiting.append("c")
    got = window.metrics(run, jobs, window=100)
    assert got["utilization"] == pytest.approx((40 * 50 + 10 * 2 * 70) / (100 * 100))
    assert got["held_utilization"] == pytest.approx((50 * 50 + 40 * 70) / (100 * 100))
    assert got["finished"] == 1
    assert got["refused"] == 1
    assert got["queued_at_end"] == 1
    inference = got["by_class"]["inference"]
    assert inference["jobs"] == 3 and inference["finished"] == 1
    # waits: a 10 s, c >= 50 s (censored): p50 is the higher of the two, censored
    assert inference["p95_wait_min"] == pytest.approx(50 / 60) and inference["p95_censored"]
    training = got["by_class"]["training"]
    assert training["p50_wait_min"] == pytest.approx(10 / 60) and not training["p50_censored"]


def test_bound_known_answers() -> None:
    # one job that fits: all its work inside the window is possible
    jobs = [_job("a", "inference", 50, 1000, 50)]
    assert window.bound(jobs, 100, window=100, step=10) == {
        "simple": pytest.approx(0.25),
        "refined": pytest.approx(0.25),
    }
    # demand of twice the pool, but only from half-way: the pool starts empty, so no
    # schedule reaches more than half (the simple bound says 100%)
    late = [_job("b", "inference", 50, 50, 200)]
    got = window.bound(late, 100, window=100, step=10)
    assert got["simple"] == pytest.approx(1.0)
    assert got["refined"] == pytest.approx(0.5)


# -- the replay: re-cut plumbing and queue trimming -------------------------------------------


def _gpu(host: str, gpu: int, mib: int, suffix: str = "", **extra: Any) -> dict[str, Any]:
    sid = f"{host}/gpu{gpu}{suffix}"
    return {
        "id": sid,
        "host": host,
        "gpu": gpu,
        "kind": extra.pop("kind", "gpu"),
        "memory_mib": mib,
        "vendor": "nvidia",
        "island": f"{host}/island0",
        "uuid": sid,
        "gpu_uuid": f"{host}-{gpu}",
        **extra,
    }


def _request(job: Job) -> JobRequest:
    return JobRequest(gpus=job.gpus, memory_mib=job.memory_mib, same_node=job.gpus > 1)


def test_recut_plumbing() -> None:
    """One re-cut of h/gpu0 into two 40 GiB slices, decided at the pass after its job ended
    (t=90), cost 10 s: the new slices appear at t=100."""
    pool = [_gpu("h", 0, 80 * GIB), _gpu("h", 1, 80 * GIB)]
    new = [_gpu("h", 0, 40 * GIB, "/mig0", kind="mig"), _gpu("h", 0, 40 * GIB, "/mig1", kind="mig")]
    jobs = [
        _job("first", "training", 0, 90, 70 * GIB),  # best-fit: h/gpu0 (first in order)
        _job("keep", "training", 1, 1000, 70 * GIB),  # h/gpu1, all along
        _job("x", "inference", 95, 50, 30 * GIB),  # arrive during the re-cut's cost
        _job("y", "inference", 97, 50, 30 * GIB),
    ]
    seen: list[tuple[float, list[str], str | None]] = []
    recut_hold: dict[float, str | None] = {}  # time -> who holds h/gpu0 (while it exists)

    def hook(ctx: PassContext) -> list[Recut]:
        keep = ctx.view.holder("h/gpu1")
        seen.append((ctx.now, sorted(ctx.slices), keep.alloc if keep else None))
        if "h/gpu0" in ctx.slices:
            old = ctx.view.holder("h/gpu0")
            recut_hold[ctx.now] = old.alloc if old else None
        if ctx.now >= 90 and not ctx.recutting and "h/gpu0" in ctx.slices:
            return [Recut("h/gpu0", new)]
        return []

    run = replay("t", jobs, pool, 160 * GIB, _request, lambda j: 50, hook=hook, recut_cost=10)
    assert run.starts["first"] == 0 and run.held_mib["first"] == 80 * GIB  # was on h/gpu0
    assert run.recuts == [(90, "h/gpu0")]
    assert run.starts["keep"] == 1 and run.ends["keep"] == 1001  # never disturbed
    # nothing landed on h/gpu0 during the cost: x and y wait until its new slices appear
    assert run.starts["x"] == 100 and run.starts["y"] == 100
    assert run.held_mib["x"] == run.held_mib["y"] == 40 * GIB  # on the new slices
    # During the cost the card keeps its old slice, held by the re-cut (as production's
    # reshape record holds it), and the new ones are not there yet.
    during = [ids for now, ids, _ in seen if 90 < now < 100]
    assert len(during) == 2 and all(ids == ["h/gpu0", "h/gpu1"] for ids in during)
    assert {t: h for t, h in recut_hold.items() if 90 < t < 100} == {
        95: "reshape:h/gpu0",
        97: "reshape:h/gpu0",
    }
    after = [ids for now, ids, _ in seen if now >= 100]
    assert after[0] == ["h/gpu0/mig0", "h/gpu0/mig1", "h/gpu1"]
    assert all(h == "keep" for now, _, h in seen if 1 <= now < 1001)  # hold re-applied
    assert run.rebuilds == 1  # old slices out and new slices in, at once


def test_recut_of_a_held_gpu_is_refused() -> None:
    pool = [_gpu("h", 0, 80 * GIB)]
    jobs = [_job("a", "inference", 0, 100, 10 * GIB)]

    def hook(ctx: PassContext) -> list[Recut]:
        return [Recut("h/gpu0", [_gpu("h", 0, 40 * GIB, "/mig0", kind="mig")])]

    with pytest.raises(AssertionError, match="slices held"):
        replay("t", jobs, pool, 80 * GIB, _request, lambda j: 50, hook=hook)


def test_trimmed_queue_places_the_same() -> None:
    """The contended day's first hours on a small pool (a long queue): trimming the queue
    changes nothing the passes decide, with and without a pass cadence."""
    pool = [_gpu("a", g, 40 * GIB) for g in range(4)] + [_gpu("b", g, 80 * GIB) for g in range(2)]
    jobs = [
        j
        for j in make_contended_trace(5)
        if j.arrival < 3 * HOUR and j.memory_mib <= 80 * GIB and j.gpus <= 4
    ]
    assert len(jobs) > 300
    for cadence in (None, 60.0):
        plain = replay("p", jobs, pool, 320 * GIB, _request, lambda j: j.priority,
                       pass_interval=cadence, until=4 * HOUR)  # fmt: skip
        trim = replay("t", jobs, pool, 320 * GIB, _request, lambda j: j.priority,
                      pass_interval=cadence, until=4 * HOUR, trim=True)  # fmt: skip
        assert len(plain.waiting) > 100  # the queue was long
        assert trim.starts == plain.starts
        assert trim.waiting == plain.waiting


# -- the elastic column: the one scheduler's re-cuts, made in virtual time -------------------


def _dgx_replay(tmp_path: Path, more_policy: str | None) -> Run:
    """Ten 8 GiB jobs (one a second, an hour each) on the idle whole H100 node sg-dgx01,
    passes every minute; with `more_policy` (None: static) under an elastic section that
    may cut H100s into 1g.10gb / 3g.40gb at once, followed by `more_policy`."""
    import run as bench
    import simpool

    slices = [s for s in simpool.pool_slices("training") if s["host"] == "sg-dgx01"]
    total = sum(s["memory_mib"] for s in slices)
    jobs = [_job(f"j{n}", "inference", n, 3600, 8 * GIB) for n in range(10)]
    if more_policy is None:
        return replay("s", jobs, slices, total, _request, lambda j: 50, pass_interval=60)
    policy = tmp_path / "pool.yaml"
    policy.write_text(
        "version: 1\nelastic:\n  min-idle: 0s\n  batch-window: 30s\n  rules:\n"
        "    - hosts: h100\n      profiles: [1g.10gb, 3g.40gb]\n" + more_policy
    )
    return replay(
        "e", jobs, slices, total, _request, lambda j: 50, pass_interval=60, recut_cost=10,
        pool_policy=bench.pool_policy(policy), in_hosts=bench.inventory_hosts(), until=3 * 3600,
    )  # fmt: skip


def test_elastic_column_replays_the_schedulers_recuts(tmp_path: Path) -> None:
    """Ten 8 GiB jobs on one idle whole H100 node: without elastic each holds a whole
    80 GB card; with the policy's elastic section, schedule_pass's own re-cuts are made
    (the card out of the pool for the cost) and the jobs run on 1g.10gb slices."""
    static = _dgx_replay(tmp_path, None)
    elastic = _dgx_replay(tmp_path, "")
    assert static.recuts == [] and len(set(static.held_mib.values())) == 1
    assert max(static.held_mib.values()) > 79 * GIB  # a whole card each
    # The first pass (t=0) waits: the batch window; the next (t=60) re-cuts two cards
    # (7 + 3 slices wanted); their slices appear after the 10 s cost, at the next pass.
    assert [t for t, _ in elastic.recuts] == [60, 60]
    assert all(gpu.startswith("sg-dgx01/gpu") for _, gpu in elastic.recuts)
    assert sorted(elastic.starts.values()) == [120] * 10
    assert all(mib == 9984 for mib in elastic.held_mib.values())  # 1g.10gb each


def test_elastic_column_applies_the_policys_time_windows(tmp_path: Path) -> None:
    """The elastic column reads the elastic section in force at each pass, as production's
    pass does: a window that keeps cards whole all day (elastic off) stops the re-cuts the
    section alone would make. (The replay once read the section and ignored windows, where
    production and bench/shares applied them.)"""
    window = (
        "windows:\n  - name: keep-whole\n    timezone: UTC\n    days: daily\n"
        '    hours: "00:00-12:00"\n    elastic:\n      enabled: false\n'
    )
    kept = _dgx_replay(tmp_path, window)
    assert kept.recuts == []  # the window is in force for the whole replay: no re-cut
    assert max(kept.held_mib.values()) > 79 * GIB  # the jobs run on whole cards
    # 8 whole cards, 8 jobs at a time: the last two start when the first ones end
    assert sum(1 for t in kept.starts.values() if t < 3600) == 8


def test_granular_bound_counts_what_slices_waste() -> None:
    """A 100 MiB pool for 100 s; slices of 40 or 100 MiB. A 30 MiB job holds a 40 MiB
    slice (ratio 0.75), a 60 MiB one a 100 MiB slice (0.6): the held capacity (10,000
    MiB s) goes to the 30 MiB jobs first."""
    jobs = [
        _job("a", "inference", 0, 100, 30),  # holds 40 x 100 = 4,000, uses 3,000
        _job("b", "inference", 0, 100, 30),  # the same
        _job("c", "inference", 0, 100, 60),  # holds 100 x 100: only 2,000 held left
    ]
    sizes = {"nvidia": [40, 100], "amd": [100]}
    # 3,000 + 3,000 + 60 x 100 x 0.2 = 7,200 of 10,000
    assert window.granular_bound(jobs, 100, sizes, window=100) == pytest.approx(0.72)
    # the fluid bound ignores the slices: everything fits (120 MiB of demand on 100)
    assert window.bound(jobs, 100, window=100, step=10)["simple"] == 1.0
