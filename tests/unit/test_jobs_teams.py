"""Teams on the jobs side (gpupoolctl.jobs.teams): the share inputs a pass decides with (the
quotas in force at its time, the fair-share history, what teams hold outside -l), the team
a submission gets, the `quota` report; and a job reclaimed for another team's guaranteed
share is requeued whatever it asked (jobs.reaping), as `jobs` says (jobs.dryrun)."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.errors import ExitCode, UsageError
from gpupoolctl.jobs import Jobs, JobSpec, Nodes, reaping, submitting
from gpupoolctl.jobs.listing import reason_text
from gpupoolctl.jobs.service import JobsCore
from gpupoolctl.jobs.teams import quota_report, with_team
from gpupoolctl.ledger import Ledger, State
from gpupoolctl.ledger.state import FAIR_SHARE_HALF_LIFE_S
from gpupoolctl.ledger.units import format_ts, parse_ts
from gpupoolctl.policy import parse_policy
from gpupoolctl.policy.membership import NotAMember
from gpupoolctl.policy.model import PoolPolicy
from gpupoolctl.remote.target import target_from_vars
from gpupoolctl.sched import JobRequest
from gpupoolctl.sched.snapshot import share_inputs
from tests.unit.test_jobs_service import FakeNode

GIB = 1024  # MiB
SOURCE = "teams.yaml"
POLICY = """\
version: 1
teams:
  serve:
    members: [ann]
    default: true
    quota:
      - site: east
        nominal: {gpu-memory: 160GiB, cards: 2}
        borrowing-limit: {gpu-memory: 80GiB}
      - site: west
        nominal: {gpu-memory: 80GiB}
  train:
    members: [bob, group:ml]
    quota:
      - site: east
        nominal: {cards: 2}
        lending-limit: {cards: 1}
  free:
    members: [carl]
windows:
  - name: east-night
    timezone: UTC
    hours: "20:00-08:00"
    teams:
      serve: {quota: {site: east, nominal: {gpu-memory: 80GiB}}}
      train: {quota: {site: east, nominal: {cards: 3}}}
  - name: weekend
    timezone: Asia/Tokyo
    days: sat,sun
    teams:
      train: {quota: {site: west, nominal: {cards: 1}}}
"""
DAY = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)  # a Wednesday, noon UTC (21:00 in Tokyo)
NIGHT = datetime(2026, 3, 4, 22, 0, tzinfo=UTC)  # 07:00 Thursday in Tokyo: not the weekend
SATURDAY = datetime(2026, 3, 7, 10, 0, tzinfo=UTC)  # 19:00 Saturday in Tokyo, daytime in UTC


def card(host: str, index: int, site: str) -> dict[str, Any]:
    return {
        "id": f"{host}/gpu{index}",
        "host": host,
        "gpu": index,
        "kind": "gpu",
        "profile": None,
        "memory_mib": 80 * GIB,
        "uuid": f"GPU-{host}-{index}",
        "devices": [f"GPU-{host}-{index}"],
        "vendor": "nvidia",
        "model": "H100",
        "site": site,
        "island": f"{host}/island{index}",
    }


EAST = [card("e1", i, "east") for i in range(4)]
WEST = [card("w1", i, "west") for i in range(2)]


def policy() -> PoolPolicy:
    return parse_policy(POLICY, SOURCE)


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def book(tmp_path: Path) -> Ledger:
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, actor="t@h", clock=Clock(DAY))
    ledger.refresh_slices(["e1"], EAST)
    ledger.refresh_slices(["w1"], WEST)
    return ledger


def hold(
    ledger: Ledger, slices: list[str], owner: str, team: str | None, ttl: timedelta | None = None
) -> str:
    """A hold as a job's placement records it (only jobs have teams); team None: a hand alloc."""
    request = {"team": team, "job": f"j-{slices[0]}"} if team else {}
    done = ledger.alloc(lambda _s, _n: slices, owner=owner, request=request, ttl=ttl)
    return done.value.id


def advance(ledger: Ledger, delta: timedelta) -> None:
    ledger.clock.advance(delta)  # type: ignore[attr-defined]


def now_of(ledger: Ledger) -> str:
    return format_ts(ledger.clock())


# -- share_inputs -------------------------------------------------------------------------


