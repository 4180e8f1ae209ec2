"""How the scheduling call inside `submit` grows with the queue: the pass's inputs and the
pass itself, as jobs.scheduling._decide runs them, on the bundled sim pool with every slice
held and N jobs queued (so that nothing fits and the whole queue is gone through).

    python bench/slurm-vs-pool/pass_scaling.py [--queues 1,10,100,1000] [--repeat 20]

Two queues: N identical requests (the stress ramp's: one slice of >= 10 GB), which the pass
answers once and reuses (sched.queue's per-shape memo), and N requests that all differ (each
asks a slightly different amount of memory), which it cannot reuse. Per N: the median wall
time of sched.snapshot.queued (the queue as the scheduler takes it), PoolView.from_state (the pool
with its holds) and schedule_pass, each alone, in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

SIM_INVENTORY = REPO_ROOT / "gpupoolctl" / "data" / "sim.yaml"


def sim_slices(folder: Path) -> dict[str, dict[str, Any]]:
    """The sim pool's slices as a ledger records them: one `alloc` through the CLI (which
    reads the nodes' facts into a fresh ledger), then the ledger's state."""
    from gpupoolctl.ledger import Ledger

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(folder), "GPUPOOL_SIM_DIR": str(folder / "sim"), "NO_COLOR": "1"})
    ledger = folder / "ledger"
    argv = [sys.executable, "-m", "gpupoolctl.cli.main", "-q", "-i", str(SIM_INVENTORY),
            "--ledger", str(ledger), "alloc", "--mem", "10G"]  # fmt: skip
    subprocess.run(argv, env=env, cwd=REPO_ROOT, check=True, capture_output=True, timeout=120)
    handle = Ledger(ledger, durable=False)
    try:
        return dict(handle.read().state.slices)
    finally:
        handle.close()


SMALL_MIB = 40 * 1024 + 1000  # above a 3g.40gb slice's 40,448 MiB, under a whole card


def full_pool_with_queue(
    slices: dict[str, dict[str, Any]], queued: int, distinct: bool, *, victims: bool = False
) -> Any:
    """A State: every slice held by a running job, `queued` jobs queued behind them.
    `victims`: the holds on slices under 40 GiB are preemptible jobs of a lower priority,
    and the queued jobs ask for more than 40 GiB, so that every waiting job has eligible
    victims to weigh and none of them frees what it needs."""
    from gpupoolctl.ledger import State
    from gpupoolctl.ledger.units import format_ts, utc_now

    state = State()
    ts = format_ts(utc_now())
    seq = 0

    def apply(op: str, data: dict[str, Any]) -> None:
        nonlocal seq
        seq += 1
        state.apply({"v": 1, "seq": seq, "ts": ts, "actor": "bench", "op": op, "data": data})

    apply("slices", {"hosts": sorted({s["host"] for s in slices.values()}),
                     "slices": list(slices.values())})  # fmt: skip
    for index, slice_id in enumerate(sorted(slices)):
        job_id, alloc_id = f"r-{index}", f"a-{index}"
        request: dict[str, Any] = {"gpus": 1, "memory_mib": 9537, "priority": 50, "job": job_id}
        if victims and int(slices[slice_id].get("memory_mib") or 0) < SMALL_MIB:
            request.update(priority=10, preemptible=True)
        apply("alloc", {"id": alloc_id, "owner": "bench", "slices": [slice_id],
                        "uuids": [None], "expires": None, "request": request})  # fmt: skip
        apply("job", {"id": job_id, "state": "running", "alloc": alloc_id, "run": 1,
                      "request": request, "argv": ["sleep", "1"]})  # fmt: skip
    for index in range(queued):
        job_id = f"q-job-{index}"
        memory = (SMALL_MIB + 1024 if victims else 9537) + (index if distinct else 0)
        request = {"gpus": 1, "memory_mib": memory, "priority": 50}
        apply("job", {"id": job_id, "state": "queued", "run": 0, "request": request,
                      "argv": ["sleep", "1"], "policy": "best-fit"})  # fmt: skip
        apply("enqueue", {"id": f"q-{index}", "owner": "bench", "priority": 50,
                          "request": request, "job": job_id})  # fmt: skip
    return state, ts


def median_ms(work: Any, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        work()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def measure(
    slices: dict[str, dict[str, Any]], queued: int, distinct: bool, repeat: int
) -> tuple[float, float, float]:
    """Median ms of (the queue's entries, the pool view, the pass less its view)."""
    from gpupoolctl.ledger.units import parse_ts
    from gpupoolctl.sched import PoolView, schedule_pass
    from gpupoolctl.sched.snapshot import queued as queued_entries

    state, ts = full_pool_with_queue(slices, queued, distinct)
    now = parse_ts(ts)
    entries, _ = queued_entries(state)

    def one_pass() -> Any:
        view = PoolView.from_state(state, ts)  # a pass takes what it places: a fresh view
        return schedule_pass(entries, view, now, preempt=True, foresee=True)

    result = one_pass()
    assert not result.placed and len(result.waiting) == queued, "expected a full pool"
    entries_ms = median_ms(lambda: queued_entries(state), repeat)
    view_ms = median_ms(lambda: PoolView.from_state(state, ts), repeat)
    return entries_ms, view_ms, median_ms(one_pass, repeat) - view_ms


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queues", default="1,10,100,1000")
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="pass-scaling-") as folder:
        slices = sim_slices(Path(folder))
    print(f"pass scaling: {len(slices)} slices, all held; median of {args.repeat} (ms)")
    print(f"  {'queue':>6} {'requests':>9} {'entries':>8} {'pool view':>10} {'pass':>8}")
    for queued in (int(q) for q in args.queues.split(",")):
        for distinct in (False, True):
            entries_ms, view_ms, pass_ms = measure(slices, queued, distinct, args.repeat)
            kind = "distinct" if distinct else "same"
            print(f"  {queued:>6} {kind:>9} {entries_ms:>8.2f} {view_ms:>10.2f} {pass_ms:>8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
