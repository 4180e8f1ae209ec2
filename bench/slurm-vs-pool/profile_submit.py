"""Where the pool's submit call spends its time: the pool leg of run.py (the same `stress
ramp` flags), run in this process with probes on the submit path, per level.

    python bench/slurm-vs-pool/profile_submit.py [--levels 16,32,64] [--work 1s]
        [--hold 8s] [--json FILE] [--slurm] [--warm-handles] [--autocompact N]
        [--submit-without-reap]

A probe wraps one function of the submit path and adds the wall time and the calling
thread's CPU time (time.thread_time) of each call to the level that is running, and to the
submit that called it (a submitting thread) or to the thread's name (the reaper, the agent
sessions' fan-out threads). Probes nest: a probe's "self" time is its time less that of the
probes it called. Per level it prints:

- per submit (mean): calls, wall and CPU ms of each step of jobs.submitting.submit (recover,
  reap, enqueue: its own transaction, schedule, final_read) and of what they spend it on:
  lock_wait (for the ledger lock; a waiter's read-ahead included), hold_ex / hold_sh (the
  lock held, exclusive / shared), catch_up (reading what is new before the lock is taken;
  whole_read: snapshot and journal read whole, with or without the lock; copy: a new
  handle starting from the state another handle of the process read), refresh (bringing
  the state up to date under the lock; full_load: a replay of everything there),
  records_applied (records a catch-up, refresh or read-ahead applied; a whole read or a
  copy counts all it holds), fsync, build (the scheduling decision under the lock),
  pass (sched.schedule_pass), pool_view, agent:poll / agent:launch (the agent sessions),
  write@STEP and read@STEP (transactions and reads, by the step that made them);
- the same totals for the other threads;
- by second of the level: the submits that started in it (mean wall, CPU, lock wait,
  records applied, full loads) and the cores busy in this process and on the machine;
- the pass's mean wall by queue length;
- CPU seconds per second of the level and per job: this process (every thread, one GIL),
  its live children (the agent sessions), its reaped children (sbatch, squeue), Slurm's
  daemons, and the whole machine (/proc/stat, which misses nothing).

--slurm runs the same ramp through run.py's tuned loopback Slurm (root, slurm-wlm, munge)
for the CPU figures. --warm-handles, --autocompact and --submit-without-reap are what-ifs:
they change the run to measure what an option would save (see the README).

A probe costs about 7 us a call, 45-80 calls a submit: 0.3-0.6 ms of a submit's 12-30 ms
of CPU. A level's figures cover all of it (warm-up, hold and drain): its jobs are all the
jobs submitted in it, not only those of the steady window that jobs/s is measured in.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

SIM_INVENTORY = REPO_ROOT / "gpupoolctl" / "data" / "sim.yaml"
TICK = os.sysconf("SC_CLK_TCK")
SLURM_DAEMONS = ("munged", "slurmctld", "slurmd", "slurmstepd")


class Probes:
    """Per level, per owner (a submit, or a thread name): wall and CPU of each probe."""

    def __init__(self) -> None:
        self.level: float | None = None
        self.local = threading.local()
        self.lock = threading.Lock()
        # level -> owner ("submit" or a thread's name) -> probe ->
        # [calls, wall, cpu, self wall, self cpu]
        self.totals: dict[Any, dict[str, dict[str, list[float]]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0]))
        )
        self.submits: dict[Any, list[dict[str, float]]] = defaultdict(list)  # level -> per submit
        self.passes: dict[Any, list[tuple[int, int, float, float]]] = defaultdict(list)
        self.levels: dict[Any, dict[str, float]] = {}
        # level -> second -> cores busy in this process and on the machine
        self.seconds: dict[Any, dict[int, dict[str, float]]] = defaultdict(dict)

    def _stack(self) -> list[list[Any]]:
        stack = getattr(self.local, "stack", None)
        if stack is None:
            stack = self.local.stack = []
        return stack

    def wrap(
        self,
        name: str | Callable[[tuple, dict], str],
        fn: Callable[..., Any],
        *,
        on_call: Callable[..., None] | None = None,
    ) -> Callable[..., Any]:
        probes = self

        @functools.wraps(fn)
        def probed(*args: Any, **kwargs: Any) -> Any:
            label = name(args, kwargs) if callable(name) else name
            stack = probes._stack()
            frame = [label, 0.0, 0.0]  # children's wall, cpu
            stack.append(frame)
            wall0, cpu0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
                stack.pop()
                if stack:
                    stack[-1][1] += wall
                    stack[-1][2] += cpu
                probes._add(label, wall, cpu, wall - frame[1], cpu - frame[2])
                if on_call is not None:
                    on_call(args, kwargs, wall, cpu)

        return probed

    def _owner(self) -> tuple[str, dict[str, float] | None]:
        current = getattr(self.local, "submit", None)
        if current is not None:
            return "submit", current
        name = threading.current_thread().name
        if name.startswith("gpupool-session"):
            return "session-fanout", None
        return ("reaper" if name == "stress-reaper" else name), None

    def _add(
        self, label: str, wall: float, cpu: float, self_wall: float, self_cpu: float,
        count: int = 1,
    ) -> None:  # fmt: skip
        owner, current = self._owner()
        if current is not None:
            current[f"{label}.n"] = current.get(f"{label}.n", 0) + count
            current[f"{label}.wall"] = current.get(f"{label}.wall", 0.0) + wall
            current[f"{label}.cpu"] = current.get(f"{label}.cpu", 0.0) + cpu
            current[f"{label}.self_wall"] = current.get(f"{label}.self_wall", 0.0) + self_wall
            current[f"{label}.self_cpu"] = current.get(f"{label}.self_cpu", 0.0) + self_cpu
        with self.lock:
            row = self.totals[self.level][owner][label]
            row[0] += count
            row[1] += wall
            row[2] += cpu
            row[3] += self_wall
            row[4] += self_cpu


PROBES = Probes()


class _HoldTimer:
    """The fcntl module as ledger.lock uses it, timing each hold of the ledger lock from
    the flock that took it to the one that let it go: wall and the holder's CPU."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def flock(self, fd: int, op: int) -> None:
        inner = self._inner
        if op == inner.LOCK_UN:
            taken = getattr(PROBES.local, "held", None)
            inner.flock(fd, op)
            if taken is not None:
                PROBES.local.held = None
                kind, wall0, cpu0 = taken
                wall, cpu = time.perf_counter() - wall0, time.thread_time() - cpu0
                PROBES._add(f"hold_{kind}", wall, cpu, wall, cpu)
            return
        inner.flock(fd, op)  # raises BlockingIOError when busy: nothing taken
        kind = "ex" if op & inner.LOCK_EX else "sh"
        PROBES.local.held = (kind, time.perf_counter(), time.thread_time())


