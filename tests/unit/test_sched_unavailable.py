"""Why a slice is out of placement (sched.unavailable), and the ledger records it reads:
drains of two sources side by side (old ledgers replaying as they did), lost cards kept
as the ledger knew them, stray processes, fenced runs, holds `ledger repair` quarantined,
idle cards kept for a re-cut with when they may be cut."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.jobs.alloc import alloc as hold
from gpupoolctl.ledger import Ledger, NothingFits, drains
from gpupoolctl.ledger.slices import (
    accounted_by,
    keep_lost_cards,
    mark_strays,
    pids_from_facts,
)
from gpupoolctl.ledger.state import State
from gpupoolctl.policy.model import ElasticPolicy, ElasticRule
from gpupoolctl.policy.ownership import NotOwner
from gpupoolctl.sched import JobRequest, NoFit, PoolView, QueueEntry, place
from gpupoolctl.sched.cards import cards_of
from gpupoolctl.sched.elastic import ElasticInputs
from gpupoolctl.sched.queue import schedule_pass
from gpupoolctl.sched.unavailable import blocks
from tests.property.test_elastic_properties import NOW, base_slices
from tests.unit.test_ledger_damage import damage_line, fresh, make_slices

TS = "2025-06-01T12:00:00.000Z"


def whole(host: str, gpu: int, **extra: Any) -> dict[str, Any]:
    return {
        "id": f"{host}/gpu{gpu}",
        "host": host,
        "gpu": gpu,
        "kind": "gpu",
        "memory_mib": 81559,
        "uuid": f"GPU-{host}-{gpu}",
        **extra,
    }


def replay(*records: tuple[str, dict[str, Any]]) -> State:
    state = State()
    for seq, (op, data) in enumerate(records, 1):
        state.apply({"seq": seq, "ts": TS, "actor": "t@h", "op": op, "data": data})
    return state


SLICES = (
    "slices",
    {"hosts": ["h1", "h2"], "slices": [whole("h1", 0), whole("h1", 1), whole("h2", 0)]},
)


def drained(target: str, source: str, reason: str = "r") -> tuple[str, dict[str, Any]]:
    return ("drain", {"target": target, "state": "drained", "reason": reason, "source": source})


# -- the decision ---------------------------------------------------------------------------


def test_the_first_reason_that_applies_wins_and_a_held_slice_keeps_its_block() -> None:
    state = replay(
        (
            "slices",
            {
                "hosts": ["h1", "h2"],
                "slices": [
                    whole("h1", 0, lost=True),
                    whole("h1", 1, stray_pids=[7]),
                    whole("h2", 0),
                    whole("h2", 1),
                ],
            },
        ),
        drained("h1/gpu0", "admin"),
        drained("h1/gpu1", "health", "health: XID 79"),
        drained("h1/gpu1", "admin", "fans"),
        (
            "fence",
            {
                "host": "h2",
                "node_id": "j-1",
                "job": "j-1",
                "slices": ["h2/gpu0"],
                "state": "fenced",
            },
        ),
        ("repair", {"holds": [{"id": "a-9", "owner": "bob", "slices": ["h2/gpu1"]}]}),
        ("alloc", {"id": "a-10", "owner": "ann", "slices": ["h2/gpu1"]}),
    )
    found = blocks(state)
    assert {k: b.kind for k, b in found.items()} == {
        "h1/gpu0": "card-lost",  # before its admin drain
        "h1/gpu1": "failed",  # the health check's drain says most; then the admin's, strays
        "h2/gpu0": "stale-run",
        "h2/gpu1": "quarantined",  # held by a-10 as well: still said
    }
    assert "XID 79" in found["h1/gpu1"].why and "j-1" in found["h2/gpu0"].why
    assert found["h2/gpu1"].state == "blocked"
    pool = PoolView.from_state(state, TS)
    assert pool.holder("h2/gpu1").alloc == "a-10"  # a live hold stays its holder's
    assert not set(found) & set(pool.free)

    state.apply(
        {
            "seq": 99,
            "ts": TS,
            "actor": "t@h",
            "op": "host",
            "data": {"host": "h1", "state": "lost", "since": TS},
        }
    )
    assert {blocks(state)[s].kind for s in ("h1/gpu0", "h1/gpu1")} == {"node-lost"}


def test_a_silent_or_lost_host_is_told_by_its_last_answer_not_its_first_missed_poll() -> None:
    """As the drain and the jobs' reasons tell it: the host answered at 10:00:30, missed
    the poll at 10:01:00 and was declared lost at 10:02:30."""
    answered, missed, declared = (f"2025-06-01T10:{t}.000Z" for t in ("00:30", "01:00", "02:30"))
    state = replay(SLICES)
    state.apply({"seq": 10, "ts": missed, "actor": "t@h", "op": "host",
                 "data": {"host": "h1", "state": "silent", "since": missed,
                          "answered": answered}})  # fmt: skip
    assert blocks(state)["h1/gpu0"].why.startswith(f"h1 has not answered since {answered}:")
    state.apply({"seq": 11, "ts": declared, "actor": "t@h", "op": "host",
                 "data": {"host": "h1", "state": "lost", "since": missed}})  # fmt: skip
    assert blocks(state)["h1/gpu0"].why == f"node h1 lost: no answer since {answered}"
    # a ledger that never recorded an answer still says something true
    never = replay(SLICES, ("host", {"host": "h2", "state": "lost", "since": missed}))
    assert never.answered.get("h2") is None
    assert blocks(never)["h2/gpu0"].why == f"node h2 lost since {missed}"


def test_a_no_fit_reason_counts_each_reason() -> None:
    state = replay(
        (
            "slices",
            {
                "hosts": ["h1", "h2"],
                "slices": [
                    whole("h1", 0),
                    whole("h1", 1),
                    whole("h1", 2, lost=True),
                    whole("h2", 0),
                    whole("h2", 1),
                ],
            },
        ),
        ("alloc", {"id": "a-2", "owner": "ann", "slices": ["h1/gpu0"]}),
        drained("h1/gpu1", "admin"),
        ("host", {"host": "h2", "state": "lost", "since": TS}),
    )
    result = place(JobRequest(profile="gpu"), PoolView.from_state(state, TS))
    assert isinstance(result, NoFit) and not result.never
    assert result.reason == (
        "nothing fits 1 x gpu now: 0 matching slice(s) free of 5: 1 held, 2 on a lost node, "
        "1 on a lost card, 1 drained"
    )


# -- drains of two sources -----------------------------------------------------------------


def test_drains_of_two_sources_stand_side_by_side_and_are_lifted_one_at_a_time() -> None:
    state = replay(SLICES, drained("h1/gpu0", "admin", "fans"), drained("h1/gpu0", "health"))
    assert sorted(state.drains["h1/gpu0"]) == ["admin", "health"]
    assert state.drain_of("h1/gpu0")["source"] == "health"
    lift = {"target": "h1/gpu0", "state": "undrained", "source": "admin"}
    state.apply({"seq": 9, "ts": TS, "actor": "t@h", "op": "drain", "data": lift})
    assert list(state.drains["h1/gpu0"]) == ["health"] and not state.problems
    again = State.from_dict(state.to_dict())
    assert again.drains == state.drains


def test_an_old_ledger_replays_as_it_did_one_drain_per_target() -> None:
    # Written by a version with one drain per target: an admin's drain replaced the health
    # check's, and an undrain without a source lifted the target.
    old = ("drain", {"target": "h1/gpu0", "state": "undrained"})
    state = replay(SLICES, drained("h1/gpu0", "health"), drained("h1/gpu0", "admin"), old)
    assert state.drains == {} and not state.problems
    # An old snapshot's drains (a list of records) loads.
    raw = replay(SLICES).to_dict()
    raw["drains"] = [{"target": "h1", "reason": "PSU", "source": "admin", "actor": "a", "ts": TS}]
    assert State.from_dict(raw).drain_of("h1")["reason"] == "PSU"
    # Lifting a source that does not drain the target is a problem, as before.
    bad = replay(
        SLICES,
        drained("h1", "admin"),
        ("drain", {"target": "h1", "state": "undrained", "source": "health"}),
    )
    assert [p["message"] for p in bad.problems] == [
        "undrain of h1's health drain, which is not drained"
    ]


def test_undrain_lifts_the_admins_drain_first_and_says_what_still_holds(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l.jsonl", durable=False, actor="t@h")
    ledger.refresh_slices(["h1"], [whole("h1", 0), whole("h1", 1)])
    drains.drain(ledger, ["h1/gpu0", "h1/gpu1"], "fans")
    drains.drain(ledger, ["h1/gpu0"], "health: XID 79", source="health")
    (first, second) = drains.undrain(ledger, ["h1/gpu0", "h1/gpu1"]).value
    assert (first.source, first.still["reason"]) == ("admin", "health: XID 79")
    assert (second.source, second.still) == ("admin", None)
    (again,) = drains.undrain(ledger, ["h1/gpu0"]).value  # a person insists: lifted
    assert (again.source, again.still) == ("health", None)
    assert ledger.read().state.drains == {}


# -- lost cards and stray processes from the nodes' facts -----------------------------------


def test_a_lost_card_keeps_the_slices_known_of_it_marked_lost() -> None:
    known = [whole("h1", 0), {**whole("h1", 1), "id": "h1/gpu1/mig-3g.40gb@0", "kind": "mig"}]
    read = [whole("h1", 0), {**whole("h1", 1), "memory_mib": 0, "uuid": "", "lost": True}]
    kept = keep_lost_cards(read, known)
    assert [(e["id"], e.get("lost"), e["uuid"]) for e in kept] == [
        ("h1/gpu0", None, "GPU-h1-0"),
        ("h1/gpu1/mig-3g.40gb@0", True, "GPU-h1-1"),
    ]
    assert keep_lost_cards(read, []) == read  # never seen before: as read


def test_processes_are_strays_unless_a_hold_or_a_known_run_accounts_for_them() -> None:
    facts = {
        "gpus": [
            {"index": 0, "uuid": "GPU-0", "processes": [{"pid": 11}]},
            {"index": 1, "uuid": "GPU-1", "processes": [{"pid": 12}, {"pid": 13}]},
            {
                "index": 2,
                "uuid": "GPU-2",
                "mig": {
                    "mode": "enabled",
                    "instances": [
                        {
                            "profile": "3g.40gb",
                            "placement_start": 0,
                            "gi_id": 1,
                            "compute_instances": [],
                        },
                        {
                            "profile": "3g.40gb",
                            "placement_start": 4,
                            "gi_id": 2,
                            "compute_instances": [],
                        },
                    ],
                },
                "processes": [{"pid": 14, "gpu_instance_id": 2}, {"pid": 15}],
            },
        ]
    }
    pids = pids_from_facts("h1", facts)
    assert pids == {
        "h1/gpu0": [11],
        "h1/gpu1": [12, 13],
        "h1/gpu2/mig-3g.40gb@0": [15],  # no instance said: counted on every instance
        "h1/gpu2/mig-3g.40gb@4": [14, 15],
    }
    state = replay(
        ("slices", {"hosts": ["h1"], "slices": [whole("h1", 0), whole("h1", 1)]}),
        ("alloc", {"id": "a-2", "owner": "ann", "slices": ["h1/gpu0"]}),
        ("job", {"id": "j-1", "state": "running", "nodes": [{"host": "h1", "pid": 13}]}),
    )
    marked = mark_strays(
        [whole("h1", 0), whole("h1", 1, stray_pids=[99])], pids, accounted_by(state, TS)
    )
    assert [e.get("stray_pids") for e in marked] == [None, [12]]


# -- holds ledger repair quarantined --------------------------------------------------------


def test_repair_keeps_a_live_holds_slices_out_until_an_admin_releases_it(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False, actor="t@h")
    ledger.refresh_slices(["n1"], make_slices())
    for _ in range(4):
        hold(ledger, JobRequest(), owner="alice")
    ledger.release("a-3")  # a-2, a-4, a-5 held
    damage_line(ledger.path, 4)  # a-4's alloc
    damage_line(ledger.path, 3)  # a-3's, released later: not a live hold
    result = fresh(ledger).repair().value
    assert [(h["id"], h["owner"], h["slices"]) for h in result.holds] == [
        ("a-4", "alice", ["n1/gpu2"])
    ]
    state = fresh(ledger).read().state
    assert blocks(state)["n1/gpu2"].kind == "quarantined"
    taken = hold(fresh(ledger), JobRequest(gpus=3), owner="bob").value.slices
    assert taken == ["n1/gpu1", "n1/gpu4", "n1/gpu5"]  # n1/gpu2 is not handed out again
    with pytest.raises(NothingFits):
        hold(fresh(ledger), JobRequest(), owner="bob")
    with pytest.raises(NotOwner, match="only a pool admin may release it"):
        fresh(ledger).release("a-4", user="alice", admin=False)
    released = fresh(ledger).release("a-4", user="root", admin=True).value
    assert released.slices == ["n1/gpu2"]
    assert "n1/gpu2" not in blocks(fresh(ledger).read().state)
    assert fresh(ledger).verify().ok


# -- idle cards kept for a re-cut -------------------------------------------------------------


def test_a_card_kept_for_a_recut_says_when_min_idle_lets_it_be_cut() -> None:
    slices = [s for s in base_slices() if s["host"] == "sg-dgx01"]
    policy = ElasticPolicy(
        enabled=True, rules=(ElasticRule(line=1, hosts="sg-dgx01"),), min_idle_s=300
    )
    changed = {f"sg-dgx01/gpu{i}": NOW - timedelta(seconds=80 + i) for i in range(8)}
    inputs = ElasticInputs(policy=policy, cards=cards_of(slices), changed=changed)
    request = JobRequest(memory_mib=10 * 1024, host="sg-dgx01")
    entry = QueueEntry(id="q-0", priority=50, seq=0, enqueued=NOW, request=request)
    result = schedule_pass([entry], PoolView(slices), NOW, elastic=inputs)
    ((_, nofit),) = result.waiting
    # The card idle longest (87 s) may be cut 213 s from now.
    assert nofit.reason.endswith("8 kept to be cut in 3m33s (min-idle)"), nofit.reason


def test_alloc_says_which_of_the_matching_slices_are_out_and_why() -> None:
    """alloc's refusal counts what is held, drained and lost, as a waiting job's reason
    does; it said only '0 matching slice(s) free'."""
    from gpupoolctl.sched.alloc import pick

    state = replay(
        (
            "slices",
            {
                "hosts": ["h1", "h2"],
                "slices": [whole("h1", 0), whole("h1", 1), whole("h2", 0)],
            },
        ),
        ("alloc", {"id": "a-2", "owner": "ann", "slices": ["h1/gpu0"]}),
        drained("h1/gpu1", "admin"),
        ("host", {"host": "h2", "state": "lost", "since": TS}),
    )
    with pytest.raises(NothingFits) as refused:
        pick(state, JobRequest(profile="gpu"), TS)
    assert str(refused.value) == (
        "nothing fits profile=gpu: 0 matching slice(s) free of 3: 1 held, 1 on a lost node, "
        "1 drained; free now: none"
    )
