"""The snapshot (sched.snapshot): frozen, the same from the same state, and the same for
production and a benchmark, so their passes decide the same.

Production builds it from the ledger's State (JobsCore.snapshot), the benchmarks from their
in-memory stand-in (bench/utilization's replay.Recorded, replay.pass_snapshot); both go
through sched.snapshot.snapshot. The policy has teams, a window that replaces a quota and
the elastic section (elastic off by night), so the windows are part of what must agree.
"""

from __future__ import annotations

import dataclasses
import tempfile
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.benchpath  # noqa: F401  # bench/utilization's scripts on sys.path

# isort: split
from replay import Hold, Recorded, pass_snapshot

from gpupoolctl.jobs import Nodes
from gpupoolctl.jobs.service import JobsCore
from gpupoolctl.ledger import Ledger, State
from gpupoolctl.policy import parse_policy
from gpupoolctl.sched import Holder, JobRequest, PassResult, QueueEntry
from gpupoolctl.sched.elastic import glob_hosts
from gpupoolctl.sched.modes import run_pass
from gpupoolctl.sched.snapshot import Snapshot, snapshot
from gpupoolctl.timestamps import format_ts

GIB = 1024
POLICY = """\
version: 1
elastic:
  min-idle: 0s
  batch-window: 0s
  rules:
    - hosts: "*"
      profiles: [1g.10gb, 3g.40gb]
teams:
  serve:
    members: [ann]
    quota: {nominal: {gpu-memory: 160GiB}}
  train:
    members: [bob]
    quota: {nominal: {gpu-memory: 160GiB}}
windows:
  - name: night
    timezone: UTC
    days: daily
    hours: "20:00-08:00"
    teams:
      train: {quota: {nominal: {gpu-memory: 320GiB}}}
    elastic:
      enabled: false
"""
NOON = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
NIGHT = datetime(2026, 3, 4, 22, 0, tzinfo=UTC)
CARDS = [f"h{h}/gpu{g}" for h in range(2) for g in range(4)]


def _card(sid: str) -> dict[str, Any]:
    host, gpu = sid.split("/")
    index = int(gpu[3:])
    return {
        "id": sid,
        "host": host,
        "gpu": index,
        "kind": "gpu",
        "profile": None,
        "memory_mib": 81559,
        "uuid": f"GPU-{host}-{index}",
        "gpu_uuid": f"GPU-{host}-{index}",
        "devices": [f"GPU-{host}-{index}"],
        "vendor": "nvidia",
        "model": "NVIDIA H100 80GB HBM3",
        "island": f"{host}/nvl",
    }


def _no_node(*_: Any) -> Any:
    raise AssertionError("a snapshot asks no node")


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


# (card, team, priority, preemptible) of each hold; then the queue's requests (GiB, team)
holds_st = st.lists(
    st.tuples(
        st.sampled_from(CARDS),
        st.sampled_from(["serve", "train"]),
        st.sampled_from([10, 50, 90]),
        st.booleans(),
    ),
    max_size=6,
    unique_by=lambda h: h[0],
)
queue_st = st.lists(
    st.tuples(st.sampled_from([8, 30, 70, 150]), st.sampled_from(["serve", "train"])),
    max_size=6,
)


def _ledger(folder: Path, moment: datetime, holds: list[tuple[str, str, int, bool]]) -> Ledger:
    """A ledger of two 4-card hosts, with `holds` recorded as jobs' placements record them,
    then the clock moved to `moment`."""
    clock = Clock(moment - timedelta(hours=2))
    ledger = Ledger(folder / "ledger.jsonl", durable=False, actor="t@h", clock=clock)
    for host in ("h0", "h1"):
        ledger.refresh_slices([host], [_card(s) for s in CARDS if s.startswith(host)])
    for n, (sid, team, priority, preemptible) in enumerate(holds):
        request = {"job": f"j{n}", "team": team, "priority": priority}
        request["preemptible"] = preemptible
        owner = "ann" if team == "serve" else "bob"
        ledger.alloc(lambda _s, _n, sid=sid: [sid], owner=owner, request=request)
        clock.now += timedelta(minutes=7)
    clock.now = moment
    return ledger


def _stand_in(state: State) -> Recorded:
    """A benchmark's in-memory state holding what the ledger's holds."""
    recorded = Recorded(state.slices.values())
    for alloc in state.allocations.values():
        hold = Hold(alloc.id, alloc.owner, tuple(alloc.slices), alloc.created, dict(alloc.request))
        recorded.hold(hold)
    recorded.card_changed.update(state.card_changed)
    return recorded


def _entries(queue: list[tuple[int, str]], moment: datetime) -> list[QueueEntry]:
    return [
        QueueEntry(
            id=f"q{n}",
            priority=50,
            seq=100 + n,
            enqueued=moment - timedelta(minutes=n),
            request=JobRequest(memory_mib=gib * GIB, team=team),
            job=f"w{n}",
        )
        for n, (gib, team) in enumerate(queue)
    ]


