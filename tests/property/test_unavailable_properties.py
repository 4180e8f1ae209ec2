"""What keeps a slice out of placement (sched.unavailable), on random ledgers: a slice with
any mark (lost node or card, a drain of either source, a stale run, stray processes, a
quarantined hold, a re-cut) is never placed, by `place`, `alloc`'s rule or a scheduling
pass; a no-fit reason's counts add up to every matching slice, each counted under the
reason the one decision gives; and a snapshot keeps the same marks."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpupoolctl.ledger.state import State, card_key
from gpupoolctl.ledger.units import format_ts
from gpupoolctl.sched import ALLOC_POLICY, JobRequest, Placement, PoolView, QueueEntry, place
from gpupoolctl.sched.place import not_free
from gpupoolctl.sched.queue import schedule_pass
from gpupoolctl.sched.unavailable import KINDS, LABELS, blocks
from tests.property.test_sched_properties import pools

SETTINGS = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NOW = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)
STAMP = format_ts(NOW)
MARKS = ("lost-card", "stray", "fence", "quarantine", "reshape", "drain-card", "alloc")


@st.composite
def ledgers(draw: st.DrawFn) -> State:
    """A ledger replayed from records: slices (some read lost, some with stray processes),
    holds, drains of hosts and cards by either source, lost hosts, fenced runs, quarantined
    holds, re-cuts in flight."""
    slices = draw(pools())
    hosts = sorted({s["host"] for s in slices})
    cards = sorted({card_key(s) for s in slices if card_key(s)})
    marks = {s["id"]: draw(st.sampled_from((None, None, None, *MARKS))) for s in slices}
    for entry in slices:
        if marks[entry["id"]] == "lost-card":
            entry["lost"] = True
        elif marks[entry["id"]] == "stray":
            entry["stray_pids"] = [draw(st.integers(2, 99999))]
    records: list[tuple[str, dict[str, Any]]] = [("slices", {"hosts": hosts, "slices": slices})]
    by_id = {s["id"]: s for s in slices}
    reserved: dict[str, set[int]] = {}  # host -> cards a re-cut reserved (one each)
    for n, (sid, mark) in enumerate(marks.items()):
        if mark == "alloc":
            records.append(("alloc", {"id": f"a-{n}", "owner": "ann", "slices": [sid]}))
        elif mark == "fence":
            fence = {"host": sid.split("/", 1)[0], "node_id": f"j-{n}", "slices": [sid]}
            records.append(("fence", {**fence, "state": "fenced"}))
        elif mark == "quarantine":
            hold = {"id": f"a-{1000 + n}", "owner": "bob", "slices": [sid], "seq": n}
            records.append(("repair", {"holds": [hold], "gaps": []}))
        elif mark == "reshape" and by_id[sid]["gpu"] not in reserved.get(by_id[sid]["host"], ()):
            reserved.setdefault(by_id[sid]["host"], set()).add(by_id[sid]["gpu"])
            card = card_key(by_id[sid])
            records.append(
                ("reshape", {"id": f"r-{n}", "gpu": card, "state": "reserved", "slices": [sid]})
            )
        elif mark == "drain-card":
            source = draw(st.sampled_from(("admin", "health")))
            drain = {"target": card_key(by_id[sid]), "state": "drained", "source": source}
            records.append(("drain", drain))
    for host in draw(st.lists(st.sampled_from(hosts), max_size=2, unique=True)):
        if draw(st.booleans()):
            records.append(("host", {"host": host, "state": "lost", "since": STAMP}))
        else:
            source = draw(st.sampled_from(("admin", "health")))
            records.append(
                ("drain", {"target": host, "state": "drained", "reason": "y", "source": source})
            )
    if cards and draw(st.booleans()):  # a card drained by both: each lifted on its own
        card = draw(st.sampled_from(cards))
        for source in ("admin", "health"):
            records.append(
                ("drain", {"target": card, "state": "drained", "reason": "z", "source": source})
            )
        if draw(st.booleans()):
            records.append(("drain", {"target": card, "state": "undrained", "source": "admin"}))
    state = State()
    for seq, (op, data) in enumerate(records, 1):
        state.apply({"seq": seq, "ts": STAMP, "actor": "t@h", "op": op, "data": data})
    assert not state.problems, state.problems
    return state


REQUESTS = st.builds(
    JobRequest,
    gpus=st.integers(1, 3),
    profile=st.sampled_from([None, None, "gpu", "1g.10gb"]),
    memory_mib=st.sampled_from([None, None, 9000, 30000]),
    host=st.sampled_from([None, None, "n0", "n1*"]),
)


@SETTINGS
@given(ledgers(), REQUESTS)
def test_a_marked_slice_is_never_placed(state: State, request: JobRequest) -> None:
    found = blocks(state)
    for policy in ("best-fit", "spread", ALLOC_POLICY):
        pool = PoolView.from_state(state, STAMP)
        assert not set(found) & set(pool.free)  # never offered
        result = place(request, pool, policy)
        if isinstance(result, Placement):
            assert not set(result.slices) & set(found), (result.slices, found)
    entries = [QueueEntry(id=f"q-{i}", priority=50, seq=i, enqueued=NOW, request=request)
               for i in range(3)]  # fmt: skip
    passed = schedule_pass(entries, PoolView.from_state(state, STAMP), NOW)
    for _, placement in passed.placed:
        assert not set(placement.slices) & set(found)


@SETTINGS
@given(ledgers(), REQUESTS)
def test_the_reason_counts_add_up_to_every_matching_slice(
    state: State, request: JobRequest
) -> None:
    pool = PoolView.from_state(state, STAMP)
    free, taken = not_free(request, pool)
    matching = list(pool.all_candidates(request))
    assert free + sum(n for _, n in taken) == len(matching)
    found = blocks(state)
    expected: dict[str, int] = {}
    for slot in matching:
        if state.holder(slot.id, STAMP) is not None:
            why = "held"
        elif slot.id in found:
            why = found[slot.id].label
        else:
            continue
        expected[why] = expected.get(why, 0) + 1
    assert dict(taken) == expected
    order = ["held", *(LABELS[k] for k in KINDS)]
    assert [why for why, _ in taken] == sorted(dict(taken), key=order.index)


@SETTINGS
@given(ledgers())
def test_a_snapshot_keeps_every_mark(state: State) -> None:
    assert blocks(State.from_dict(state.to_dict())) == blocks(state)
