"""submit / jobs / logs / cancel / schedule end to end on the bundled simulated pool."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

PY = sys.executable
L40S = "dxb-l40s-01"  # four whole cards, no MIG: easy to fill


def jobs_json(cli, *extra: str) -> dict[str, dict[str, Any]]:
    run = cli("-q", "jobs", "--all", "-o", "json", *extra)
    assert run.code == 0, run.stderr
    return {j["id"]: j for j in run.json()}


def held(cli) -> list[dict[str, Any]]:
    run = cli("-q", "pool", "--no-refresh", "-o", "json")
    assert run.code == 0, run.stderr
    return [s for n in run.json()["nodes"] for s in n["slices"] if s["state"] == "held"]


def submit(cli, *args: str) -> str:
    run = cli("-q", *args)
    assert run.code == 0, run.stderr
    return run.stdout.strip()


def test_small_request_lands_on_a_small_slice_and_wait_exits_with_its_code(jobs_cli) -> None:
    code = "import os, sys; print('hi from', os.environ['CUDA_VISIBLE_DEVICES']); sys.exit(3)"
    run = jobs_cli("-q", "submit", "--mem", "10G", "--wait", "--", PY, "-c", code)
    assert run.code == 3, run.stderr
    assert run.stdout.startswith("hi from MIG-")
    (job,) = jobs_json(jobs_cli).values()
    assert job["state"] == "failed" and job["exit_code"] == 3
    assert "/mig-" in job["slice"] and ("1g.10gb" in job["slice"] or "2g.10gb" in job["slice"])
    assert held(jobs_cli) == []


def test_dry_run_changes_nothing_and_four_h100_stay_on_one_dgx(jobs_cli) -> None:
    ledger = Path(jobs_cli.tmp) / "home" / ".local" / "state" / "gpupoolctl" / "ledger.jsonl"
    # The issue's own example: nothing about size, so four whole cards, one NVLink island.
    args = ["--gpus", "4", "--same-island", "--model", "H100", "--priority", "high"]
    plan = jobs_cli("-q", "submit", *args, "--dry-run", "-o", "json", "--", "true")
    assert plan.code == 0, plan.stderr
    doc = plan.json()
    assert doc["fits"] and len(doc["hosts"]) == 1 and doc["hosts"][0].startswith("sg-dgx")
    assert len(doc["slices"]) == 4 and doc["why"]
    assert not any("/mig-" in slice_id for slice_id in doc["slices"]), doc["slices"]
    assert not ledger.exists()  # nothing recorded, not even the slices it read
    text = jobs_cli("-q", "submit", *args, "--dry-run", "--", "true")
    assert "would run on sg-dgx" in text.stdout and "why:" in text.stdout
    job_id = submit(jobs_cli, "submit", *args, "--", PY, "-c", "import time; time.sleep(0.3)")
    job = jobs_json(jobs_cli, "--no-refresh")[job_id]
    assert job["host"] == doc["hosts"][0] and job["slice"].count(",") == 3
    assert job["state"] in ("running", "done")


def test_logs_and_cancel_release_the_slice(jobs_cli) -> None:
    code = "import time; print('started', flush=True); time.sleep(30)"
    job_id = submit(
        jobs_cli, "-l", L40S, "submit", "--name", "$(touch PWNED)", "--", PY, "-c", code
    )
    assert job_id.startswith("j-")
    follow = jobs_cli("-q", "logs", job_id)
    for _ in range(50):
        if follow.stdout:
            break
        follow = jobs_cli("-q", "logs", job_id)
    assert follow.stdout == "started\n"
    inventory = jobs_cli("-q", "-l", L40S, "inventory", "-o", "json").json()
    procs = [len(g["processes"]) for g in inventory["hosts"][0]["facts"]["gpus"]]
    assert sorted(procs) == [0, 0, 0, 1]  # the job is a process on its simulated GPU
    cancelled = jobs_cli("-q", "cancel", job_id, "--grace", "2")
    assert cancelled.code == 0 and f"cancelled {job_id} (exit code 143)" in cancelled.stdout
    job = jobs_json(jobs_cli)[job_id]
    assert (
        job["state"] == "cancelled" and job["exit_code"] == 143 and job["name"] == "$(touch PWNED)"
    )
    assert held(jobs_cli) == []
    again = jobs_cli("-q", "cancel", job_id)
    assert again.code == 1 and "already ended" in again.stderr
    assert jobs_cli("-q", "cancel", "j-999").code == 1
    assert not list(Path(jobs_cli.tmp).rglob("PWNED"))


def test_queue_when_full_then_scheduled_when_freed(jobs_cli) -> None:
    long = ["--", PY, "-c", "import time; time.sleep(30)"]
    first = [submit(jobs_cli, "-l", L40S, "submit", "--profile", "gpu", *long) for _ in range(4)]
    waiting = jobs_cli("-l", L40S, "submit", "--profile", "gpu", "--name", "late", *long)
    assert waiting.code == 0 and "queued" in waiting.stderr
    late = waiting.stdout.strip()
    states = jobs_json(jobs_cli)
    assert [states[j]["state"] for j in first] == ["running"] * 4
    assert states[late]["state"] == "queued" and states[late]["host"] is None
    assert jobs_cli("-q", "cancel", first[0], "--grace", "1").code == 0
    sched = jobs_cli("-q", "schedule", "-o", "json")
    assert sched.code == 0, sched.stderr
    assert any(e["event"] == "started" and e["job"] == late for e in sched.json())
    assert jobs_json(jobs_cli, "--no-refresh")[late]["state"] == "running"


def test_high_priority_preempts_a_preemptible_low_job_which_is_requeued(jobs_cli) -> None:
    long = ["--", PY, "-c", "import time; time.sleep(30)"]
    low = ["--priority", "low", "--preemptible", "--requeue", "--grace", "1"]
    victims = [submit(jobs_cli, "-l", L40S, "submit", *low, "--profile", "gpu", *long)]
    others = [submit(jobs_cli, "-l", L40S, "submit", "--profile", "gpu", *long) for _ in range(3)]
    boss = submit(jobs_cli, "-l", L40S, "submit", "--priority", "high", "--profile", "gpu", *long)
    states = jobs_json(jobs_cli, "--no-refresh")
    assert states[boss]["state"] == "running"
    assert states[victims[0]]["state"] == "queued"  # requeued: it asked to be
    assert "preempted by " + boss in states[victims[0]]["reason"]
    assert all(states[j]["state"] == "running" for j in others)  # not preemptible
    # A normal job does not preempt the (non-preemptible) normal ones: it waits.
    waits = jobs_cli("-l", L40S, "submit", "--profile", "gpu", *long)
    assert "queued" in waits.stderr
    history = jobs_cli("-q", "ledger", "show", "--op", "job", "-o", "json").json()
    marks = [r for r in history if r["data"].get("preempt")]
    assert marks and marks[0]["data"]["id"] == victims[0]


def test_impossible_and_malformed_requests(jobs_cli) -> None:
    never = jobs_cli("-q", "submit", "--gpus", "100", "--same-node", "--", "true")
    assert never.code == 5 and "never" in never.stderr and "Traceback" not in never.stderr
    huge = jobs_cli("-q", "-o", "json", "submit", "--mem", "4TB", "--dry-run", "--", "true")
    assert huge.code == 5 and huge.json()["code"] == "no-match", huge.stdout
    assert jobs_json(jobs_cli) == {}
    for args in (
        ["--priority", "urgent", "--", "true"],
        ["--"],
        ["--env", "API_TOKEN=x", "--", "true"],
        ["--env", "NOEQUALS", "--", "true"],
        ["--mem", "lots", "--", "true"],
        ["--vendor", "intel", "--", "true"],
    ):
        run = jobs_cli("-q", "submit", *args)
        assert run.code == 2, (args, run.stderr)
        assert "Traceback" not in run.stderr


def test_cancel_of_a_queued_job_ends_its_waiting_submitter(jobs_cli) -> None:
    long = ["--", PY, "-c", "import time; time.sleep(30)"]
    first = [submit(jobs_cli, "-l", L40S, "submit", "--profile", "gpu", *long) for _ in range(4)]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))},
        "HOME": str(Path(jobs_cli.tmp) / "home"),
        "GPUPOOL_SIM_DIR": str(jobs_cli.sim_dir),
    }
    args = ["-l", L40S, "submit", "--profile", "gpu", "--name", "late", "--wait", *long]
    waiter = subprocess.Popen(
        [PY, "-m", "gpupoolctl.cli.main", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=jobs_cli.cwd,
    )
    try:
        late = None
        for _ in range(100):  # until the waiter has queued its job (it then follows it)
            named = [j for j in jobs_json(jobs_cli, "--no-refresh").values() if j["name"]]
            if named:
                late = named[0]["id"]
                break
            assert waiter.poll() is None, waiter.communicate()
        assert late is not None
        cancelled = jobs_cli("-q", "cancel", late)
        assert cancelled.code == 0, cancelled.stderr
        _, stderr = waiter.communicate(timeout=60)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 1 and f"{late}: cancelled" in stderr, stderr
    assert "Traceback" not in stderr
    # A card comes free: the cancelled job is not what starts on it, nothing ever does.
    assert jobs_cli("-q", "cancel", first[0], "--grace", "1").code == 0
    sched = jobs_cli("-q", "schedule", "-o", "json")
    assert sched.code == 0 and sched.json() == [], sched.stdout
    job = jobs_json(jobs_cli, "--no-refresh")[late]
    assert job["state"] == "cancelled" and job["host"] is None and job["exit_code"] is None
    assert len(held(jobs_cli)) == 3


def test_wait_shows_the_jobs_stderr_on_ours(jobs_cli) -> None:
    code = "import sys; print('out'); print('Traceback: boom', file=sys.stderr); sys.exit(2)"
    run = jobs_cli("-q", "submit", "--mem", "10G", "--wait", "--", PY, "-c", code)
    assert run.code == 2
    assert run.stdout == "out\n"
    assert "Traceback: boom\n" in run.stderr


def test_a_command_line_that_is_not_utf8_is_one_line_and_nothing_is_recorded(jobs_cli) -> None:
    """A byte that is not UTF-8 (0xff) in the command or the name reached the journal's
    encoder as a lone surrogate and ended in a traceback; now exit 2, one line naming the
    field, and the ledger is as it was."""
    for args in (("--", "sleep", "\udcff"), ("--name", "a\udcffb", "--", "sleep", "1")):
        run = jobs_cli("submit", "--mem", "10G", *args)
        assert run.code == 2, (run.code, run.stderr)
        assert "Traceback" not in run.stderr
        line = run.stderr.strip().splitlines()[-1]
        assert len(run.stderr.strip().splitlines()) <= 2, run.stderr  # notice + error
        assert "is not valid UTF-8 text" in line
        assert ("job.argv[1]" if args[0] == "--" else "--name") in line
    history = jobs_cli("-o", "json", "ledger", "show").json()
    assert {r["op"] for r in history} <= {"slices"}  # submit's refresh of the pool, no job
    assert jobs_cli("ledger", "verify").code == 0
    assert jobs_cli("-q", "submit", "--mem", "10G", "--", "true").code == 0