def _counting(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (replay.refresh, read_ahead or catch_up), counting the records it applies: the
    seq of the state it brought up to date, after less before (a full reload counts all it
    read, and so does a new handle's start from a copy: see the `copy` probe)."""

    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        loaded = args[0]
        before = loaded.state.seq if loaded is not None else 0
        done = fn(*args, **kwargs)
        if done is None or done is loaded:  # read ahead, or brought up to date in place
            applied = loaded.state.seq - before if loaded is not None else 0
        else:  # reloaded from nothing: everything it read
            applied = done.state.seq - (done.snap.seq if done.snap else 0)
        PROBES._add("records_applied", 0.0, 0.0, 0.0, 0.0, count=applied)
        return done

    return counted


def install() -> None:
    """Wrap the functions of the submit path where their callers look them up."""
    from gpupoolctl.jobs import launching, reaping, scheduling, service, teams
    from gpupoolctl.jobs.nodes import Nodes
    from gpupoolctl.ledger import copies, fileio, lock, replay
    from gpupoolctl.ledger.ledger import Ledger, Transaction
    from gpupoolctl.remote.session import SessionPool
    from gpupoolctl.stress import runner
    from gpupoolctl.stress.pool_backend import PoolBackend

    wrap = PROBES.wrap

    original_submit = PoolBackend.submit

    @functools.wraps(original_submit)
    def submit(self: Any, work: Any) -> Any:
        record: dict[str, float] = {}
        PROBES.local.submit = record
        wall0, cpu0 = time.perf_counter(), time.thread_time()
        try:
            return original_submit(self, work)
        finally:
            record["start"] = wall0
            record["total.wall"] = time.perf_counter() - wall0
            record["total.cpu"] = time.thread_time() - cpu0
            PROBES.local.submit = None
            with PROBES.lock:
                PROBES.submits[PROBES.level].append(record)

    PoolBackend.submit = submit  # type: ignore[method-assign]

    teams.with_team = wrap("with_team", teams.with_team)
    reaping.recover = wrap("recover", reaping.recover)
    reaping.reap = wrap("reap", reaping.reap)
    scheduling.schedule = wrap("schedule", scheduling.schedule)
    launching.launch = wrap("launch", launching.launch)
    service.JobsCore.never_fits = wrap("place_check", service.JobsCore.never_fits)  # type: ignore[method-assign]

    def top_level(inside: str, top: str) -> Callable[[tuple, dict], str]:
        # A submit's own write is its enqueue transaction, its own read (after the
        # schedule call) its last step; those of recover, reap and schedule are theirs.
        def label(args: tuple, kwargs: dict) -> str:
            in_submit = getattr(PROBES.local, "submit", None) is not None
            stack = PROBES._stack()
            if in_submit and not stack:
                return top
            return f"{inside}@{stack[-1][0]}" if stack else inside

        return label

    Ledger.write = wrap(top_level("write", "enqueue"), Ledger.write)  # type: ignore[method-assign]
    Ledger.read = wrap(top_level("read", "final_read"), Ledger.read)  # type: ignore[method-assign]
    SessionPool.call = wrap("session_call", SessionPool.call)  # type: ignore[method-assign]
    lock._wait = wrap("lock_wait", lock._wait)
    lock.fcntl = _HoldTimer(lock.fcntl)  # how long each holder keeps the lock
    Ledger._read_ahead = wrap("read_ahead", Ledger._read_ahead)  # type: ignore[method-assign]
    replay.refresh = wrap("refresh", _counting(replay.refresh))
    replay.read_ahead = _counting(replay.read_ahead)
    replay.load = wrap("full_load", replay.load)
    # The reading done before the lock is taken (a new handle's whole replay included).
    replay.catch_up = wrap("catch_up", _counting(replay.catch_up))
    replay._load = wrap("whole_read", replay._load)  # locked or not: snapshot + journal
    copies.take = wrap("copy", copies.take)  # a new handle's start from another's state
    fileio.sync = wrap("fsync", fileio.sync)
    Transaction.encoded = wrap("encode", Transaction.encoded)  # type: ignore[method-assign]
    service.JobsCore.pool = wrap("pool_view", service.JobsCore.pool)  # type: ignore[method-assign]

    def note_pass(args: tuple, kwargs: dict, wall: float, cpu: float) -> None:
        snap = args[0]  # sched.snapshot.Snapshot: the pass's queue and slices
        with PROBES.lock:
            PROBES.passes[PROBES.level].append((len(snap.queue), len(snap.slices), wall, cpu))

    scheduling.run_pass = wrap("pass", scheduling.run_pass, on_call=note_pass)

    def agent_label(args: tuple, kwargs: dict) -> str:
        calls = args[1]
        verbs = {c.verb for c in calls}
        if verbs == {"poll"}:
            return "agent:poll"
        if verbs == {"launch"}:
            return "agent:launch"
        return "agent:other"

    Nodes.call = wrap(agent_label, Nodes.call)  # type: ignore[method-assign]

    # The decision the scheduling call makes under the lock, once per round.
    original_decide = scheduling._decide
    scheduling._decide = wrap("build", original_decide)

    # Level boundaries: which level a probe's time belongs to, and CPU at both ends.
    original_closed = runner.Ramp._closed

    def closed(self: Any, lvl: Any) -> None:
        PROBES.level = lvl.level
        start = snapshot_cpu()
        done = threading.Event()
        sampler = threading.Thread(
            target=_sample, args=(lvl.level, start, done), name="profile-sampler", daemon=True
        )
        sampler.start()
        try:
            original_closed(self, lvl)
        finally:
            done.set()
            sampler.join()
            end = snapshot_cpu()
            PROBES.levels[lvl.level] = {key: end[key] - start[key] for key in start} | {
                "jobs": len(lvl.samples),
                "t0": start["wall"],
            }
            PROBES.level = None

    runner.Ramp._closed = closed  # type: ignore[method-assign]


def skip_reap_in_submit() -> None:
    """What if: jobs.submitting's `reaping.reap` does nothing (recover is kept)."""
    import types

    from gpupoolctl.jobs import reaping, submitting

    stand_in = types.SimpleNamespace(recover=reaping.recover, reap=lambda *a, **k: [])
    submitting.reaping = stand_in  # type: ignore[assignment]


def warm_handles_before_levels() -> None:
    """What if: each level starts with as many ledger handles as it has submitters, each
    having read the ledger (a new one replays all of it), before the level's clock starts."""
    import contextlib

    from gpupoolctl.stress import runner
    from gpupoolctl.stress.pool_backend import PoolBackend

    backends: list[Any] = []
    original_prepare = PoolBackend.prepare

    def prepare(self: Any, *args: Any, **kwargs: Any) -> Any:
        backends.append(self)
        return original_prepare(self, *args, **kwargs)

    PoolBackend.prepare = prepare  # type: ignore[method-assign]
    original_init = runner._Level.__init__

    def init(self: Any, scenario: Any, index: int, level: float, clock: Any) -> None:
        for backend in backends:
            with contextlib.ExitStack() as stack:
                for _ in range(int(level)):
                    jobs, _meter = stack.enter_context(backend._borrow())
                    jobs.read()
        original_init(self, scenario, index, level, clock)

    runner._Level.__init__ = init  # type: ignore[method-assign]


def _proc_cpu() -> dict[str, float]:
    """CPU seconds, from /proc: Slurm's daemons (munged, slurmctld, slurmd, slurmstepd, with
    the children they reaped) and this process's other live children (the pool's agent
    sessions). A slurmstepd that ends unreaped by slurmd takes its seconds with it: the
    machine's figure (/proc/stat) is the one that misses nothing."""
    me = os.getpid()
    children = daemons = 0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                head, _, tail = f.read().rpartition(")")
        except OSError:
            continue
        fields = tail.split()
        comm = head.partition("(")[2]
        if comm in SLURM_DAEMONS:
            daemons += sum(int(v) for v in fields[11:15])
        elif int(fields[1]) == me:
            children += int(fields[11]) + int(fields[12])
    return {"children_cpu": children / TICK, "daemons_cpu": daemons / TICK}


def _machine_cpu() -> tuple[float, float]:
    with open("/proc/stat", encoding="ascii") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return (sum(values) - idle) / TICK, sum(values) / TICK


def snapshot_cpu() -> dict[str, float]:
    times = os.times()
    busy, total = _machine_cpu()
    return {
        "wall": time.perf_counter(),
        "process_cpu": times.user + times.system,
        "process_user": times.user,
        "process_sys": times.system,
        # Children that ended and were waited for: sbatch and squeue for Slurm.
        "reaped_cpu": times.children_user + times.children_system,
        **_proc_cpu(),
        "machine_busy": busy,
        "machine_total": total,
    }


def _sample(level: float, start: dict[str, float], done: threading.Event) -> None:
    """About once a second of the level: cores busy in this process and on the machine
    since the last sample, under the second it was taken in (a sampler starved of the GIL
    leaves seconds out rather than misplacing them)."""
    last = start
    while not done.wait(1.0):
        now = snapshot_cpu()
        wall = now["wall"] - last["wall"]
        PROBES.seconds[level][int(now["wall"] - start["wall"]) - 1] = {
            "process": (now["process_cpu"] - last["process_cpu"]) / wall,
            "machine": (now["machine_busy"] - last["machine_busy"]) / wall,
        }
        last = now


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def summarize() -> dict[str, Any]:
    out: dict[str, Any] = {}
    for level, usage in PROBES.levels.items():
        submits = PROBES.submits.get(level, [])
        n = len(submits) or 1
        keys = sorted({k.rsplit(".", 1)[0] for s in submits for k in s if k != "start"})
        per_submit = {
            key: {
                stat: sum(s.get(f"{key}.{stat}", 0.0) for s in submits) / n
                for stat in ("n", "wall", "cpu", "self_wall", "self_cpu")
            }
            for key in keys
        }
        passes = PROBES.passes.get(level, [])
        by_queue: dict[str, list[float]] = defaultdict(list)
        for queue, _slices, wall, _cpu in passes:
            bucket = "0" if queue == 0 else f"{2 ** (queue - 1).bit_length()}"
            by_queue[bucket].append(wall)
        totals = PROBES.totals.get(level, {})
        series: dict[int, list[dict[str, float]]] = defaultdict(list)
        for s in submits:
            series[int(s["start"] - usage["t0"])].append(s)
        timeline = {
            second: {
                "submits": len(rows),
                "wall_ms": mean([r["total.wall"] for r in rows]) * 1e3,
                "cpu_ms": mean([r["total.cpu"] for r in rows]) * 1e3,
                "lock_wait_ms": mean([r.get("lock_wait.wall", 0.0) for r in rows]) * 1e3,
                "records_applied": mean([r.get("records_applied.n", 0) for r in rows]),
                "full_loads": sum(r.get("full_load.n", 0) for r in rows),
            }
            for second, rows in sorted(series.items())
        }
        for second, cores in PROBES.seconds.get(level, {}).items():
            timeline.setdefault(second, {"submits": 0}).update(cores)
        out[str(level)] = {
            "usage": usage,
            "submits": len(submits),
            "per_submit": per_submit,
            "submit_wall_p50_p95": percentiles([s["total.wall"] for s in submits]),
            "timeline": timeline,
            "threads": {
                owner: {label: row for label, row in rows.items()}
                for owner, rows in totals.items()
                if owner != "submit"
            },
            "passes": {
                "count": len(passes),
                "by_queue_len": {
                    k: {"count": len(v), "mean_wall_ms": mean(v) * 1e3}
                    for k, v in sorted(by_queue.items(), key=lambda kv: int(kv[0]))
                },
                "slices": max((p[1] for p in passes), default=0),
            },
        }
    return out


def percentiles(values: list[float]) -> tuple[float, float]:
    if not values:
        return (0.0, 0.0)
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(q * len(ordered)))]  # noqa: E731
    return (pick(0.5), pick(0.95))


