"""Inside-the-job attribution in the stress data model: a job's own compute/comm split,
its work and link classes, summed per level, saved and read back (older files too)."""

from __future__ import annotations

import json

import pytest

from gpupoolctl.stress.metrics import metric_value, summarize_level
from gpupoolctl.stress.model import METRICS, PHASE_HELP, PHASES, LevelResult, Sample
from gpupoolctl.stress.result import dumps, from_dict, to_csv_rows
from gpupoolctl.stress.thresholds import metric_family

T0 = 1_700_000_000.0
WINDOW = (T0 + 10.0, T0 + 20.0)


def job(submitted: float, run: float = 2.0, **kwargs) -> Sample:
    at = T0 + submitted
    return Sample(level=2, submitted=at, started=at, ended=at + run, ok=True, **kwargs)


def summarize(samples: list[Sample]) -> LevelResult:
    return summarize_level(
        samples, level=2, model="closed", warmup_s=10.0, hold_s=10.0, window=WINDOW
    )


def test_phases_and_metrics_name_the_split():
    assert PHASES[-2:] == ("compute", "comm")
    assert set(PHASES) <= set(PHASE_HELP)
    for name in ("work_throughput", "phase.compute", "phase.comm"):
        assert name in METRICS
    assert metric_family("work_throughput") == "throughput"


def test_level_sums_work_comm_links_and_bounds():
    samples = [
        job(
            11,
            work=64,
            phases={"run": 2, "compute": 0.5, "comm": 1.5},
            comm_links={"nic": 1.2, "pcie": 0.3},
            bound_by="nic",
        ),
        job(
            13,
            work=64,
            phases={"run": 2, "compute": 1.0, "comm": 1.0},
            comm_links={"nvlink": 1.0},
            bound_by="nvlink",
        ),
        job(
            15,
            work=64,
            phases={"run": 2, "compute": 0.4, "comm": 1.6},
            comm_links={"nic": 1.6},
            bound_by="nic",
        ),
        job(17),  # a sleep job: reports nothing, counts in neither mean
    ]
    lv = summarize(samples)
    assert lv.phases["compute"] == pytest.approx((0.5 + 1.0 + 0.4) / 3)
    assert lv.phases["comm"] == pytest.approx((1.5 + 1.0 + 1.6) / 3)
    # mean per reporting job: a job without time on a class counts 0 there
    assert lv.comm_links == pytest.approx({"nvlink": 1 / 3, "pcie": 0.1, "nic": 2.8 / 3})
    assert list(lv.comm_links) == ["nvlink", "pcie", "nic"]  # LINK_CLASSES order
    assert lv.bound_by == {"nic": 2, "nvlink": 1}
    # each job's 64 samples lie entirely inside the 10 s window
    assert lv.work_throughput == pytest.approx(3 * 64 / 10.0)
    assert metric_value(lv, "work_throughput") == lv.work_throughput
    assert metric_value(lv, "phase.comm") == lv.phases["comm"]


def test_work_is_credited_by_share_inside_the_window():
    # submitted 1 s before the window, ended 1 s into it: half its life inside
    lv = summarize([job(9, work=100)])
    assert lv.work_throughput == pytest.approx(50 / 10.0)


def test_no_work_reported_is_none_not_zero():
    lv = summarize([job(11), job(12)])
    assert lv.work_throughput is None
    assert lv.comm_links == {} and lv.bound_by == {}
    assert metric_value(lv, "work_throughput") is None


def test_failed_jobs_credit_no_work():
    failed = job(11, work=100)
    failed.ok = False
    failed.error = "exit 1"
    assert summarize([failed]).work_throughput is None


def _saved(lv: LevelResult) -> dict:
    from gpupoolctl.stress.model import RunResult

    run = RunResult(
        scenario={},
        levels=[lv],
        knees=None,
        backend="pool",
        transport="local",
        tool_version="x",
        created="2024-01-01T00:00:00Z",
        host="h",
        commit=None,
    )
    return json.loads(dumps(run))


def test_round_trip_and_older_files():
    lv = summarize([job(11, work=8, phases={"comm": 1.0}, comm_links={"wan": 1.0}, bound_by="wan")])
    data = _saved(lv)
    back = from_dict(data, "a.json").levels[0]
    assert back.work_throughput == lv.work_throughput
    assert back.comm_links == {"wan": 1.0} and back.bound_by == {"wan": 1}
    row = to_csv_rows(from_dict(data, "a.json"))[0]
    assert row["work_throughput"] == lv.work_throughput and row["comm_wan"] == 1.0
    assert row["comm_nic"] is None and row["phase_comm"] == 1.0
    for key in ("work_throughput", "comm_links", "bound_by"):
        del data["levels"][0][key]
    old = from_dict(data, "old.json").levels[0]
    assert old.work_throughput is None and old.comm_links == {} and old.bound_by == {}


@pytest.mark.parametrize(
    ("key", "value", "word"),
    [
        ("work_throughput", "fast", "a number or null"),
        ("comm_links", {"nic": "x"}, "a number"),
        ("comm_links", [1], "an object"),
        ("bound_by", {"nic": 1.5}, "a whole number"),
    ],
)
def test_damaged_fields_name_the_key(key, value, word):
    from gpupoolctl.errors import SourceError

    data = _saved(summarize([job(11, work=8)]))
    data["levels"][0][key] = value
    with pytest.raises(SourceError, match=f"levels\\[0\\].{key}.*{word}"):
        from_dict(data, "bad.json")
