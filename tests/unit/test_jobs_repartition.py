"""jobs.repartition, the one executor of `partition apply` and elastic re-cuts, against a
simulated DGX reached by the real agent (local transport) and a real ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.jobs import Nodes, repartition, reshape
from gpupoolctl.jobs.repartition import CardWork, apply_plans
from gpupoolctl.ledger import Ledger
from gpupoolctl.partition import parse_spec, plan_host
from gpupoolctl.remote import run_agent_each, target_from_vars
from gpupoolctl.sched.cards import cards_of
from gpupoolctl.sched.elastic import Recut

CUT = """
version: v1
mig-configs:
  cut:
    - devices: [0, 1]
      mig-enabled: true
      mig-devices: {"1g.10gb": 7}
"""


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> CardWork:
    monkeypatch.setenv("GPUPOOL_SIM_DIR", str(tmp_path / "sim"))
    target = target_from_vars("dgx", {"transport": "local", "sim": "dgx-h100"})
    ledger = Ledger(tmp_path / "ledger.jsonl", durable=False)
    work = CardWork(ledger, Nodes([target], run_agent_each))
    ledger.refresh_from_facts([facts(work)])
    return work


def facts(work: CardWork) -> Any:
    return work.nodes.one("dgx", "facts", {})


def plan(work: CardWork) -> Any:
    return plan_host(parse_spec(CUT), "cut", "dgx", [], facts(work).data)


def mig_modes(work: CardWork) -> list[str]:
    return [g["mig"]["mode"] for g in facts(work).data["gpus"][:2]]


def test_each_changed_card_is_reserved_then_closed_and_its_new_slices_recorded(work) -> None:
    assert work.ledger is not None
    applied = apply_plans(work, [plan(work)], {"dgx": facts(work).data}, reason="test")
    assert applied.refused == [] and applied.answers["dgx"].ok
    assert mig_modes(work) == ["enabled", "enabled"]
    state = work.ledger.read().state
    assert state.reshapes == {}
    assert state.reshape_totals == {"done": 2}
    ids = sorted(s for s in state.slices if s.startswith(("dgx/gpu0/", "dgx/gpu1/")))
    assert len(ids) == 14 and all("/mig-1g.10gb@" in s for s in ids)


def test_a_host_with_a_card_another_run_reserved_is_left_whole(work) -> None:
    """A re-cut (or another apply) holds GPU 1: the apply changes nothing on that host,
    not even GPU 0, which nobody holds."""
    assert work.ledger is not None
    state = work.ledger.read().state
    card = cards_of(state.slices.values())["dgx/gpu1"]
    recut = Recut(card, tuple(("1g.10gb", n) for n in range(7)), "test", ("j-1",), None)
    other = work.ledger.write(lambda tx: reshape.reserve(tx, recut)).value
    assert other is not None
    before = mig_modes(work)
    applied = apply_plans(work, [plan(work)], {"dgx": facts(work).data}, reason="test")
    (message,) = applied.refused
    assert "dgx/gpu1 is being changed by a re-cut (test) by pid" in message
    assert "nothing on dgx is changed" in message
    assert applied.answers == {}  # no request was sent
    assert mig_modes(work) == before
    assert list(work.ledger.read().state.reshapes) == [other.id]  # theirs, untouched


def test_an_elastic_pass_leaves_a_card_an_apply_reserved_alone(work) -> None:
    assert work.ledger is not None
    state = work.ledger.read().state
    key = "dgx/gpu0"

    def first(tx: Any) -> Any:
        return repartition.reserve_card(
            tx, key=key, host="dgx", gpus=[0], before="whole", after="cut",
            reason="partition apply -c cut", source="apply",
        )  # fmt: skip

    work.ledger.write(first)
    card = cards_of(state.slices.values())[key]
    recut = Recut(card, tuple(("1g.10gb", n) for n in range(7)), "test", ("j-1",), None)
    assert work.ledger.write(lambda tx: reshape.reserve(tx, recut)).value is None


def test_without_a_ledger_the_same_requests_are_sent_and_nothing_recorded(
    work, tmp_path: Path
) -> None:
    bare = CardWork(None, work.nodes)
    applied = apply_plans(bare, [plan(work)], {"dgx": facts(work).data}, reason="test")
    assert applied.answers["dgx"].ok and mig_modes(work) == ["enabled", "enabled"]
    assert repartition.recover(bare) == []
