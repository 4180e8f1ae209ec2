"""Teams' shares benchmark: a static split vs shares with borrowing vs shares with windows.

    python bench/shares/run.py [--seeds 2025,2026,2027] [--seed N] [--workers 2]
                               [--pass-interval 60] [--grace 30] [--recut-cost 10]
                               [--calibration-seed 2025] [--write-policies] [--json FILE]

The contended day of bench/utilization (jobtrace.make_contended_trace) with two teams:
every inference job is team `inference`, every training job team `training`. Replayed
five ways, all starting from the `mixed` layout's slices, every pass through
gpupoolctl.sched.snapshot.run_pass(snapshot, preempt=True) on the snapshot production's
builder makes of the replay's state and the column's policy (sharereplay.py):

  (a) static   each site's hosts split between the teams by the split rule; each team's
               jobs replayed on its own hosts' slices only (a quota = what it owns);
  (b) shares   shares.yaml: each team's nominal per site = its static-split memory there,
               borrowing and lending unlimited, reclaim on;
  (c) windows  windows.yaml: the same teams, and per site a day (08:00-20:00 local) and a
               night window whose nominal quotas follow the demand by day and by night;
  (a+e)        (a) with elastic re-cuts inside each team's own hosts: the elastic section of
               playbooks/pool.yaml as shipped, the re-cuts each pass decides are made;
  (c+e)        windows-elastic.yaml: windows.yaml's teams and windows plus the same elastic
               section (the one in force at each pass: PoolPolicy.elastic_in_force).

(a), (b) and (c) keep the layout all day (no elastic re-cuts). The policy files are derived
by the rules below from one calibration day (seed 2025) and used unchanged on every seed, as
an operator sets quotas from past demand; `--write-policies` writes them again from the
rules, and every run checks that they still match.
See README.md for the rules, the definitions and the results.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
UTILIZATION = HERE.parent / "utilization"
ROOT = HERE.parents[1]
for _path in (str(HERE), str(ROOT), str(UTILIZATION)):
    if _path in sys.path:
        sys.path.remove(_path)
# bench/utilization's modules first (its run.py is not this one: loaded by path below).
sys.path[:0] = [str(UTILIZATION), str(ROOT)]
sys.path.append(str(HERE))

import sharereplay  # noqa: E402
import simpool  # noqa: E402
from jobtrace import (  # noqa: E402
    DAY,
    POOL_MEMORY_MIB,
    SITE_UTC_OFFSET_H,
    Job,
    make_contended_trace,
)
from replay import T0  # noqa: E402

from gpupoolctl.policy.model import (  # noqa: E402
    GPU_MEMORY,
    PoolPolicy,
    QuotaScope,
    Team,
    TeamsPolicy,
)
from gpupoolctl.sched import JobRequest  # noqa: E402

SHARES = HERE / "shares.yaml"
WINDOWS = HERE / "windows.yaml"
WINDOWS_ELASTIC = HERE / "windows-elastic.yaml"
POOL_POLICY = ROOT / "playbooks" / "pool.yaml"  # its elastic section: the `+e` columns'
LAYOUT = "mixed"
TEAMS = ("inference", "training")
TIMEZONES = {"singapore": "Asia/Singapore", "dubai": "Asia/Dubai"}  # UTC+8, UTC+4, no DST
DAY_START, DAY_END = 8 * 60, 20 * 60  # a site's day in local minutes: 08:00-20:00
CALIBRATION_SEED = 2025
COLUMNS = ("a", "a+e", "b", "c", "c+e")
COLUMN_NAMES = {
    "a": "a: static",
    "a+e": "a+e: +elastic",
    "b": "b: shares",
    "c": "c: windows",
    "c+e": "c+e: +elastic",
}
# The targets, each (x) against (y): the (c vs the static split), the same with
# re-cuts on the windows' side only, and with re-cuts on both sides.
COMPARISONS = (("c", "a"), ("c+e", "a"), ("c+e", "a+e"))


def _utilization_run() -> Any:
    """bench/utilization/run.py as a module (its contended_request: memory, vendor, site
    pin, one node), under another name than this script's."""
    spec = importlib.util.spec_from_file_location("utilization_run", UTILIZATION / "run.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_UTIL: Any = None


def _util() -> Any:
    global _UTIL
    if _UTIL is None:
        _UTIL = _utilization_run()
    return _UTIL


def team_of(job: Job) -> str:
    return job.kind  # every inference job is team inference, every training job training


def request_of(job: Job) -> JobRequest:
    """bench/utilization's contended request (the `mixed` column's), with the job's team."""
    return replace(_util().contended_request(job), team=team_of(job))


# -- the rules ---------------------------------------------------------------------------------


def site_hosts(slices: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """site -> host -> memory of its slices (MiB) in the layout."""
    out: dict[str, dict[str, int]] = {}
    for entry in slices:
        host = out.setdefault(str(entry["site"]), {})
        host[entry["host"]] = host.get(entry["host"], 0) + int(entry["memory_mib"])
    return {site: dict(sorted(hosts.items())) for site, hosts in sorted(out.items())}


def local_day_hours(site: str) -> list[tuple[float, float, bool]]:
    """The window's hours in UTC seconds, each (start, end, inside the site's local day)."""
    out = []
    for hour in range(int(DAY // 3600)):
        local = (hour + SITE_UTC_OFFSET_H[site]) % 24
        out.append((hour * 3600.0, (hour + 1) * 3600.0, DAY_START <= local * 60 < DAY_END))
    return out


def demand(jobs: list[Job], window: float = DAY) -> dict[str, dict[str, dict[str, float]]]:
    """site -> period (all, day, night) -> team -> memory-time (MiB-s) its users' jobs ask
    for inside the window if each ran the moment it arrived (memory x GPUs x the part of
    [arrival, arrival + duration) inside the window, and inside the site's local day or
    night for `day` / `night`)."""
    out: dict[str, dict[str, dict[str, float]]] = {}
    hours = {site: local_day_hours(site) for site in SITE_UTC_OFFSET_H}
    for job in jobs:
        if not 0 <= job.arrival < window:
            continue
        site = str(job.site)
        periods = out.setdefault(site, {p: dict.fromkeys(TEAMS, 0.0) for p in PERIODS})
        memory = job.memory_mib * job.gpus
        end = min(window, job.arrival + job.duration)
        periods["all"][team_of(job)] += memory * (end - job.arrival)
        for start, stop, day in hours[site]:
            inside = max(0.0, min(end, stop) - max(job.arrival, start))
            if inside:
                periods["day" if day else "night"][team_of(job)] += memory * inside
    return dict(sorted(out.items()))


PERIODS = ("all", "day", "night")


def split_rule(
    hosts: dict[str, dict[str, int]], asked: dict[str, dict[str, dict[str, float]]]
) -> dict[str, dict[str, list[str]]]:
    """The static split: at each site, the set of whole hosts for team inference whose
    share of the site's memory is nearest to inference's share of the site's memory-time
    demand over the day (the rest is training's); ties go to the set listed first
    (fewer hosts, then host names)."""
    out: dict[str, dict[str, list[str]]] = {}
    for site, memory in hosts.items():
        total = sum(memory.values())
        want = asked[site]["all"]
        share = want["inference"] / (want["inference"] + want["training"])
        names = list(memory)
        subsets = [c for n in range(len(names) + 1) for c in itertools.combinations(names, n)]
        best = min(subsets, key=lambda c: abs(sum(memory[h] for h in c) / total - share))
        out[site] = {
            "inference": list(best),
            "training": [h for h in names if h not in best],
        }
    return out


def window_rule(
    hosts: dict[str, dict[str, int]], asked: dict[str, dict[str, dict[str, float]]]
) -> dict[str, dict[str, dict[str, int]]]:
    """site -> day/night -> team -> nominal MiB: the site's memory divided between the
    teams in proportion to their demand there in that part of the day (local time)."""
    out: dict[str, dict[str, dict[str, int]]] = {}
    for site, memory in hosts.items():
        total = sum(memory.values())
        out[site] = {}
        for period in ("day", "night"):
            want = asked[site][period]
            inference = round(total * want["inference"] / (want["inference"] + want["training"]))
            out[site][period] = {"inference": inference, "training": total - inference}
    return out


def split_memory(
    hosts: dict[str, dict[str, int]], split: dict[str, dict[str, list[str]]]
) -> dict[str, dict[str, int]]:
    """team -> site -> memory it owns under the split (MiB)."""
    return {
        team: {site: sum(hosts[site][h] for h in split[site][team]) for site in hosts}
        for team in TEAMS
    }


# -- the policy files --------------------------------------------------------------------------


def _quota_lines(per_site: dict[str, int], indent: str) -> list[str]:
    return [
        line
        for site, mib in per_site.items()
        for line in (f"{indent}- site: {site}", f"{indent}  nominal: {{gpu-memory: {mib}MiB}}")
    ]


def policy_text(
    nominal: dict[str, dict[str, int]],
    windows: dict[str, dict[str, dict[str, int]]] | None,
    header: list[str],
) -> str:
    """A pool policy file (the `teams:` / `windows:` format): each team's nominal per site,
    borrowing and lending unlimited (no limits written); windows per site by day/night."""
    lines = [f"# {h}" if h else "#" for h in header] + ["version: 1", "teams:"]
    for team in TEAMS:
        lines += [f"  {team}:", "    quota:", *_quota_lines(nominal[team], "      ")]
    if windows:
        lines.append("windows:")
        for site, periods in windows.items():
            for period, hours in (("day", "08:00-20:00"), ("night", "20:00-08:00")):
                lines += [
                    f"  - name: {site}-{period}",
                    f"    timezone: {TIMEZONES[site]}",
                    "    days: daily",
                    f'    hours: "{hours}"',
                    "    teams:",
                ]
                for team in TEAMS:
                    mib = periods[period][team]
                    lines.append(
                        f"      {team}: {{quota: [{{site: {site}, nominal: "
                        f"{{gpu-memory: {mib}MiB}}}}]}}"
                    )
    return "\n".join(lines) + "\n"


def elastic_section(text: str) -> str:
    """The `elastic:` section of a policy file's text, as written there: the comment lines
    just above it, the key and everything indented under it (the comments and blank lines
    before the next top-level key are that key's)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split("#")[0].rstrip() == "elastic:")
    end = next(
        (i for i in range(start + 1, len(lines)) if lines[i][:1] not in ("", " ", "#")),
        len(lines),
    )
    while end > start + 1 and (not lines[end - 1].strip() or lines[end - 1].startswith("#")):
        end -= 1
    while start > 0 and lines[start - 1].startswith("#"):
        start -= 1
    return "\n".join(lines[start:end]) + "\n"


def load_policy(path: Path) -> PoolPolicy:
    """The policy file, read by the product's own parser."""
    from gpupoolctl.policy import parse_policy

    return parse_policy(path.read_text(), path.name)


def quotas_at(policy: PoolPolicy, now: datetime) -> dict[str, tuple[QuotaScope, ...]]:
    return {team.name: policy.quota_in_force(team, now) for team in policy.teams.teams}


def nominal_memory_time(policy: PoolPolicy, window: float = DAY, step: float = 60.0) -> dict:
    """team -> nominal GPU memory in force integrated over the window (MiB-s); windows
    begin and end on whole minutes."""
    out = dict.fromkeys(TEAMS, 0.0)
    t = 0.0
    while t < window:
        for team, scopes in quotas_at(policy, T0 + timedelta(seconds=t)).items():
            out[team] += sum(s.nominal.get(GPU_MEMORY, 0) for s in scopes) * step
        t += step
    return out


def quota_plan(policy: PoolPolicy, window: float = DAY, step: float = 60.0) -> list[Any]:
    """Each team's quota in force (site and nominal of each scope) minute by minute: two
    policies with equal plans differ only in what else they say (their elastic sections)."""
    plan = []
    t = 0.0
    while t < window:
        now = quotas_at(policy, T0 + timedelta(seconds=t))
        plan.append({team: sorted((s.site, sorted(s.nominal.items())) for s in scopes)
                     for team, scopes in now.items()})  # fmt: skip
        t += step
    return plan


def static_quota(owned: dict[str, int]) -> tuple[QuotaScope, ...]:
    """A team's quota on its own sub-pool: what it owns per site (nothing to borrow)."""
    return tuple(
        QuotaScope(line=0, site=site, nominal={GPU_MEMORY: mib})
        for site, mib in owned.items()
        if mib
    )


def derive(slices: list[dict[str, Any]], seed: int) -> dict[str, Any]:
    """The rules on one day's trace: the split, the two policies' texts."""
    hosts = site_hosts(slices)
    asked = demand(make_contended_trace(seed, POOL_MEMORY_MIB))
    split = split_rule(hosts, asked)
    owned = split_memory(hosts, split)
    windows = window_rule(hosts, asked)
    header = [
        f"Generated by bench/shares/run.py --write-policies from seed {seed}'s contended day.",
        "Each team's nominal per site = the memory of the `mixed` layout's slices on the",
        "hosts the static split gives it there (split rule: README.md); borrowing and",
        "lending unlimited (no limits written).",
    ]
    shares = policy_text(owned, None, header)
    header_w = [
        *header,
        "",
        "Windows: per site, by day (08:00-20:00 local) and by night, the site's memory",
        "divided between the teams in proportion to their users' demand (memory-time)",
        "there in that part of the day (window rule: README.md).",
    ]
    header_e = [
        *header_w,
        "",
        "Elastic: the elastic section of playbooks/pool.yaml, copied as it is (the `c+e`",
        "column; no window replaces it).",
    ]
    elastic = elastic_section(POOL_POLICY.read_text())
    return {
        "hosts": hosts,
        "demand": asked,
        "split": split,
        "owned": owned,
        "windows": windows,
        "shares_text": shares,
        "windows_text": policy_text(owned, windows, header_w),
        "windows_elastic_text": policy_text(owned, windows, header_e) + elastic,
    }


# -- replays -----------------------------------------------------------------------------------


def replay_task(task: dict[str, Any]) -> tuple[str, sharereplay.TeamRun, float, float]:
    """One replay (in a worker process): (key, run, wall seconds, CPU seconds)."""
    began, cpu = time.perf_counter(), time.process_time()
    jobs = make_contended_trace(task["seed"], POOL_MEMORY_MIB)
    slices = task["slices"]
    if task["column"] in ("a", "a+e"):
        team = task["team"]
        jobs = [j for j in jobs if team_of(j) == team]
        # A team on its own sub-pool: its quota is what it owns there (nothing to borrow).
        teams = TeamsPolicy((Team(team, 0, quota=static_quota(task["owned"])),))
        policy = PoolPolicy(teams=teams)
        if task.get("elastic"):  # pool.yaml's elastic section (it has no windows)
            policy = replace(policy, elastic=load_policy(task["elastic"]).elastic)
    else:
        policy = load_policy(task["policy"])  # c+e: its elastic section and windows too
    run = sharereplay.replay(
        task["key"],
        jobs,
        slices,
        POOL_MEMORY_MIB,
        request_of,
        policy,
        until=DAY,
        pass_interval=task["pass_interval"],
        grace_s=task["grace"],
        in_hosts=_util().inventory_hosts(),
        recut_cost=task["recut_cost"],
    )
    return task["key"], run, time.perf_counter() - began, time.process_time() - cpu


# -- the report --------------------------------------------------------------------------------


def cell(value: float, censored: bool, fmt: str = "{:.0f}") -> str:
    return (">=" if censored else "") + fmt.format(value)


def print_seed(seed: int, jobs: list[Job], rows: dict[str, dict[str, Any]]) -> None:
    counts = {t: sum(1 for j in jobs if team_of(j) == t) for t in TEAMS}
    print(
        f"\ncontended day, seed {seed}: {len(jobs)} jobs ("
        + ", ".join(f"{n} {t}" for t, n in counts.items())
        + ")"
    )
    width = 14
    print(f"{'':34s}" + "".join(f"{COLUMN_NAMES[c]:>{width}s}" for c in COLUMNS))

    def line(label: str, cells: list[str]) -> None:
        print(f"{label:34s}" + "".join(f"{c:>{width}s}" for c in cells))

    line("pool utilization (used)", [f"{rows[c]['utilization']:.1%}" for c in COLUMNS])
    line("  useful (lost work left out)", [f"{rows[c]['useful_utilization']:.1%}" for c in COLUMNS])
    line("  memory held by jobs", [f"{rows[c]['held_utilization']:.1%}" for c in COLUMNS])
    line("reclaims (victims)", [f"{rows[c]['reclaims']} ({rows[c]['victims']})" for c in COLUMNS])
    line("  most for one job", [str(rows[c]["most_reclaims_one_job"]) for c in COLUMNS])
    line("guarantee violations", [str(rows[c]["violations"]) for c in COLUMNS])
    line("re-cuts", [str(rows[c]["recuts"]) for c in COLUMNS])
    for team in TEAMS:
        print(f"team {team}")
        t = {c: rows[c]["teams"][team] for c in COLUMNS}
        line("  nominal in force, mean (GiB)", [f"{t[c]['nominal_gib_avg']:.0f}" for c in COLUMNS])
        line("  utilization of its share", [f"{t[c]['share_utilization']:.1%}" for c in COLUMNS])
        for part in ("all", "day", "night"):
            for q in ("p50", "p95"):
                key = f"{part}_{q}"
                line(
                    f"  wait {q} {part} (min)",
                    [cell(t[c][f"{key}_wait_min"], t[c][f"{key}_censored"]) for c in COLUMNS],
                )
        line("  work done (GiB-h)", [f"{t[c]['work_gib_h']:.0f}" for c in COLUMNS])
        line("  jobs finished", [str(t[c]["finished"]) for c in COLUMNS])
        line("  reclaims made", [str(t[c]["reclaims_made"]) for c in COLUMNS])
        line("  reclaims suffered", [str(t[c]["reclaims_suffered"]) for c in COLUMNS])
        line("  work lost (GiB-h)", [f"{t[c]['lost_gib_h']:.0f}" for c in COLUMNS])
        line("  refused (never fit)", [str(t[c]["refused"]) for c in COLUMNS])
        line("  queued at window end", [str(t[c]["queued_at_end"]) for c in COLUMNS])


def targets(
    rows: dict[str, dict[str, Any]], x: str = "c", y: str = "a"
) -> dict[str, dict[str, Any]]:
    """The targets for one seed: column x (the `c` values) vs column y (the `a` values)."""
    a, c = rows[y], rows[x]
    out: dict[str, dict[str, Any]] = {}
    for team in TEAMS:
        ta, tc = a["teams"][team], c["teams"][team]
        out[f"{team} p95 wait ({x}) <= ({y})"] = {
            "met": tc["all_p95_wait_min"] <= ta["all_p95_wait_min"],
            "c": cell(tc["all_p95_wait_min"], tc["all_p95_censored"]),
            "a": cell(ta["all_p95_wait_min"], ta["all_p95_censored"]),
        }
        out[f"{team} work done ({x}) >= ({y})"] = {
            "met": tc["work_gib_h"] >= ta["work_gib_h"],
            "c": f"{tc['work_gib_h']:.0f}",
            "a": f"{ta['work_gib_h']:.0f}",
        }
    ratio = c["utilization"] / a["utilization"]
    out[f"pool utilization ({x}) >= 1.5x ({y})"] = {
        "met": ratio >= 1.5,
        "c": f"{c['utilization']:.1%}",
        "a": f"{a['utilization']:.1%}",
        "ratio": round(ratio, 3),
    }
    out["reclaim honours guarantees (0 violations)"] = {
        "met": all(rows[k]["violations"] == 0 for k in (x, y)),
        "c": str(c["violations"]),
        "a": str(a["violations"]),
    }
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="2025,2026,2027", help="comma-separated seeds")
    parser.add_argument("--seed", type=int, help="one seed (the same as --seeds N)")
    parser.add_argument("--pass-interval", type=float, default=60.0, help="virtual seconds")
    parser.add_argument(
        "--grace", type=float, default=sharereplay.GRACE_S, help="a victim's grace period (s)"
    )
    parser.add_argument(
        "--calibration-seed",
        type=int,
        default=CALIBRATION_SEED,
        help="the day the split and the policies are derived from",
    )
    parser.add_argument(
        "--recut-cost",
        type=float,
        default=sharereplay.RECUT_COST_S,
        help="seconds a re-cut card is out of the pool (the +e columns)",
    )
    parser.add_argument(
        "--write-policies",
        action="store_true",
        help="write shares.yaml, windows.yaml and windows-elastic.yaml",
    )
    parser.add_argument(
        "--workers", type=int, default=min(2, os.cpu_count() or 1), help="replay processes"
    )
    parser.add_argument(
        "--ce-policy",
        type=Path,
        default=WINDOWS_ELASTIC,
        help="the c+e column's policy file (default windows-elastic.yaml); its quotas in "
        "force must be windows-elastic.yaml's: what it may change is the elastic section "
        "by window (windows-elastic-night.yaml)",
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    seeds = [args.seed] if args.seed is not None else [int(s) for s in args.seeds.split(",")]
    began = time.perf_counter()

    slices = simpool.pool_slices(LAYOUT)
    rules = derive(slices, args.calibration_seed)
    if args.write_policies:
        SHARES.write_text(rules["shares_text"])
        WINDOWS.write_text(rules["windows_text"])
        WINDOWS_ELASTIC.write_text(rules["windows_elastic_text"])
    for path, key in (
        (SHARES, "shares_text"),
        (WINDOWS, "windows_text"),
        (WINDOWS_ELASTIC, "windows_elastic_text"),
    ):
        if not path.exists() or path.read_text() != rules[key]:
            sys.exit(
                f"{path.name} is not what the rules give for seed {args.calibration_seed}: "
                "run with --write-policies"
            )
    if args.ce_policy != WINDOWS_ELASTIC and quota_plan(load_policy(args.ce_policy)) != quota_plan(
        load_policy(WINDOWS_ELASTIC)
    ):
        sys.exit(f"{args.ce_policy}: its quotas in force differ from {WINDOWS_ELASTIC.name}'s")
    split, owned = rules["split"], rules["owned"]
    hosts = rules["hosts"]
    print(
        f"pool: `{LAYOUT}` layout, {len(slices)} slices, "
        + ", ".join(
            f"{site} {sum(m.values()) / 1024:.0f} GiB ({len(m)} hosts)" for site, m in hosts.items()
        )
        + f"; passes every {args.pass_interval:g} s, grace {args.grace:g} s, training "
        f"checkpoints every {sharereplay.CHECKPOINT_S / 60:.0f} min; elastic re-cuts in a+e "
        f"and c+e only (playbooks/pool.yaml's elastic section, {args.recut_cost:g} s a re-cut)"
    )
    print(f"split and policies from seed {args.calibration_seed} (calibration day):")
    for site in hosts:
        want = rules["demand"][site]
        share = want["all"]["inference"] / sum(want["all"].values())
        print(
            f"  {site}: inference asks {share:.1%} of the day's memory-time -> inference "
            f"{', '.join(split[site]['inference']) or '-'} ({owned['inference'][site] / 1024:.0f}"
            f" GiB), training {', '.join(split[site]['training']) or '-'} "
            f"({owned['training'][site] / 1024:.0f} GiB)"
        )
        for period in ("day", "night"):
            nominal = rules["windows"][site][period]
            print(
                f"    {period}: nominal inference {nominal['inference'] / 1024:.0f} GiB, "
                f"training {nominal['training'] / 1024:.0f} GiB"
            )

    tasks: list[dict[str, Any]] = []
    base = {"pass_interval": args.pass_interval, "grace": args.grace}
    base["recut_cost"] = args.recut_cost
    for seed in seeds:
        for column, elastic in (("a", None), ("a+e", POOL_POLICY)):
            for team in TEAMS:
                mine = {h for site in hosts for h in split[site][team]}
                tasks.append(
                    {
                        **base,
                        "key": f"{seed}/{column}/{team}",
                        "seed": seed,
                        "column": column,
                        "team": team,
                        "owned": owned[team],
                        "slices": [s for s in slices if s["host"] in mine],
                        "elastic": elastic,
                    }
                )
        for column, path, elastic in (
            ("b", SHARES, None),
            ("c", WINDOWS, None),
            ("c+e", args.ce_policy, args.ce_policy),
        ):
            tasks.append(
                {
                    **base,
                    "key": f"{seed}/{column}",
                    "seed": seed,
                    "column": column,
                    "policy": path,
                    "slices": slices,
                    "elastic": elastic,
                }
            )
    first = {"c+e": 0, "b": 1, "c": 1, "a+e": 2, "a": 3}
    tasks.sort(key=lambda t: first[t["column"]])  # the long replays first
    runs: dict[str, sharereplay.TeamRun] = {}
    walls: dict[str, float] = {}
    cpus: dict[str, float] = {}
    if args.workers > 1:
        with ProcessPoolExecutor(args.workers) as pool:
            for key, run, wall, cpu in pool.map(replay_task, tasks):
                runs[key], walls[key], cpus[key] = run, wall, cpu
    else:
        for task in tasks:
            key, run, wall, cpu = replay_task(task)
            runs[key], walls[key], cpus[key] = run, wall, cpu

    nominal = {
        "a": {team: float(sum(owned[team].values())) * DAY for team in TEAMS},
        "b": nominal_memory_time(load_policy(SHARES)),
        "c": nominal_memory_time(load_policy(WINDOWS)),
    }
    nominal["a+e"] = nominal["a"]
    nominal["c+e"] = nominal_memory_time(load_policy(args.ce_policy))
    report: dict[str, Any] = {
        "layout": LAYOUT,
        "calibration_seed": args.calibration_seed,
        "split": split,
        "owned_mib": owned,
        "windows_mib": rules["windows"],
        "demand_mib_s": rules["demand"],
        "pass_interval_s": args.pass_interval,
        "grace_s": args.grace,
        "recut_cost_s": args.recut_cost,
        "checkpoint_s": sharereplay.CHECKPOINT_S,
        "seeds": {},
    }
    verdicts: dict[str, list[dict[str, Any]]] = {}
    for seed in seeds:
        jobs = make_contended_trace(seed, POOL_MEMORY_MIB)
        merged = {
            c: sharereplay.merge(c, [runs[f"{seed}/{c}/{t}"] for t in TEAMS])
            if c in ("a", "a+e")
            else runs[f"{seed}/{c}"]
            for c in COLUMNS
        }
        rows = {
            c: sharereplay.team_metrics(
                merged[c], jobs, team_of, nominal[c], SITE_UTC_OFFSET_H, DAY
            )
            for c in COLUMNS
        }
        print_seed(seed, jobs, rows)
        own = derive(slices, seed)["split"] if seed != args.calibration_seed else split
        if own != split:
            print(f"(the split rule on seed {seed}'s own trace would give {own})")
        found = {f"{x} / {y}": targets(rows, x, y) for x, y in COMPARISONS}
        for pair, values in found.items():
            for name, value in values.items():
                verdicts.setdefault(pair, {}).setdefault(name, []).append(value)
        report["seeds"][str(seed)] = {"rows": rows, "targets": found, "own_split": own}
    titles = {
        "c / a": "c: shares with windows, vs a: the static split (the issue's comparison)",
        "c+e / a": "c+e: windows + elastic re-cuts, vs a: the static split",
        "c+e / a+e": "c+e: windows + elastic re-cuts, vs a+e: the static split + re-cuts",
    }
    for pair, by_name in verdicts.items():
        x, y = pair.split(" / ")
        print(f"\ntargets ({titles[pair]}), per seed:")
        for name, values in by_name.items():
            word = "met" if all(v["met"] for v in values) else "NOT met"
            cells = "; ".join(
                f"{seed}: {x} {v['c']} vs {y} {v['a']}"
                + (f" ({v['ratio']:.2f}x)" if "ratio" in v else "")
                for seed, v in zip(seeds, values, strict=True)
            )
            met = sum(v["met"] for v in values)
            print(f"  {name}: {word} ({met}/{len(values)} seeds) - {cells}")
    wall = time.perf_counter() - began
    report["targets"] = {
        pair: {name: all(v["met"] for v in values) for name, values in by_name.items()}
        for pair, by_name in verdicts.items()
    }
    report["wall_s"] = wall
    report["replay_wall_s"] = walls
    report["replay_cpu_s"] = cpus
    print(
        f"\nseeds {', '.join(map(str, seeds))}; wall time {wall:.1f} s ({args.workers} "
        f"worker(s)); replays (wall / CPU s): "
        + ", ".join(f"{k} {walls[k]:.0f}/{cpus[k]:.0f}" for k in walls)
    )
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str))


if __name__ == "__main__":
    main()