def test_no_share_inputs_without_teams() -> None:
    now = format_ts(DAY)
    assert share_inputs(State(), None, now) is None
    assert share_inputs(State(), parse_policy("version: 1\n"), now) is None


def test_the_quotas_in_force_follow_the_windows() -> None:
    pol = policy()
    day = share_inputs(State(), pol, format_ts(DAY))
    assert day is not None
    assert set(day.quotas) == {"serve", "train", "free"}
    assert day.quotas["serve"] == pol.teams.named("serve").quota  # type: ignore[union-attr]
    assert day.quotas["train"] == pol.teams.named("train").quota  # type: ignore[union-attr]
    assert day.quotas["free"] == ()
    assert day.history == {} and list(day.elsewhere) == []

    night = share_inputs(State(), pol, format_ts(NIGHT))
    assert night is not None
    east, west = night.quotas["serve"]  # the window replaces the east scope, keeps the west
    assert (east.site, dict(east.nominal), east.borrowing_limit) == (
        "east",
        {"gpu-memory": 80 * GIB},
        None,
    )
    assert (west.site, dict(west.nominal)) == ("west", {"gpu-memory": 80 * GIB})
    (train_east,) = night.quotas["train"]
    assert dict(train_east.nominal) == {"cards": 3} and train_east.lending_limit is None

    # The weekend window (Tokyo time) adds a scope train's own quota does not have.
    weekend = share_inputs(State(), pol, format_ts(SATURDAY))
    assert weekend is not None
    assert [(s.site, dict(s.nominal)) for s in weekend.quotas["train"]] == [
        ("east", {"cards": 2}),
        ("west", {"cards": 1}),
    ]
    assert weekend.quotas["serve"] == day.quotas["serve"]


def test_history_is_the_decayed_past_plus_what_is_held_now(book: Ledger) -> None:
    ended = hold(book, ["e1/gpu0"], "ann", "serve")
    advance(book, timedelta(hours=1))
    book.release(ended)  # 80 GiB for an hour
    ended_at = now_of(book)
    hold(book, ["e1/gpu1", "w1/gpu0"], "ann", "serve")  # 160 GiB, open
    hold(book, ["e1/gpu2"], "bob", "train")  # 80 GiB, open
    hold(book, ["e1/gpu3"], "dan", None)  # no team: no one's history
    hold(book, ["w1/gpu1"], "bob", "train", ttl=timedelta(hours=1))  # expires before now
    advance(book, timedelta(days=7))  # a half-life after the first hold ended
    state = book.read().state
    now = now_of(book)
    assert FAIR_SHARE_HALF_LIFE_S == 7 * 86400
    assert state.team_history(now) == {"serve": pytest.approx(80 * 3600 / 2)}
    inputs = share_inputs(state, policy(), now)
    assert inputs is not None
    week = 7 * 86400
    assert dict(inputs.history) == {
        "serve": pytest.approx(80 * 3600 / 2 + 160 * week),
        "train": pytest.approx(80 * week),  # the expired hold is not held any more
    }
    assert ended_at < now


def test_elsewhere_lists_what_teams_hold_outside_the_hosts_of_the_pass(book: Ledger) -> None:
    hold(book, ["e1/gpu0", "w1/gpu0"], "ann", "serve")
    hold(book, ["w1/gpu1"], "dan", None)  # no team: counts against no quota
    hold(book, ["e1/gpu1"], "bob", "train")
    state = book.read().state
    now = now_of(book)
    inputs = share_inputs(state, policy(), now, hosts={"e1"})
    assert inputs is not None
    assert [(team, entry["id"]) for team, entry in inputs.elsewhere] == [("serve", "w1/gpu0")]
    everywhere = share_inputs(state, policy(), now)
    assert everywhere is not None and list(everywhere.elsewhere) == []
    west_only = share_inputs(state, policy(), now, hosts={"w1"})
    assert west_only is not None
    assert sorted((t, e["id"]) for t, e in west_only.elsewhere) == [
        ("serve", "e1/gpu0"),
        ("train", "e1/gpu1"),
    ]


# -- with_team ----------------------------------------------------------------------------


def core(book: Ledger, owner: str, pol: PoolPolicy | None, *, admin: bool = False) -> JobsCore:
    nodes = Nodes([target_from_vars("e1", {"transport": "local"})], FakeNode())
    return JobsCore(book, nodes, owner=owner, policy=pol, admin=admin)


