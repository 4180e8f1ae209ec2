"""`gpupoolctl top` on a synthetic 1,000-node pool: what a frame costs and what the live view
costs while nobody writes, against `gpupoolctl pool --no-refresh` as the peer.

    python bench/top/run.py [--nodes 1000] [--frames 15] [--rounds 5] [--idle-s 30]
        [--json FILE]

The ledger is written in a temp folder through gpupoolctl.ledger itself (no fsync): N nodes
of eight 80 GB cards at four sites, every fifth node with two cards cut into MIG instances
(7 x 1g.10gb, 2 x 3g.40gb), about half the slices held by running jobs, a queue of 200 jobs
that fit nowhere, some drains, and alloc/release churn so the journal has history. Then:

1. In this process: the follower's first poll (the full replay any reader pays once), then
   per frame the pieces of one redraw, median of --frames: an incremental poll after ten
   new records, build_frame, the plain text, the terminal picture (rich, 200 x 60), and the
   scheduler's dry pass that says why queued jobs wait (asked again only when the ledger
   moved or every 10 s). The peer: `ledger.pool_report`, what `pool --no-refresh` computes.
2. Subprocesses, alternating --rounds: `top --once` against `pool --no-refresh -o json`.
3. Idle: `top` in a real terminal (tmux, 200 x 60) left alone for --idle-s seconds, its CPU
   time from /proc; the peer is what operators run today, `pool --no-refresh` every 2 s
   (top's default interval) for the same time, its children's CPU time.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import resource
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT))

from gpupoolctl.board.follow import Follower  # noqa: E402
from gpupoolctl.board.frame import FrameBuilder, build_frame  # noqa: E402
from gpupoolctl.ledger import Ledger, pool_report  # noqa: E402
from gpupoolctl.sched.unavailable import blocks  # noqa: E402

SITES = ("singapore", "dubai", "frankfurt", "virginia")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def synthetic_slices(nodes: int) -> list[dict[str, Any]]:
    slices = []
    for n in range(nodes):
        host = f"node{n:04d}"
        site = SITES[n % len(SITES)]
        for gpu in range(8):
            base = {
                "host": host,
                "gpu": gpu,
                "site": site,
                "vendor": "nvidia",
                "model": "NVIDIA H100 80GB HBM3",
                "island": f"{host}/island0",
            }
            if n % 5 == 0 and gpu == 6:
                for i in range(7):
                    slices.append(
                        {
                            **base,
                            "id": f"{host}/gpu6/mig-1g.10gb@{i}",
                            "kind": "mig",
                            "profile": "1g.10gb",
                            "memory_mib": 9984,
                            "uuid": f"MIG-{host}-6-{i}",
                        }
                    )
            elif n % 5 == 0 and gpu == 7:
                for i in (0, 4):
                    slices.append(
                        {
                            **base,
                            "id": f"{host}/gpu7/mig-3g.40gb@{i}",
                            "kind": "mig",
                            "profile": "3g.40gb",
                            "memory_mib": 40448,
                            "uuid": f"MIG-{host}-7-{i}",
                        }
                    )
            else:
                slices.append(
                    {
                        **base,
                        "id": f"{host}/gpu{gpu}",
                        "kind": "gpu",
                        "profile": None,
                        "memory_mib": 81559,
                        "uuid": f"GPU-{host}-{gpu}",
                    }
                )
    return slices


def write_pool(path: Path, nodes: int) -> dict[str, int]:
    ledger = Ledger(path, durable=False, actor="bench@top", autocompact=0)
    slices = synthetic_slices(nodes)
    ledger.refresh_slices(sorted({s["host"] for s in slices}), slices)
    held = [s["id"] for i, s in enumerate(slices) if i % 2 == 0]
    jobs = 0
    for start in range(0, len(held), 400):
        with ledger.transaction() as tx:
            for slice_id in held[start : start + 400]:
                jobs += 1
                job_id, alloc_id, host = f"j-{jobs}", f"a-{tx.next_seq}", slice_id.split("/")[0]
                owner = f"user{jobs % 40}"
                request = {"gpus": 1, "job": job_id, "team": f"team{jobs % 4}"}
                tx.append(
                    "alloc",
                    {"id": alloc_id, "owner": owner, "slices": [slice_id], "request": request},
                )
                tx.append(
                    "job",
                    {
                        "id": job_id,
                        "owner": owner,
                        "state": "running",
                        "alloc": alloc_id,
                        "request": request,
                        "nodes": [{"host": host, "slices": [slice_id], "pid": 1}],
                    },
                )
    with ledger.transaction() as tx:
        for q in range(200):
            job_id = f"j-q{q}"
            request = {"gpus": 16, "same_node": True, "memory_mib": 81000}
            tx.append(
                "job",
                {"id": job_id, "owner": f"user{q % 40}", "state": "queued", "request": request},
            )
            tx.append(
                "enqueue",
                {
                    "id": f"q-{q}",
                    "owner": f"user{q % 40}",
                    "job": job_id,
                    "priority": 50,
                    "request": request,
                },
            )
        for n in range(0, nodes, 97):
            tx.append(
                "drain",
                {
                    "target": f"node{n:04d}",
                    "state": "drained",
                    "reason": "bench",
                    "source": "admin",
                },
            )
    free = [s["id"] for i, s in enumerate(slices) if i % 2 == 1]
    for round_no in range(10):  # churn: 10 x 200 alloc + release
        with ledger.transaction() as tx:
            for slice_id in free[round_no * 200 : (round_no + 1) * 200]:
                alloc_id = f"a-{tx.next_seq}"
                tx.append("alloc", {"id": alloc_id, "owner": "churn", "slices": [slice_id]})
                tx.append("release", {"id": alloc_id})
    state = ledger.read().state
    return {
        "nodes": nodes,
        "slices": len(slices),
        "records": state.seq,
        "jobs": jobs,
        "queued": 200,
        "bytes": path.stat().st_size,
    }


def median_ms(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1000, 2)


def in_process(path: Path, frames: int, *, settle: bool = True) -> dict[str, Any]:
    from rich.console import Console

    from gpupoolctl.cli.top_live import Ui, render
    from gpupoolctl.cli.top_source import settle_heap
    from gpupoolctl.cli.top_text import frame_text

    out: dict[str, Any] = {}
    follower = Follower(Ledger(path, durable=False, actor="viewer@top"))
    builder = FrameBuilder()
    t0 = time.perf_counter()
    view = follower.poll()
    out["first_poll_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    if settle:
        settle_heap()  # as top does after a load
    t0 = time.perf_counter()
    builder.frame(view.state, view.now, touched=follower.take_touched())
    out["first_frame_ms"] = round((time.perf_counter() - t0) * 1000, 1)
    writer = Ledger(path, durable=False, actor="bench@top", autocompact=0)
    polls, sparks, kept, full, texts, pictures, peers = [], [], [], [], [], [], []
    for _ in range(frames):
        with writer.transaction() as tx:
            for gpu in (0, 2, 4, 6, 0):  # free cards of node0001 (every odd slice is free)
                alloc_id = f"a-{tx.next_seq}"
                tx.append("alloc", {"id": alloc_id, "owner": "w", "slices": [f"node0001/gpu{gpu}"]})
                tx.append("release", {"id": alloc_id})
        t0 = time.perf_counter()
        view = follower.poll()
        polls.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        series = follower.utilization(view)
        sparks.append(time.perf_counter() - t0)
        inputs = {
            "events": list(follower.events),
            "utilization": series,
            "waiting": {},
        }
        t0 = time.perf_counter()
        frame = builder.frame(view.state, view.now, touched=follower.take_touched(), **inputs)
        kept.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        again = build_frame(view.state, view.now, **inputs)
        full.append(time.perf_counter() - t0)
        assert again == frame  # the kept rows draw what a frame from nothing draws
        t0 = time.perf_counter()
        frame_text(frame, 200)
        texts.append(time.perf_counter() - t0)
        console = Console(file=io.StringIO(), width=200, height=60, force_terminal=True)
        t0 = time.perf_counter()
        console.print(render(frame, Ui(), 200, 60))
        pictures.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        pool_report(view.state, view.now, blocked=blocks(view.state))
        peers.append(time.perf_counter() - t0)
    out.update(
        poll_ms=median_ms(polls),
        kept_build_ms=median_ms(kept),
        full_build_ms=median_ms(full),
        text_ms=median_ms(texts),
        picture_ms=median_ms(pictures),
        utilization_ms=median_ms(sparks),
        redraw_ms=round(
            median_ms(polls) + median_ms(sparks) + median_ms(kept) + median_ms(pictures), 2
        ),
        peer_pool_report_ms=median_ms(peers),
    )
    out["reasons_ms"] = reasons_ms(path)
    return out


def reasons_ms(path: Path) -> float:
    """The scheduler's dry pass over the synthetic queue, as top asks it."""
    from gpupoolctl.cli.handles import open_jobs
    from gpupoolctl.cli.settings import OutputFormat, Settings
    from gpupoolctl.jobs.dryrun import waiting_reasons

    settings = Settings(
        inventory=None,
        limit=None,
        forks=16,
        output=OutputFormat.auto,
        ledger=path,
        verbosity=-1,
        accept_new_host_keys=False,
        connect_timeout=10.0,
        command_timeout=None,
    )
    jobs = open_jobs(settings)
    view = jobs.read()
    waiting_reasons(jobs, view)  # the first pass also imports the scheduler: not timed
    t0 = time.perf_counter()
    reasons = waiting_reasons(jobs, view)
    took = time.perf_counter() - t0
    assert len(reasons) == 200, len(reasons)
    return round(took * 1000, 1)


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "gpupoolctl.cli.main", "-q", *args]


