"""Ownership end to end on the bundled simulated pool, shared by real users (their own
uids, one ledger in a folder their group shares): bob may not release, cancel or drain
--now what alice holds, unless the pool policy makes him a pool admin; and saying he is
someone else (LOGNAME, USER) changes nothing."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from tests.users import ALICE, BOB

PY = sys.executable
L40S = "dxb-l40s-01"  # four whole cards, no MIG


def _alice_holds(cli, env: dict[str, str] | None = None) -> tuple[str, str]:
    """Alice's allocation and her job running on the L40S node."""
    held = cli("-q", "alloc", "--profile", "1g.10gb", "-o", "json", user=ALICE, extra_env=env)
    assert held.code == 0, held.stderr
    job = cli(
        "-q", "submit", "--host", L40S, "--", PY, "-c", "import time; time.sleep(30)",
        user=ALICE, extra_env=env,
    )  # fmt: skip
    assert job.code == 0, job.stderr
    return held.json()["id"], job.stdout.strip()


def _one_line_refusal(run: Any, what: str) -> None:
    assert run.code == 1, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr
    (line,) = run.stderr.strip().splitlines()
    assert what in line and "or a pool admin may" in line, line


def test_another_user_may_not_release_cancel_or_drain_now_what_alice_holds(shared_cli) -> None:
    alloc_id, job_id = _alice_holds(shared_cli)
    release = shared_cli("-q", "release", alloc_id, user=BOB)
    _one_line_refusal(release, f"release {alloc_id}: it is {ALICE}'s allocation")
    cancel = shared_cli("-q", "cancel", job_id, "--grace", "0", user=BOB)
    _one_line_refusal(cancel, f"cancel {job_id}: it is {ALICE}'s job")
    drain = shared_cli("-q", "drain", L40S, "--reason", "PSU", "--now", user=BOB)
    _one_line_refusal(drain, f"it would stop other users' jobs: {job_id} ({ALICE}'s)")

    jobs = shared_cli("-q", "jobs", "-o", "json", user=ALICE).json()
    assert [(j["id"], j["state"]) for j in jobs] == [(job_id, "running")]
    records = shared_cli("-q", "ledger", "show", "-o", "json").json()
    # A refusal changes nothing: not even the drain that --now came with is recorded.
    assert [r["op"] for r in records if r["op"] in ("release", "drain")] == []
    assert not any(r["data"].get("cancel") or r["data"].get("preempt") for r in records)
    assert shared_cli("-q", "drain", "-o", "json").json() == []


def test_a_pool_admin_may_and_the_ledger_says_so(shared_cli) -> None:
    policy = shared_cli.tmp / "pool.yaml"
    policy.write_text(f"version: 1\nadmins: [{BOB}]\n")
    admin = {"GPUPOOL_POLICY": str(policy)}
    alloc_id, job_id = _alice_holds(shared_cli)
    assert shared_cli("-q", "release", alloc_id, user=BOB, extra_env=admin).code == 0
    cancel = shared_cli("-q", "cancel", job_id, "--grace", "0", user=BOB, extra_env=admin)
    assert cancel.code == 0, cancel.stderr
    records = shared_cli("-q", "ledger", "show", "-o", "json").json()
    (release,) = [r for r in records if r["op"] == "release" and r["data"]["id"] == alloc_id]
    assert release["data"] == {"id": alloc_id, "as_admin": True}
    assert release["actor"].startswith(f"{BOB}@")
    (mark,) = [r for r in records if r["op"] == "job" and r["data"].get("cancel")]
    assert mark["data"]["cancel"]["as_admin"] is True and mark["actor"].startswith(f"{BOB}@")


@pytest.mark.parametrize("claimed", ["root", ALICE])
def test_saying_you_are_someone_else_changes_nothing(shared_cli, claimed: str) -> None:
    # LOGNAME and USER are the user's to set: who acts is the uid's name, for the pool
    # admins check (root always is one), the owner check and every record's actor.
    claims = {"LOGNAME": claimed, "USER": claimed}
    alloc_id, job_id = _alice_holds(shared_cli, claims)
    cancel = shared_cli("-q", "cancel", job_id, "--grace", "0", user=BOB, extra_env=claims)
    _one_line_refusal(cancel, f"cancel {job_id}: it is {ALICE}'s job")
    release = shared_cli("-q", "release", alloc_id, user=BOB, extra_env=claims)
    _one_line_refusal(release, f"release {alloc_id}: it is {ALICE}'s allocation")
    held = shared_cli(
        "-q", "alloc", "--profile", "1g.10gb", "-o", "json", user=BOB, extra_env=claims
    )
    assert held.code == 0, held.stderr
    assert held.json()["owner"] == BOB

    records = shared_cli("-q", "ledger", "show", "-o", "json").json()
    actors = {r["data"]["id"]: r["actor"].split("@")[0] for r in records if r["op"] == "alloc"}
    assert actors.pop(held.json()["id"]) == BOB
    assert alloc_id in actors and set(actors.values()) == {ALICE}  # hers, and her job's
    (submitted,) = [r for r in records if r["op"] == "job" and "owner" in r["data"]]
    assert submitted["actor"].startswith(f"{ALICE}@") and submitted["data"]["owner"] == ALICE
    assert not [r for r in records if r["op"] == "release" or r["data"].get("cancel")]
    jobs = shared_cli("-q", "jobs", "-o", "json").json()
    assert [(j["id"], j["state"], j["owner"]) for j in jobs] == [(job_id, "running", ALICE)]