def job_spec(team: str | None = None) -> JobSpec:
    return JobSpec(argv=["python", "x.py"], name="x", request=JobRequest(team=team, priority=60))


@pytest.fixture
def groups(monkeypatch: pytest.MonkeyPatch) -> dict[str, frozenset[str]]:
    """Unix groups by user, instead of this machine's."""
    table: dict[str, frozenset[str]] = {}
    monkeypatch.setattr(
        "gpupoolctl.policy.actor.unix_groups", lambda user: table.get(user, frozenset())
    )
    return table


def test_with_team_without_teams_leaves_the_spec_or_says_why_not(book: Ledger, groups) -> None:
    spec = job_spec()
    assert with_team(core(book, "ann", None), spec) is spec
    assert with_team(core(book, "ann", parse_policy("version: 1\n")), spec) is spec
    with pytest.raises(UsageError, match=r"--team serve: .*no teams: section") as caught:
        with_team(core(book, "ann", None), job_spec("serve"))
    assert caught.value.exit_code == ExitCode.USAGE
    # A policy file without teams: the message names it.
    static = core(book, "ann", parse_policy("version: 1\n", "static.yaml"))
    with pytest.raises(UsageError, match=r"--team serve: the pool policy in static\.yaml has no"):
        with_team(static, job_spec("serve"))


def test_with_team_resolves_the_team(book: Ledger, groups) -> None:
    pol = policy()
    groups["dan"] = frozenset({"ml"})
    chosen = with_team(core(book, "bob", pol), job_spec())
    assert chosen.request.team == "train"
    # Everything else is as it was.
    assert chosen.request.priority == 60 and chosen.argv == ["python", "x.py"]
    assert chosen.name == "x"
    assert with_team(core(book, "dan", pol), job_spec()).request.team == "train"  # by group
    assert with_team(core(book, "zed", pol), job_spec()).request.team == "serve"  # default
    assert with_team(core(book, "bob", pol), job_spec("serve")).request.team == "serve"
    with pytest.raises(NotAMember, match=f"ann is not a member of team train in {SOURCE}") as c:
        with_team(core(book, "ann", pol), job_spec("train"))
    assert c.value.exit_code == ExitCode.ERROR
    admin = core(book, "ann", pol, admin=True)
    assert with_team(admin, job_spec("train")).request.team == "train"
    with pytest.raises(UsageError, match="no such team"):
        with_team(admin, job_spec("nope"))


# -- quota_report -------------------------------------------------------------------------


def rows_of(report: dict[str, Any]) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    keys = ("nominal", "limit", "lendable", "in_use", "borrowed")
    return {
        (r["team"], r["scope"], r["resource"]): tuple(r[k] for k in keys) for r in report["teams"]
    }


