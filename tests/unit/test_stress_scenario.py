"""Stress scenarios: levels, durations, thresholds, workloads, request shapes, YAML files with
file:line errors, flags over files, the to_dict round trip, and threshold evaluation."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.jobs.spec import JobSpec
from gpupoolctl.sched import JobRequest
from gpupoolctl.stress.model import METRICS, Distribution, LevelResult, ThresholdCheck
from gpupoolctl.stress.scenario import (
    RequestShape,
    Scenario,
    Workload,
    check_levels,
    format_levels,
    level_range,
    load_scenario,
    parse_levels,
    parse_scenario,
    parse_seconds,
    scenario_from_dict,
    scenario_from_flags,
)
from gpupoolctl.stress.thresholds import (
    Threshold,
    broken_streak,
    evaluate,
    metric_family,
    parse_threshold,
)

PLAYBOOKS = Path(__file__).resolve().parents[2] / "playbooks"


# --- levels ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1,2,4,8", (1, 2, 4, 8)),
        (" 1, 2 ,4 ", (1, 2, 4)),
        ("8", (8,)),
        ("0.5,1.5", (0.5, 1.5)),
        ("1..64x2", (1, 2, 4, 8, 16, 32, 64)),
        ("1..60x2", (1, 2, 4, 8, 16, 32)),  # a stop off the grid ends below it
        ("1 .. 27 x 3", (1, 3, 9, 27)),
        ("2..2x2", (2,)),
        ("0.25..2x2", (0.25, 0.5, 1, 2)),
        ("1..33+8", (1, 9, 17, 25, 33)),
        ("1..30+8", (1, 9, 17, 25)),
        ("0.1..0.5+0.1", (0.1, 0.2, 0.3, 0.4, 0.5)),  # no 0.30000000000000004
        ("1e1..4e1+1e1", (10, 20, 30, 40)),
    ],
)
def test_parse_levels_forms(text: str, expected: tuple[float, ...]) -> None:
    levels = parse_levels(text)
    assert levels == tuple(float(v) for v in expected)
    assert all(isinstance(v, float) for v in levels)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("1,2,2,4", "2 is given twice"),
        ("4,2,1", "must increase: 2 comes after 4"),
        ("0,1", "levels are numbers > 0"),
        ("a,b", "'1..64x2'"),  # shows the accepted forms
        ("1,,2", "bad level ''"),
        ("-1,2", "bad level '-1'"),
        ("1..64", "bad level range"),
        ("64..1x2", "start is above stop"),
        ("1..64x1", "factor must be more than 1"),
        ("1..64x0.5", "factor must be more than 1"),
        ("1..64+0", "step must be a number > 0"),
        ("1..1000+1", "at most 64"),
        (",".join(str(i) for i in range(1, 70)), "at most 64"),
        ("", "no levels given"),
        ("1..2..4", "bad level range"),
    ],
)
def test_parse_levels_errors(text: str, needle: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_levels(text)
    assert needle in str(info.value)


def test_level_range_needs_one_of_factor_or_step() -> None:
    with pytest.raises(UsageError, match="either a factor"):
        level_range(1, 8)
    with pytest.raises(UsageError, match="either a factor"):
        level_range(1, 8, factor=2, step=1)
    assert level_range(1, 8, factor=2) == (1.0, 2.0, 4.0, 8.0)


def test_format_levels_reads_back() -> None:
    levels = (1.0, 2.0, 2.5, 1e-5 + 3, 1000.0)
    text = format_levels(levels)
    assert text == "1,2,2.5,3.00001,1000"
    assert parse_levels(text) == levels


def test_check_levels_per_model() -> None:
    assert check_levels((1, 2, 1024), "closed") == (1.0, 2.0, 1024.0)
    assert check_levels((0.5, 1000), "open") == (0.5, 1000.0)
    with pytest.raises(UsageError, match="whole numbers of concurrent submitters"):
        check_levels((1, 1.5), "closed")
    with pytest.raises(UsageError, match=r"1\.\.1024"):
        check_levels((1, 2048), "closed")
    with pytest.raises(UsageError, match="at most 10000"):
        check_levels((1, 20000), "open")
    with pytest.raises(UsageError, match="unknown load model 'half-open'"):
        check_levels((1,), "half-open")


# --- durations ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        ("500ms", 0.5),
        ("250us", 0.00025),
        ("30s", 30.0),
        ("2m", 120.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1.5s", 1.5),
        ("12", 12.0),
        (7, 7.0),
        (0.25, 0.25),
    ],
)
def test_parse_seconds(value: str | float, seconds: float) -> None:
    assert parse_seconds(value) == pytest.approx(seconds)


def test_parse_seconds_zero_and_errors() -> None:
    assert parse_seconds("0s", allow_zero=True) == 0.0
    assert parse_seconds(0, allow_zero=True) == 0.0
    with pytest.raises(UsageError, match="hold: must be more than zero"):
        parse_seconds("0s", "hold")
    with pytest.raises(UsageError, match="hold: bad duration '3 fortnights'"):
        parse_seconds("3 fortnights", "hold")
    with pytest.raises(UsageError, match="expected a duration"):
        parse_seconds(True)
    with pytest.raises(UsageError, match="expected a duration"):
        parse_seconds(-1)


# --- thresholds --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "metric", "op", "value"),
    [
        ("queue_wait.p95 < 5s", "queue_wait.p95", "<", 5.0),
        ("turnaround.p99 <= 1500ms", "turnaround.p99", "<=", 1.5),
        ("queue_wait.max<2m", "queue_wait.max", "<", 120.0),
        ("phase.run < 250us", "phase.run", "<", 0.00025),
        ("harness < 3 ms", "harness", "<", 0.003),
        ("failure_rate < 1%", "failure_rate", "<", 0.01),
        ("failure_rate <= 0.05", "failure_rate", "<=", 0.05),
        ("throughput >= 2/s", "throughput", ">=", 2.0),
        ("throughput > 3.5", "throughput", ">", 3.5),
        ("dropped <= 0", "dropped", "<=", 0.0),
        ("completed >= 100", "completed", ">=", 100.0),
    ],
)
def test_parse_threshold(text: str, metric: str, op: str, value: float) -> None:
    threshold = parse_threshold(text)
    assert (threshold.metric, threshold.op) == (metric, op)
    assert threshold.value == pytest.approx(value)
    assert threshold.expr == text.strip()
    assert threshold.source is None


@pytest.mark.parametrize(
    ("text", "needles"),
    [
        ("queue_wait.p95 < 5", ["is a duration", "no unit", "s, ms, us, m"]),
        ("turnaround.p50 < 5/s", ["is a duration", "unit '/s'"]),
        ("failure_rate < 5", ["over 1", "5%"]),
        ("failure_rate < 120%", ["over 100%"]),
        ("failure_rate < 5s", ["unit 's' does not fit", "'%'"]),
        ("throughput >= 2/m", ["unit '/m' does not fit", "'/s'"]),
        ("dropped <= 1%", ["is a count", "no unit"]),
        ("latency < 5s", ["unknown metric 'latency'", "queue_wait.p95", "phase.ledger"]),
        ("queue_wait.p95 = 5s", ["unknown comparison '='", "<, <=, >, >="]),
        ("queue_wait.p95 => 5s", ["unknown comparison '=>'"]),
        ("throughput >= -1", ["bad value '-1'"]),
        ("throughput >=", ["bad value ''"]),
        ("", ["empty"]),
        ("p(95)<500", ["no comparison found", "queue_wait.p95 < 5s"]),
    ],
)
def test_parse_threshold_errors(text: str, needles: list[str]) -> None:
    with pytest.raises(UsageError) as info:
        parse_threshold(text)
    for needle in needles:
        assert needle in str(info.value)


def test_parse_threshold_from_a_file_is_a_source_error() -> None:
    with pytest.raises(SourceError) as info:
        parse_threshold("latency < 5s", "nightly.yaml:12")
    assert (info.value.path, info.value.line) == ("nightly.yaml", 12)
    assert str(info.value).startswith("nightly.yaml:12: bad threshold 'latency < 5s'")
    with pytest.raises(SourceError) as info:
        parse_threshold("latency < 5s", "nightly.yaml")
    assert info.value.line is None


def test_every_metric_has_a_unit_family() -> None:
    families = {metric: metric_family(metric) for metric in METRICS}
    assert families["queue_wait.p95"] == "duration"
    assert families["phase.ledger"] == "duration"
    assert families["harness"] == "duration"
    assert families["failure_rate"] == "rate"
    assert families["throughput"] == "throughput"
    assert families["dropped"] == "count"


@pytest.mark.parametrize(
    ("op", "holds_at"),
    [("<", {1.0}), ("<=", {1.0, 2.0}), (">", {3.0}), (">=", {2.0, 3.0})],
)
def test_threshold_ops(op: str, holds_at: set[float]) -> None:
    threshold = parse_threshold(f"throughput {op} 2")
    assert {v for v in (1.0, 2.0, 3.0) if threshold.holds(v)} == holds_at


def _dist(p95: float | None, count: int = 10) -> Distribution:
    return Distribution(count=count, mean=p95, p50=p95, p90=p95, p95=p95, p99=p95, max=p95)


def _level(
    level: float,
    *,
    p95: float | None = 1.0,
    failure_rate: float = 0.0,
    throughput: float = 2.0,
    checks: list[ThresholdCheck] | None = None,
) -> LevelResult:
    return LevelResult(
        level=level,
        model="closed",
        warmup_s=1.0,
        hold_s=5.0,
        window_s=5.0,
        submitted=10,
        completed=10,
        failed=0,
        dropped=0,
        throughput=throughput,
        failure_rate=failure_rate,
        queue_wait=_dist(p95),
        turnaround=_dist(p95),
        phases={"run": 0.5},
        harness_s=0.001,
        thresholds=list(checks or []),
    )


def test_evaluate_with_the_real_metrics() -> None:
    thresholds = [
        parse_threshold("queue_wait.p95 < 5s"),
        parse_threshold("failure_rate < 1%"),
        parse_threshold("throughput >= 2/s"),
        parse_threshold("phase.ledger < 10ms"),  # not measured: no value, broken
        parse_threshold("phase.run <= 500ms"),
    ]
    checks = evaluate(thresholds, _level(4, p95=3.0, failure_rate=0.02, throughput=2.0))
    assert checks == [
        ThresholdCheck("queue_wait.p95 < 5s", 3.0, True),
        ThresholdCheck("failure_rate < 1%", 0.02, False),
        ThresholdCheck("throughput >= 2/s", 2.0, True),
        ThresholdCheck("phase.ledger < 10ms", None, False),
        ThresholdCheck("phase.run <= 500ms", 0.5, True),
    ]


def test_evaluate_no_value_or_not_finite_breaks() -> None:
    thresholds = [parse_threshold("queue_wait.p95 < 5s"), parse_threshold("throughput > 1")]
    checks = evaluate(thresholds, _level(1, p95=None))
    assert checks[0] == ThresholdCheck("queue_wait.p95 < 5s", None, False)
    assert checks[1].ok
    checks = evaluate(thresholds, _level(1), value_of=lambda level, name: float("nan"))
    assert [(c.value, c.ok) for c in checks] == [(None, False), (None, False)]
    assert evaluate([], _level(1)) == []


def test_broken_streak() -> None:
    ok = [ThresholdCheck("x", 1.0, True)]
    bad = [ThresholdCheck("x", 9.0, False)]
    assert broken_streak([]) == 0
    assert broken_streak([_level(1, checks=ok), _level(2, checks=bad)]) == 1
    levels = [_level(1, checks=bad), _level(2, checks=ok), _level(4, checks=bad)]
    levels.append(_level(8, checks=ok + bad))
    assert broken_streak(levels) == 2
    assert broken_streak([*levels, _level(16, checks=[])]) == 0  # no thresholds: not broken


# --- workloads ---------------------------------------------------------------------------


def test_workload_argv_per_kind() -> None:
    assert Workload().argv() == ["gpupoolctl-workload", "sim", "--work", "1.0"]
    assert Workload("sim", {"work_s": "500ms", "sigma": 0.05, "kappa": 0}).argv() == [
        "gpupoolctl-workload",
        "sim",
        "--work",
        "0.5",
        "--sigma",
        "0.05",
        "--kappa",
        "0.0",
    ]
    assert Workload("sleep", {}).argv() == ["sleep", "1"]
    assert Workload("sleep", {"seconds": 0.25}).argv() == ["sleep", "0.25"]
    assert Workload("cmd", {"argv": "python -c 'print(1)'"}).argv() == [
        "python",
        "-c",
        "print(1)",
    ]
    assert Workload("matmul", {"dtype": "bfloat16"}).argv() == [
        "gpupoolctl-workload",
        "matmul",
        "--seconds",
        "10.0",
        "--size",
        "4096",
        "--dtype",
        "bfloat16",
    ]


def test_workload_limits_are_the_nodes_own() -> None:
    """One definition: the scenario checks against the agent's workload modules' limits."""
    from gpupoolctl.agent.workloads import matmul, sim
    from gpupoolctl.stress import workload

    assert workload.DTYPES is matmul.DTYPES
    assert workload.MAX_MATMUL_SIZE is matmul.MAX_SIZE
    assert workload.MAX_MATMUL_SECONDS is matmul.MAX_SECONDS
    assert workload.MAX_WORK_S is sim.MAX_WORK_S
    assert Workload("matmul", {"size": matmul.MAX_SIZE}).args["size"] == matmul.MAX_SIZE
    with pytest.raises(UsageError, match=f"expected {matmul.MIN_SIZE}..{matmul.MAX_SIZE}"):
        Workload("matmul", {"size": matmul.MAX_SIZE + 1})


def test_importing_the_workload_limits_stays_light() -> None:
    """The agent's workload modules are imported on the workstation for their limits: that
    must not load a GPU library (matmul imports torch or cupy only when it runs)."""
    import subprocess
    import sys

    code = (
        "import sys, gpupoolctl.stress.workload\n"
        "print(sorted(m for m in ('torch', 'cupy', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_workload_defaults_are_filled_in() -> None:
    assert Workload("sim", {}) == Workload("sim", {"work_s": 1.0, "sigma": None, "kappa": None})
    assert Workload("matmul").args == {"seconds": 10.0, "size": 4096, "dtype": "float16"}
    assert Workload("sim").run_s == 1.0
    assert Workload("cmd", {"argv": ["true"]}).run_s is None


@pytest.mark.parametrize(
    ("kind", "args", "needle"),
    [
        ("gpu-burn", {}, "unknown workload 'gpu-burn'; valid: sim, sleep, cmd, matmul"),
        ("sim", {"seconds": 1}, "unknown argument 'seconds'; valid: work_s, sigma, kappa"),
        ("sim", {"work_s": 0}, "must be more than zero"),
        ("sim", {"work_s": "2h"}, "at most 3600s"),
        ("sim", {"sigma": 1.5}, "sigma: expected a number within 0..1"),
        ("sim", {"kappa": True}, "kappa: expected a number within 0..1"),
        ("cmd", {}, "argv is required"),
        ("cmd", {"argv": []}, "non-empty list of strings"),
        ("cmd", {"argv": "echo 'unclosed"}, "cannot split"),
        ("cmd", {"argv": ["a\0b"]}, "NUL"),
        ("matmul", {"dtype": "int8"}, "float16, bfloat16, float32"),
        ("matmul", {"size": 0}, "size: expected 1..65536"),
        ("matmul", {"size": 1.5}, "size: expected a whole number"),
    ],
)
def test_workload_errors(kind: str, args: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError) as info:
        Workload(kind, args)
    assert needle in str(info.value)


# --- request shapes ----------------------------------------------------------------------


def test_shape_job_fields_build_a_job_request_and_spec() -> None:
    shape = RequestShape(
        weight=3,
        gpus=2,
        profile="3g.40gb",
        vendor="NVIDIA",
        model="H100",
        bandwidth="high",
        same_island=True,
        priority="high",
        preemptible=True,
    )
    fields = shape.job_fields()
    assert set(fields) <= {f.name for f in dataclasses.fields(JobRequest)}
    request = JobRequest(**fields)
    assert request == JobRequest(
        gpus=2,
        profile="3g.40gb",
        vendor="nvidia",
        model="H100",
        bandwidth_class="high",
        same_island=True,
        priority=90,
        preemptible=True,
    )
    spec = JobSpec(argv=Workload().argv(), request=request, name="stress-1", policy="spread")
    spec.validate()
    assert shape.weight == 3.0 and isinstance(shape.weight, float)


def test_shape_memory_priority_and_whole_cards() -> None:
    assert RequestShape(mem="10G").job_fields()["memory_mib"] == 9537
    assert RequestShape(mem="10G").job_fields()["profile"] is None
    # Neither profile nor mem: whole cards, as `gpupoolctl submit` does.
    assert RequestShape(gpus=4).job_request().profile == "gpu"
    assert RequestShape(priority="75").job_fields()["priority"] == 75
    assert RequestShape(priority=" Low ").priority == "low"
    assert RequestShape(priority=20).job_fields()["priority"] == 20  # type: ignore[arg-type]


def test_an_empty_profile_is_refused_not_read_as_whole_cards() -> None:
    # The shape and `submit` build the size the same way (sched.request.sized_profile): an
    # empty profile is a mistake to name, where the shape used to ask for whole cards.
    with pytest.raises(UsageError, match="profile must not be empty"):
        RequestShape(profile="")
    with pytest.raises(UsageError, match="profile must not be empty"):
        RequestShape(profile="  ")


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"gpus": 0}, "gpus: expected a whole number >= 1"),
        ({"gpus": True}, "gpus: expected a whole number >= 1"),
        ({"weight": 0}, "weight: expected a number > 0"),
        ({"weight": float("inf")}, "weight: expected a number > 0"),
        ({"mem": "10 parsecs"}, "bad memory size '10 parsecs'"),
        ({"priority": "urgent"}, "low, normal, high or a number 0..100"),
        ({"priority": "200"}, "within 0..100"),
        ({"profile": "3g.40gb", "mem": "10G"}, "a profile or a memory size, not both"),
        ({"vendor": "intel"}, "unknown vendor 'intel'"),
        ({"bandwidth": "warp"}, "unknown bandwidth class 'warp'"),
        ({"same_node": "yes"}, "same_node: expected true or false"),
    ],
)
def test_shape_errors(fields: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError) as info:
        RequestShape(**fields)  # type: ignore[arg-type]
    assert needle in str(info.value)


# --- scenarios ---------------------------------------------------------------------------


def _full() -> Scenario:
    return Scenario(
        name="mix",
        model="open",
        levels=(0.5, 1, 2.5),
        warmup_s=0,
        hold_s=10,
        drain_s=5,
        job_timeout_s=30,
        workload=Workload("cmd", {"argv": ["python3", "-c", "pass"]}),
        requests=(RequestShape(weight=2, mem="20G"), RequestShape(profile="gpu", gpus=2)),
        thresholds=(parse_threshold("failure_rate < 1%"), parse_threshold("throughput >= 2/s")),
        stop_after_breaks=3,
        seed=7,
        policy="topology",
        poll_s=0.5,
        source="mix.yaml",
    )


def test_scenario_defaults() -> None:
    scenario = Scenario("x", levels=(1, 2))
    assert scenario.levels == (1.0, 2.0)
    assert scenario.workload == Workload("sim", {})
    assert scenario.requests == (RequestShape(mem="10G"),)
    assert (scenario.warmup_s, scenario.hold_s, scenario.drain_s) == (5.0, 30.0, 60.0)
    assert (scenario.job_timeout_s, scenario.stop_after_breaks, scenario.poll_s) == (600, 2, 0.2)


def test_to_dict_round_trips_through_json() -> None:
    scenario = _full()
    data = json.loads(json.dumps(scenario.to_dict()))
    assert data["levels"] == [0.5, 1, 2.5]
    assert data["workload"] == {"kind": "cmd", "args": {"argv": ["python3", "-c", "pass"]}}
    assert data["thresholds"] == ["failure_rate < 1%", "throughput >= 2/s"]
    assert scenario_from_dict(data) == scenario
    assert scenario_from_dict(Scenario("y", levels=(1,)).to_dict()) == Scenario("y", levels=(1,))


def test_scenario_from_dict_errors() -> None:
    with pytest.raises(UsageError, match="unknown field 'hold'"):
        scenario_from_dict({"name": "x", "levels": [1], "hold": 3})
    with pytest.raises(UsageError, match="missing field 'name'"):
        scenario_from_dict({"levels": [1]})
    with pytest.raises(UsageError, match="request: unknown field 'memory'"):
        scenario_from_dict({"name": "x", "levels": [1], "requests": [{"memory": "10G"}]})


@pytest.mark.parametrize(
    ("changes", "needle"),
    [
        ({"hold_s": 0}, "hold_s: must be more than zero"),
        ({"warmup_s": -1}, "warmup_s: expected a duration"),
        ({"drain_s": 90000}, "at most 86400s"),
        ({"job_timeout_s": 0.5}, "must be longer than the sim workload's own run time (1s)"),
        ({"policy": "random"}, "unknown policy 'random'"),
        ({"stop_after_breaks": 0}, "stop-after-breaks: expected a whole number 1..64"),
        ({"seed": 1.5}, "seed: expected a whole number"),
        ({"name": " "}, "scenario name"),
        ({"requests": ()}, "at least one request shape"),
        ({"model": "open", "levels": (1, 50000)}, "at most 10000"),
        ({"poll_s": 120}, "at most 60s"),
    ],
)
def test_scenario_errors(changes: dict[str, object], needle: str) -> None:
    values: dict[str, object] = {"name": "x", "levels": (1, 2)} | changes
    with pytest.raises(UsageError) as info:
        Scenario(**values)  # type: ignore[arg-type]
    assert needle in str(info.value)


# --- YAML files --------------------------------------------------------------------------


def write(tmp_path: Path, body: str, name: str = "scn.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


def error_of(tmp_path: Path, body: str) -> SourceError:
    path = write(tmp_path, body)
    with pytest.raises(SourceError) as info:
        load_scenario(path)
    assert info.value.path == str(path)
    return info.value


@pytest.mark.parametrize("name", ["stress-nightly.yaml", "stress-quick.yaml"])
def test_bundled_playbooks_load(name: str) -> None:
    scenario = load_scenario(PLAYBOOKS / name)
    assert scenario.model == "closed"
    assert scenario.thresholds
    per_level = scenario.warmup_s + scenario.hold_s + scenario.drain_s
    assert len(scenario.levels) * per_level <= (10 * 60 if "nightly" in name else 90)
    for shape in scenario.requests:
        JobRequest(**shape.job_fields()).validate()


def test_nightly_playbook_mixes_shapes() -> None:
    scenario = load_scenario(PLAYBOOKS / "stress-nightly.yaml")
    metrics = {t.metric for t in scenario.thresholds}
    assert {"queue_wait.p95", "failure_rate"} <= metrics
    assert scenario.workload.kind == "sim"
    by_weight = sorted(scenario.requests, key=lambda s: -s.weight)
    assert by_weight[0].mem == "10G"
    assert any(s.profile == "3g.40gb" for s in scenario.requests)
    assert any(s.job_fields()["profile"] == "gpu" for s in scenario.requests)


def test_full_file(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """\
        name: mixed
        model: open
        levels: {from: 0.5, to: 4, factor: 2}
        warmup: 0
        hold: 1m
        drain: 500ms
        job-timeout: 90
        poll: 100ms
        workload:
          kind: cmd
          argv: [python3, -c, "pass"]
        requests:
          - {weight: 3, mem: 10}
          - weight: 1
            profile: gpu
            gpus: 2
            same-island: true
            priority: 80
        thresholds:
          - queue_wait.p95 < 5s
          - failure_rate < 1%
        stop-after-breaks: 3
        seed: 42
        policy: spread
        """,
    )
    scenario = load_scenario(path)
    assert scenario.name == "mixed" and scenario.model == "open"
    assert scenario.levels == (0.5, 1.0, 2.0, 4.0)
    assert (scenario.warmup_s, scenario.hold_s, scenario.drain_s) == (0.0, 60.0, 0.5)
    assert (scenario.job_timeout_s, scenario.poll_s) == (90.0, 0.1)
    assert scenario.workload.argv() == ["python3", "-c", "pass"]
    assert scenario.requests[0] == RequestShape(weight=3, mem="10")
    assert scenario.requests[1].job_fields()["priority"] == 80
    assert scenario.requests[1].same_island
    assert [t.source for t in scenario.thresholds] == [f"{path}:20", f"{path}:21"]
    assert (scenario.stop_after_breaks, scenario.seed, scenario.policy) == (3, 42, "spread")
    assert scenario.source == str(path)


@pytest.mark.parametrize(
    ("levels", "expected"),
    [
        ("levels: 1..8x2", (1, 2, 4, 8)),
        ("levels: 1,2,3", (1, 2, 3)),
        ("levels: 4", (4,)),
        ("levels: [1, 2, 8]", (1, 2, 8)),
        ("levels: {from: 1, to: 33, step: 8}", (1, 9, 17, 25, 33)),
    ],
)
def test_file_levels_forms(tmp_path: Path, levels: str, expected: tuple[float, ...]) -> None:
    scenario = load_scenario(write(tmp_path, levels + "\n"))
    assert scenario.levels == tuple(float(v) for v in expected)
    assert scenario.name == "scn"  # the file's name without .yaml


@pytest.mark.parametrize(
    ("body", "line", "needles"),
    [
        ("levels: 1,2\nhold_s: 30s\n", 2, ["unknown key 'hold_s'", "did you mean 'hold'", "drain"]),
        ("levels:\n  - 1\n  - two\n", 3, ["expected a number > 0, got 'two'"]),
        ("levels:\n  - 1\n  - 1.5\n", 3, ["whole numbers of concurrent submitters"]),
        ("levels:\n  - 2\n  - 1\n", 1, ["must increase"]),
        ("levels:\n  from: 1\n  to: 8\n", 1, ["factor"]),
        ("levels: 4,2\n", 1, ["must increase"]),
        ("model: open\nlevels: 1..50000x2\n", 2, ["at most 10000"]),
        ("levels: {from: 1, to: 8}\n", 1, ["'factor' (geometric) or 'step'"]),
        ("levels: {from: 1, to: 8, factor: 2, step: 1}\n", 1, ["either 'factor'"]),
        ("levels: {from: 1, upto: 8}\n", 1, ["unknown key 'upto'", "from, to, factor, step"]),
        ("levels: true\n", 1, ["levels: use"]),
        ("model: half\nlevels: 1\n", 1, ["model: expected closed or open"]),
        ("levels: 1\nhold: 30 parsecs\n", 2, ["hold: bad duration"]),
        ("levels: 1\nwarmup: -1\n", 2, ["warmup: expected a duration"]),
        ("levels: 1\nworkload: burn\n", 2, ["unknown workload 'burn'"]),
        (
            "levels: 1\nworkload:\n  kind: sim\n  seconds: 3\n",
            4,
            ["workload sim: unknown key 'seconds'", "kind, work, sigma, kappa"],
        ),
        ("levels: 1\nworkload:\n  work: 3\n", 2, ["missing 'kind'"]),
        ("levels: 1\nworkload:\n  kind: sim\n  sigma: 3\n", 4, ["sigma: expected a number"]),
        ("levels: 1\nworkload:\n  kind: cmd\n", 2, ["argv is required"]),
        (
            "levels: 1\njob-timeout: 1s\nworkload: {kind: sim, work: 5s}\n",
            2,
            ["job time-out (1s) must be longer"],
        ),
        (
            "levels: 1\nrequests:\n  - mem: 10G\n  - same_node: true\n",
            4,
            ["unknown key 'same_node'", "did you mean 'same-node'", "preemptible"],
        ),
        ("levels: 1\nrequests:\n  - mem: 10G\n  - mem: lots\n", 4, ["bad memory size 'lots'"]),
        (
            "levels: 1\nrequests:\n  - gpus: 1\n    mem: 10G\n    profile: 1g.10gb\n",
            3,
            ["not both"],
        ),
        ("levels: 1\nrequests:\n  - weight: -2\n", 3, ["weight: expected a number > 0"]),
        ("levels: 1\nrequests: []\n", 2, ["at least one request shape"]),
        (
            "levels: 1\nthresholds:\n  - failure_rate < 1%\n  - queue_wait.p95 < 5\n",
            4,
            ["bad threshold 'queue_wait.p95 < 5'", "is a duration"],
        ),
        ("levels: 1\nthresholds:\n  - {a: 1}\n", 3, ["expected text such as"]),
        ("levels: 1\nstop-after-breaks: 0\n", 2, ["expected a whole number 1..64"]),
        ("levels: 1\nseed: abc\n", 2, ["seed: expected a whole number"]),
        ("levels: 1\npolicy: random\n", 2, ["policy: expected one of best-fit, spread"]),
        ("levels: 1\nhold: 1s\nhold: 2s\n", 3, ["duplicate key 'hold'"]),
        ("hold: 1s\n", 1, ["missing required key 'levels'"]),
        ("- levels: 1\n", 1, ["the scenario must be a mapping"]),
        ("levels: [1, 2\nhold: 3s\n", 2, ["not valid YAML"]),
    ],
)
def test_file_errors_name_the_line(
    tmp_path: Path, body: str, line: int, needles: list[str]
) -> None:
    error = error_of(tmp_path, body)
    assert error.line == line, str(error)
    for needle in needles:
        assert needle in str(error)
    assert str(error).startswith(f"{error.path}:{line}: ")


def test_empty_missing_and_directory(tmp_path: Path) -> None:
    error = error_of(tmp_path, "")
    assert error.line is None and "empty file" in str(error) and "levels" in str(error)
    with pytest.raises(SourceError, match="cannot read"):
        load_scenario(tmp_path / "absent.yaml")
    with pytest.raises(SourceError, match="is a folder"):
        load_scenario(tmp_path)
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"\xff\xfe\x00levels")
    with pytest.raises(SourceError):
        load_scenario(binary)


def test_yaml_merge_keys_in_a_scenario(tmp_path: Path) -> None:
    merged = load_scenario(
        write(
            tmp_path,
            """\
            levels: 1
            requests:
              - &small {profile: 1g.10gb, weight: 1, priority: low}
              - {<<: *small, weight: 2}
              - <<: [{mem: 20G, weight: 5}, {mem: 40G, preemptible: true}]
            """,
        )
    )
    written_out = parse_scenario(
        "levels: 1\nrequests:\n"
        "  - {profile: 1g.10gb, weight: 1, priority: low}\n"
        "  - {profile: 1g.10gb, weight: 2, priority: low}\n"
        "  - {mem: 20G, weight: 5, preemptible: true}\n"  # the first merged mapping wins
    )
    assert merged.requests == written_out.requests


@pytest.mark.parametrize(
    ("body", "line", "needle"),
    [
        # A merged key is checked like one written there, and named at its own line.
        ("levels: 1\nrequests:\n  - &s {mem: 10G, color: red}\n  - {<<: *s}\n", 3, "'color'"),
        ("levels: 1\nrequests:\n  - &s {mem: 10G}\n  - {<<: 3}\n", 4, "<<: expected a mapping"),
        ("levels: 1\nrequests:\n  - &s {<<: *s}\n", 3, "cannot merge itself"),
        ("levels: 1\nrequests:\n  - {<<: *nope}\n", 3, "undefined alias 'nope'"),
        # Its own keys are still unique, merge or not.
        ("levels: 1\nrequests:\n  - &s {mem: 1G}\n  - {<<: *s, gpus: 1, gpus: 2}\n", 4, "dup"),
        ("levels: !!int x\n", 1, "'x' is not a valid int"),
        ("levels: 1\nseed: !!float lots\n", 2, "'lots' is not a valid float"),
        ("levels: 1\nname: a\x07b\n", 2, "special characters are not allowed"),
    ],
)
def test_yaml_errors_are_one_line(tmp_path: Path, body: str, line: int, needle: str) -> None:
    error = error_of(tmp_path, body)
    assert error.line == line, str(error)
    assert needle in str(error)
    assert "\n" not in str(error)


def test_parse_scenario_from_text() -> None:
    scenario = parse_scenario("levels: 1..4x2\nname: ci\n", "<stdin>")
    assert scenario.name == "ci" and scenario.source == "<stdin>"


# --- flags -------------------------------------------------------------------------------


def test_flags_alone() -> None:
    scenario = scenario_from_flags(None, levels="1,2,4,8,16,32,64", hold="30s", workload="sim")
    assert scenario.levels == (1, 2, 4, 8, 16, 32, 64)
    assert scenario.hold_s == 30.0
    assert scenario.name == "adhoc" and scenario.source is None
    assert scenario.requests == (RequestShape(mem="10G"),)
    with pytest.raises(UsageError, match="no levels"):
        scenario_from_flags(None, hold="30s")


def test_flags_override_the_file() -> None:
    base = load_scenario(PLAYBOOKS / "stress-nightly.yaml")
    scenario = scenario_from_flags(
        base,
        levels="1..8x2",
        hold="5s",
        warmup="0s",
        job_timeout="1m",
        work="250ms",
        mem="20G",
        thresholds=["throughput >= 1/s"],
        seed=3,
        name="tonight",
        model=None,  # not given: the file's value stays
        drain=None,
    )
    assert scenario.levels == (1, 2, 4, 8)
    assert (scenario.hold_s, scenario.warmup_s, scenario.job_timeout_s) == (5.0, 0.0, 60.0)
    assert scenario.drain_s == base.drain_s and scenario.model == base.model
    assert scenario.workload.args == {**base.workload.args, "work_s": 0.25}  # sigma, kappa kept
    assert scenario.requests == (RequestShape(mem="20G"),)  # one shape replaces the mix
    assert [t.expr for t in scenario.thresholds] == ["throughput >= 1/s"]  # replaced, not added
    assert (scenario.seed, scenario.name) == (3, "tonight")
    assert scenario.source == base.source
    # No overrides at all: the same scenario; an empty threshold list keeps the file's.
    assert scenario_from_flags(base) == base
    assert scenario_from_flags(base, thresholds=[]).thresholds == base.thresholds


def test_flags_workloads() -> None:
    base = Scenario("x", levels=(1,))
    cmd = scenario_from_flags(base, cmd="python3 -c 'print(1)'")
    assert cmd.workload.argv() == ["python3", "-c", "print(1)"]
    sleep = scenario_from_flags(base, workload="sleep", seconds="2s")
    assert sleep.workload.argv() == ["sleep", "2"]
    # --work is how long one job runs alone, whatever the workload.
    assert scenario_from_flags(base, workload="sleep", work="500ms").workload.argv() == [
        "sleep",
        "0.5",
    ]
    assert scenario_from_flags(base, workload="matmul", work="3s").workload.args["seconds"] == 3
    matmul = scenario_from_flags(base, workload="matmul", size=1024, dtype="float32")
    assert matmul.workload.args == {"seconds": 10.0, "size": 1024, "dtype": "float32"}
    whole = scenario_from_flags(base, gpus=2)
    assert whole.requests[0].job_fields()["profile"] == "gpu"
    assert scenario_from_flags(base, profile="1g.10gb").requests == (
        RequestShape(profile="1g.10gb"),
    )


@pytest.mark.parametrize(
    ("overrides", "needle"),
    [
        ({"workload": "cmd", "cmd": "true", "work": "1s"}, "--work applies to the sim and"),
        ({"seconds": "2s"}, "--seconds applies to the sleep and matmul workload, not sim"),
        ({"sigma": 0.1, "workload": "sleep"}, "--sigma applies to the sim workload, not sleep"),
        ({"workload": "burn"}, "--workload: unknown kind 'burn'"),
        ({"levels": "8,4"}, "--levels: levels must increase"),
        ({"hold": "soon"}, "--hold: bad duration 'soon'"),
        ({"cmd": "echo 'open"}, "--cmd: workload cmd: cannot split"),
        ({"mem": "lots"}, "--profile/--mem/--gpus: bad memory size"),
        ({"thresholds": ["latency < 1s"]}, "unknown metric 'latency'"),
        ({"model": "open", "levels": "1..50000x2"}, "at most 10000"),
        ({"job_timeout": "1s", "work": "5s"}, "must be longer"),
    ],
)
def test_flag_errors(overrides: dict[str, object], needle: str) -> None:
    with pytest.raises(UsageError) as info:
        scenario_from_flags(Scenario("x", levels=(1,)), **overrides)
    assert needle in str(info.value)


def test_unknown_override_is_a_programming_error() -> None:
    with pytest.raises(TypeError, match="unknown override 'speed'"):
        scenario_from_flags(None, levels="1", speed=3)


def test_threshold_equality_ignores_where_it_came_from() -> None:
    assert Threshold("throughput", ">", 1.0, "throughput > 1", "a.yaml:3") == Threshold(
        "throughput", ">", 1.0, "throughput > 1"
    )
