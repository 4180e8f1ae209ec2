"""What keeps a slice out of placement, end to end on the bundled simulated pool: a card the
driver reports lost, a card that failed under an admin's drain, a run `cancel --forget` left
behind, processes no hold accounts for, a hold `ledger repair` quarantined; each gets no new
work, `pool` and `top` say why, and a job that waits says how many slices each keeps out."""

from __future__ import annotations

import os
import pwd
import sys
from pathlib import Path
from typing import Any

PY = sys.executable
DGX = "sg-dgx01"  # eight whole H100s
L40S = "dxb-l40s-01"  # four whole L40S cards, no MIG
SLEEP = ["--", PY, "-c", "import time; time.sleep(60)"]


def slices_of(cli, host: str, *refresh: str) -> dict[str, dict[str, Any]]:
    run = cli("-q", "pool", "--host", host, *refresh, "-o", "json")
    assert run.code == 0, run.stderr
    return {s["slice"]: s for n in run.json()["nodes"] for s in n["slices"]}


def jobs_of(cli) -> dict[str, dict[str, Any]]:
    run = cli("-q", "jobs", "--all", "-o", "json")
    assert run.code == 0, run.stderr
    return {j["id"]: j for j in run.json()}


def submit(cli, *args: str, ledger: str | None = None) -> str:
    where = ["--ledger", ledger] if ledger else []
    run = cli("-q", *where, "submit", *args, *SLEEP)
    assert run.code == 0, run.stderr
    return run.stdout.strip()


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_a_lost_card_is_never_placed_is_shown_lost_and_health_drains_it(jobs_cli) -> None:
    assert slices_of(jobs_cli, DGX)[f"{DGX}/gpu3"]["state"] == "free"  # the ledger knows it
    assert jobs_cli("-q", "sim", "fault", f"{DGX}/gpu3", "lost").code == 0

    shown = slices_of(jobs_cli, DGX)[f"{DGX}/gpu3"]
    assert shown["state"] == "lost" and "reports the card lost" in shown["why"], shown
    assert shown["memory_mib"] > 0  # what the card was, not the 0 MiB a lost card reads
    job = submit(jobs_cli, "--gpus", "1", "--host", DGX)
    assert jobs_of(jobs_cli)[job]["slice"] == f"{DGX}/gpu0"  # not the "smallest" lost card

    top = jobs_cli("-q", "top", "--once", "-o", "json")
    assert top.code == 0, top.stderr
    frame = top.json()
    assert frame["totals"]["lost"] == 1, frame["totals"]
    (gpu3,) = [g for s in frame["sites"] for n in s["nodes"] for g in n["gpus"]
               if g["key"] == f"{DGX}/gpu3"]  # fmt: skip
    assert gpu3["state"] == "lost"

    drained = jobs_cli("-q", "health", "-l", DGX, "--drain", "-o", "json")
    assert drained.code == 4, drained.stderr
    assert [d["target"] for d in drained.json()["drains"]["drained"]] == [f"{DGX}/gpu3"]


def test_a_card_that_fails_under_an_admin_drain_stays_drained_after_undrain(jobs_cli) -> None:
    card = f"{L40S}/gpu0"
    assert jobs_cli("-q", "drain", card, "--reason", "fan noise").code == 0
    assert jobs_cli("-q", "sim", "fault", card, "xid=79").code == 0
    assert jobs_cli("-q", "health", "-l", L40S, "--drain").code == 4
    listed = jobs_cli("-q", "drain", "-o", "json").json()
    assert sorted((d["target"], d["source"]) for d in listed) == [(card, "admin"), (card, "health")]

    undrained = jobs_cli("-q", "undrain", card)  # the fan is fixed
    assert undrained.code == 0, undrained.stderr
    assert f"{card} is still drained by health" in undrained.stderr
    assert "XID 79" in undrained.stderr
    job = submit(jobs_cli, "--host", L40S, "--profile", "gpu")
    assert jobs_of(jobs_cli)[job]["slice"] == f"{L40S}/gpu1"  # not the dead card
    shown = slices_of(jobs_cli, L40S, "--no-refresh")[card]
    assert shown["state"] == "drained" and "health check" in shown["why"], shown


def test_a_forgotten_run_takes_its_card_out_until_it_is_killed(jobs_cli) -> None:
    job = submit(jobs_cli, "--host", L40S, "--profile", "gpu")
    (pid,) = jobs_of(jobs_cli)[job]["pids"]
    assert jobs_cli("-q", "sim", "fault", L40S, "node-down").code == 0
    assert jobs_cli("-q", "cancel", job, "--grace", "0").code == 1  # the node cannot say
    forgot = jobs_cli("-q", "cancel", "--forget", job)
    assert forgot.code == 0, forgot.stderr
    assert jobs_cli("-q", "sim", "fault", L40S, "--clear").code == 0  # the node is back
    assert alive(pid)  # nobody asked it to stop

    card = f"{L40S}/gpu0"
    shown = slices_of(jobs_cli, L40S)[card]
    assert shown["state"] == "blocked" and f"a run of {job} may still be there" in shown["why"]
    second = submit(jobs_cli, "--host", L40S, "--profile", "gpu")  # submit asks no fence
    assert jobs_of(jobs_cli)[second]["slice"] == f"{L40S}/gpu1"  # not beside the stale run

    passed = jobs_cli("-q", "schedule", "-o", "json")
    assert passed.code == 0, passed.stderr
    assert not alive(pid)
    assert slices_of(jobs_cli, L40S)[card]["state"] == "free"


