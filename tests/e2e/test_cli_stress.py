"""`stress ramp / compare / report` end to end: the real CLI in a subprocess, the bundled
simulated pool, real jobs (the built-in sim workload) launched through the agent."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

DGX = "sg-dgx01"  # eight whole H100s: one node

# Where the harness finds the knee of the contention model is checked in virtual time
# (tests/unit/test_stress_knee_virtual.py); the same ramp on the sim pool by the wall clock,
# whose numbers depend on how busy the machine is, is a benchmark: bench/stress-knee.


@pytest.fixture
def stress_cli(cli):
    """The cli fixture, and afterwards no job of the test left running."""
    yield cli
    for pid_file in Path(cli.sim_dir).glob("jobs/*/*/pid.json"):
        pgid = json.loads(pid_file.read_text())["pgid"]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)


def noop_ramp(cli, *extra: str) -> Any:
    return cli(
        "stress",
        "ramp",
        "--backend",
        "noop",
        "--levels",
        "1,2,4,8,16",
        "--warmup",
        "0s",
        "--hold",
        "300ms",
        *extra,
    )


def test_noop_ramp_reports_levels_knees_and_a_harness_far_cheaper_than_a_submit(cli) -> None:
    run = noop_ramp(cli, "-o", "json")
    assert run.code == 0, run.stderr
    result = run.json()
    assert result["backend"] == "noop" and result["format"] == "gpupoolctl-stress/1"
    assert [lv["level"] for lv in result["levels"]] == [1, 2, 4, 8, 16]
    assert {"kneedle", "usl", "latency"} == set(result["knees"])
    for point in result["knees"].values():
        assert point["level"] is not None or point["note"]  # a point, or why there is none
    assert all(lv["submitted"] > 100 for lv in result["levels"])  # the harness is not slow
    # Per submission the harness costs well under a millisecond; one pooled submit through
    # the ledger and an agent call costs tens of milliseconds or more (see the pool ramps).
    assert max(lv["harness_s"] for lv in result["levels"]) < 0.001


def test_thresholds_stop_the_ramp_and_exit_4(cli) -> None:
    run = noop_ramp(cli, "--threshold", "throughput > 1000000000/s", "-o", "json")
    assert run.code == 4, run.stderr
    result = run.json()
    assert len(result["levels"]) == 2  # broken twice in a row: no third level
    assert "thresholds broken at 2 levels in a row" in run.stderr
    assert result["levels"][0]["thresholds"][0]["ok"] is False


def test_a_ramp_within_its_thresholds_exits_0_and_shows_a_table(cli) -> None:
    run = noop_ramp(cli, "--threshold", "failure_rate < 1%")
    assert run.code == 0, run.stderr
    assert "LEVEL" in run.stdout and "JOBS/S" in run.stdout
    assert "Capacity peak (USL fit" in run.stdout


def _regress(source: Path, target: Path, factor: float) -> None:
    data = json.loads(source.read_text())
    for level in data["levels"]:
        level["throughput"] *= factor
    target.write_text(json.dumps(data))


def test_compare_exits_0_on_the_same_run_4_on_a_regression_1_on_a_broken_file(cli) -> None:
    assert noop_ramp(cli, "--save", "base.json", "-q").code == 0
    base = Path(cli.cwd) / "base.json"
    same = cli("stress", "compare", "base.json", "--baseline", "base.json")
    assert same.code == 0, same.stderr
    _regress(base, Path(cli.cwd) / "slow.json", 0.5)
    slow = cli("stress", "compare", "slow.json", "--baseline", "base.json", "-o", "json")
    assert slow.code == 4, slow.stderr
    verdict = slow.json()
    assert verdict["regressed"] is True
    assert any("throughput" in sentence for sentence in verdict["regressions"])
    # A generous tolerance lets the same drop pass.
    lenient = cli(
        "stress",
        "compare",
        "slow.json",
        "--baseline",
        "base.json",
        "--tolerance",
        "throughput=60%",
    )
    assert lenient.code == 0, lenient.stderr
    (Path(cli.cwd) / "broken.json").write_text('{"format": "gpupoolctl-stress/1",\n  "levels": [')
    broken = cli("stress", "compare", "broken.json", "--baseline", "base.json")
    assert broken.code == 1
    assert broken.stderr.count("\n") == 1 and "broken.json:" in broken.stderr
    assert "Traceback" not in broken.stderr
    bad_tolerance = cli("stress", "compare", "base.json", "-b", "base.json", "--tolerance", "x=1")
    assert bad_tolerance.code == 2 and "x" in bad_tolerance.stderr


def test_report_renders_a_saved_run_as_table_plot_and_html(cli) -> None:
    assert noop_ramp(cli, "--save", "run.json", "-q").code == 0
    shown = cli("stress", "report", "run.json", "--plot", "--html", "run.html", "-b", "run.json")
    assert shown.code == 0, shown.stderr
    assert "JOBS/S" in shown.stdout and "throughput" in shown.stdout.lower()
    page = (Path(cli.cwd) / "run.html").read_text()
    assert page.count("<svg") >= 3 and "baseline" in page.lower()
    as_csv = cli("stress", "report", "run.json", "-o", "csv")
    assert as_csv.code == 0
    header, *rows = as_csv.stdout.strip().splitlines()
    assert header.startswith("level,") and len(rows) == 5


def test_bad_scenario_file_is_one_line_naming_file_and_line(cli) -> None:
    (Path(cli.cwd) / "bad.yaml").write_text("name: x\nlevels: 1,2,4\nhold: soon\n")
    run = cli("stress", "ramp", "--scenario", "bad.yaml", "--backend", "noop")
    assert run.code in (1, 2)
    assert "bad.yaml:3" in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert "Traceback" not in run.stderr


def test_an_empty_profile_in_a_scenario_is_refused_as_submit_refuses_it(cli) -> None:
    # It used to be read as "no size" and ramped whole cards; `submit --profile ""` refuses.
    scenario = "name: x\nlevels: 1\nrequests:\n  - gpus: 1\n    profile: ''\n"
    (Path(cli.cwd) / "empty.yaml").write_text(scenario)
    run = cli("stress", "ramp", "--scenario", "empty.yaml", "--backend", "noop", "-o", "json")
    assert run.code == 1 and run.stdout == ""
    assert run.stderr.strip().endswith("empty.yaml:5: profile must not be empty"), run.stderr
    assert run.stderr.count("\n") == 1


def test_ctrl_c_stops_the_ramp_cancels_its_jobs_and_keeps_the_results(stress_cli) -> None:
    home = Path(stress_cli.tmp) / "home"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(home), "GPUPOOL_SIM_DIR": str(stress_cli.sim_dir)})
    argv = [
        sys.executable,
        "-m",
        "gpupoolctl.cli.main",
        "-l",
        DGX,
        "stress",
        "ramp",
        "--levels",
        "2,4",
        "--warmup",
        "0s",
        "--hold",
        "60s",
        "--workload",
        "sleep",
        "--work",
        "30s",
        "--save",
        "part.json",
    ]
    proc = subprocess.Popen(
        argv,
        cwd=stress_cli.cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        running: list[Any] = []
        while time.monotonic() < deadline and len(running) < 2:
            time.sleep(0.5)
            listing = stress_cli("-q", "jobs", "-o", "json")
            running = [j for j in listing.json() if j["state"] == "running"]
        assert len(running) == 2, "the ramp's two jobs never started"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=90)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted" in stderr and "Traceback" not in stderr
    saved = json.loads((Path(stress_cli.cwd) / "part.json").read_text())
    assert saved["stopped_early"] == "interrupted during level 2"
    assert len(saved["levels"]) == 1
    after = stress_cli("-q", "jobs", "--all", "-o", "json").json()
    ramp_jobs = [j for j in after if (j.get("name") or "").startswith("stress-")]
    assert ramp_jobs and all(j["state"] == "cancelled" for j in ramp_jobs), ramp_jobs


# -- a ramp's own verdict -----------------------------------------------------------------------


def short_ramp(cli, *extra: str, timeout: float = 120) -> Any:
    """One level on one node, no warm-up, a short hold: a few seconds of real jobs."""
    return cli(
        "-l",
        DGX,
        "stress",
        "ramp",
        "--levels",
        "1",
        "--warmup",
        "0s",
        "--drain",
        "20s",
        "--save",
        "run.json",
        "-o",
        "json",
        *extra,
        timeout=timeout,
    )


def test_a_ramp_where_every_job_failed_exits_1_with_the_workloads_own_reason(
    stress_cli,
) -> None:
    failing = "sh -c 'echo starting; echo this node has no GPU for it >&2; exit 3'"
    run = short_ramp(stress_cli, "--hold", "1s", "--workload", "cmd", "--cmd", failing)
    assert run.code == 1, run.stderr
    assert "Traceback" not in run.stderr
    [error] = [line for line in run.stderr.splitlines() if "error:" in line]
    assert "no job succeeded at any level" in error and "this node has no GPU for it" in error
    saved = json.loads((Path(stress_cli.cwd) / "run.json").read_text())
    [level] = saved["levels"]
    assert level["completed"] == 0 and level["failed"] > 0
    # The saved reason is the workload's, not a placeholder.
    assert list(level["errors"]) == ["exit code <n>: this node has no GPU for it"]


def test_matmul_on_a_node_without_pytorch_or_cupy_says_so_and_exits_1(stress_cli) -> None:
    import importlib.util

    if any(importlib.util.find_spec(name) for name in ("torch", "cupy")):
        pytest.skip("PyTorch or CuPy is installed here: matmul can run")
    run = short_ramp(stress_cli, "--hold", "1s", "--workload", "matmul", "--work", "1s")
    assert run.code == 1, run.stderr
    [level] = json.loads((Path(stress_cli.cwd) / "run.json").read_text())["levels"]
    [reason] = level["errors"]
    assert "neither PyTorch nor CuPy can be imported" in reason
    assert "neither PyTorch nor CuPy" in run.stderr


def test_reap_names_the_wait_for_a_job_s_end_to_be_noticed(stress_cli) -> None:
    """On the sim pool, a job's end reaches the harness only at the reaper's next pass:
    that wait is measured as reap, and little of a job's time is left unattributed."""
    run = short_ramp(stress_cli, "--hold", "1500ms", "--workload", "sleep", "--work", "100ms")
    assert run.code == 0, run.stderr
    [level] = run.json()["levels"]
    assert level["completed"] > 0 and level["failed"] == 0
    reap, turnaround = level["phases"]["reap"], level["turnaround"]["mean"]
    assert 0 < reap < turnaround - level["phases"]["run"], level
    verdict = run.json()["bottleneck"]
    assert verdict["shares_at_knee"]["reap"] > 0
    assert verdict["shares_at_knee"].get("unattributed", 0.0) < 0.5 * reap / turnaround
    rows = stress_cli("stress", "report", "run.json", "-o", "csv")
    assert rows.code == 0 and "phase_reap" in rows.stdout.splitlines()[0]


