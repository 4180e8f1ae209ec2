"""Result files: JSON round trip, atomic save, every malformed file as one clear line,
flat CSV rows, and where a run came from."""

from __future__ import annotations

import copy
import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

import gpupoolctl
from gpupoolctl.errors import ExitCode, GpupoolError, SourceError
from gpupoolctl.stress import result as result_mod
from gpupoolctl.stress.histogram import distribution
from gpupoolctl.stress.model import (
    FORMAT,
    PHASES,
    Distribution,
    KneePoint,
    Knees,
    LevelResult,
    RunResult,
    ThresholdCheck,
)
from gpupoolctl.stress.result import dumps, environment, from_dict, load, save, to_csv_rows, to_dict


def level(n: float, throughput: float, *, p95: float | None = 0.2) -> LevelResult:
    waits = [] if p95 is None else [p95 / 2, p95]
    return LevelResult(
        level=n,
        model="closed",
        warmup_s=5.0,
        hold_s=30.0,
        window_s=30.0,
        submitted=40,
        completed=38,
        failed=2,
        dropped=0,
        throughput=throughput,
        failure_rate=2 / 40,
        queue_wait=distribution(waits),
        turnaround=distribution([1.0, 1.5, 2.5]),
        phases={"ledger": 0.01, "run": 1.2},
        harness_s=0.0004,
        errors={"job j-<n> timed out after <n> s": 2},
        thresholds=[ThresholdCheck("queue_wait.p95 < 5s", p95, True)],
    )


def run_result() -> RunResult:
    return RunResult(
        scenario={"name": "nightly", "model": "closed", "levels": [1, 2, 4], "seed": 0},
        levels=[level(1, 1.0), level(2, 1.9), level(4, 3.5, p95=None)],
        knees=Knees(
            kneedle=KneePoint("kneedle", "diminishing returns", 2.0, 1.9),
            usl=KneePoint(
                "usl", "capacity peak", 30.8, 41.0, extra={"sigma": 0.05, "kappa": 0.001}
            ),
            latency=KneePoint("latency", "queue wait rises", None, note="fewer than 3 levels"),
        ),
        backend="pool",
        transport="local",
        tool_version="0.1.0",
        created="2025-06-01T12:00:00Z",
        host="admin-1",
        commit="0123456789abcdef0123456789abcdef01234567-dirty",
        stopped_early=None,
    )