def subprocesses(env: dict[str, str], rounds: int) -> dict[str, Any]:
    cases = {
        "top --once": cli("top", "--once"),
        "pool --no-refresh -o json": cli("pool", "--no-refresh", "-o", "json"),
    }
    times: dict[str, list[float]] = {name: [] for name in cases}
    for r in range(rounds + 1):
        order = list(cases) if r % 2 == 0 else list(reversed(cases))
        for name in order:
            t0 = time.perf_counter()
            done = subprocess.run(cases[name], env=env, capture_output=True, timeout=300)
            took = time.perf_counter() - t0
            if done.returncode != 0:
                raise SystemExit(f"{name} failed: {done.stderr.decode()[-400:]}")
            if r:  # the first round warms the caches
                times[name].append(took)
    result = {name: median_ms(v) for name, v in times.items()}
    result["ratio_top_to_pool"] = round(
        result["top --once"] / result["pool --no-refresh -o json"], 2
    )
    return result


def cpu_of(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def idle(env: dict[str, str], folder: Path, seconds: float) -> dict[str, Any]:
    tmux = shutil.which("tmux")
    if tmux is None:
        return {"skipped": "tmux is not installed"}
    socket = f"bench-top-{os.getpid()}"
    script = folder / "top.sh"
    exports = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items() if k.isidentifier())
    script.write_text(
        f"{exports}unset COLUMNS LINES\nexec {shlex.join(cli('top'))} 2>{folder}/top.err\n"
    )
    subprocess.run(
        [
            tmux,
            "-L",
            socket,
            "new-session",
            "-d",
            "-s",
            "top",
            "-x",
            "200",
            "-y",
            "60",
            f"sh {script}",
        ],
        check=True,
    )
    try:
        pid = int(
            subprocess.run(
                [tmux, "-L", socket, "display", "-p", "-t", "top", "#{pane_pid}"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout
        )
        deadline = time.monotonic() + 120
        while (
            "q quit"
            not in subprocess.run(
                [tmux, "-L", socket, "capture-pane", "-p", "-t", "top"],
                capture_output=True,
                text=True,
            ).stdout
        ):
            if time.monotonic() > deadline:
                raise SystemExit("top never drew its first frame")
            time.sleep(0.2)
        started = cpu_of(pid)
        time.sleep(2.0)  # the first redraws after start
        before, t0 = cpu_of(pid), time.monotonic()
        time.sleep(seconds)
        used, wall = cpu_of(pid) - before, time.monotonic() - t0
        top = {
            "cpu_s": round(used, 3),
            "wall_s": round(wall, 1),
            "percent_of_a_core": round(100 * used / wall, 2),
            "start_cpu_s": round(started, 2),
        }
    finally:
        subprocess.run([tmux, "-L", socket, "kill-server"], check=False)
    # The peer: `watch -n 2 gpupoolctl pool --no-refresh` for the same time.
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.monotonic()
    while time.monotonic() - t0 < seconds:
        tick = time.monotonic()
        subprocess.run(cli("pool", "--no-refresh"), env=env, capture_output=True, timeout=120)
        time.sleep(max(0.0, 2.0 - (time.monotonic() - tick)))
    wall = time.monotonic() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before_children.ru_utime) + (after.ru_stime - before_children.ru_stime)
    peer = {
        "cpu_s": round(used, 3),
        "wall_s": round(wall, 1),
        "percent_of_a_core": round(100 * used / wall, 2),
    }
    return {"top": top, "peer_pool_every_2s": peer}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--frames", type=int, default=15)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--idle-s", type=float, default=30.0)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--no-settle",
        action="store_true",
        help="in-process frames without settle_heap (the collector scanning the whole state)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-top-") as tmp:
        folder = Path(tmp)
        path = folder / "ledger.jsonl"
        t0 = time.perf_counter()
        pool = write_pool(path, args.nodes)
        pool["write_s"] = round(time.perf_counter() - t0, 1)
        print(f"pool: {json.dumps(pool)}", flush=True)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
        env.update(
            {
                "GPUPOOL_LEDGER": str(path),
                "GPUPOOL_LEDGER_NO_FSYNC": "1",
                "GPUPOOL_SIM_DIR": str(folder / "sim"),
                "HOME": str(folder),
                "PYTHONPATH": str(REPO_ROOT),
            }
        )
        frame = in_process(path, args.frames, settle=not args.no_settle)
        print(f"frame: {json.dumps(frame)}", flush=True)
        procs = subprocesses(env, args.rounds)
        print(f"subprocess: {json.dumps(procs)}", flush=True)
        quiet = idle(env, folder, args.idle_s)
        print(f"idle: {json.dumps(quiet)}", flush=True)
    result = {
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "pool": pool,
        "frame": frame,
        "subprocess": procs,
        "idle": quiet,
    }
    targets = {
        "redraw under 100 ms": frame["redraw_ms"] < 100,
        "idle under 5% of a core": isinstance(quiet.get("top"), dict)
        and quiet["top"]["percent_of_a_core"] < 5,
    }
    result["targets"] = targets
    print(json.dumps(targets))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
