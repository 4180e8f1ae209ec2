"""bench/shares: the replay's reclaim (stop, grace, requeue with the remaining work, no
double hold), the independent guarantee check, the measures, the split and window rules,
and the two policy files.

The bench modules are scripts, not a package: imported with bench/utilization on sys.path
and bench/shares after it (test_bench_utilization's `import run` must find bench/utilization's
run.py), and bench/shares/run.py under a name of its own.
"""

from __future__ import annotations

import importlib.util
import itertools
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

_REPO = Path(__file__).resolve().parents[2]
_SHARES = _REPO / "bench" / "shares"
for _path in (str(_REPO), str(_REPO / "bench" / "utilization")):
    if _path not in sys.path:
        sys.path.insert(0, _path)
if str(_SHARES) not in sys.path:  # last: bench/utilization's `run` must stay the one found
    sys.path.append(str(_SHARES))

import sharereplay  # noqa: E402
from jobtrace import Job  # noqa: E402
from replay import T0  # noqa: E402

from gpupoolctl.policy.model import (  # noqa: E402
    GPU_MEMORY,
    PoolPolicy,
    QuotaScope,
    Team,
    TeamsPolicy,
)
from gpupoolctl.sched import JobRequest  # noqa: E402

GIB = 1024
HOUR = 3600.0


def _bench_run() -> Any:
    spec = importlib.util.spec_from_file_location("gpupool_bench_shares_run", _SHARES / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bench() -> Any:
    return _bench_run()


def _card(host: str, gpu: int, mib: int = 80 * GIB, site: str = "x") -> dict[str, Any]:
    uuid = f"GPU-{host}-{gpu}"
    return {
        "id": f"{host}/gpu{gpu}",
        "kind": "gpu",
        "profile": None,
        "memory_mib": mib,
        "uuid": uuid,
        "devices": [uuid],
        "island": f"{host}/island0",
        "site": site,
        "host": host,
        "gpu": gpu,
        "gpu_uuid": uuid,
        "vendor": "nvidia",
        "model": "NVIDIA H100 80GB HBM3",
        "bandwidth_class": "ultra",
    }


def _job(name: str, kind: str, arrival: float, duration: float, gib: int, priority: int) -> Job:
    return Job(name, kind, arrival, duration, 1, gib * GIB, priority, site="x")


def _request(job: Job) -> JobRequest:
    return JobRequest(gpus=1, memory_mib=job.memory_mib, team=job.kind)


def _even(per_team_gib: int) -> PoolPolicy:
    """Both teams with the same nominal: the policy the replay's snapshots read."""
    scope = QuotaScope(line=0, site="x", nominal={GPU_MEMORY: per_team_gib * GIB})
    teams = tuple(Team(team, 0, quota=(scope,)) for team in ("inference", "training"))
    return PoolPolicy(teams=TeamsPolicy(teams))


def test_reclaim_requeues_the_victim_with_its_remaining_work() -> None:
    """Two cards, one per team's nominal; training borrows the second, inference reclaims
    it: the victim's slices are free after the grace period, it is requeued with what its
    last checkpoint did not save, and it runs again once the card is free."""
    slices = [_card("h", 0), _card("h", 1)]
    jobs = [
        _job("t1", "training", 0, 10 * HOUR, 70, 10),
        _job("t2", "training", 0, 10 * HOUR, 70, 10),
        _job("i1", "inference", 4500, HOUR, 30, 50),
    ]
    run = sharereplay.replay("t", jobs, slices, 160 * GIB, _request, _even(80), until=24 * HOUR)
    assert [(r.at, r.by, r.team, r.reclaim) for r in run.reclaims] == [
        (4500.0, "i1", "inference", True)
    ]
    (victim,) = run.reclaims[0].victims
    assert victim == "t2"  # the one that borrowed (t1 is within training's nominal)
    first, second = run.tries[victim]
    # stopped at the end of the 30 s grace, 4,530 s into its run: two checkpoints (3,600 s)
    assert (first.start, first.end, first.stopped, first.useful_s) == (0.0, 4530.0, True, 3600.0)
    assert run.tries["i1"][0].start == 4560.0  # the next pass after the card is free
    assert run.tries["i1"][0].slices == first.slices  # on the card the victim left
    # requeued when it stopped; starts again when i1 ends (a pass on the minute)
    assert run.queued[victim] == [[0.0, 0.0], [4530.0, 8160.0]]
    assert second.start == 8160.0 and second.end == 8160.0 + 10 * HOUR - 3600.0
    assert not second.stopped
    assert run.violations == []
    rows = sharereplay.team_metrics(
        run,
        jobs,
        lambda j: j.kind,
        {"inference": 80.0 * GIB * 24 * HOUR, "training": 80.0 * GIB * 24 * HOUR},
        {"x": 0},
        24 * HOUR,
    )
    training = rows["teams"]["training"]
    assert training["reclaims_suffered"] == 1
    assert training["lost_gib_h"] == pytest.approx(70 * 930 / HOUR)  # 4,530 - 3,600 s lost
    # work kept: t1's 10 h, t2's 1 h checkpointed + its second try's 9 h
    assert training["work_gib_h"] == pytest.approx(70 * 20)
    assert training["finished"] == 2 and rows["teams"]["inference"]["finished"] == 1
    # t2 waited 0 s, then 8,160 - 4,530 s once requeued: waits count every queued stretch
    assert training["all_p95_wait_min"] == pytest.approx((8160 - 4530) / 60)
    assert rows["violations"] == 0


def test_no_double_hold_and_a_victim_that_ends_during_its_grace_is_done() -> None:
    """A victim whose work ends inside its grace period finishes (it is not requeued), and
    no slice is ever held twice (PoolView.hold refuses that; the replay asserts it)."""
    slices = [_card("h", 0), _card("h", 1)]
    jobs = [
        _job("t1", "training", 0, 10 * HOUR, 70, 10),
        _job("t2", "training", 0, 4510, 70, 10),  # ends 10 s after it is signalled
        _job("i1", "inference", 4500, HOUR, 30, 50),
    ]
    run = sharereplay.replay("t", jobs, slices, 160 * GIB, _request, _even(80), until=24 * HOUR)
    assert run.reclaims[0].victims == ("t2",)
    assert len(run.tries["t2"]) == 1 and not run.tries["t2"][0].stopped
    assert run.finished["t2"] == 4510.0
    for job_id, tries in run.tries.items():
        for a, b in itertools.pairwise(tries):
            assert a.end <= b.start, job_id
    by_slice: dict[str, list[tuple[float, float]]] = {}
    for tries in run.tries.values():
        for attempt in tries:
            for sid in attempt.slices:
                by_slice.setdefault(sid, []).append((attempt.start, attempt.end))
    for sid, spans in by_slice.items():
        spans.sort()
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans)), sid


