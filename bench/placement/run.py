"""Placement benchmark: placements per second on a synthetic 1,000-node pool.

    python bench/placement/run.py [--nodes 1000] [--placements 20000] [--json out.json]

The pool: the bundled simulated pool's six hosts, each as shipped and as partitioned by the
`mixed` and `inference` labels of playbooks/layouts.yaml (really applied to a temporary sim
by the agent, see bench/utilization/simpool.py), i.e. 18 host shapes, repeated under new
names to --nodes nodes (H100 DGX, A100, MI300X and L40S hosts; whole cards, MIG slices,
MI300X DPX/CPX partitions).

The stream (seeded): 60% inference requests by memory (4..40 GB), 15% by profile
(1g.10gb, 3g.40gb, 2g.10gb, cpx, gpu), 10% filtered single cards (model H100 / ultra
bandwidth / amd), 15% multi-GPU whole-card jobs (2, 4 or 8; same island or same node).
It first fills the pool to 70% of its slices, then keeps it there: every placement is held
and the oldest hold is released while more than 70% is held. The timer covers place() only
(the pure function a submit calls); the `cycle` rate adds the hold and release.

Peer, in the same run: a scan of every slice for each single-slice request, ranked by the
same key (what `ledger.fit.pick` did before sched), on a sample of the stream. Both must
pick the same slice; the ratio is the index's gain.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench" / "utilization"))

import simpool  # noqa: E402

from gpupoolctl.ledger.state import State  # noqa: E402
from gpupoolctl.sched import Holder, JobRequest, Placement, PoolView, matches, place  # noqa: E402
from gpupoolctl.sched.policies import slot_key  # noqa: E402

GB = 10**9 / 2**20  # MiB in a decimal GB, as `--mem 10G` means


def build_pool(nodes: int) -> tuple[list[dict[str, Any]], int]:
    """The slices of `nodes` nodes, and how many physical cards they have."""
    templates: list[tuple[str, list[dict[str, Any]]]] = []
    cards: dict[str, int] = {}
    for label in (None, "mixed", "inference"):
        slices = simpool.pool_slices(label)
        for host in sorted({s["host"] for s in slices}):
            mine = [s for s in slices if s["host"] == host]
            templates.append((host, mine))
            if label is None:  # as shipped, one GPU index per card (MI300X in SPX)
                cards[host] = len({s["gpu"] for s in mine})
    pool: list[dict[str, Any]] = []
    total_cards = 0
    for n in range(nodes):
        host, slices = templates[n % len(templates)]
        pool += simpool.rename(slices, host, f"node{n:04d}")
        total_cards += cards[host]
    return pool, total_cards


def stream(seed: int, count: int) -> list[JobRequest]:
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        roll = rng.random()
        if roll < 0.60:
            out.append(JobRequest(memory_mib=int(rng.choice([4, 8, 10, 16, 20, 24, 40]) * GB)))
        elif roll < 0.75:
            out.append(
                JobRequest(profile=rng.choice(["1g.10gb", "3g.40gb", "2g.10gb", "cpx", "gpu"]))
            )
        elif roll < 0.85:
            out.append(
                rng.choice(
                    [
                        JobRequest(profile="gpu", model="H100"),
                        JobRequest(bandwidth_class="ultra", memory_mib=int(40 * GB)),
                        JobRequest(vendor="amd"),
                    ]
                )
            )
        else:
            gpus = rng.choice([2, 4, 8])
            same = rng.random() < 0.5
            out.append(JobRequest(gpus=gpus, profile="gpu", same_island=same, same_node=not same))
    return out


def run_stream(
    slices: list[dict[str, Any]], requests: list[JobRequest], policy: str, peer_every: int
) -> dict[str, Any]:
    view = PoolView(slices)
    limit = int(0.7 * len(slices))
    holds: deque[str] = deque()
    held = 0
    placed = failed = 0
    place_s = cycle_s = placed_s = 0.0
    peer_s = index_s = 0.0  # peer checks are excluded from the cycle time
    peer_n = 0
    for number, request in enumerate(requests):
        start = time.perf_counter()
        result = place(request, view, policy)
        mid = time.perf_counter()
        place_s += mid - start
        if peer_every and number % peer_every == 0 and request.gpus == 1:
            # peer: scan every slice, same rank
            p0 = time.perf_counter()
            free = [
                view.slot(s["id"]) for s in slices if s["id"] in view.free and matches(s, request)
            ]
            best = min(free, key=lambda s: slot_key(view, s, policy)).id if free else None
            p1 = time.perf_counter()
            again = place(request, view, policy)
            p2 = time.perf_counter()
            peer_s += p1 - p0
            index_s += p2 - p1
            cycle_s -= p2 - p0
            peer_n += 1
            got = again.slices[0] if isinstance(again, Placement) else None
            assert got == best, (request, got, best)
        if isinstance(result, Placement):
            placed_s += mid - start
            alloc = f"a-{number}"
            view.hold(result.slices, Holder(alloc=alloc, slices=tuple(result.slices)))
            holds.append(alloc)
            held += len(result.slices)
            placed += 1
        else:
            failed += 1
        while held > limit and holds:
            held -= len(view.unhold(holds.popleft()).slices)
        cycle_s += time.perf_counter() - start
    return {
        "policy": policy,
        "placements": len(requests),
        "placed": placed,
        "no_fit": failed,
        "place_per_s": len(requests) / place_s,
        "cycle_per_s": len(requests) / cycle_s,
        "mean_place_us": place_s / len(requests) * 1e6,
        "placed_only_per_s": placed / placed_s if placed_s else None,
        "peer_samples": peer_n,
        "peer_scan_us": peer_s / peer_n * 1e6 if peer_n else None,
        "index_us": index_s / peer_n * 1e6 if peer_n else None,
    }


def view_build(slices: list[dict[str, Any]]) -> dict[str, float]:
    """PoolView.from_state on the 1,000-node ledger state with 30% of slices held: cold (new
    slice map) and warm (the skeleton reused, as consecutive submits see it)."""
    state = State()
    ts = "2025-06-01T00:00:00.000Z"
    hosts = sorted({s["host"] for s in slices})
    state.apply(
        {
            "seq": 1,
            "ts": ts,
            "actor": "b",
            "op": "slices",
            "data": {"hosts": hosts, "slices": slices},
        }
    )
    for n, entry in enumerate(slices[::3]):
        state.apply(
            {
                "seq": n + 2,
                "ts": ts,
                "actor": "b",
                "op": "alloc",
                "data": {"id": f"a-{n}", "owner": "b", "slices": [entry["id"]]},
            }
        )
    start = time.perf_counter()
    PoolView.from_state(state, ts)
    cold = time.perf_counter() - start
    times = []
    for _ in range(5):
        start = time.perf_counter()
        view = PoolView.from_state(state, ts)
        place(JobRequest(memory_mib=int(10 * GB)), view)
        times.append(time.perf_counter() - start)
    return {"cold_ms": cold * 1e3, "warm_view_and_place_ms": statistics.median(times) * 1e3}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--placements", type=int, default=20000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--peer-every", type=int, default=50)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    slices, gpus = build_pool(args.nodes)
    shapes = len({(s["kind"], s.get("profile"), s["memory_mib"], s.get("model")) for s in slices})
    print(
        f"pool: {args.nodes} nodes, {gpus} cards ({gpus / args.nodes:.1f}/node), "
        f"{len(slices)} slices in {shapes} shapes"
    )
    requests = stream(args.seed, args.placements)
    results = []
    for policy in ("best-fit", "spread", "topology"):
        row = run_stream(slices, requests, policy, args.peer_every)
        results.append(row)
        peer = ""
        if row["peer_samples"]:
            ratio = row["peer_scan_us"] / row["index_us"]
            peer = (
                f"; peer full scan {row['peer_scan_us']:.0f} us vs {row['index_us']:.0f} us "
                f"single-slice ({row['peer_samples']} samples, same picks, x{ratio:.0f})"
            )
        print(
            f"{policy:9s} {row['place_per_s']:8.0f} placements/s (mean {row['mean_place_us']:.0f}"
            f" us; with hold+release {row['cycle_per_s']:.0f}/s; successful ones alone "
            f"{row['placed_only_per_s']:.0f}/s); "
            f"{row['placed']} placed, {row['no_fit']} no fit{peer}"
        )
    build = view_build(slices)
    print(
        f"PoolView.from_state, {len(slices)} slices: cold {build['cold_ms']:.0f} ms; "
        f"warm view + one placement {build['warm_view_and_place_ms']:.1f} ms"
    )
    best = results[0]["place_per_s"]
    verdict = "met" if best >= 5000 else "NOT met"
    print(f"target >= 5000 placements/s (best-fit, the default): {verdict}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(
            json.dumps(
                {"nodes": args.nodes, "slices": len(slices), "results": results, "view": build},
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