def write_json(tmp_path: Path, data: object, name: str = "baseline.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data, indent=2))
    return path


# -- round trip ------------------------------------------------------------------------------


def test_save_load_round_trip(tmp_path):
    original = run_result()
    path = tmp_path / "run.json"
    save(original, path)
    assert load(path) == original


def test_file_is_sorted_indented_and_stable(tmp_path):
    original = run_result()
    path = tmp_path / "run.json"
    save(original, path)
    text = path.read_text()
    assert text == dumps(original)
    assert text.endswith("}\n") and '\n  "backend": "pool",' in text
    keys = list(json.loads(text))
    assert keys == sorted(keys)
    assert json.loads(text)["format"] == FORMAT
    # Saving what was loaded writes the same bytes.
    save(load(path), tmp_path / "again.json")
    assert (tmp_path / "again.json").read_text() == text


def test_save_is_atomic_and_readable(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("old")
    save(run_result(), path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.json"]  # no temp left over
    assert stat.S_IMODE(path.stat().st_mode) == 0o644


def test_save_into_missing_folder_is_a_typed_error(tmp_path):
    with pytest.raises(GpupoolError, match="cannot write"):
        save(run_result(), tmp_path / "nope" / "run.json")


def test_no_knees_and_no_optional_keys(tmp_path):
    original = run_result()
    original.knees = None
    data = to_dict(original)
    for lv in data["levels"]:
        del lv["queue_wait"]["hist"]
    del data["stopped_early"]
    back = from_dict(data, "x.json")
    assert back.knees is None and back.stopped_early is None
    assert back.levels[0].queue_wait.hist is None


def test_non_finite_numbers_are_written_as_null():
    original = run_result()
    assert original.knees is not None
    original.knees.usl.extra["n_star_error"] = float("inf")
    original.knees.usl.value = float("nan")
    data = json.loads(dumps(original))
    assert data["knees"]["usl"]["extra"]["n_star_error"] is None
    assert data["knees"]["usl"]["value"] is None


def test_numpy_values_in_extra_are_saved_as_plain_numbers():
    np = pytest.importorskip("numpy")
    original = run_result()
    assert original.knees is not None
    original.knees.usl.extra.update(count=np.int64(7), params=np.array([0.5, 1.5]))
    data = json.loads(dumps(original))
    assert data["knees"]["usl"]["extra"]["count"] == 7
    assert data["knees"]["usl"]["extra"]["params"] == [0.5, 1.5]


# -- malformed files ---------------------------------------------------------------------------


def test_not_json_names_the_line(tmp_path):
    path = tmp_path / "baseline.json"
    path.write_text('{\n  "format": "gpupoolctl-stress/1",\n  "levels": [1,, 2]\n}\n')
    with pytest.raises(SourceError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:3: not JSON")
    assert caught.value.exit_code == ExitCode.ERROR
    assert "\n" not in message


def test_missing_file_and_folder_and_binary(tmp_path):
    with pytest.raises(SourceError, match="cannot read"):
        load(tmp_path / "absent.json")
    with pytest.raises(SourceError, match="is a folder"):
        load(tmp_path)
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(SourceError, match="not UTF-8"):
        load(binary)


def good() -> dict:
    return to_dict(run_result())


def broken(change) -> dict:
    data = copy.deepcopy(good())
    change(data)
    return data


CASES = [
    (lambda d: d.update(format="k6-summary/1"), "format: expected 'gpupoolctl-stress/1'"),
    (lambda d: d.pop("format"), "format: missing"),
    (
        lambda d: d["levels"][2].update(throughput="x"),
        "levels[2].throughput: expected a number, got 'x'",
    ),
    (
        lambda d: d["levels"][0].update(throughput=True),
        "levels[0].throughput: expected a number, got true",
    ),
    (lambda d: d["levels"][1].pop("failure_rate"), "levels[1].failure_rate: missing"),
    (
        lambda d: d["levels"][1].update(completed=3.5),
        "levels[1].completed: expected a whole number >= 0",
    ),
    (lambda d: d["levels"][1].update(failed=-1), "levels[1].failed: expected a whole number >= 0"),
    (
        lambda d: d["levels"][0]["queue_wait"].update(p95="1s"),
        "levels[0].queue_wait.p95: expected a number or null",
    ),
    (lambda d: d["levels"][0]["turnaround"].pop("count"), "levels[0].turnaround.count: missing"),
    (
        lambda d: d["levels"][0].update(turnaround=[]),
        "levels[0].turnaround: expected an object, got a list",
    ),
    (
        lambda d: d["levels"][0]["phases"].update(run="long"),
        "levels[0].phases.run: expected a number",
    ),
    (
        lambda d: d["levels"][0]["errors"].update(oops="2"),
        "levels[0].errors['oops']: expected a whole number",
    ),
    (lambda d: d["levels"][0]["thresholds"][0].pop("ok"), "levels[0].thresholds[0].ok: missing"),
    (
        lambda d: d["levels"][0]["thresholds"][0].update(ok="yes"),
        "levels[0].thresholds[0].ok: expected true or false",
    ),
    (lambda d: d["levels"].insert(0, 7), "levels[0]: expected an object, got 7"),
    (lambda d: d.update(levels={}), "levels: expected a list, got an object"),
    (lambda d: d.pop("levels"), "levels: missing"),
    (lambda d: d.update(scenario="nightly"), "scenario: expected an object, got 'nightly'"),
    (lambda d: d.pop("knees"), "knees: missing"),
    (lambda d: d["knees"].pop("usl"), "knees.usl: missing"),
    (
        lambda d: d["knees"]["usl"].update(level="30"),
        "knees.usl.level: expected a number or null, got '30'",
    ),
    (
        lambda d: d["knees"]["kneedle"].update(method=1),
        "knees.kneedle.method: expected a string, got 1",
    ),
    (lambda d: d.update(backend=None), "backend: expected a string, got null"),
    (lambda d: d.update(commit=5), "commit: expected a string or null, got 5"),
    (lambda d: d.pop("created"), "created: missing"),
]


@pytest.mark.parametrize(("change", "expected"), CASES)
def test_every_malformed_file_names_file_and_key(tmp_path, change, expected):
    path = write_json(tmp_path, broken(change))
    with pytest.raises(GpupoolError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}: "), message
    assert expected in message, message
    assert "\n" not in message
    assert caught.value.exit_code == ExitCode.ERROR  # a harness error, not a regression


# NaN compares false both ways, so a damaged file must not reach compare as a "pass": the
# JSON reader refuses NaN, Infinity and 1e400 where it reads them, with their line.
@pytest.mark.parametrize(
    ("change", "word"),
    [
        (lambda d: d["levels"][0].update(throughput=float("nan")), "NaN"),
        (lambda d: d["levels"][0]["queue_wait"].update(p95=float("inf")), "Infinity"),
        (lambda d: d["levels"][0]["queue_wait"].update(p95=float("-inf")), "-Infinity"),
    ],
)
def test_a_non_finite_number_is_refused_with_its_line(tmp_path, change, word):
    path = write_json(tmp_path, broken(change))
    line = next(n for n, text in enumerate(path.read_text().splitlines(), 1) if f": {word}" in text)
    with pytest.raises(SourceError) as caught:
        load(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}: expected a finite number, not {word} "), message
    assert "\n" not in message


def test_a_number_too_large_for_a_float_is_refused(tmp_path):
    text = re.sub(r'"throughput": [0-9.e+-]+', '"throughput": 1e400', json.dumps(good(), indent=2))
    path = tmp_path / "baseline.json"
    path.write_text(text)
    with pytest.raises(SourceError, match=r":\d+: expected a finite number, not 1e400"):
        load(path)


@pytest.mark.parametrize("data", [[], "text", 3, None])
def test_top_level_must_be_an_object(tmp_path, data):
    with pytest.raises(GpupoolError, match="expected an object"):
        load(write_json(tmp_path, data))


def test_unknown_keys_are_ignored():
    data = good()
    data["added_later"] = {"x": 1}
    data["levels"][0]["also_new"] = 3
    assert from_dict(data, "x.json") == run_result()


def test_whole_numbers_are_accepted_where_floats_are_expected():
    data = good()
    data["levels"][0]["throughput"] = 2
    assert from_dict(data, "x.json").levels[0].throughput == 2.0


# -- CSV rows --------------------------------------------------------------------------------------


def test_csv_rows_are_flat_and_uniform():
    rows = to_csv_rows(run_result())
    assert [row["level"] for row in rows] == [1, 2, 4]
    assert len({tuple(row) for row in rows}) == 1  # same keys, same order, every row
    first = rows[0]
    for key in ("throughput", "failure_rate", "harness_s", "thresholds_ok"):
        assert key in first
    for name in ("queue_wait", "turnaround"):
        for stat_name in ("p50", "p90", "p95", "p99", "max"):
            assert f"{name}_{stat_name}" in first
    for phase in PHASES:
        assert f"phase_{phase}" in first
    assert first["phase_run"] == 1.2 and first["phase_launch"] is None
    assert first["queue_wait_p95"] == pytest.approx(0.2, rel=1e-3)
    assert rows[2]["queue_wait_p95"] is None
    assert first["thresholds_ok"] is True
    assert all(not isinstance(v, dict | list | Distribution) for v in first.values())


# -- environment -----------------------------------------------------------------------------------


def test_environment_fields():
    env = environment()
    assert set(env) == {"tool_version", "host", "commit", "created"}
    assert env["tool_version"] == gpupoolctl.__version__
    assert env["host"]
    assert len(env["created"]) == 20 and env["created"].endswith("Z")
    assert env["created"][10] == "T"


def _package_in(tmp_path: Path, monkeypatch) -> Path:
    """A stand-in gpupoolctl package at tmp_path/src/gpupoolctl, as if imported from there."""
    package = tmp_path / "src" / "gpupoolctl"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text('__version__ = "9"\n')
    monkeypatch.setattr(gpupoolctl, "__file__", str(package / "__init__.py"))
    return package


def _git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.com",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.com",
    }
    done = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_commit_of_a_checkout_clean_and_dirty(tmp_path, monkeypatch):
    package = _package_in(tmp_path, monkeypatch)
    repo = tmp_path / "src"
    _git(repo, "init", "-q")
    # Not tracked yet: an installed copy inside someone else's checkout reports nothing.
    assert result_mod.source_commit() is None
    _git(repo, "add", "gpupoolctl/__init__.py")
    _git(repo, "commit", "-q", "-m", "init")
    head = _git(repo, "rev-parse", "HEAD")
    assert result_mod.source_commit() == head
    (repo / "results.json").write_text("{}")  # untracked output does not make it dirty
    assert result_mod.source_commit() == head
    (package / "__init__.py").write_text('__version__ = "10"\n')
    assert result_mod.source_commit() == f"{head}-dirty"


def test_commit_is_none_outside_a_checkout(tmp_path, monkeypatch):
    _package_in(tmp_path, monkeypatch)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    assert result_mod.source_commit() is None


def test_commit_is_none_without_git(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # no git on PATH
    assert result_mod.source_commit() is None
    assert environment()["commit"] is None


def test_commit_gives_up_when_git_hangs(tmp_path, monkeypatch):
    fake = tmp_path / "git"
    fake.write_text("#!/bin/sh\nexec sleep 30\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ.get('PATH', '')}")
    assert result_mod.source_commit(timeout_s=0.2) is None


def test_launch_has_its_own_percentiles_in_the_file_and_older_files_without_them_load(tmp_path):
    original = run_result()
    original.levels[0].launch = distribution([0.15, 0.3, 0.8])
    path = tmp_path / "run.json"
    save(original, path)
    data = json.loads(path.read_text())
    assert data["levels"][0]["launch"]["count"] == 3
    assert load(path) == original
    row = to_csv_rows(original)[0]
    assert row["launch_p95"] == pytest.approx(0.8, rel=1e-3)
    # A result saved before launch had its own figure: no launch measured, not an error.
    for lv in data["levels"]:
        del lv["launch"]
    older = from_dict(data, "older.json")
    assert older.levels[0].launch.count == 0 and older.levels[0].launch.p95 is None


# -- reap, and results saved before it was measured -------------------------------------------

BEFORE_REAP = Path(__file__).parents[1] / "fixtures" / "stress" / "before-reap.json"


def test_reap_round_trips_through_json_and_csv(tmp_path):
    from gpupoolctl.stress.metrics import metric_value
    from gpupoolctl.stress.thresholds import evaluate, parse_threshold

    original = run_result()
    original.levels[0].phases["reap"] = 0.25
    path = tmp_path / "run.json"
    save(original, path)
    assert json.loads(path.read_text())["levels"][0]["phases"]["reap"] == 0.25
    back = load(path)
    assert back == original and back.levels[0].phases["reap"] == 0.25
    rows = to_csv_rows(back)
    assert rows[0]["phase_reap"] == 0.25 and rows[1]["phase_reap"] is None
    # In a job's life order: after the run, before the run's own split.
    keys = list(rows[0])
    assert keys.index("phase_run") < keys.index("phase_reap") < keys.index("phase_compute")
    assert metric_value(back.levels[0], "phase.reap") == 0.25
    [check] = evaluate([parse_threshold("phase.reap < 200ms")], back.levels[0])
    assert (check.value, check.ok) == (0.25, False)


def test_a_result_saved_before_reap_loads_and_reports():
    """A file `stress ramp --save` wrote before reap was measured (the sim pool, sleep
    100ms, levels 1, 2, 4): it loads, and every report of it works, with reap absent."""
    from gpupoolctl.stress.bottleneck import UNATTRIBUTED, find_bottleneck
    from gpupoolctl.stress.compare import compare
    from gpupoolctl.stress.report_html import render_html
    from gpupoolctl.stress.report_text import bottleneck_lines, level_rows

    old = load(BEFORE_REAP)
    assert [lv.level for lv in old.levels] == [1, 2, 4]
    assert all("reap" not in lv.phases and "run" in lv.phases for lv in old.levels)
    assert all(row["phase_reap"] is None for row in to_csv_rows(old))
    found = find_bottleneck(old.levels, old.knees)
    assert found is not None and "reap" not in found.shares_at_knee
    assert found.shares_at_knee[UNATTRIBUTED] > 0.1  # what reap now names, unnamed then
    assert "reap" not in found.sentence  # not named as unknown either
    assert bottleneck_lines(old)[0].startswith("Bottleneck: ")
    assert len(level_rows(old)) == 3
    svgs = re.findall(r"<svg\b.*?</svg>", render_html(old), flags=re.S)
    picture = next(svg for svg in svgs if "Where the time went" in svg)
    assert re.search(r">\s*run\s*<", picture) and not re.search(r">\s*reap\s*<", picture)
    # Compared both ways with a run that measured it.
    new = copy.deepcopy(old)
    for lv in new.levels:
        lv.phases["reap"] = 0.08
    assert compare(new, old).rows and compare(old, new).rows
    named = find_bottleneck(new.levels, new.knees)
    assert named is not None and named.shares_at_knee["reap"] > 0
    assert named.shares_at_knee.get(UNATTRIBUTED, 0.0) < found.shares_at_knee[UNATTRIBUTED]