def test_queue_wait_is_the_wait_for_a_slice_and_launch_is_reported_apart(stress_cli) -> None:
    run = short_ramp(stress_cli, "--hold", "1500ms", "--workload", "sleep", "--work", "100ms")
    assert run.code == 0, run.stderr
    [level] = run.json()["levels"]
    assert level["completed"] > 0 and level["failed"] == 0
    queue, launch = level["queue_wait"], level["launch"]
    assert launch["count"] == queue["count"] == level["submitted"]
    # One submitter on an idle node never waits for a slice: what it waits for is its
    # launch (an agent call), and that is reported as launch, not as queue wait. Medians,
    # because with a handful of jobs p95 is the slowest one, and on a loaded CI machine one
    # descheduled submit can take as long as a launch.
    assert queue["p50"] < launch["p50"] / 2, (queue, launch)
    # The queue phase and the queue-wait percentiles are one and the same wait.
    assert level["phases"]["queue"] == pytest.approx(queue["mean"], abs=1e-3)
    assert level["phases"]["launch"] == pytest.approx(launch["mean"], abs=1e-3)
    table = stress_cli("stress", "report", "run.json")
    assert table.code == 0 and "LAUNCH P95" in table.stdout
    # The pool is left as it was found: nothing running, nothing held, the ledger clean.
    jobs = stress_cli("-q", "jobs", "-o", "json")
    assert jobs.code == 0 and [j for j in jobs.json() if j["state"] == "running"] == []
    verify = stress_cli("-q", "ledger", "verify")
    assert verify.code == 0, verify.stdout + verify.stderr


