"""Placement leaves hosts whose last contact failed alone, decided in sched from the ledger:
on random small pools, with random holds and random hosts recorded silent (a poll or a
launch got no answer) or lost, placement never chooses such a host while it places exactly
what the answering hosts' free slices can hold; the request is never refused for it (it
waits); and once the hosts answer again, their slices are placeable as before."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.ledger import State
from gpupoolctl.sched import Holder, NoFit, Placement, PoolView, place
from tests.property.test_sched_properties import (
    SETTINGS,
    candidates,
    fits_somewhere,
    held_pools,
    policies,
    requests,
)

NOW = "2025-06-01T01:00:00.000Z"
BACK = {"silent": "answering", "lost": "returned"}


class Journal:
    """Ledger records replayed into a State, as every process reads the ledger."""

    def __init__(self) -> None:
        self.state = State()

    def add(self, op: str, data: dict[str, Any]) -> None:
        seq = self.state.seq + 1
        record = {"seq": seq, "ts": "2025-06-01T00:00:00.000Z", "actor": "t", "op": op}
        self.state.apply({**record, "data": data})
        assert not self.state.problems, self.state.problems


def ledger_of(slices: list[dict], holders: list[Holder], away: dict[str, str]) -> Journal:
    journal = Journal()
    journal.add("slices", {"hosts": sorted({s["host"] for s in slices}), "slices": slices})
    for holder in holders:
        journal.add(
            "alloc",
            {"id": holder.alloc, "owner": "u", "slices": list(holder.slices), "request": {}},
        )
    for host, how in sorted(away.items()):
        since = "2025-06-01T00:30:00.000Z"
        journal.add("host", {"host": host, "state": how, "since": since, "why": "unreachable"})
    return journal


@SETTINGS
@given(held_pools(), st.data(), requests, policies)
def test_a_host_that_does_not_answer_is_never_chosen_while_another_fits(
    pool_and_holds, data, request, policy
):
    slices, holders = pool_and_holds
    hosts = sorted({s["host"] for s in slices})
    chosen = data.draw(st.lists(st.sampled_from(hosts), unique=True))
    away = {h: data.draw(st.sampled_from(["silent", "lost"])) for h in chosen}
    journal = ledger_of(slices, holders, away)
    by_id = {s["id"]: s for s in slices}

    result = place(request, PoolView.from_state(journal.state, NOW), policy)
    answering = [s for s in candidates(slices, holders, request) if s["host"] not in away]
    assert isinstance(result, Placement) == fits_somewhere(answering, request, policy)
    if isinstance(result, Placement):
        assert not {by_id[s]["host"] for s in result.slices} & set(away)
    else:  # it waits for the host to answer: refused only if it could never fit at all
        empty = place(request, PoolView(slices), policy)
        assert result.never == (isinstance(empty, NoFit) and empty.never)

    for host, how in sorted(away.items()):  # they answer again (a poll, or their facts)
        journal.add("host", {"host": host, "state": BACK[how]})
    again = PoolView.from_state(journal.state, NOW)
    assert set(again.free) == set(PoolView(slices, holders).free)
