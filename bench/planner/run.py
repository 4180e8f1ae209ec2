"""Planner benchmark: a mixed layout for 1,000 simulated GPUs, and search vs brute force.

    python bench/planner/run.py [--gpus 1000] [--rounds 5] [--json out.json]

Part 1 synthesises facts for N GPUs (8 per host) across every MIG model of the catalog plus
MI300X, some of them already partitioned, and times plan_host for a "mixed" spec over all
hosts (parse not included; the placement cache is cleared before every round, so each round
searches every distinct request once). Target: under 1 s for 1,000 GPUs.

Part 2 compares the planner's search with brute-force enumeration of every placement
combination (one start per instance, then keep the valid layout with the longest free run)
on single GPUs, for a fixed set of requests, and prints the time of each and their ratio.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from gpupoolctl.hw import catalog  # noqa: E402
from gpupoolctl.partition import parse_spec, plan_host  # noqa: E402
from gpupoolctl.partition import planner as planner_mod  # noqa: E402
from gpupoolctl.partition.planner import check_layout, largest_free_run, place  # noqa: E402

MIXED = {
    # model key -> mig-devices for the "mixed" label (valid on that model)
    "A100-SXM4-40GB": {"3g.20gb": 1, "2g.10gb": 1, "1g.5gb": 2},
    "A100-SXM4-80GB": {"4g.40gb": 1, "1g.10gb": 3},
    "H100-SXM5-80GB": {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2},
    "H100-NVL-94GB": {"1g.24gb": 2, "3g.47gb": 1},
    "H100-96GB": {"2g.24gb": 3, "1g.12gb": 1},
    "GH200-144GB": {"4g.72gb": 1, "1g.18gb": 3},
    "H200-141GB": {"3g.71gb": 1, "2g.35gb": 1, "1g.18gb": 2},
    "B200-180GB": {"1g.23gb": 7},
    "A30-24GB": {"2g.12gb": 1, "1g.6gb": 2},
    "RTX-PRO-6000-96GB": {"2g.48gb": 1, "1g.24gb": 2},
}


def mixed_spec() -> str:
    lines = ["version: v1", "mig-configs:", "  mixed:"]
    for key, devices in MIXED.items():
        model = catalog.nvidia_model(key)
        ids = ", ".join(f'"{i}"' for i in model.pci_device_ids)
        lines += [
            f"    - device-filter: [{ids}]",
            "      devices: all",
            "      mig-enabled: true",
            f"      mig-devices: {json.dumps(devices)}",
        ]
    lines += [
        '    - device-filter: "0x74A11002"',
        "      devices: all",
        "      compute-partition: CPX",
        "      memory-partition: NPS4",
    ]
    return "\n".join(lines) + "\n"


def nvidia_gpu(index: int, key: str, rng: random.Random) -> dict[str, Any]:
    model = catalog.nvidia_model(key)
    geometry = model.mig
    assert geometry is not None
    instances = []
    enabled = rng.random() < 0.5
    if enabled:  # some already sliced: a random valid layout of one profile
        profile = rng.choice(geometry.profiles)
        layout = place(geometry, {profile.name: rng.randint(1, profile.max_instances)}) or []
        for gi_id, (name, start) in enumerate(layout, start=1):
            p = geometry.by_name(name)
            assert p is not None
            instances.append(
                {
                    "gi_id": gi_id,
                    "profile": name,
                    "profile_id": p.id,
                    "placement_start": start,
                    "placement_size": p.placement_size,
                    "memory_mib": p.memory_mib,
                    "sm_count": p.sm_count,
                    "compute_instances": [{"ci_id": 0, "profile": name, "uuid": None}],
                }
            )
    return {
        "index": index,
        "vendor": "nvidia",
        "model": model.names[0],
        "uuid": f"GPU-{key}-{index}-{rng.getrandbits(32):08x}",
        "pci_device_id": model.pci_device_ids[0],
        "compute_capability": model.compute_capability,
        "mig": {
            "capable": True,
            "mode": "enabled" if enabled else "disabled",
            "pending": "enabled" if enabled else "disabled",
            "instances": instances,
        },
        "partition": None,
        "sriov": None,
        "processes": [],
    }


def amd_gpu(index: int, rng: random.Random) -> dict[str, Any]:
    compute, memory = rng.choice([("SPX", "NPS1"), ("CPX", "NPS4"), ("DPX", "NPS2")])
    return {
        "index": index,
        "vendor": "amd",
        "model": "AMD Instinct MI300X",
        "uuid": f"amd-{index}-{rng.getrandbits(32):08x}",
        "pci_device_id": "0x74A11002",
        "mig": None,
        "partition": {
            "compute": compute,
            "memory": memory,
            "memory_caps": ["NPS1", "NPS2", "NPS4"],
        },
        "sriov": None,
        "processes": [],
    }


def synth_fleet(gpus: int, seed: int = 7) -> dict[str, dict[str, Any]]:
    rng = random.Random(seed)
    kinds = [*MIXED, "mi300x"]
    fleet: dict[str, dict[str, Any]] = {}
    for host_index in range((gpus + 7) // 8):
        kind = kinds[host_index % len(kinds)]
        count = min(8, gpus - host_index * 8)
        if kind == "mi300x":
            cards = [amd_gpu(i, rng) for i in range(count)]
        else:
            cards = [nvidia_gpu(i, kind, rng) for i in range(count)]
        fleet[f"node{host_index:04d}"] = {"host": f"node{host_index:04d}", "gpus": cards}
    return fleet


def bench_fleet(gpus: int, rounds: int) -> dict[str, Any]:
    spec = parse_spec(mixed_spec(), "bench-mixed.yaml")
    fleet = synth_fleet(gpus)
    times = []
    stats: dict[str, int] = {}
    for _ in range(rounds):
        planner_mod._place_cached.cache_clear()
        start = time.perf_counter()
        plans = [plan_host(spec, "mixed", host, [], facts) for host, facts in fleet.items()]
        times.append(time.perf_counter() - start)
        stats = {
            "gpus": sum(len(f["gpus"]) for f in fleet.values()),
            "hosts": len(fleet),
            "gpus_planned": sum(len(p.gpus) for p in plans),
            "gpus_changing": sum(1 for p in plans for g in p.gpus if not g.unchanged),
            "ops": sum(len(g.ops) for p in plans for g in p.gpus),
            "errors": sum(len(p.errors) for p in plans),
        }
    return {**stats, "seconds_median": statistics.median(times), "seconds_all": times}


# --- search vs brute force ------------------------------------------------------------------

REQUESTS: list[tuple[str, dict[str, int]]] = [
    ("H100-SXM5-80GB", {"1g.10gb": 7}),
    ("H100-SXM5-80GB", {"3g.40gb": 1, "2g.20gb": 1, "1g.10gb": 2}),
    ("H100-SXM5-80GB", {"1g.20gb": 1, "1g.10gb": 5}),
    ("H100-SXM5-80GB", {"2g.20gb": 3, "1g.10gb": 1}),
    ("H100-SXM5-80GB", {"3g.40gb": 2, "1g.10gb": 1}),  # impossible: proven by search
    ("A100-SXM4-40GB", {"4g.20gb": 1, "2g.10gb": 1, "1g.5gb": 1}),
    ("A100-SXM4-40GB", {"1g.10gb": 3, "1g.5gb": 1}),
    ("A100-SXM4-40GB", {"1g.5gb": 6}),
    ("A30-24GB", {"2g.12gb": 1, "1g.6gb": 2}),
    ("RTX-PRO-6000-96GB", {"1g.24gb": 2, "2g.48gb": 1}),
    ("RTX-PRO-6000-96GB", {"1g.24gb": 4}),
    ("B200-180GB", {"1g.23gb": 4, "3g.90gb": 1}),
]


def brute_force(
    geometry: catalog.MigGeometry, requested: dict[str, int]
) -> list[tuple[str, int]] | None:
    instances = [name for name, n in sorted(requested.items()) for _ in range(n)]
    choices = [geometry.by_name(name).placement_starts for name in instances]  # type: ignore[union-attr]
    best: list[tuple[str, int]] | None = None
    best_run = -1
    combos = 0
    for starts in itertools.product(*choices):
        combos += 1
        layout = list(zip(instances, starts, strict=True))
        if check_layout(geometry, layout):
            continue
        mask = 0
        for name, start in layout:
            size = geometry.by_name(name).placement_size  # type: ignore[union-attr]
            mask |= ((1 << size) - 1) << start
        run = largest_free_run(mask, geometry.memory_slots)
        if run > best_run:
            best, best_run = layout, run
    return best


def bench_search(repeat: int) -> dict[str, Any]:
    rows = []
    for key, requested in REQUESTS:
        geometry = catalog.nvidia_model(key).mig
        assert geometry is not None
        runs = []
        for _ in range(repeat):
            planner_mod._place_cached.cache_clear()  # time the search, not the cache
            start = time.perf_counter()
            ours = place(geometry, requested)
            runs.append(time.perf_counter() - start)
        search_s = statistics.median(runs)
        start = time.perf_counter()
        theirs = brute_force(geometry, requested)
        brute_s = time.perf_counter() - start
        combos = 1
        for name, n in requested.items():
            combos *= len(geometry.by_name(name).placement_starts) ** n  # type: ignore[union-attr]
        assert (ours is None) == (theirs is None), (key, requested)
        rows.append(
            {
                "model": key,
                "request": " + ".join(f"{n}x{p}" for p, n in requested.items()),
                "feasible": ours is not None,
                "search_ms": search_s * 1000,
                "brute_ms": brute_s * 1000,
                "combinations": combos,
                "ratio": brute_s / search_s if search_s else float("inf"),
            }
        )
    total_search = sum(r["search_ms"] for r in rows)
    total_brute = sum(r["brute_ms"] for r in rows)
    return {
        "rows": rows,
        "search_ms": total_search,
        "brute_ms": total_brute,
        "ratio": total_brute / total_search,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=20, help="planner runs per request")
    parser.add_argument("--json", help="write results here too")
    args = parser.parse_args()

    fleet = bench_fleet(args.gpus, args.rounds)
    print(
        f"plan_host, mixed layout: {fleet['gpus']} GPUs on {fleet['hosts']} hosts, "
        f"{fleet['gpus_changing']} changing, {fleet['ops']} ops, {fleet['errors']} errors: "
        f"median {fleet['seconds_median'] * 1000:.1f} ms over {args.rounds} rounds "
        f"(target < 1000 ms)"
    )
    search = bench_search(args.repeat)
    print(
        f"{'model':<20} {'request':<42} {'fits':<5} {'combos':>8} {'search ms':>10} "
        f"{'brute ms':>10} {'ratio':>8}"
    )
    for r in search["rows"]:
        print(
            f"{r['model']:<20} {r['request']:<42} {r['feasible']!s:<5} {r['combinations']:>8} "
            f"{r['search_ms']:>10.3f} {r['brute_ms']:>10.3f} {r['ratio']:>8.1f}"
        )
    print(
        f"total: search {search['search_ms']:.2f} ms, brute force {search['brute_ms']:.2f} ms, "
        f"brute/search = {search['ratio']:.1f}x"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"fleet": fleet, "search": search}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
