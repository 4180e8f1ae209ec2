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
