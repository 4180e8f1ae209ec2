"""One trace through production's path, the real CLI on the bundled simulated pool with the
ledger's clock set to each arrival (GPUPOOL_NOW), and through bench/utilization's replay:
the same jobs start at the same arrival on the same memory (issue 32, part 3).

Each job is `gpupoolctl submit`ted at its arrival; submit records it and runs the loop's
round (reap, then the scheduling pass), as the replay without a pass interval runs a pass
at every arrival. The jobs run far longer than the trace lasts (nothing ends), so what
decides is placement as the host fills: which slice each job gets (best fit among MIG
instances of several sizes, multi-GPU jobs on one node), and which later, smaller jobs
still fit past the ones that wait. The pass is limited to one host (`-l`), whose slices the
replay gets from the ledger. (Jobs that end would need the CLI's passes and the replay's
to see the same ends at the same instants; the library-level test in
tests/unit/test_bench_scale.py covers those, on a virtual clock.)"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import tests.benchpath  # noqa: F401  # bench/utilization's scripts on sys.path

# isort: split
import jobtrace
from replay import T0, replay

from gpupoolctl.ledger import Ledger
from gpupoolctl.sched import JobRequest
from gpupoolctl.timestamps import format_ts, parse_ts

HOST = "sg-dgx02"  # eight H100s cut by MIG as shipped: slices of several sizes
FOREVER = 10**6  # seconds: no job of the trace ends while it lasts


def request_of(job: jobtrace.Job) -> JobRequest:
    return JobRequest(gpus=job.gpus, memory_mib=job.memory_mib, same_node=job.gpus > 1)


def test_the_cli_and_the_replay_start_the_same_jobs_at_the_same_arrivals(jobs_cli, tmp_path):
    ledger_path = tmp_path / "ledger.jsonl"
    env = {"GPUPOOL_LEDGER": str(ledger_path)}
    day = sorted(jobtrace.make_trace(11, inference=400, training=12), key=lambda j: j.arrival)
    first = day[0].arrival
    # Fourteen jobs of the day, arriving five times as fast, on whole seconds (the ledger's
    # clock counts milliseconds), two of them training (60 GB and more per GPU).
    picked = [j for j in day if j.kind == "training"][:2] + [
        j for j in day if j.kind == "inference"
    ][:12]
    trace = sorted(
        (
            dataclasses.replace(j, arrival=float(round((j.arrival - first) / 5)), duration=FOREVER)
            for j in picked
        ),
        key=lambda j: (j.arrival, j.id),
    )

    listed = jobs_cli("-q", "-l", HOST, "pool", extra_env=env)  # the host's slices, recorded
    assert listed.code == 0, listed.stderr
    slices = [s for s in Ledger(ledger_path).read().state.slices.values() if s["host"] == HOST]
    assert len(slices) > 8  # MIG instances, not only whole cards

    names: dict[str, str] = {}
    for job in trace:
        now = {**env, "GPUPOOL_NOW": format_ts(T0 + timedelta(seconds=job.arrival))}
        run = jobs_cli(
            "-q", "-l", HOST, "submit", "--gpus", str(job.gpus), "--mem",
            f"{job.memory_mib}MiB", "--priority", str(job.priority),
            *(["--same-node"] if job.gpus > 1 else []), "--", "sleep", str(FOREVER),
            extra_env=now,
        )  # fmt: skip
        assert run.code == 0, run.stderr
        names[run.stdout.strip()] = job.id

    # The replay up to just after the last arrival, where the CLI's part of the day ends.
    until = trace[-1].arrival + 1
    replayed = replay("r", trace, slices, 0, request_of, lambda j: j.priority, until=until)
    state = Ledger(ledger_path).read().state
    started, held = {}, {}
    for job_id, job in state.jobs.items():
        if job.get("alloc") is None:
            continue
        alloc = state.allocations[job["alloc"]]
        started[names[job_id]] = (parse_ts(alloc.created) - T0).total_seconds()
        held[names[job_id]] = sum(state.slices[s]["memory_mib"] for s in alloc.slices)
    queued = {names[j] for j, job in state.jobs.items() if job["state"] == "queued"}
    # Not everything fits at once: the queue decided something.
    assert queued and started
    assert started == replayed.starts
    assert held == replayed.held_mib
    assert queued == set(replayed.waiting)
    assert not replayed.refused and all(j["state"] != "failed" for j in state.jobs.values())
