"""drain / undrain end to end on the bundled simulated pool: drained hosts and cards take
no new work (submit, alloc, elastic re-cuts), what runs there goes on, undrain lifts it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

PY = sys.executable
L40S = "dxb-l40s-01"  # four whole cards, no MIG
SLEEP = ["--", PY, "-c", "import time; time.sleep(30)"]


def jobs_of(cli) -> dict[str, dict[str, Any]]:
    run = cli("-q", "jobs", "--all", "-o", "json")
    assert run.code == 0, run.stderr
    return {j["id"]: j for j in run.json()}


def test_drained_cards_and_hosts_take_no_new_work_until_undrained(jobs_cli) -> None:
    run = jobs_cli("-q", "drain", *(f"{L40S}/gpu{n}" for n in range(3)), "--reason", "fans")
    assert run.code == 0, run.stderr
    assert run.stdout.splitlines()[0] == f"drained {L40S}/gpu0: fans"
    listed = jobs_cli("-q", "drain", "-o", "json").json()
    assert [d["target"] for d in listed] == [f"{L40S}/gpu{n}" for n in range(3)]
    assert all(d["reason"] == "fans" and d["source"] == "admin" for d in listed)

    first = jobs_cli("-q", "submit", "--host", L40S, "--profile", "gpu", *SLEEP)
    assert first.code == 0, first.stderr
    running = jobs_of(jobs_cli)[first.stdout.strip()]
    assert running["state"] == "running" and running["slice"] == f"{L40S}/gpu3"
    pool = jobs_cli("-q", "pool", "--host", L40S, "--no-refresh", "-o", "json").json()
    states = {s["slice"]: s["state"] for n in pool["nodes"] for s in n["slices"]}
    assert states == {**{f"{L40S}/gpu{n}": "drained" for n in range(3)}, f"{L40S}/gpu3": "held"}

    # The whole host drained: the running job goes on, new work waits, alloc finds nothing.
    assert jobs_cli("-q", "drain", L40S, "--reason", "PSU swap").code == 0
    second = jobs_cli("-q", "submit", "--host", L40S, "--profile", "gpu", *SLEEP)
    assert second.code == 0, second.stderr
    waiting = jobs_of(jobs_cli)[second.stdout.strip()]
    assert waiting["state"] == "queued"
    assert jobs_of(jobs_cli)[first.stdout.strip()]["state"] == "running"
    refused = jobs_cli("-q", "alloc", "--host", L40S)
    assert refused.code == 5, refused.stderr

    assert jobs_cli("-q", "undrain", L40S).code == 0
    assert jobs_cli("-q", "undrain", L40S).code == 1  # not drained any more: said, exit 1
    run = jobs_cli("-q", "schedule", "-o", "json")
    assert run.code == 0, run.stderr
    # The card drains are still there: the host's only free cards are drained ones.
    assert jobs_of(jobs_cli)[second.stdout.strip()]["state"] == "queued"
    assert jobs_cli("-q", "undrain", f"{L40S}/gpu1").code == 0
    assert jobs_cli("-q", "schedule").code == 0
    started = jobs_of(jobs_cli)[second.stdout.strip()]
    assert started["state"] == "running" and started["slice"] == f"{L40S}/gpu1"


def test_a_drained_card_is_never_recut_and_bad_drains_are_one_line(
    jobs_cli, tmp_path: Path
) -> None:
    policy = tmp_path / "pool.yaml"
    policy.write_text(
        "version: 1\nelastic:\n  min-idle: 0s\n  batch-window: 0s\n  rules:\n"
        "    - hosts: sg-dgx01\n"
    )
    assert jobs_cli("-q", "drain", "sg-dgx01", "--reason", "firmware").code == 0
    run = jobs_cli("-q", "--pool-policy", str(policy), "submit", "--host", "sg-dgx01",
                   "--mem", "10G", *SLEEP)  # fmt: skip
    assert run.code == 0, run.stderr
    listed = jobs_cli("-q", "--pool-policy", str(policy), "jobs", "-o", "json").json()
    assert [j["state"] for j in listed] == ["queued"]
    shown = jobs_cli("-q", "ledger", "show", "--op", "reshape", "-o", "json")
    assert shown.code == 0 and shown.json() == []  # nothing re-cut on a drained host

    for args, code, text in (
        (["drain", "nosuch", "--reason", "x"], 1, "no host or card 'nosuch'"),
        (["drain", "sg-dgx01"], 2, "--reason"),
        (["drain", "sg-dgx01", "--reason", "  "], 2, "--reason must not be empty"),
        (["undrain", "sg-dgx02"], 1, "'sg-dgx02' is not drained"),
    ):
        bad = jobs_cli("-q", *args)
        lines = [line for line in bad.stderr.splitlines() if line.strip()]
        assert bad.code == code and len(lines) == 1 and text in lines[0], (args, bad.stderr)


def test_drain_now_stops_what_runs_there_requeueing_the_jobs_that_asked(jobs_cli) -> None:
    again = jobs_cli("-q", "submit", "--host", L40S, "--profile", "gpu", "--requeue", *SLEEP)
    once = jobs_cli("-q", "submit", "--host", L40S, "--profile", "gpu", *SLEEP)
    elsewhere = jobs_cli("-q", "submit", "--host", "dxb-a100-01", "--profile", "gpu", *SLEEP)
    assert again.code == once.code == elsewhere.code == 0
    ids = [r.stdout.strip() for r in (again, once, elsewhere)]
    assert [jobs_of(jobs_cli)[i]["state"] for i in ids] == ["running"] * 3

    # The card of one of them drained first, on its own: draining the host --now stops it too.
    card = jobs_of(jobs_cli)[ids[1]]["slice"]
    assert jobs_cli("-q", "drain", card, "--reason", "fan").code == 0
    run = jobs_cli("drain", L40S, "--reason", "PSU swap", "--now", "--grace", "1")
    assert run.code == 0, run.stderr
    jobs = jobs_of(jobs_cli)
    assert jobs[ids[0]]["state"] == "queued"  # asked for --requeue; its host is drained
    assert "drain of dxb-l40s-01" in jobs[ids[0]]["reason"]
    assert jobs[ids[1]]["state"] == "cancelled" and jobs[ids[1]]["exit_code"] == 143
    assert jobs[ids[2]]["state"] == "running"  # another host: untouched
    assert jobs_cli("-q", "drain", "--now").code == 2  # --now needs a target
