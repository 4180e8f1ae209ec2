"""Teams end to end on the bundled simulated pool, through the real CLI: two teams share one
DGX node by quotas that change between night and day (a window in Asia/Singapore), crossed
with a fixed clock (GPUPOOL_NOW), never a sleep. At night training may fill the node;
in the morning the serving team's work reclaims what training holds above its day quota,
the reclaimed jobs are requeued and wait, `quota` and `usage` say who held what."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from tests.users import ALICE, BOB, EVE, named

PY = sys.executable
DGX = "sg-dgx01"  # eight whole H100 80 GB cards
SLEEP = "import time; time.sleep(600)"
NIGHT = "2026-12-01T13:00:00.000Z"  # 21:00 in Singapore (UTC+8, no daylight saving)
MORNING = "2026-12-02T00:30:00.000Z"  # 08:30 in Singapore: the day's quotas

POLICY = named("""\
version: 1
teams:
  serve:
    members: [alice]
    quota: {nominal: {cards: 6}}
  train:
    members: [bob]
    quota: {nominal: {cards: 2}, borrowing-limit: {cards: 0}}
windows:
  - name: singapore-night
    timezone: Asia/Singapore
    hours: "20:00-08:00"
    teams:
      serve: {quota: {nominal: {cards: 1}}}
      train: {quota: {nominal: {cards: 7}}}
""")


def at(moment: str) -> dict[str, str]:
    return {"GPUPOOL_NOW": moment}


def submit(cli, policy: Path, moment: str, who: str, *extra: str) -> Any:
    """`submit` as the test user `who` (tests/users.py): members are real users."""
    return cli(
        "-q", "--pool-policy", str(policy), "-l", DGX, "submit", "--profile", "gpu",
        "--grace", "0", *extra, "--", PY, "-c", SLEEP,
        user=who, extra_env=at(moment),
    )  # fmt: skip


def jobs(cli, policy: Path, moment: str) -> dict[str, dict[str, Any]]:
    run = cli(
        "-q", "--pool-policy", str(policy), "-l", DGX, "jobs", "--all", "-o", "json",
        user=BOB, extra_env=at(moment),
    )  # fmt: skip
    assert run.code == 0, run.stderr
    return {j["id"]: j for j in run.json()}


def test_night_training_is_reclaimed_for_serving_in_the_morning(shared_cli) -> None:
    policy = shared_cli.tmp / "pool.yaml"
    policy.write_text(POLICY)
    assert shared_cli("-q", "--pool-policy", str(policy), "policy", "check").code == 0

    # Night: training's quota is 7 cards; it takes them, and the 8th borrowed (serving
    # leaves its one card idle).
    night = [submit(shared_cli, policy, NIGHT, BOB, "--preemptible") for _ in range(8)]
    assert all(r.code == 0 for r in night), [r.stderr for r in night]
    train_ids = [r.stdout.strip() for r in night]
    state = jobs(shared_cli, policy, NIGHT)
    assert [state[j]["state"] for j in train_ids] == ["running"] * 8, state

    quota = shared_cli(
        "-q", "--pool-policy", str(policy), "-o", "json", "quota", user=BOB, extra_env=at(NIGHT)
    )
    assert quota.code == 0, quota.stderr
    report = quota.json()
    assert report["active_windows"] == ["singapore-night"]
    rows = {(r["team"], r["resource"]): r for r in report["teams"]}
    assert rows[("train", "cards")]["nominal"] == 7
    assert rows[("train", "cards")]["in_use"] == 8 and rows[("train", "cards")]["borrowed"] == 1
    assert rows[("serve", "cards")]["nominal"] == 1 and rows[("serve", "cards")]["in_use"] == 0

    # Morning: serving's quota is 6 cards, training's 2. Serving asks for two cards; the
    # pass reclaims two of training's (borrowed or preemptible, the newest first), requeues
    # them, and starts serving's work on the freed cards.
    morning = [submit(shared_cli, policy, MORNING, ALICE) for _ in range(2)]
    assert all(r.code == 0 for r in morning), [r.stderr for r in morning]
    serve_ids = [r.stdout.strip() for r in morning]
    state = jobs(shared_cli, policy, MORNING)
    assert [state[j]["state"] for j in serve_ids] == ["running", "running"], state
    requeued = [j for j in train_ids if state[j]["state"] == "queued"]
    assert requeued == train_ids[-2:], state  # the newest first
    for job_id in requeued:
        assert "reclaimed for team serve" in (state[job_id].get("reason") or ""), state[job_id]
    assert [state[j]["state"] for j in train_ids[:-2]] == ["running"] * 6

    # Training is above its day limit (2 cards, no borrowing by day): its requeued work
    # waits for its quota, and reclaims nothing from serving (within its nominal).
    plan = shared_cli(
        "-q", "--pool-policy", str(policy), "-l", DGX, "-o", "json", "schedule", "--dry-run",
        user=BOB, extra_env=at(MORNING),
    )  # fmt: skip
    assert plan.code == 0, plan.stderr
    events = plan.json()
    assert not [e for e in events if e["event"] == "would-preempt"], events
    waiting = {e["job"]: e["reason"] for e in events if e["event"] == "waiting"}
    assert set(waiting) == set(requeued)
    assert all(r == "team train at its limit (6 of 2 cards)" for r in waiting.values()), waiting
    assert {e["code"] for e in events if e["event"] == "waiting"} == {"quota-limit"}, events
    dry = submit(shared_cli, policy, MORNING, BOB, "--dry-run")
    assert dry.code == 0, dry.stderr
    assert "team train at its limit (6 of 2 cards)" in dry.stdout + dry.stderr, dry

    # Usage: the night's holds, from the fixed clock: training held cards from 21:00 to
    # 08:30 (11.5 h) for the two reclaimed runs.
    usage = shared_cli("-q", "usage", "--by", "team", "-o", "json", user=BOB, extra_env=at(MORNING))
    assert usage.code == 0, usage.stderr
    by_team = {r["team"]: r for r in usage.json()["rows"]}
    assert by_team["train"]["gpu_hours"] >= 8 * 11.5 - 0.01, by_team
    assert by_team["serve"]["gpu_hours"] == 0, by_team  # started just now


def test_team_choice_is_checked_at_submit(shared_cli) -> None:
    policy = shared_cli.tmp / "pool.yaml"
    policy.write_text(POLICY)
    unknown = submit(shared_cli, policy, NIGHT, BOB, "--team", "nosuch")
    assert unknown.code == 2, unknown.stderr
    assert "no such team" in unknown.stderr and "serve, train" in unknown.stderr
    other = submit(shared_cli, policy, NIGHT, BOB, "--team", "serve")
    assert other.code == 1, other.stderr
    assert f"{BOB} is not a member of team serve" in other.stderr
    assert len(other.stderr.strip().splitlines()) == 1
    stranger = submit(shared_cli, policy, NIGHT, EVE)
    assert stranger.code == 1 and f"{EVE} is in no team" in stranger.stderr, stranger.stderr
    assert "Traceback" not in unknown.stderr + other.stderr + stranger.stderr
    listed = shared_cli("-q", "jobs", "--all", "-o", "json", user=BOB, extra_env=at(NIGHT))
    assert listed.json() == []  # nothing was queued by a refused submit


CLEARING = named("""\
version: 1
elastic:
  min-idle: 0s
  batch-window: 0s
  max-cards-per-pass: 2
  rules:
    - hosts: sg-dgx01
      profiles: [1g.10gb]
