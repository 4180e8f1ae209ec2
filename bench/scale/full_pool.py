"""Production's scheduling call at fleet size, in its worst case: every slice held, N jobs
queued behind them, so that nothing fits and the pass goes through the whole queue trying
preemption for each (as `jobs.scheduling._decide` calls it: the snapshot, then
`run_pass(preempt=True, foresee=True)`).

    python bench/scale/full_pool.py [--nodes 1000] [--queues 0,1000,10000] [--repeat 1]

The fleet is run.py's (the bundled pool's 8-GPU classes after the `mixed` layout, two
sites); the held pool and the queue are bench/slurm-vs-pool/pass_scaling.py's (the same
ledger records production writes, applied to a State). Per N, for N identical requests
(which the pass answers once per shape) and N that all differ: the snapshot's build and
the pass, in milliseconds, and the process's peak resident memory.
"""

from __future__ import annotations

import argparse
import importlib.util
import resource
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
for folder in (ROOT, ROOT / "bench" / "utilization", ROOT / "bench" / "slurm-vs-pool"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import pass_scaling  # noqa: E402  # bench/slurm-vs-pool/pass_scaling.py

from gpupoolctl.sched.modes import run_pass  # noqa: E402
from gpupoolctl.sched.snapshot import snapshot  # noqa: E402

_spec = importlib.util.spec_from_file_location(
    "bench_scale_run", Path(__file__).with_name("run.py")
)
assert _spec is not None and _spec.loader is not None
scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--queues", default="0,1000,10000")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--victims",
        action="store_true",
        help="the small slices' holds are preemptible and of a lower priority, and the "
        "queue asks for more than they free: every waiting job weighs victims in vain",
    )
    args = parser.parse_args(argv)
    slices = {s["id"]: s for s in scale.fleet(args.nodes)}
    victims = "; small slices' holds preemptible in vain" if args.victims else ""
    print(f"{args.nodes} nodes, {len(slices)} slices, every one held{victims};"
          f" median of {args.repeat}")  # fmt: skip
    header = ("queue", "requests", "snapshot ms", "pass ms", "ms/job", "RSS MiB")
    widths = (6, 9, 12, 10, 7, 8)
    print("  " + " ".join(f"{h:>{w}}" for h, w in zip(header, widths, strict=True)))
    for queued in (int(q) for q in args.queues.split(",")):
        for distinct in (False, True):
            state, ts = pass_scaling.full_pool_with_queue(
                slices, queued, distinct, victims=args.victims
            )
            builds, passes = [], []
            for _ in range(args.repeat):
                began = time.perf_counter()
                snap = snapshot(state, None, ts)
                built = time.perf_counter()
                result = run_pass(snap, preempt=True, foresee=True)
                builds.append(built - began)
                passes.append(time.perf_counter() - built)
            assert not result.placed and len(result.waiting) == queued, "expected a full pool"
            pass_ms = statistics.median(passes) * 1e3
            per_job = pass_ms / queued if queued else 0.0
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            kind = "distinct" if distinct else "same"
            print(f"  {queued:>6} {kind:>9} {statistics.median(builds) * 1e3:>12.0f}"
                  f" {pass_ms:>10.0f} {per_job:>7.1f} {rss:>8.0f}", flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
