"""A launch its node does not carry out for the node's sake, end to end on the bundled
simulated pool through the real CLI: a node that is down (no answer) or a device the node no
longer has (its cards re-cut behind this ledger). The job is requeued, not failed, and not
counted as a restart; it runs where placement puts it next. A node that gave no answer takes
no work until it answers again (a pass's poll, or its facts)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

L40S = "dxb-l40s-01"  # four L40S 48 GB cards: the best fit for 44 GiB
LAYOUTS = str(Path(__file__).resolve().parents[2] / "playbooks" / "layouts.yaml")


def jobs_by_id(cli) -> dict[str, dict[str, Any]]:
    run = cli("-q", "jobs", "--all", "-o", "json")
    assert run.code in (0, 3), run.stderr
    return {j["id"]: j for j in run.json()}


def host_records(cli) -> list[tuple[str, str]]:
    run = cli("-q", "ledger", "show", "--op", "host", "-o", "json")
    assert run.code == 0, run.stderr
    return [(r["data"]["host"], r["data"]["state"]) for r in run.json()]


def test_a_launch_that_gets_no_answer_requeues_and_runs_elsewhere(jobs_cli) -> None:
    assert jobs_cli("-q", "pool", "--summary").code == 0  # the ledger knows the slices
    assert jobs_cli("-q", "sim", "fault", L40S, "node-down").code == 0

    first = jobs_cli("-q", "submit", "--mem", "44GiB", "--max-restarts", "3", "--", "sleep", "60")
    assert first.code == 3, first.stderr  # it runs; the host that did not answer is named
    assert f"{L40S}: unreachable" in first.stderr and "Traceback" not in first.stderr
    job_id = first.stdout.strip()
    job = jobs_by_id(jobs_cli)[job_id]
    assert job["state"] == "running" and job["host"] != L40S, job
    assert job["restarts"] == "0/3", job  # the job never ran: no restart counted
    assert (L40S, "silent") in host_records(jobs_cli)

    # Placement leaves the silent node alone: work that only it could hold waits for it.
    only_there = jobs_cli("-q", "submit", "--mem", "44GiB", "--host", L40S, "--", "sleep", "60")
    assert only_there.code == 0, only_there.stderr
    waiting = only_there.stdout.strip()
    assert jobs_by_id(jobs_cli)[waiting]["state"] == "queued"
    assert host_records(jobs_cli).count((L40S, "silent")) == 1  # recorded once, not per pass

    # Back: the next pass's poll hears it, and the work waiting for it starts there.
    assert jobs_cli("-q", "sim", "fault", L40S, "--clear").code == 0
    listed = jobs_by_id(jobs_cli)
    assert host_records(jobs_cli)[-1] == (L40S, "answering")
    listed = jobs_by_id(jobs_cli)
    assert listed[waiting]["state"] == "running" and listed[waiting]["host"] == L40S, listed
    assert listed[job_id]["state"] == "running", listed


def test_a_node_that_did_not_answer_is_placeable_again_once_its_facts_are_read(
    jobs_cli,
) -> None:
    assert jobs_cli("-q", "pool", "--summary").code == 0
    assert jobs_cli("-q", "sim", "fault", L40S, "node-down").code == 0
    queued = jobs_cli("-q", "submit", "--mem", "44GiB", "--host", L40S, "--", "sleep", "60")
    assert queued.code == 3, queued.stderr  # its launch got no answer: requeued, it waits
    job_id = queued.stdout.strip()
    assert jobs_cli("-q", "sim", "fault", L40S, "--clear").code == 0
    assert jobs_cli("-q", "-l", L40S, "pool").code == 0  # reads its facts: it answers
    assert host_records(jobs_cli)[-1] == (L40S, "answering")
    second = jobs_cli("-q", "submit", "--mem", "44GiB", "--host", L40S, "--", "sleep", "60")
    assert second.code == 0, second.stderr
    listed = jobs_by_id(jobs_cli)
    for ran in (job_id, second.stdout.strip()):
        assert listed[ran]["state"] == "running" and listed[ran]["host"] == L40S, listed


def test_a_device_the_node_no_longer_has_is_not_launched_on(jobs_cli) -> None:
    """sg-dgx02's MIG instances are re-made behind this ledger (an apply recorded in another
    ledger stands for an interrupted one): the job placed on a gone instance is refused by
    the node, requeued, the node's slices read again, and it runs on an instance that is
    there."""
    node = "sg-dgx02"
    assert jobs_cli("-q", "-l", node, "pool", "--summary").code == 0
    elsewhere = str(jobs_cli.tmp / "elsewhere.jsonl")
    for layout in ("training", "inference"):  # every MIG instance destroyed, then new ones
        applied = jobs_cli(
            "-q", "--ledger", elsewhere, "-l", node, "partition", "apply", "-f", LAYOUTS,
            "-c", layout, "--yes",
        )  # fmt: skip
        assert applied.code == 0, applied.stderr
    submitted = jobs_cli("-q", "-l", node, "submit", "--profile", "1g.10gb", "--", "sleep", "60")
    assert submitted.code == 0, submitted.stderr
    job = jobs_by_id(jobs_cli)[submitted.stdout.strip()]
    assert job["state"] == "running" and job["restarts"] is None, job
    facts = jobs_cli("-q", "-l", node, "inventory", "-o", "json")
    assert facts.code == 0, facts.stderr
    present = {
        ci["uuid"]
        for host in facts.json()["hosts"]
        for gpu in host["facts"]["gpus"]
        for gi in (gpu.get("mig") or {}).get("instances") or []
        for ci in gi["compute_instances"]
    }
    allocs = jobs_cli("-q", "ledger", "show", "--op", "alloc", "-o", "json")
    assert allocs.code == 0, allocs.stderr
    held = [r["data"]["uuids"] for r in allocs.json() if r["data"]["request"]["job"] == job["id"]]
    assert len(held) == 2, held  # the refused try's hold (released) and the running one's
    assert held[0][0] not in present and set(held[-1]) <= present, (held, sorted(present)[:3])
    # The ledger's slices of the node are what it has now.
    pool = jobs_cli("-q", "-l", node, "pool", "--no-refresh", "-o", "json")
    assert pool.code == 0, pool.stderr
    recorded = {s["uuid"] for n in pool.json()["nodes"] for s in n["slices"] if s["kind"] == "mig"}
    assert recorded == present