def test_quota_report_by_day_and_by_night(book: Ledger) -> None:
    hold(book, ["e1/gpu0", "e1/gpu1", "e1/gpu2"], "ann", "serve")  # 240 GiB, 3 cards
    hold(book, ["e1/gpu3"], "bob", "train")
    hold(book, ["w1/gpu0"], "carl", "free")
    hold(book, ["w1/gpu1"], "dan", None)
    state = book.read().state
    day = quota_report(policy(), state, format_ts(DAY))
    assert day["at"] == format_ts(DAY)
    assert day["active_windows"] == []
    assert rows_of(day) == {
        ("serve", "site east", "gpu-memory"): (160 * GIB, 240 * GIB, None, 240 * GIB, 80 * GIB),
        ("serve", "site east", "cards"): (2, None, None, 3, 1),
        ("serve", "site west", "gpu-memory"): (80 * GIB, None, None, 0, 0),
        ("train", "site east", "cards"): (2, None, 1, 1, 0),
        ("free", "(not limited)", "gpu-memory"): (None, None, None, 80 * GIB, 0),
    }
    assert [r["team"] for r in day["teams"]] == ["serve", "serve", "serve", "train", "free"]
    windows = {(w["window"], w["team"], w["resource"]): w for w in day["windows"]}
    assert set(windows) == {
        ("east-night", "serve", "gpu-memory"),
        ("east-night", "train", "cards"),
        ("weekend", "train", "cards"),
    }
    night_serve = windows[("east-night", "serve", "gpu-memory")]
    assert night_serve == {
        "window": "east-night",
        "active": False,
        "timezone": "UTC",
        "days": night_serve["days"],
        "hours": "20:00-08:00",
        "team": "serve",
        "scope": "site east",
        "resource": "gpu-memory",
        "nominal": 80 * GIB,
    }
    assert windows[("weekend", "train", "cards")]["hours"] == "00:00-24:00"
    assert windows[("weekend", "train", "cards")]["days"] == "sat,sun"
    assert not any(w["active"] for w in day["windows"])

    night = quota_report(policy(), state, format_ts(NIGHT))
    assert night["active_windows"] == ["east-night"]
    assert rows_of(night) == {
        ("serve", "site east", "gpu-memory"): (80 * GIB, None, None, 240 * GIB, 160 * GIB),
        ("serve", "site west", "gpu-memory"): (80 * GIB, None, None, 0, 0),
        ("train", "site east", "cards"): (3, None, None, 1, 0),
        ("free", "(not limited)", "gpu-memory"): (None, None, None, 80 * GIB, 0),
    }
    assert {w["window"]: w["active"] for w in night["windows"]} == {
        "east-night": True,
        "weekend": False,
    }

    saturday = quota_report(policy(), state, format_ts(SATURDAY))
    assert saturday["active_windows"] == ["weekend"]
    assert rows_of(saturday)[("train", "site west", "cards")] == (1, None, None, 0, 0)
    assert parse_ts(saturday["at"]) == SATURDAY


# -- reclaim: reaping and the reason jobs shows -------------------------------------------


@pytest.fixture
def running(tmp_path: Path) -> tuple[Jobs, FakeNode, str]:
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    ledger.refresh_slices(["e1"], EAST[:1])
    node = FakeNode()
    jobs = Jobs(ledger, Nodes([target_from_vars("e1", {"transport": "local"})], node), owner="bob")
    job_id = str(submitting.submit(jobs, job_spec()).job_id)  # no --requeue
    return jobs, node, job_id


def job_of(jobs: Jobs, job_id: str) -> dict[str, Any]:
    state = jobs.ledger.read().state
    return state.jobs.get(job_id) or state.finished[job_id]


def mark_and_stop(jobs: Jobs, node: FakeNode, job_id: str, mark: dict[str, Any]) -> None:
    """What a pass that preempts does: the mark on the running job, then the job stops."""
    job = job_of(jobs, job_id)
    assert job["state"] == "running" and not job.get("requeue")
    with jobs.ledger.transaction() as tx:
        tx.append("job", {"id": job_id, "state": "running", "preempt": mark})
    node.jobs[job["nodes"][0]["node_id"]] = {"state": "exited", "exit_code": 143, "signal": "TERM"}


def test_a_job_reclaimed_for_a_team_is_requeued_without_requeue(running) -> None:
    jobs, node, job_id = running
    mark = {"by": "j-99", "at": time.time() - 1, "grace_s": 0, "reclaim": "serve"}
    mark_and_stop(jobs, node, job_id, mark)
    running_job = job_of(jobs, job_id)
    assert reason_text(running_job) == "being reclaimed for team serve (j-99)"
    reaping.reap(jobs)
    job = job_of(jobs, job_id)
    assert job["state"] == "queued"
    assert job["reason"] == "reclaimed for team serve (j-99); requeued"
    state = jobs.ledger.read().state
    assert [q["job"] for q in state.queue.values()] == [job_id]
    assert state.holders == {}  # its card is free for the team that reclaimed it
    assert reason_text(job) == "reclaimed for team serve (j-99); requeued"
    assert reason_text(job, "team train at its limit") == (
        "reclaimed for team serve (j-99); requeued; team train at its limit"
    )


def test_a_plain_preemption_without_requeue_cancels(running) -> None:
    jobs, node, job_id = running
    mark_and_stop(jobs, node, job_id, {"by": "j-99", "at": time.time() - 1, "grace_s": 0})
    assert reason_text(job_of(jobs, job_id)) == "being preempted for j-99"
    reaping.reap(jobs)
    job = job_of(jobs, job_id)
    assert job["state"] == "cancelled" and job["reason"] == "preempted by j-99"
    assert jobs.ledger.read().state.queue == {}