teams:
  serve:
    members: [alice]
    quota: {nominal: {gpu-memory: 0GiB}}
  train:
    members: [bob]
    quota: {nominal: {cards: 2}}
""")


def test_a_cut_card_is_cleared_and_merged_for_a_teams_whole_card_job(shared_cli) -> None:
    """Every card of sg-dgx01 cut into 7 x 1g.10gb and each holding one borrowed serving
    job: training's whole-card job (within its nominal) reclaims the cheapest card's job,
    the card is merged whole for it, and the requeued serving job is kept off it."""
    policy = shared_cli.tmp / "pool.yaml"
    policy.write_text(CLEARING)
    layouts = str(Path(__file__).parents[2] / "playbooks" / "layouts.yaml")
    cut = shared_cli("-q", "-l", DGX, "partition", "apply", "-f", layouts, "-c", "inference",
                   "--yes")  # fmt: skip
    assert cut.code == 0, cut.stderr

    def run(*args: str, who: str) -> Any:
        return shared_cli("-q", "--pool-policy", str(policy), "-l", DGX, *args,
                        user=who, extra_env=at(MORNING))  # fmt: skip

    small = ("submit", "--mem", "5G", "--policy", "spread", "--grace", "0", "--", PY, "-c", SLEEP)
    served = [run(*small, who=ALICE) for _ in range(8)]
    assert all(r.code == 0 for r in served), [r.stderr for r in served]
    serving = [r.stdout.strip() for r in served]
    state = jobs(shared_cli, policy, MORNING)
    cards = {state[j]["slice"].split("/mig-")[0] for j in serving}
    assert len(cards) == 8  # one on every card: no card is idle

    big = run("submit", "--profile", "gpu", "--", PY, "-c", SLEEP, who=BOB)
    assert big.code == 0, big.stderr
    train_id = big.stdout.strip()
    for _ in range(5):  # passes: the victim stops, the card is merged, the job starts
        if jobs(shared_cli, policy, MORNING)[train_id]["state"] == "running":
            break
        assert run("schedule", who=BOB).code == 0
    state = jobs(shared_cli, policy, MORNING)
    assert state[train_id]["state"] == "running", state[train_id]
    card = state[train_id]["slice"]
    assert "/mig-" not in card and card.startswith(f"{DGX}/gpu")
    # One serving job was reclaimed (requeued: its second run), and runs elsewhere now:
    # nothing of the serving team is on the card made whole.
    moved = [j for j in serving if state[j]["run"] == 2]
    assert len(moved) == 1 and all(state[j]["state"] == "running" for j in serving), state
    assert not any(state[j]["slice"].startswith(f"{card}/") for j in serving)
    (reshape,) = [
        r["data"]
        for r in shared_cli("-q", "ledger", "show", "--op", "reshape", "-o", "json").json()
        if r["data"]["state"] == "done"
    ]
    assert reshape["gpu"] == card and reshape["after"] == "whole card"