def render(summary: dict[str, Any]) -> str:
    lines = []
    for level, doc in summary.items():
        u = doc["usage"]
        wall = u["wall"]
        jobs = max(1, u["jobs"])
        lines.append(
            f"level {level}: {u['jobs']} jobs, {doc['submits']} probed submits in "
            f"{wall:.1f} s; "
            f"submit wall p50/p95 {doc['submit_wall_p50_p95'][0] * 1e3:.0f}/"
            f"{doc['submit_wall_p50_p95'][1] * 1e3:.0f} ms"
        )
        lines.append(
            f"  CPU per second of level: process {u['process_cpu'] / wall:.2f} "
            f"(user {u['process_user'] / wall:.2f}, sys {u['process_sys'] / wall:.2f}), "
            f"children {u['children_cpu'] / wall:.2f}, reaped {u['reaped_cpu'] / wall:.2f}, "
            f"slurm daemons {u['daemons_cpu'] / wall:.2f}, "
            f"machine {u['machine_busy'] / wall:.2f} of {u['machine_total'] / wall:.2f}"
        )
        lines.append(
            f"  CPU s per job: process {u['process_cpu'] / jobs * 1e3:.1f} ms, "
            f"children {u['children_cpu'] / jobs * 1e3:.1f} ms, reaped "
            f"{u['reaped_cpu'] / jobs * 1e3:.1f} ms, slurm daemons "
            f"{u['daemons_cpu'] / jobs * 1e3:.1f} ms, machine "
            f"{u['machine_busy'] / jobs * 1e3:.1f} ms"
        )
        if doc["submits"]:
            lines.append(f"  per submit (mean):    {'calls':>6} {'wall ms':>8} {'cpu ms':>7}"
                         f" {'self wall':>9} {'self cpu':>8}")  # fmt: skip
        for key, row in doc["per_submit"].items():
            lines.append(
                f"    {key:<18} {row['n']:>6.2f} {row['wall'] * 1e3:>8.1f} "
                f"{row['cpu'] * 1e3:>7.1f} {row['self_wall'] * 1e3:>9.1f} "
                f"{row['self_cpu'] * 1e3:>8.1f}"
            )
        for owner, rows in doc["threads"].items():
            lines.append(f"  thread {owner} (level total):")
            for label, (calls, w, c, sw, sc) in sorted(rows.items()):
                lines.append(
                    f"    {label:<18} {calls:>6.0f} {w:>8.2f} s {c:>7.2f} s"
                    f" self {sw:>6.2f} s {sc:>6.2f} s"
                )
        lines.append(
            "  by second of the level: submits started, their mean wall / CPU / lock wait (ms),"
            " records applied, full loads; cores busy: process, machine"
        )
        for second, row in sorted(doc["timeline"].items()):
            lines.append(
                f"    {second:>3} s {row['submits']:>4} {row.get('wall_ms', 0):>7.0f}"
                f" {row.get('cpu_ms', 0):>6.1f} {row.get('lock_wait_ms', 0):>7.0f}"
                f" {row.get('records_applied', 0):>6.0f} {row.get('full_loads', 0):>4.0f}"
                f"   {row.get('process', 0):>5.2f} {row.get('machine', 0):>5.2f}"
            )
        p = doc["passes"]
        if not p["count"]:
            continue
        lines.append(f"  passes: {p['count']} on {p['slices']} slices; mean wall by queue length:")
        lines.append(
            "    "
            + ", ".join(
                f"<= {k}: {v['count']} x {v['mean_wall_ms']:.1f} ms"
                for k, v in p["by_queue_len"].items()
            )
        )
    return "\n".join(lines)