def test_inference_restarts_whole_training_keeps_its_checkpoints() -> None:
    inference = _job("i", "inference", 0, 5000, 10, 50)
    training = _job("t", "training", 0, 5000, 10, 10)
    assert sharereplay.requeued_remaining(inference, 4000, 5000) == (0.0, 5000)
    assert sharereplay.requeued_remaining(training, 4000, 5000) == (3600.0, 1400.0)
    assert sharereplay.requeued_remaining(training, 1799, 5000) == (0.0, 5000)


def test_guarantee_check_counts_what_goes_below_nominal() -> None:
    slices = {s["id"]: s for s in (_card("h", n) for n in range(4))}
    quotas = {"training": (QuotaScope(line=0, site="x", nominal={GPU_MEMORY: 150 * GIB}),)}
    holds = {
        "t1": ("training", ("h/gpu0",)),
        "t2": ("training", ("h/gpu1",)),
        "i1": ("inference", ("h/gpu2",)),
    }
    # training holds 160 GiB for a 150 GiB nominal: stopping one card's job leaves 80
    bad = sharereplay.guarantee_violations(["t2"], holds, quotas, slices)
    assert bad == [
        {
            "team": "training",
            "scope": "site x",
            "held_after_mib": 80 * GIB,
            "nominal_mib": 150 * GIB,
        }
    ]
    # a team with no quota, or a nominal it stays above, is not a violation
    assert sharereplay.guarantee_violations(["i1"], holds, quotas, slices) == []
    low = {"training": (QuotaScope(line=0, site="x", nominal={GPU_MEMORY: 80 * GIB}),)}
    assert sharereplay.guarantee_violations(["t2"], holds, low, slices) == []
    # a scope the victims' slices are not on is untouched
    elsewhere = {"training": (QuotaScope(line=0, site="y", nominal={GPU_MEMORY: 999 * GIB}),)}
    assert sharereplay.guarantee_violations(["t2"], holds, elsewhere, slices) == []


