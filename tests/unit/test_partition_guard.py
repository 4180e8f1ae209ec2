"""GPUs left alone because the ledger says their slices are held: who holds them, and the
GPU counted as refused in the outcome (never as "already as asked")."""

from __future__ import annotations

from typing import Any

from gpupoolctl.ledger.state import State
from gpupoolctl.partition.guard import held_gpus, keep_held_gpus
from gpupoolctl.partition.outcome import merge_outcomes
from tests.unit.test_partition_plan import nvidia_gpu, one

TS = "2025-01-01T00:00:00.000000Z"


def record(seq: int, op: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"seq": seq, "ts": TS, "actor": "test", "op": op, "data": data}


def ledger_state() -> State:
    state = State()
    slices = [
        {"id": "n1/gpu6", "host": "n1", "gpu": 6, "kind": "gpu"},
        {"id": "n1/gpu7", "host": "n1", "gpu": 7, "kind": "gpu"},
    ]
    state.apply(record(1, "slices", {"hosts": ["n1"], "slices": slices}))
    state.apply(record(2, "alloc", {"id": "a-2", "owner": "alice", "slices": ["n1/gpu7"]}))
    job = {"id": "a-3", "owner": "bob", "slices": ["n1/gpu6"], "request": {"job": "j-1"}}
    state.apply(record(3, "alloc", job))
    return state


def test_held_gpus_name_the_allocation_its_owner_and_its_job() -> None:
    assert held_gpus(ledger_state(), TS) == {
        ("n1", 7): ["a-2 (alice)"],
        ("n1", 6): ["a-3 (bob, job j-1)"],
    }


def test_a_held_gpu_is_refused_in_the_outcome_even_when_nothing_was_sent() -> None:
    whole = "x:\n  - devices: all\n    mig-enabled: false\n"
    plan = one(whole, nvidia_gpu(7, instances=[("3g.40gb", 0, None), ("3g.40gb", 4, None)]))
    ops = len(plan.gpus[0].ops)
    assert ops > 0 and plan.changed
    messages = keep_held_gpus([plan], held_gpus(ledger_state(), TS))
    reason = "left as it is, its slices are held by a-2 (alice); release them first, or use --force"
    assert messages == [f"n1 GPU 7: {reason}"]
    assert not plan.changed and plan.agent_args(False)["gpus"] == []  # nothing is sent
    merged = merge_outcomes([plan], {})
    assert merged.failed  # not "nothing to change"
    (gpu,) = merged.hosts[0]["gpus"]
    assert gpu["index"] == 7 and not gpu["ok"] and gpu["applied"] == 0
    assert gpu["error"] == reason and gpu["ops"] == ops
