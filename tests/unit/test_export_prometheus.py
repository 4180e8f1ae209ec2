"""The Prometheus export: the exposition format's rules, read back by the reference client
library's parser (and promtool where installed), pool metrics from a ledger state, stress
metrics from saved runs, and the atomic textfile."""

from __future__ import annotations

import math
import re
import shutil
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.errors import UsageError
from gpupoolctl.export.prometheus import (
    METRIC_NAME,
    TEXTFILE_NAME,
    Family,
    format_value,
    pool_families,
    render,
    write_textfile,
)
from gpupoolctl.ledger.state import State
from gpupoolctl.stress.histogram import distribution
from gpupoolctl.stress.model import KneePoint, Knees, LevelResult, RunResult
from gpupoolctl.stress.prometheus import level_text, stress_families

parser = pytest.importorskip(
    "prometheus_client.parser", reason="prometheus-client is in the test extra"
)

NOW = "2025-06-01T12:00:00.000Z"
MIG = "h1/gpu6/mig-1g.10gb@0"


def ledger_state() -> State:
    """Two hosts: a whole GPU and two MIG slices on h1 (one held), a VF on h2; a queued
    request and a running job."""
    state = State()
    slices = [
        {"id": "h1/gpu0", "host": "h1", "kind": "gpu", "profile": None, "memory_mib": 81920},
        {"id": MIG, "host": "h1", "kind": "mig", "profile": "1g.10gb", "memory_mib": 9984},
        {
            "id": "h1/gpu6/mig-1g.10gb@1",
            "host": "h1",
            "kind": "mig",
            "profile": "1g.10gb",
            "memory_mib": 9984,
        },
        {"id": "h2/gpu0/vf0", "host": "h2", "kind": "vf", "profile": "vf/4", "memory_mib": 4096},
    ]
    records: list[tuple[str, dict[str, Any]]] = [
        ("slices", {"hosts": ["h1", "h2"], "slices": slices}),
        ("alloc", {"id": "a-2", "owner": "alice", "slices": [MIG], "expires": None}),
        ("enqueue", {"id": "q-3", "owner": "bob", "priority": 5, "request": {}}),
        ("job", {"id": "j-4", "state": "running", "host": "h1"}),
        ("job", {"id": "j-5", "state": "done", "host": "h1"}),  # history, not state
    ]
    for seq, (op, data) in enumerate(records, start=1):
        state.apply({"seq": seq, "ts": NOW, "actor": "t@ws", "op": op, "data": data})
    assert not state.problems
    return state


def level(n: float, throughput: float, p95: float | None, failure_rate: float) -> LevelResult:
    return LevelResult(
        level=n,
        model="closed",
        warmup_s=1.0,
        hold_s=10.0,
        window_s=10.0,
        submitted=20,
        completed=19,
        failed=1,
        dropped=0,
        throughput=throughput,
        failure_rate=failure_rate,
        queue_wait=distribution([] if p95 is None else [p95 / 2, p95]),
        turnaround=distribution([1.0]),
        phases={},
        harness_s=0.0,
    )


def run(name: str | None = "nightly", latency: float | None = None) -> RunResult:
    return RunResult(
        scenario={"name": name} if name else {},
        levels=[level(1, 1.0, 0.2, 0.0), level(2, 1.9, 0.3, 0.05), level(0.5, 0.5, None, 0.0)],
        knees=Knees(
            kneedle=KneePoint("kneedle", "diminishing returns", 2.0, 1.9),
            usl=KneePoint("usl", "capacity peak", 30.8, 41.0),
            latency=KneePoint("latency", "queue wait rises", latency, note="none"),
        ),
        backend="pool",
        transport="local",
        tool_version="0.1.0",
        created="2025-06-01T12:00:00Z",
        host="ws",
        commit=None,
    )


# -- the format's rules --------------------------------------------------------------------

SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)$")


def check_rules(text: str) -> dict[str, str]:
    """Every sample's metric has HELP then TYPE before it, its family's lines are together,
    names are legal, no series is given twice, counters end in _total. Returns the types."""
    assert text.endswith("\n")
    helped: set[str] = set()
    types: dict[str, str] = {}
    series: set[str] = set()
    done: set[str] = set()
    current = None
    for line in text.split("\n")[:-1]:  # the format's lines end in \n, nothing else
        if line.startswith("# HELP "):
            name = line.split(" ")[2]
            assert name not in helped and name not in done, f"second HELP for {name}"
            if current:
                done.add(current)
            helped.add(name)
            current = name
        elif line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            assert name == current and name in helped and name not in types, line
            types[name] = kind
        else:
            match = SAMPLE.match(line)
            assert match, f"not a sample line: {line!r}"
            name = match.group(1)
            assert name == current and name in types, f"{name} before its HELP/TYPE"
            assert METRIC_NAME.fullmatch(name)
            key = match.group(1) + (match.group(2) or "")
            assert key not in series, f"series given twice: {key}"
            series.add(key)
    for name, kind in types.items():
        assert (kind == "counter") == name.endswith("_total"), name
    return types