def test_trimmed_queue_reclaims_the_same() -> None:
    """Trimming (bench/utilization's replay.trimmed) gives the same tries and reclaims."""
    slices = [_card("h", n, mib) for n, mib in enumerate([80 * GIB, 80 * GIB, 40 * GIB, 20 * GIB])]
    jobs = []
    for n in range(30):
        kind = "inference" if n % 3 else "training"
        gib = [10, 18, 30, 60][n % 4] if kind == "inference" else [35, 70][n % 2]
        duration = (1 + n % 5) * HOUR if kind == "training" else (60 + 7 * n % 50) * 60
        # Inference comes fast and borrows training's idle share; training comes later and
        # reclaims it.
        arrival = n * 700.0 + 2 * HOUR if kind == "training" else n * 200.0
        jobs.append(_job(f"j{n:02d}", kind, arrival, duration, gib, 50 if n % 3 else 10))
    kept = [
        sharereplay.replay(
            "t", jobs, slices, 220 * GIB, _request, _even(110), until=12 * HOUR, trim=trim
        )
        for trim in (True, False)
    ]
    trimmed, full = kept
    assert {k: [(t.start, t.end, t.slices) for t in v] for k, v in trimmed.tries.items()} == {
        k: [(t.start, t.end, t.slices) for t in v] for k, v in full.tries.items()
    }
    assert [(r.at, r.by, r.victims) for r in trimmed.reclaims] == [
        (r.at, r.by, r.victims) for r in full.reclaims
    ]
    assert trimmed.reclaims  # the case does reclaim
    assert trimmed.violations == full.violations == []


def test_waits_by_local_day_and_night_censored_at_the_end() -> None:
    run = sharereplay.TeamRun("t", total_mib=100)
    jobs = [
        Job("d", "inference", 1 * HOUR, 600, 1, 10, 50, site="x"),  # 09:00 local: day
        Job("n", "inference", 13 * HOUR, 600, 1, 10, 50, site="x"),  # 21:00 local: night
    ]
    run.queued = {"d": [[1 * HOUR, 1 * HOUR + 300]], "n": [[13 * HOUR, None]]}
    run.tries = {"d": [sharereplay.Try(1 * HOUR + 300, 1 * HOUR + 900, 20, ("s",))]}
    run.finished = {"d": 1 * HOUR + 900}
    rows = sharereplay.team_metrics(
        run, jobs, lambda j: j.kind, {"inference": 100.0 * 86400}, {"x": 8}, 86400
    )
    team = rows["teams"]["inference"]
    assert (team["day_p95_wait_min"], team["day_p95_censored"]) == (5.0, False)
    assert team["night_p95_wait_min"] == pytest.approx(11 * 60)
    assert team["night_p95_censored"] and team["queued_at_end"] == 1
    assert team["share_utilization"] == pytest.approx(20 * 600 / (100 * 86400))
    assert team["finished"] == 1


def test_split_and_window_rules(bench: Any) -> None:
    hosts = {"x": {"a": 100, "b": 300, "c": 600}}
    asked = {
        "x": {
            "all": {"inference": 62.0, "training": 38.0},
            "day": {"inference": 90.0, "training": 10.0},
            "night": {"inference": 30.0, "training": 70.0},
        }
    }
    # 62% of 1,000: {c} is 60%, {a, c} 70%, {b, c} 90%: the nearest set is {c}
    assert bench.split_rule(hosts, asked) == {"x": {"inference": ["c"], "training": ["a", "b"]}}
    assert bench.window_rule(hosts, asked) == {
        "x": {
            "day": {"inference": 900, "training": 100},
            "night": {"inference": 300, "training": 700},
        }
    }


def test_policy_files_cover_every_hour_and_keep_the_site_memory(bench: Any) -> None:
    shares, windows = bench.load_policy(bench.SHARES), bench.load_policy(bench.WINDOWS)
    owned: dict[str | None, int] = {}
    for team in shares.teams.teams:
        for scope in team.quota:
            assert scope.borrowing_limit is None and scope.lending_limit is None
            owned[scope.site] = owned.get(scope.site, 0) + scope.nominal[GPU_MEMORY]
    base = {(t.name, s.key): s for t in windows.teams.teams for s in t.quota}
    assert {k: s.nominal for k, s in base.items()} == {
        (t.name, s.key): s.nominal for t in shares.teams.teams for s in t.quota
    }
    for minute in range(0, 24 * 60, 30):
        now = T0 + timedelta(minutes=minute)
        per_site: dict[str | None, int] = {}
        for team in windows.teams.teams:
            for scope in windows.quota_in_force(team, now):
                assert (team.name, scope.key) in base
                assert scope is not base[(team.name, scope.key)], "a window is in force"
                per_site[scope.site] = per_site.get(scope.site, 0) + scope.nominal[GPU_MEMORY]
        assert per_site == owned, minute
    # Singapore's day is 00:00-12:00 UTC (UTC+8), Dubai's 04:00-16:00 (UTC+4)
    names = {w.name for w in windows.active_windows(T0 + timedelta(hours=2))}
    assert names == {"singapore-day", "dubai-night"}
    names = {w.name for w in windows.active_windows(T0 + timedelta(hours=13))}
    assert names == {"singapore-night", "dubai-day"}