def test_a_hold_shorter_than_a_job_measures_nothing_and_exits_1(stress_cli) -> None:
    run = stress_cli(
        "-l", DGX, "stress", "ramp", "--levels", "1", "--warmup", "500ms", "--hold", "500ms",
        "--workload", "sleep", "--work", "2s", "--threshold", "failure_rate < 1%",
        "-o", "json",
    )  # fmt: skip
    assert run.code == 1, run.stderr
    [error] = [line for line in run.stderr.splitlines() if "error:" in line]
    assert "no level measured anything" in error and "--hold" in error
    result = run.json()
    [level] = result["levels"]
    assert level["submitted"] == 0 and level["throughput"] > 0  # only a warm-up job's share
    assert level["thresholds"] == []  # not judged: "failure_rate 0 %" would have read "ok"
    assert "got 0" in result["knees"]["kneedle"]["note"]  # not fed to the fits


def test_compare_fails_on_missing_levels_or_an_early_stop_and_refuses_other_workloads(
    cli,
) -> None:
    assert noop_ramp(cli, "--save", "base.json", "-q").code == 0
    base = json.loads((Path(cli.cwd) / "base.json").read_text())
    short = {**base, "levels": base["levels"][:3]}  # 8 and 16 not run
    (Path(cli.cwd) / "short.json").write_text(json.dumps(short))
    missing = cli("stress", "compare", "short.json", "-b", "base.json", "-o", "json")
    assert missing.code == 4, missing.stderr
    assert missing.json()["regressed"] is False
    assert any("missing from the current run: 8, 16" in s for s in missing.json()["incomplete"])
    assert "missing from the current run: 8, 16" in missing.stderr
    allowed = cli("stress", "compare", "short.json", "-b", "base.json", "--allow-missing-levels")
    assert allowed.code == 0, allowed.stderr
    stopped = {**base, "stopped_early": "thresholds broken at 2 levels in a row (last: 16)"}
    (Path(cli.cwd) / "stopped.json").write_text(json.dumps(stopped))
    early = cli("stress", "compare", "stopped.json", "-b", "base.json")
    assert early.code == 4 and "current run stopped early" in early.stderr
    other = json.loads(json.dumps(base))
    other["scenario"]["workload"] = {"kind": "sleep", "args": {"seconds": 1.0}}
    (Path(cli.cwd) / "other.json").write_text(json.dumps(other))
    refused = cli("stress", "compare", "other.json", "-b", "base.json")
    assert refused.code == 1 and refused.stderr.count("\n") == 1, refused.stderr
    assert "different workloads" in refused.stderr and "sleep seconds=1.0" in refused.stderr
    assert "--allow-other-workload" in refused.stderr
    anyway = cli("stress", "compare", "other.json", "-b", "base.json", "--allow-other-workload")
    assert anyway.code == 0 and "different workload" in anyway.stderr
    helped = cli("stress", "compare", "--help")
    assert "--allow-missing-levels" in helped.stdout and "--allow-other-workload" in helped.stdout