def run_ramp(base: Path, args: argparse.Namespace, backend: list[str]) -> dict[str, Any]:
    """The ramp run.py runs, in this process (`stress ramp` through the CLI's own entry
    point, so that the probes see it); its result document."""
    from gpupoolctl.cli import main as cli_main

    sys.argv = [
        "gpupoolctl", "-q", "-i", str(SIM_INVENTORY), "--ledger", str(base / "ledger"),
        "stress", "ramp", "--levels", args.levels, "--load-model", "closed",
        "--workload", "sleep", "--work", args.work, "--warmup", args.warmup,
        "--hold", args.hold, "--drain", args.drain, "--job-timeout", "2m",
        "--name", "slurm-vs-pool", *backend, "--save", str(base / "result.json"), "-o", "json",
    ]  # fmt: skip
    stdout = sys.stdout
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (the ramp's own JSON: not ours)
    try:
        cli_main.run()
    except SystemExit as exc:
        if exc.code not in (0, 4, None):
            raise
    finally:
        sys.stdout.close()
        sys.stdout = stdout
    return json.loads((base / "result.json").read_text())


def slurm_cluster(root: Path) -> Any:
    """run.py's loopback cluster with the tuned setting (batch_sched_delay=0)."""
    import importlib.util

    here = Path(__file__).with_name("run.py")
    spec = importlib.util.spec_from_file_location("slurm_vs_pool_run", here)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.slurm_cluster(root, module.TUNED + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--levels", default="16,32,64")
    parser.add_argument("--work", default="1s")
    parser.add_argument("--warmup", default="2s")
    parser.add_argument("--hold", default="8s")
    parser.add_argument("--drain", default="30s")
    parser.add_argument(
        "--slurm", action="store_true",
        help="the same ramp through run.py's tuned loopback Slurm instead (CPU figures only)",
    )  # fmt: skip
    parser.add_argument(
        "--autocompact", type=int,
        help="what if: GPUPOOL_LEDGER_AUTOCOMPACT for the run (records that make a writer "
        "compact; default 10,000)",
    )  # fmt: skip
    parser.add_argument(
        "--submit-without-reap", action="store_true",
        help="what if: submit does not poll running jobs first (the ramp's reaper still "
        "does, every poll_s)",
    )  # fmt: skip
    parser.add_argument(
        "--warm-handles", action="store_true",
        help="what if: before each level's clock starts, the pool backend has one ledger "
        "handle per submitter of the level, each brought up to date",
    )  # fmt: skip
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="profile-submit-") as folder:
        base = Path(folder)
        (base / "home").mkdir()
        for key in [k for k in os.environ if k.startswith(("GPUPOOL_", "XDG_", "SLURM_"))]:
            del os.environ[key]
        os.environ.update(
            {"HOME": str(base / "home"), "GPUPOOL_SIM_DIR": str(base / "sim"), "NO_COLOR": "1"}
        )
        if args.autocompact is not None:
            os.environ["GPUPOOL_LEDGER_AUTOCOMPACT"] = str(args.autocompact)
        install()
        if args.submit_without_reap:
            skip_reap_in_submit()
        if args.warm_handles:
            warm_handles_before_levels()
        previous = Path.cwd()
        os.chdir(base)  # where the jobs write (sbatch's slurm-<id>.out), as run.py runs it
        try:
            if args.slurm:
                with slurm_cluster(base / "slurm") as cluster:
                    os.environ["SLURM_CONF"] = cluster.env["SLURM_CONF"]
                    result = run_ramp(base, args, ["--backend", "slurm"])
            else:
                result = run_ramp(base, args, [])
        finally:
            os.chdir(previous)  # out of the folder before it goes
    summary = summarize()
    for level in result["levels"]:
        doc = summary.get(str(float(level["level"])))
        if doc is not None:
            doc["throughput"] = level["throughput"]
            doc["phases"] = level["phases"]
    for level, doc in summary.items():
        print(f"level {level}: {doc.get('throughput', 0):.2f} jobs/s (steady window)")
    print(render(summary))
    if args.json:
        args.json.write_text(json.dumps(summary, indent=2, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
