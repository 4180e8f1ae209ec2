"""bench/scale: the fleet it copies from the bundled pool, and the line it fits through the
passes' times. The bench modules are scripts, imported as they import each other."""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from gpupoolctl.ledger import Ledger

_REPO = Path(__file__).resolve().parents[2]
for _path in (str(_REPO), str(_REPO / "bench" / "utilization")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

_spec = importlib.util.spec_from_file_location("bench_scale", _REPO / "bench/scale/run.py")
assert _spec is not None and _spec.loader is not None
scale = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(scale)


@pytest.fixture(scope="module")
def six_nodes() -> list[dict]:
    return scale.fleet(6)


def test_the_fleet_takes_the_classes_in_turn_half_in_each_site(six_nodes) -> None:
    hosts = sorted({s["host"] for s in six_nodes})
    assert hosts == ["dub-n0003", "dub-n0004", "dub-n0005", "sin-n0000", "sin-n0001", "sin-n0002"]
    sites = {s["host"]: s["site"] for s in six_nodes}
    assert [sites[h] for h in hosts].count("singapore") == 3
    # Node n copies class n mod 3: the same slice profiles as its class's host.
    profiles = {
        host: sorted(str(s.get("profile")) for s in six_nodes if s["host"] == host)
        for host in hosts
    }
    assert profiles["sin-n0000"] == profiles["dub-n0003"]
    assert profiles["sin-n0002"] == profiles["dub-n0005"]
    assert profiles["sin-n0000"] != profiles["sin-n0002"]  # a DGX is not an MI300X


def test_every_copied_slice_is_its_own(six_nodes) -> None:
    ids = [s["id"] for s in six_nodes]
    uuids = [s["uuid"] for s in six_nodes]
    assert len(set(ids)) == len(ids) and len(set(uuids)) == len(uuids)
    assert all(s["id"].startswith(s["host"] + "/") for s in six_nodes)
    assert all(str(s["island"]).startswith(s["host"] + "/") for s in six_nodes)


def test_the_line_through_the_pass_times_is_per_thousand_queued() -> None:
    # 2 ms + 0.5 ms per queued job: 500 ms per 1,000 queued.
    log = [(60.0 * n, queued, 0.002 + 0.0005 * queued) for n, queued in enumerate((0, 10, 400))]
    slope_ms, intercept_ms = scale.per_thousand_queued(log)
    assert slope_ms == pytest.approx(500.0)
    assert intercept_ms == pytest.approx(2.0)
    # One queue length only: no slope to fit, the mean instead.
    assert scale.per_thousand_queued([(0.0, 5, 0.01), (60.0, 5, 0.03)]) == pytest.approx(
        (0.0, 20.0)
    )


_day_spec = importlib.util.spec_from_file_location(
    "bench_production_day", _REPO / "bench/scale/production_day.py"
)
assert _day_spec is not None and _day_spec.loader is not None
day = importlib.util.module_from_spec(_day_spec)
_day_spec.loader.exec_module(day)


def test_production_runs_each_job_of_the_day_for_its_duration_on_virtual_nodes(
    tmp_path, six_nodes
) -> None:
    """production_day drives production's executor (records as submit does, then refresh
    each minute) on virtual nodes: every job that arrived ran, starting at or after its
    arrival and ending its duration later on the virtual clock, and every slice was given
    back."""
    slices = [s for s in six_nodes if s["host"] in ("sin-n0000", "sin-n0001")]  # two DGXs
    hosts = sorted({s["host"] for s in slices})
    whole_day = sorted(
        day.jobtrace.make_trace(7, inference=30, training=1), key=lambda j: j.arrival
    )
    first = whole_day[0].arrival  # the day's first dozen jobs, from its first arrival on
    inference = [j for j in whole_day if j.kind == "inference"][:12]
    trace = [dataclasses.replace(j, arrival=j.arrival - first) for j in inference]
    clock = day.Clock(day.T0)
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, clock=clock.now)
    ledger.refresh_slices(hosts, slices)
    pool = day.virtual_pool(ledger, hosts, day.VirtualNodes(clock))
    traced = day.run_day(pool, clock, trace, scale.request_of).traced
    assert clock.at < day.T0 + timedelta(hours=12), "the day never drained"
    ended = ledger.read().state.finished
    assert set(ended) == set(traced)
    for job_id, job in ended.items():
        assert job["state"] == "done"
        # the node's start and the job's end, in epoch seconds as the agent reports them
        started, finished = float(job["nodes"][0]["started"]), float(job["ended"])
        assert started >= day.T0.timestamp() + traced[job_id].arrival  # never before it came
        assert finished - started == pytest.approx(traced[job_id].duration, abs=1e-3)
    assert ledger.read().state.holders == {}  # every slice given back


def test_one_trace_gets_the_same_decisions_from_production_and_from_the_replay(
    tmp_path, six_nodes
) -> None:
    """Issue 32, part 3: the same jobs, through production's executor (production_day: the
    ledger, refresh every minute, virtual nodes) and through bench/utilization's replay
    (the snapshot and the pass on its in-memory state, a pass every minute), start at the
    same minute on the same memory, and the same ones are refused. A static pool (one DGX
    cut by MIG, 20 slices) under a queue hours long; re-cuts are not compared here."""
    from replay import replay

    host = "sin-n0001"
    slices = [s for s in six_nodes if s["host"] == host]
    day_jobs = sorted(
        day.jobtrace.make_trace(11, inference=400, training=12), key=lambda j: j.arrival
    )
    first = day_jobs[0].arrival
    # The day's first sixty jobs, arriving twenty times as fast: most of them queue.
    trace = [dataclasses.replace(j, arrival=(j.arrival - first) / 20) for j in day_jobs[:60]]

    replayed = replay("r", trace, slices, 0, scale.request_of, lambda j: j.priority,
                      pass_interval=60)  # fmt: skip
    waited = [
        j for j in trace if j.id in replayed.starts and replayed.starts[j.id] - j.arrival > 60
    ]
    assert len(waited) > 30 and {j.priority for j in trace} == {10, 50}  # a queue, two priorities

    clock = day.Clock(day.T0)
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, clock=clock.now)
    ledger.refresh_slices([host], slices)
    pool = day.virtual_pool(ledger, [host], day.VirtualNodes(clock))
    traced = day.run_day(pool, clock, trace, scale.request_of).traced
    state = ledger.read().state
    started, held, refused = {}, {}, set()
    for job_id, job in state.finished.items():
        name = traced[job_id].id
        if job["state"] == "failed" and "can never fit" in str(job.get("error")):
            refused.add(name)
            continue
        assert job["state"] == "done", job
        started[name] = float(job["nodes"][0]["started"]) - day.T0.timestamp()
        held[name] = sum(state.slices[s]["memory_mib"] for s in job["placement"]["slices"])
    assert refused == set(replayed.refused)
    assert started == replayed.starts
    assert held == replayed.held_mib