def test_elastic_recut_in_the_share_replay() -> None:
    """The `+e` columns: an idle whole card is re-cut for a team's small waiting jobs (the
    scheduler decides, the replay makes it as bench/utilization's does: the card is out for
    the re-cut's cost, then its new slices join the pool), the jobs run on the new slices,
    and no slice is ever held twice."""
    from dataclasses import replace

    from gpupoolctl.policy import parse_policy

    policy = parse_policy(
        "version: 1\n"
        "elastic:\n"
        "  rules:\n"
        "    - hosts: h\n"
        "      vendor: nvidia\n"
        "      profiles: [1g.10gb, 2g.20gb, 3g.40gb, 7g.80gb]\n"
        "      keep-whole: 1\n",
        "pool.yaml",
    )

    slices = [_card("h", 0), _card("h", 1)]
    jobs = [_job(f"i{n}", "inference", 0, HOUR, 8, 50) for n in range(4)]
    run = sharereplay.replay(
        "t",
        jobs,
        slices,
        160 * GIB,
        _request,
        replace(_even(160), elastic=policy.elastic),
        until=24 * HOUR,
    )
    # Both whole cards are hidden from the 8 GiB jobs (a 10 GB slice serves them; cutting
    # either leaves the one whole card keep-whole asks for): nothing starts at 0 s; once
    # they waited the batch window (30 s) the next pass re-cuts the first card for them.
    assert run.recuts == [(60.0, "h/gpu0")]
    for job in jobs:
        (attempt,) = run.tries[job.id]
        assert attempt.start == 120.0  # the first pass after the 10 s re-cut cost
        (sid,) = attempt.slices
        assert sid.startswith("h/gpu0/")  # a slice of the card's new layout
        assert attempt.held_mib < 80 * GIB
    held = [s for t in run.tries.values() for a in t for s in a.slices]
    assert len(held) == len(set(held))  # all at once here: no slice held twice
    assert all(run.finished[j.id] <= 2 * HOUR for j in jobs)
    assert run.violations == [] and run.reclaims == []


def test_the_night_elastic_policy_changes_only_what_may_be_cut_at_each_sites_night(
    bench: Any,
) -> None:
    """windows-elastic-night.yaml (--ce-policy): the quotas in force are windows-elastic's
    minute by minute; at a site's night its cards may only be made whole (every rule
    that selects them allows just the full-size profile or mode), by day as pool.yaml."""
    night = bench.load_policy(bench.HERE / "windows-elastic-night.yaml")
    assert bench.quota_plan(night) == bench.quota_plan(bench.load_policy(bench.WINDOWS_ELASTIC))
    day_rules = bench.load_policy(bench.WINDOWS_ELASTIC).elastic
    sites = {  # UTC offset, hosts
        "singapore": (8, ("sg-dgx01", "sg-a100-01")),
        "dubai": (4, ("dxb-a100-01", "dxb-mi300x-01")),
    }
    full = {"nvidia": {"7g.80gb", "7g.40gb"}, "amd": {"spx/nps1"}}
    util = bench._util()  # host patterns are read through the bundled inventory
    inventory = util.load_inventory(util.simpool.INVENTORY)

    def in_hosts(pattern: str, host: str) -> bool:
        return host in {h.name for h in inventory.select(pattern)}

    for minute in range(0, 24 * 60, 30):
        now = T0 + timedelta(minutes=minute)
        elastic = night.elastic_in_force(now)
        for offset, hosts in sites.values():
            local_hour = (minute // 60 + offset) % 24
            is_night = not 8 <= local_hour < 20
            for host in hosts:
                vendor = "amd" if "mi300x" in host else "nvidia"
                model = "MI300X" if vendor == "amd" else ("H100" if "dgx" in host else "A100")
                rule = elastic.rule_for(host, vendor, model, in_hosts)
                assert rule is not None
                allowed = set(rule.amd_modes or ()) if vendor == "amd" else set(rule.profiles or ())
                if is_night:
                    assert allowed <= full[vendor], (minute, host, allowed)
                else:
                    same = day_rules.rule_for(host, vendor, model, in_hosts)
                    assert same is not None and allowed == set(
                        (same.amd_modes if vendor == "amd" else same.profiles) or ()
                    ), (minute, host)