def parsed(text: str) -> dict[str, Any]:
    """The text as prometheus_client's parser reads it: {family: family}."""
    return {family.name: family for family in parser.text_string_to_metric_families(text)}


def value(families: dict[str, Any], name: str, **labels: str) -> float:
    family = families[name.removesuffix("_total")]
    found = [s.value for s in family.samples if s.name == name and s.labels == labels]
    assert len(found) == 1, (name, labels, family.samples)
    return float(found[0])


def everything() -> str:
    return render(
        [*pool_families(ledger_state(), NOW, 1748779200.0), *stress_families([("r.json", run())])]
    )


def test_full_export_follows_the_rules_and_parses() -> None:
    text = everything()
    types = check_rules(text)
    families = parsed(text)
    assert types["gpupoolctl_ledger_records_total"] == "counter"
    assert families["gpupoolctl_ledger_records"].type == "counter"
    assert {f.type for f in families.values()} == {"gauge", "counter"}
    assert all(f.documentation for f in families.values())


def test_pool_metrics_count_what_the_ledger_says() -> None:
    families = parsed(render(pool_families(ledger_state(), NOW, 1748779200.0)))
    mig = {"host": "h1", "kind": "mig", "profile": "1g.10gb"}
    assert value(families, "gpupoolctl_slices", **mig, state="held") == 1
    assert value(families, "gpupoolctl_slices", **mig, state="free") == 1
    whole = {"host": "h1", "kind": "gpu", "profile": "gpu", "state": "free"}
    assert value(families, "gpupoolctl_slices", **whole) == 1
    assert value(families, "gpupoolctl_slice_memory_bytes", **whole) == 81920 * 2**20
    vf = {"host": "h2", "kind": "vf", "profile": "vf/4", "state": "free"}
    assert value(families, "gpupoolctl_slice_memory_bytes", **vf) == 4096 * 2**20
    assert value(families, "gpupoolctl_allocations_held") == 1
    assert value(families, "gpupoolctl_queue_entries") == 1
    assert value(families, "gpupoolctl_jobs", state="running") == 1
    assert value(families, "gpupoolctl_jobs", state="queued") == 0
    assert value(families, "gpupoolctl_ledger_records_total") == 5
    assert value(families, "gpupoolctl_ledger_problems") == 0
    assert value(families, "gpupoolctl_ledger_read_timestamp_seconds") == 1748779200.0
    held = [s for s in families["gpupoolctl_slices"].samples if s.labels["state"] == "held"]
    assert len(held) == 1  # no other series claims a held slice


def test_an_expired_hold_counts_as_free() -> None:
    state = ledger_state()
    state.allocations["a-2"].expires = "2025-06-01T11:00:00.000Z"
    families = parsed(render(pool_families(state, NOW, 0.0)))
    mig = {"host": "h1", "kind": "mig", "profile": "1g.10gb"}
    assert value(families, "gpupoolctl_slices", **mig, state="free") == 2
    assert value(families, "gpupoolctl_allocations_held") == 0


def test_an_empty_ledger_gives_zeros_not_gaps() -> None:
    text = render(pool_families(State(), NOW, 0.0))
    check_rules(text)
    families = parsed(text)
    assert "gpupoolctl_slices" not in families  # no slice known: no series at all
    assert value(families, "gpupoolctl_allocations_held") == 0
    assert value(families, "gpupoolctl_ledger_records_total") == 0


def test_stress_metrics_per_scenario_and_level() -> None:
    families = parsed(render(stress_families([("a.json", run()), ("b.json", run("quick", 4))])))
    assert value(
        families, "gpupoolctl_stress_throughput_jobs_per_second", scenario="nightly", level="2"
    ) == pytest.approx(1.9)
    assert value(
        families, "gpupoolctl_stress_queue_wait_p95_seconds", scenario="nightly", level="1"
    ) == pytest.approx(0.2, rel=0.01)
    assert value(
        families, "gpupoolctl_stress_failure_ratio", scenario="nightly", level="2"
    ) == pytest.approx(0.05)
    # An open-model rate keeps its fraction; an unmeasured p95 is absent, not 0.
    assert value(
        families, "gpupoolctl_stress_throughput_jobs_per_second", scenario="nightly", level="0.5"
    ) == pytest.approx(0.5)
    waits = families["gpupoolctl_stress_queue_wait_p95_seconds"].samples
    assert {s.labels["level"] for s in waits if s.labels["scenario"] == "nightly"} == {"1", "2"}
    knees = families["gpupoolctl_stress_knee_level"].samples
    assert {(s.labels["scenario"], s.labels["method"]): s.value for s in knees} == {
        ("nightly", "kneedle"): 2.0,
        ("nightly", "usl"): 30.8,
        ("quick", "kneedle"): 2.0,
        ("quick", "usl"): 30.8,
        ("quick", "latency"): 4.0,  # found only in this run
    }
    assert value(
        families, "gpupoolctl_stress_run_timestamp_seconds", scenario="quick"
    ) == pytest.approx(1748779200.0)


