"""What a new user hits first, through the real command line on the bundled pool: a job's
slice is never handed out twice, a waiting submit keeps the pool moving and says why it
waits, and errors are never silenced by -q."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

PY = sys.executable
SLEEP = ["--", PY, "-c", "import time; time.sleep(60)"]


def submit(cli, *args: str) -> str:
    run = cli("-q", "submit", *args)
    assert run.code == 0, run.stderr
    return run.stdout.strip()


def alloc_of(cli, job_id: str) -> str:
    shown = cli("-q", "ledger", "show", "--op", "job", "-o", "json")
    assert shown.code == 0, shown.stderr
    placed = [r["data"].get("alloc") for r in shown.json() if r["data"]["id"] == job_id]
    placed = [a for a in placed if a]
    assert placed, shown.stdout
    return placed[-1]


def popen(cli, *args: str) -> subprocess.Popen:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))},
        "HOME": str(Path(cli.tmp) / "home"),
        "GPUPOOL_SIM_DIR": str(cli.sim_dir),
    }
    return subprocess.Popen(
        [PY, "-m", "gpupoolctl.cli.main", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cli.cwd,
    )


def test_release_of_a_running_jobs_allocation_is_refused_and_the_slice_stays_single(jobs_cli):
    job = submit(jobs_cli, "--profile", "1g.10gb", *SLEEP)
    alloc = alloc_of(jobs_cli, job)
    refused = jobs_cli("-q", "release", alloc)
    assert refused.code == 1
    assert f"job {job}" in refused.stderr and f"cancel {job}" in refused.stderr
    assert "Traceback" not in refused.stderr
    # the next submit of the same size gets another slice
    second = submit(jobs_cli, "--profile", "1g.10gb", *SLEEP)
    rows = {j["id"]: j for j in jobs_cli("-q", "jobs", "-o", "json").json()}
    assert rows[job]["slice"] != rows[second]["slice"]
    for each in (job, second):
        assert jobs_cli("-q", "cancel", each, "--grace", "0").code == 0
    verify = jobs_cli("-q", "ledger", "verify")
    assert verify.code == 0, verify.stdout


def test_submit_wait_on_a_queued_job_reaps_the_blockers_and_says_why_it_waits(jobs_cli):
    gate = Path(jobs_cli.tmp) / "gate"
    # Blockers that end when the test says so, not after a time the machine's load decides.
    hold = f"import os, time\nwhile not os.path.exists({str(gate)!r}): time.sleep(0.05)"
    for _ in range(2):  # the pool's two 3g.40gb slices
        submit(jobs_cli, "--profile", "3g.40gb", "--", PY, "-c", hold)
    waiter = popen(jobs_cli, "submit", "--profile", "3g.40gb", "--wait", "--", "echo", "hi")
    try:
        deadline = time.monotonic() + 60
        queued = []
        while not queued and time.monotonic() < deadline:
            rows = jobs_cli("-q", "jobs", "--no-refresh", "-o", "json").json()
            queued = [j["id"] for j in rows if j["state"] == "queued"]
            assert waiter.poll() is None, waiter.communicate()
        assert queued
        gate.write_text("")  # the blockers end; nobody else reaps them but the waiter
        stdout, stderr = waiter.communicate(timeout=60)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 0, stderr
    assert stdout == "hi\n"
    said = [line for line in stderr.splitlines() if ": queued: " in line]
    assert said and "3g.40gb" in said[0], stderr
    assert "done, exit code 0" in stderr


def test_quiet_never_hides_a_failed_launch(jobs_cli):
    run = jobs_cli("-q", "submit", "--profile", "1g.10gb", "--", "./eval.sh")
    assert run.code == 1
    assert run.stdout.strip().startswith("j-")
    assert "cannot run './eval.sh'" in run.stderr, run.stderr
    waited = jobs_cli("-q", "submit", "--profile", "1g.10gb", "--wait", "--", "./eval.sh")
    assert waited.code == 1
    assert "cannot run './eval.sh'" in waited.stderr
    assert "exit code None" not in waited.stderr


def test_ctrl_c_in_submit_wait_leaves_the_job_running_and_says_how_to_cancel(jobs_cli):
    waiter = popen(jobs_cli, "submit", "--profile", "1g.10gb", "--wait", *SLEEP)
    try:
        deadline = time.monotonic() + 60
        job = None
        while job is None and time.monotonic() < deadline:
            rows = jobs_cli("-q", "jobs", "--no-refresh", "-o", "json").json()
            job = next((j["id"] for j in rows if j["state"] == "running"), None)
            assert waiter.poll() is None, waiter.communicate()
        assert job is not None
        waiter.send_signal(signal.SIGINT)
        _, stderr = waiter.communicate(timeout=30)
    finally:
        if waiter.poll() is None:
            waiter.kill()
            waiter.communicate()
    assert waiter.returncode == 130, stderr
    assert f"gpupoolctl cancel {job}" in stderr and "Traceback" not in stderr
    rows = {j["id"]: j for j in jobs_cli("-q", "jobs", "-o", "json").json()}
    assert rows[job]["state"] == "running"


def test_alloc_on_a_fresh_ledger_discovers_the_pools_slices(cli):
    run = cli("-q", "alloc", "--profile", "1g.10gb")
    assert run.code == 0, run.stderr
    assert run.stdout.strip().startswith("a-")
    shown = cli("-q", "pool", "--no-refresh", "-o", "json").json()
    held = [s for n in shown["nodes"] for s in n["slices"] if s["state"] == "held"]
    assert [s["profile"] for s in held] == ["1g.10gb"]


def test_sim_reset_tells_the_ledger_so_alloc_never_hands_out_a_slice_that_is_gone(cli):
    assert cli("-q", "partition", "reset", "--yes", "-l", "sg-dgx02").code == 0
    whole = cli("-q", "alloc", "--profile", "gpu", "--host", "sg-dgx02", "-g", "8")
    assert whole.code == 0, whole.stderr  # every card of the node is whole now
    assert cli("-q", "release", whole.stdout.strip()).code == 0
    reset = cli("-q", "sim", "reset")
    assert reset.code == 0, reset.stderr
    # gpu6 and gpu7 of sg-dgx02 are MIG again: eight whole cards are no longer there
    again = cli("-q", "alloc", "--profile", "gpu", "--host", "sg-dgx02", "-g", "8")
    assert again.code == 5, again.stdout
    shown = cli("-q", "pool", "--no-refresh", "-l", "sg-dgx02", "-o", "json").json()
    profiles = {s["profile"] for n in shown["nodes"] for s in n["slices"]}
    assert "1g.10gb" in profiles
    assert cli("-q", "ledger", "verify").code == 0


def test_verify_of_a_ledger_that_is_not_there_is_an_error_not_ok(cli):
    missing = Path(cli.tmp) / "nowhere" / "l.jsonl"
    run = cli("-q", "--ledger", str(missing), "ledger", "verify")
    assert run.code == 1 and "does not exist" in run.stderr and "ok" not in run.stdout
    fresh = cli("-q", "ledger", "verify", "-o", "json")  # the default one, not written yet
    assert fresh.code == 0 and fresh.json()["exists"] is False


@pytest.mark.parametrize("command", [("jobs",), ("inventory",), ("pool",), ("alloc",)])
def test_an_unusable_state_folder_is_one_local_error(cli, command):
    blocker = Path(cli.tmp) / "a-file"
    blocker.write_text("")
    env = {"XDG_STATE_HOME": str(blocker / "state"), "GPUPOOL_SIM_DIR": ""}
    run = cli(*command, extra_env=env)
    assert run.code == 1, (run.stdout, run.stderr)
    errors = [line for line in run.stderr.splitlines() if "error" in line or "warning" in line]
    assert len(errors) == 1, run.stderr
    assert str(blocker) in errors[0] and "Not a directory" in errors[0]
    assert "Traceback" not in run.stderr


@pytest.mark.parametrize(
    ("args", "env", "named"),
    [
        (("-i", ""), {}, "--inventory"),
        (("--ledger", ""), {}, "--ledger"),
        (("-l", ""), {}, "--limit"),
        ((), {"GPUPOOL_INVENTORY": ""}, "GPUPOOL_INVENTORY"),
        ((), {"GPUPOOL_LEDGER": " "}, "GPUPOOL_LEDGER"),
    ],
)
def test_empty_global_values_are_usage_errors(cli, args, env, named):
    run = cli(*args, "jobs", "--no-refresh", extra_env=env)
    assert run.code == 2, (run.stdout, run.stderr)
    assert named in run.stderr and "empty" in run.stderr
    assert run.stdout == ""


L40S = "dxb-l40s-01"  # four whole cards, no MIG: easy to fill


def test_jobs_says_why_a_job_waits_and_that_it_was_preempted(jobs_cli):
    low = ["--priority", "low", "--preemptible", "--requeue", "--grace", "0"]
    victim = submit(jobs_cli, "-l", L40S, *low, "--profile", "gpu", *SLEEP)
    for _ in range(3):
        submit(jobs_cli, "-l", L40S, "--profile", "gpu", *SLEEP)
    boss = jobs_cli("-l", L40S, "submit", "--priority", "high", "--profile", "gpu", *SLEEP)
    assert boss.code == 0, boss.stderr
    boss_id = boss.stdout.strip()
    assert f"{boss_id}: preempted {victim} to make room" in boss.stderr
    listed = jobs_cli("-q", "jobs", "-o", "json")
    assert listed.code == 0, listed.stderr
    reason = {j["id"]: j for j in listed.json()}[victim]["reason"]
    assert f"preempted by {boss_id}" in reason and "nothing fits" in reason, reason
    table = jobs_cli("-q", "jobs", "--no-refresh")
    line = next(x for x in table.stdout.splitlines() if x.startswith(victim + " "))
    assert "REASON" in table.stdout.splitlines()[0] and "nothing fits" in line


def test_pool_filters_free_host_and_summary(cli):
    held = cli("-q", "alloc", "--profile", "gpu", "--host", L40S)
    assert held.code == 0, held.stderr
    free = cli("-q", "pool", "--no-refresh", "--free", "--host", "dxb-*", "-o", "json").json()
    hosts = {n["host"] for n in free["nodes"]}
    assert hosts and all(h.startswith("dxb-") for h in hosts)
    slices = [s for n in free["nodes"] for s in n["slices"]]
    assert slices and all(s["state"] == "free" for s in slices)
    l40s = next(n for n in free["nodes"] if n["host"] == L40S)
    assert (l40s["total"], l40s["free"], l40s["held"], len(l40s["slices"])) == (4, 3, 1, 3)
    summary = cli("-q", "pool", "--no-refresh", "--summary")
    lines = summary.stdout.splitlines()
    assert len(lines) == 1 + len(cli("-q", "pool", "--no-refresh", "-o", "json").json()["nodes"])
    assert any(x.startswith(L40S) and "3xgpu" in x for x in lines), summary.stdout
    nowhere = cli("-q", "pool", "--no-refresh", "--host", "nothing-*")
    assert nowhere.code == 1 and "matches no host" in nowhere.stderr


def test_sim_reset_leaves_a_node_with_held_slices_alone_unless_forced(cli):
    held = cli("-q", "alloc", "--profile", "1g.10gb", "--host", "sg-dgx02")
    assert held.code == 0, held.stderr
    alloc = held.stdout.strip()
    refused = cli("-q", "sim", "reset", "-o", "json")
    assert refused.code == 3
    assert f"sg-dgx02: not reset: slices held by {alloc}" in refused.stderr
    outcomes = {h["host"]: h["outcome"] for h in refused.json()["hosts"]}
    assert outcomes["sg-dgx02"] == "refused" and outcomes["sg-dgx01"] == "ok"
    assert cli("-q", "ledger", "verify").code == 0
    forced = cli("-q", "sim", "reset", "--force", "-l", "sg-dgx02")
    assert forced.code == 0, forced.stderr


@pytest.mark.parametrize("command", ["submit", "alloc"])
def test_mem_help_says_what_a_bare_number_and_each_unit_mean(cli, command):
    run = cli(command, "--help", extra_env={"COLUMNS": "400"})
    assert run.code == 0
    assert "a bare number is GB" in run.stdout and "10GiB (binary)" in run.stdout


def test_pool_host_asks_only_the_hosts_it_shows(cli):
    inventory = Path(cli.tmp) / "two.yaml"
    inventory.write_text(
        "all:\n  hosts:\n"
        "    sim-a: {transport: local, sim: l40s-4}\n"
        "    gone-b: {ansible_host: 127.0.0.1, ansible_port: 1}\n"
    )
    shown = cli("-q", "-i", str(inventory), "pool", "--host", "sim-*", "--summary")
    assert shown.code == 0, shown.stderr
    assert "gone-b" not in shown.stderr and "sim-a" in shown.stdout
    everyone = cli("-q", "-i", str(inventory), "pool", "--summary")
    assert everyone.code == 3 and "gone-b" in everyone.stderr


def test_cancel_forget_frees_the_slices_of_a_job_whose_node_is_gone(jobs_cli):
    job = submit(jobs_cli, "-l", L40S, "--profile", "gpu", *SLEEP)
    gone = Path(jobs_cli.tmp) / "gone.yaml"  # the same pool, its L40S node unreachable now
    gone.write_text(f"all:\n  hosts:\n    {L40S}: {{ansible_host: 127.0.0.1, ansible_port: 1}}\n")
    stuck = jobs_cli("-q", "-i", str(gone), "cancel", job, "--grace", "0")
    assert stuck.code == 1 and f"cancel --forget {job}" in stuck.stderr, stuck.stderr
    refused = jobs_cli("-q", "release", alloc_of(jobs_cli, job))
    assert refused.code == 1
    forgot = jobs_cli("-q", "-i", str(gone), "cancel", "--forget", job, "-o", "json")
    assert forgot.code == 0, forgot.stderr
    assert forgot.json()["state"] == "failed" and "forgotten by" in forgot.json()["reason"]
    assert "was not asked" in forgot.stderr  # a warning, even with -q
    # Its slice is released, but the run it may have left there is fenced: that card takes
    # no new work until a pass finds the node answering and kills the run.
    card = f"{L40S}/gpu0"
    shown = jobs_cli("-q", "pool", "--no-refresh", "-l", L40S, "-o", "json").json()
    states = {s["slice"]: (s["state"], s["owner"]) for n in shown["nodes"] for s in n["slices"]}
    assert states.pop(card) == ("blocked", None)
    assert all(state == "free" for state, _ in states.values())
    assert jobs_cli("-q", "ledger", "verify").code == 0
    assert jobs_cli("-q", "schedule").code == 0  # the node answers: the run is killed
    shown = jobs_cli("-q", "pool", "--no-refresh", "-l", L40S, "-o", "json").json()
    assert all(s["state"] == "free" for n in shown["nodes"] for s in n["slices"])
    again = jobs_cli("-q", "cancel", "--forget", job)
    assert again.code == 1 and "already ended" in again.stderr