def _decisions(result: PassResult) -> dict[str, Any]:
    return {
        "placed": [(e.id, tuple(p.slices)) for e, p in result.placed],
        "waiting": [(e.id, n.reason) for e, n in result.waiting],
        "never": [e.id for e, _ in result.never],
        "preempt": (result.preempt[0].id, result.preempt[1]) if result.preempt else None,
        "reclaim": result.reclaim,
        "recuts": [(r.card.key, r.after) for r in result.recuts],
        "borrowed": sorted(result.borrowed),
    }


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(holds=holds_st, night=st.booleans())
def test_the_snapshot_is_frozen_and_the_same_from_the_same_state(
    holds: list[tuple[str, str, int, bool]], night: bool
) -> None:
    moment = NIGHT if night else NOON
    with tempfile.TemporaryDirectory() as folder:
        ledger = _ledger(Path(folder), moment, holds)
        policy = parse_policy(POLICY, "pool.yaml")
        state, now = ledger.read().state, format_ts(moment)
        snap = snapshot(state, policy, now)
        # Built twice from one state, and from a second read of the ledger: equal.
        assert snapshot(state, policy, now) == snap
        assert snapshot(ledger.read().state, policy, now) == snap
        with pytest.raises(dataclasses.FrozenInstanceError):
            snap.now = NOON  # type: ignore[misc]
        with pytest.raises(TypeError):
            snap.slices["x"] = {}  # type: ignore[index]
        # A pass's working view is its own: what one holds, the next view does not see.
        first = snap.pool()
        free = sorted(first.free)
        if free:
            first.hold([free[0]], Holder(alloc="tentative", slices=(free[0],)))
        again = snap.pool()
        assert sorted(again.free) == free and "tentative" not in again.holds
        assert snapshot(state, policy, now) == snap  # the snapshot did not change
        # The policy in force at that instant: the night window's quota and elastic off.
        assert snap.windows == (("night",) if night else ())
        assert (snap.elastic is None) == night
        assert snap.shares is not None
        train = snap.shares.quotas["train"][0].nominal["gpu-memory"]
        assert train == (320 if night else 160) * GIB


@SETTINGS
@given(holds=holds_st, queue=queue_st, night=st.booleans())
def test_production_and_a_benchmark_decide_the_same_on_the_same_state(
    holds: list[tuple[str, str, int, bool]], queue: list[tuple[int, str]], night: bool
) -> None:
    """JobsCore.snapshot (production) and replay.pass_snapshot (the benchmarks), each on its
    own kind of state holding the same, give equal snapshots and passes that decide the
    same (placements, waits and their reasons, victims, re-cuts)."""
    moment = NIGHT if night else NOON
    with tempfile.TemporaryDirectory() as folder:
        ledger = _ledger(Path(folder), moment, holds)
        policy = parse_policy(POLICY, "pool.yaml")
        core = JobsCore(ledger, Nodes([], _no_node), owner="ann", policy=policy)
        state = ledger.read().state
        entries = _entries(queue, moment)
        production = core.snapshot(state, format_ts(moment), queue=entries)
        bench: Snapshot = pass_snapshot(_stand_in(state), policy, moment, glob_hosts)
        bench = bench.with_queue(entries)
        assert bench == production
        for preempt in (False, True):
            ours = run_pass(production, preempt=preempt, foresee=True)
            theirs = run_pass(bench, preempt=preempt, foresee=True)
            assert _decisions(ours) == _decisions(theirs)


# Steps on a queue: ("enqueue", policy) a new entry, ("dequeue", n) the n-th queued entry,
# ("finish", n) its job leaves the queued state (the entry goes stale), ("policy", n, p) its
# job's placement policy changes.
steps_st = st.lists(
    st.one_of(
        st.tuples(st.just("enqueue"), st.sampled_from(["best-fit", "spread"])),
        st.tuples(st.just("dequeue"), st.integers(0, 5)),
        st.tuples(st.just("finish"), st.integers(0, 5)),
        st.tuples(st.just("policy"), st.integers(0, 5), st.sampled_from(["best-fit", "pack"])),
    ),
    max_size=30,
)


@SETTINGS
@given(steps=steps_st)
def test_a_loops_memo_of_entries_gives_what_a_fresh_read_gives(steps: list[tuple]) -> None:
    """sched.snapshot.queued with a long-running caller's memo returns, after every change
    to the queue and its jobs, exactly the entries and stale ids a fresh build returns; it
    reuses an entry only while the state holds the same record and policy, and forgets what
    left the queue."""
    from gpupoolctl.sched.snapshot import queued

    class Queue:  # the two fields of the ledger's state that queued() reads
        def __init__(self) -> None:
            self.queue: dict[str, dict[str, Any]] = {}
            self.jobs: dict[str, dict[str, Any]] = {}

    state, memo, seq = Queue(), {}, 0
    for step in steps:
        ids = list(state.queue)
        if step[0] == "enqueue":
            seq += 1
            state.jobs[f"j{seq}"] = {"state": "queued", "policy": step[1]}
            state.queue[f"q{seq}"] = {
                "id": f"q{seq}",
                "owner": "ann",
                "priority": 50,
                "request": {"memory_mib": seq * GIB},
                "job": f"j{seq}",
                "seq": seq,
                "ts": format_ts(NOON + timedelta(seconds=seq)),
            }
        elif ids and step[0] == "dequeue":
            del state.queue[ids[step[1] % len(ids)]]
        elif ids and step[0] == "finish":
            job = state.queue[ids[step[1] % len(ids)]]["job"]
            state.jobs[job] = {
                **state.jobs[job],
                "state": "running",
            }  # replaced, as the ledger does
        elif ids and step[0] == "policy":
            job = state.queue[ids[step[1] % len(ids)]]["job"]
            state.jobs[job] = {**state.jobs[job], "policy": step[2]}
        before = dict(memo)
        remembered, stale = queued(state, memo)
        fresh, fresh_stale = queued(state)
        assert remembered == fresh and stale == fresh_stale
        assert set(memo) == {e.id for e in fresh}  # nothing that left the queue is kept
        for entry in remembered:  # the same object while record and policy are the same
            kept = before.get(entry.id)
            same = kept is not None and kept[0] is state.queue[entry.id]
            same = same and kept[1] == (entry.policy or "best-fit")
            assert (kept is not None and kept[2] is entry) == same