def test_processes_no_hold_accounts_for_keep_their_card_out(jobs_cli) -> None:
    # Another ledger on the same pool runs a job there: this ledger does not know it.
    other = str(jobs_cli.tmp / "other.jsonl")
    theirs = submit(jobs_cli, "--host", L40S, "--profile", "gpu", ledger=other)
    card = f"{L40S}/gpu0"
    shown = slices_of(jobs_cli, L40S)[card]
    assert shown["state"] == "blocked", shown
    assert "no hold or job accounts for" in shown["why"] and "pid" in shown["why"]
    mine = submit(jobs_cli, "--host", L40S, "--profile", "gpu")
    assert jobs_of(jobs_cli)[mine]["slice"] == f"{L40S}/gpu1"

    # Once it is gone, a refresh puts the card back to work.
    assert jobs_cli("-q", "--ledger", other, "cancel", theirs, "--grace", "0").code == 0
    assert slices_of(jobs_cli, L40S)[card]["state"] == "free"


def test_a_live_hold_that_ledger_repair_quarantines_stays_out_until_an_admin_releases_it(
    cli, tmp_path: Path
) -> None:
    me = pwd.getpwuid(os.getuid()).pw_name
    policy = tmp_path / "pool.yaml"
    policy.write_text(f"version: 1\nadmins: [{me}]\n")
    env = {"USER": me, "LOGNAME": me, "GPUPOOL_POLICY": str(policy)}
    held = cli("-q", "alloc", "--host", L40S, "--profile", "gpu", "-o", "json", extra_env=env)
    assert held.code == 0, held.stderr
    alloc_id, (card,) = held.json()["id"], held.json()["slices"]
    assert cli("-q", "alloc", "--host", DGX, extra_env=env).code == 0  # a record after it

    journal = tmp_path / "home/.local/state/gpupoolctl/ledger.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    (index,) = [i for i, line in enumerate(lines) if f'"id":"{alloc_id}"'.encode() in line]
    lines[index] = lines[index].replace(b'"owner":"', b'"owner":"x')  # a bit flipped
    journal.write_bytes(b"".join(lines))
    assert cli("-q", "ledger", "verify", extra_env=env).code == 4

    repaired = cli("-q", "ledger", "repair", "-o", "json", extra_env=env)
    assert repaired.code == 0, repaired.stderr
    assert [h["id"] for h in repaired.json()["holds"]] == [alloc_id]
    assert f"quarantined {alloc_id}" in repaired.stderr and card in repaired.stderr

    shown = slices_of(cli, L40S, "--no-refresh")[card]
    assert shown["state"] == "blocked" and "ledger repair" in shown["why"], shown
    again = cli("-q", "alloc", "--host", L40S, "--profile", "gpu", "-o", "json", extra_env=env)
    assert again.code == 0, again.stderr
    assert again.json()["slices"] != [card]  # not handed out a second time

    released = cli("-q", "release", alloc_id, extra_env=env)
    assert released.code == 0, released.stderr
    assert slices_of(cli, L40S, "--no-refresh")[card]["state"] == "free"
    assert cli("-q", "ledger", "verify", extra_env=env).code == 0


def test_a_waiting_job_says_what_keeps_each_matching_slice_out(jobs_cli) -> None:
    assert jobs_cli("-q", "alloc", "--host", L40S, "--profile", "gpu").code == 0  # gpu0
    assert jobs_cli("-q", "drain", f"{L40S}/gpu1", "--reason", "fans").code == 0
    assert jobs_cli("-q", "sim", "fault", f"{L40S}/gpu2", "lost").code == 0
    assert jobs_cli("-q", "sim", "fault", f"{L40S}/gpu3", "xid=79").code == 0
    assert jobs_cli("-q", "health", "-l", L40S, "--drain").code == 4  # gpu2 and gpu3
    assert jobs_cli("-q", "pool", "--host", L40S).code == 0  # reads gpu2 lost

    job = submit(jobs_cli, "--host", L40S, "--profile", "gpu")
    waiting = jobs_of(jobs_cli)[job]
    assert waiting["state"] == "queued"
    assert waiting["reason"].endswith(
        "0 matching slice(s) free of 4: 1 held, 1 on a lost card, "
        "1 failed their health check, 1 drained"
    ), waiting["reason"]