def test_a_level_where_no_job_ended_has_no_failure_ratio() -> None:
    result = run()
    quiet = result.levels[2]  # level 0.5: nothing ended in its window
    quiet.submitted, quiet.completed, quiet.failed = 3, 0, 0
    quiet.failure_rate, quiet.throughput = 0.0, 0.0  # as summarize_level stores them
    families = parsed(render(stress_families([("a.json", result)])))
    ratios = families["gpupoolctl_stress_failure_ratio"].samples
    assert {s.labels["level"]: s.value for s in ratios} == {"1": 0.0, "2": 0.05}
    # Its throughput is a measurement (no job ended ok: 0 per second), so it stays.
    assert (
        value(
            families,
            "gpupoolctl_stress_throughput_jobs_per_second",
            scenario="nightly",
            level="0.5",
        )
        == 0.0
    )


def test_slice_state_is_the_ledgers_held_or_free() -> None:
    state = ledger_state()
    assert state.slice_state(MIG, NOW) == "held"
    assert state.slice_state("h1/gpu0", NOW) == "free"
    state.allocations["a-2"].expires = "2025-06-01T11:00:00.000Z"
    assert state.slice_state(MIG, NOW) == "free"  # the hold expired


def test_a_run_without_a_scenario_name_is_named_by_its_file() -> None:
    families = parsed(render(stress_families([("runs/2025-06-01.json", run(None))])))
    scenarios = {s.labels["scenario"] for s in families["gpupoolctl_stress_knee_level"].samples}
    assert scenarios == {"2025-06-01"}


def test_two_runs_of_one_scenario_are_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"a\.json and b\.json"):
        stress_families([("a.json", run()), ("b.json", run())])


# -- escaping and values -------------------------------------------------------------------


@given(st.text())
def test_any_label_value_survives_the_parser(text: str) -> None:
    family = Family("gpupoolctl_test", "gauge", "help with \\ and\nnewline")
    family.add(1, host=text)
    rendered = render([family])
    check_rules(rendered)
    (read,) = parser.text_string_to_metric_families(rendered)
    assert read.samples[0].labels == {"host": text}
    assert read.documentation == "help with \\ and\nnewline"


@given(st.floats(allow_nan=True, allow_infinity=True) | st.integers(-(2**53), 2**53))
def test_values_survive_the_parser(number: float) -> None:
    family = Family("gpupoolctl_test", "gauge", "h")
    family.add(number)
    (read,) = parser.text_string_to_metric_families(render([family]))
    got = read.samples[0].value
    if isinstance(number, float) and math.isnan(number):
        assert math.isnan(got)
    else:
        assert got == number


def test_value_text() -> None:
    assert [format_value(v) for v in (3, 0.5, math.inf, -math.inf, True)] == [
        "3",
        "0.5",
        "+Inf",
        "-Inf",
        "1",
    ]
    assert format_value(math.nan) == "NaN"
    assert [level_text(v) for v in (8.0, 0.5, 1 / 3)] == ["8", "0.5", repr(1 / 3)]


def test_families_refuse_what_the_format_forbids() -> None:
    with pytest.raises(ValueError, match="_total"):
        Family("gpupoolctl_jobs_started", "counter", "h")
    with pytest.raises(ValueError, match="bad metric"):
        Family("gpupoolctl-jobs", "gauge", "h")
    family = Family("gpupoolctl_x", "gauge", "h")
    family.add(1, host="a")
    with pytest.raises(ValueError, match="twice"):
        family.add(2, host="a")
    with pytest.raises(ValueError, match="label name"):
        family.add(1, **{"__name": "x"})


# -- the textfile --------------------------------------------------------------------------


def test_textfile_is_replaced_atomically_and_readable(tmp_path: Path) -> None:
    target = tmp_path / TEXTFILE_NAME
    target.write_text("old\n")
    target.chmod(0o600)
    written = write_textfile(tmp_path, everything())
    assert written == target
    assert target.read_text() == everything()
    assert sorted(p.name for p in tmp_path.iterdir()) == [TEXTFILE_NAME]  # no temp left
    assert stat.S_IMODE(target.stat().st_mode) == 0o644  # node_exporter must read it


def test_textfile_folder_must_exist(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a folder"):
        write_textfile(tmp_path / "missing", "x\n")
    (tmp_path / "file").write_text("")
    with pytest.raises(UsageError, match="not a folder"):
        write_textfile(tmp_path / "file", "x\n")


@pytest.mark.skipif(
    shutil.which("promtool") is None,
    reason="promtool (from the Prometheus release) is not on PATH; the rules above and "
    "prometheus_client's parser check the format instead",
)
def test_promtool_accepts_the_export() -> None:
    proc = subprocess.run(
        ["promtool", "check", "metrics"],
        input=everything(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