# -- restarts and recovery ---------------------------------------------------------------------

# Fails on its first try, succeeds when run again (the node tells each try its restart count).
FIRST_TRY_FAILS = (
    "import os, sys; sys.exit(1 if os.environ.get('GPUPOOL_RESTART_COUNT', '0') == '0' else 0)"
)


def _restart_scenario(cli, max_restarts: int) -> None:
    argv = json.dumps([sys.executable, "-c", FIRST_TRY_FAILS])
    (Path(cli.cwd) / "flaky.yaml").write_text(
        "name: flaky\n"
        "levels: [2]\n"
        "warmup: 0s\n"
        "hold: 1s\n"
        # The back-off before a first restart is 10 s (jobs.restarts.BACKOFF_BASE_S): the
        # drain leaves room for it and the second try.
        "drain: 25s\n"
        f"workload: {{kind: cmd, argv: {argv}}}\n"
        f"requests: [{{mem: 10G, max-restarts: {max_restarts}}}]\n"
    )
    return "flaky.yaml"


def _restart_ramp(cli, max_restarts: int, *extra: str) -> Any:
    _restart_scenario(cli, max_restarts)
    return cli(
        "-l", DGX, "stress", "ramp", "--scenario", "flaky.yaml", "--save", "run.json",
        "-o", "json", *extra, timeout=90,
    )  # fmt: skip


def test_jobs_that_fail_once_and_restart_are_recovered_and_counted(stress_cli) -> None:
    run = _restart_ramp(stress_cli, 1)
    assert run.code == 0, run.stderr
    [level] = run.json()["levels"]
    # Each submitter's first job failed, waited out its back-off, ran again and ended ok;
    # the hold was over by then, so each submitted one job.
    assert level["submitted"] == 2, level
    assert level["completed"] == 2 and level["failed"] == 0, level
    assert level["failure_rate"] == 0
    assert level["restarts"] == level["recovered"] == 2
    assert level["lost_nodes"] == 0
    table = stress_cli("stress", "report", "run.json")
    assert table.code == 0
    assert "RESTARTS" in table.stdout and "RECOVERED" in table.stdout, table.stdout
    held = stress_cli("stress", "report", "run.json", "-o", "csv").stdout.splitlines()
    assert "restarts" in held[0].split(",")
    # The jobs' own records agree: one restart used of one allowed, done.
    jobs = stress_cli("-q", "jobs", "--all", "-o", "json").json()
    ramp_jobs = [j for j in jobs if (j.get("name") or "").startswith("stress-")]
    assert len(ramp_jobs) == 2 and all(j["state"] == "done" for j in ramp_jobs), ramp_jobs
    assert {j["restarts"] for j in ramp_jobs} == {"1/1"}


def test_the_same_jobs_without_restarts_all_fail(stress_cli) -> None:
    # --max-restarts overrides the file's request shapes.
    run = _restart_ramp(stress_cli, 1, "--max-restarts", "0")
    assert run.code == 1, run.stderr  # no job succeeded at any level
    [level] = json.loads((Path(stress_cli.cwd) / "run.json").read_text())["levels"]
    assert level["submitted"] > 0 and level["completed"] == 0
    assert level["failure_rate"] == 1
    assert level["restarts"] == level["recovered"] == 0
    assert "RESTARTS" not in stress_cli("stress", "report", "run.json").stdout
