"""bench/scale: the fleet it copies from the bundled pool, and the line it fits through the
passes' times. The bench modules are scripts, imported as they import each other."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

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
    from datetime import timedelta

    from gpupoolctl.jobs import Jobs, Nodes
    from gpupoolctl.jobs.refreshing import refresh
    from gpupoolctl.ledger import Ledger
    from gpupoolctl.remote.target import target_from_vars

    slices = [s for s in six_nodes if s["host"] in ("sin-n0000", "sin-n0001")]  # two DGXs
    hosts = sorted({s["host"] for s in slices})
    import dataclasses

    whole_day = sorted(
        day.jobtrace.make_trace(7, inference=30, training=1), key=lambda j: j.arrival
    )
    first = whole_day[0].arrival  # the day's first dozen jobs, from its first arrival on
    inference = [j for j in whole_day if j.kind == "inference"][:12]
    trace = [dataclasses.replace(j, arrival=j.arrival - first) for j in inference]
    clock = day.Clock(day.T0)
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, clock=clock.now)
    ledger.refresh_slices(hosts, slices)
    targets = [target_from_vars(h, {"transport": "local"}) for h in hosts]
    jobs = Jobs(ledger, Nodes(targets, day.VirtualNodes(clock)), owner="bench", clock=clock.epoch)
    traced = {}  # job id -> the trace's job
    pending = sorted(trace, key=lambda j: j.arrival)
    while pending or ledger.read().state.jobs:
        seconds = (clock.at - day.T0).total_seconds()
        arrived = [j for j in pending if j.arrival <= seconds]
        pending = pending[len(arrived) :]
        if arrived:
            known = set(ledger.read().state.jobs)
            day.record_arrivals(jobs, arrived, scale.request_of)
            new = sorted(set(ledger.read().state.jobs) - known, key=lambda k: int(k[2:]))
            traced.update(zip(new, arrived, strict=True))  # ids follow the records' order
        refresh(jobs)
        clock.at += timedelta(seconds=60)
        assert clock.at < day.T0 + timedelta(hours=12), "the day never drained"
    ended = ledger.read().state.finished
    assert set(ended) == set(traced)
    for job_id, job in ended.items():
        assert job["state"] == "done"
        # the node's start and the job's end, in epoch seconds as the agent reports them
        started, finished = float(job["nodes"][0]["started"]), float(job["ended"])
        assert started >= day.T0.timestamp() + traced[job_id].arrival  # never before it came
        assert abs(finished - started - round(traced[job_id].duration)) < 1
    assert ledger.read().state.holders == {}  # every slice given back
