"""Ownership end to end on the bundled simulated pool: bob may not release, cancel or
drain --now what alice holds, unless the pool policy makes him a pool admin."""

from __future__ import annotations

import sys
from typing import Any

PY = sys.executable
L40S = "dxb-l40s-01"  # four whole cards, no MIG
ALICE = {"USER": "alice", "LOGNAME": "alice"}
BOB = {"USER": "bob", "LOGNAME": "bob"}


def _alice_holds(cli) -> tuple[str, str]:
    """Alice's allocation and her job running on the L40S node."""
    held = cli("-q", "alloc", "--profile", "1g.10gb", "-o", "json", extra_env=ALICE)
    assert held.code == 0, held.stderr
    job = cli(
        "-q", "submit", "--host", L40S, "--", PY, "-c", "import time; time.sleep(30)",
        extra_env=ALICE,
    )  # fmt: skip
    assert job.code == 0, job.stderr
    return held.json()["id"], job.stdout.strip()


def _one_line_refusal(run: Any, what: str) -> None:
    assert run.code == 1, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert what in line and "or a pool admin may" in line, line


def test_another_user_may_not_release_cancel_or_drain_now_what_alice_holds(jobs_cli) -> None:
    alloc_id, job_id = _alice_holds(jobs_cli)
    release = jobs_cli("-q", "release", alloc_id, extra_env=BOB)
    _one_line_refusal(release, f"release {alloc_id}: it is alice's allocation")
    cancel = jobs_cli("-q", "cancel", job_id, "--grace", "0", extra_env=BOB)
    _one_line_refusal(cancel, f"cancel {job_id}: it is alice's job")
    drain = jobs_cli("-q", "drain", L40S, "--reason", "PSU", "--now", extra_env=BOB)
    _one_line_refusal(drain, f"it would stop other users' jobs: {job_id} (alice's)")

    jobs = jobs_cli("-q", "jobs", "-o", "json", extra_env=ALICE).json()
    assert [(j["id"], j["state"]) for j in jobs] == [(job_id, "running")]
    records = jobs_cli("-q", "ledger", "show", "-o", "json").json()
    # A refusal changes nothing: not even the drain that --now came with is recorded.
    assert [r["op"] for r in records if r["op"] in ("release", "drain")] == []
    assert not any(r["data"].get("cancel") or r["data"].get("preempt") for r in records)
    assert jobs_cli("-q", "drain", "-o", "json").json() == []


def test_a_pool_admin_may_and_the_ledger_says_so(jobs_cli) -> None:
    policy = jobs_cli.tmp / "pool.yaml"
    policy.write_text("version: 1\nadmins: [bob]\n")
    admin = {**BOB, "GPUPOOL_POLICY": str(policy)}
    alloc_id, job_id = _alice_holds(jobs_cli)
    assert jobs_cli("-q", "release", alloc_id, extra_env=admin).code == 0
    cancel = jobs_cli("-q", "cancel", job_id, "--grace", "0", extra_env=admin)
    assert cancel.code == 0, cancel.stderr
    records = jobs_cli("-q", "ledger", "show", "-o", "json").json()
    (release,) = [r for r in records if r["op"] == "release" and r["data"]["id"] == alloc_id]
    assert release["data"] == {"id": alloc_id, "as_admin": True}
    assert release["actor"].startswith("bob@")
    (mark,) = [r for r in records if r["op"] == "job" and r["data"].get("cancel")]
    assert mark["data"]["cancel"]["as_admin"] is True and mark["actor"].startswith("bob@")
