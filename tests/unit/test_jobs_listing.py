"""The job list from the ledger alone (gpupoolctl.jobs.listing): whether a refresh would
have anything to do, and which jobs are recent."""

from __future__ import annotations

from typing import Any

import pytest

from gpupoolctl.jobs.listing import idle, recent
from gpupoolctl.ledger.state import State

NOW = 1_750_000_000.0  # 2025-06-15T15:06:40Z


def ts(seconds_ago: float) -> str:
    from datetime import UTC, datetime

    from gpupoolctl.ledger.units import format_ts

    return format_ts(datetime.fromtimestamp(NOW - seconds_ago, UTC))


def state_with(**parts: Any) -> State:
    state = State()
    for name, value in parts.items():
        setattr(state, name, value)
    return state


ENDED = {"j-3": {"id": "j-3", "state": "done", "updated": ts(60)}}


@pytest.mark.parametrize(
    ("parts", "expected"),
    [
        ({}, True),
        ({"finished": ENDED}, True),  # ended jobs are history: nothing to ask
        ({"jobs": {"j-1": {"id": "j-1", "state": "running"}}}, False),
        ({"jobs": {"j-1": {"id": "j-1", "state": "pending"}}}, False),
        ({"queue": {"q-1": {"id": "q-1"}}}, False),
        ({"reshapes": {"r-1": {"id": "r-1", "gpu": "n/gpu0"}}}, False),
        ({"lost": {"n1": {"host": "n1"}}}, False),
        ({"fences": {"n1:x": {"host": "n1", "node_id": "x"}}}, False),
    ],
    ids=["empty", "ended", "running", "pending", "queued", "recut", "lost", "fenced"],
)
def test_idle_only_when_a_refresh_has_nothing_to_settle_reap_or_schedule(parts, expected):
    assert idle(state_with(**parts)) is expected


def test_recent_lists_active_jobs_and_those_ended_within_the_hour_in_id_order():
    state = state_with(
        jobs={"j-10": {"id": "j-10", "state": "queued"}},
        finished={
            "j-2": {"id": "j-2", "state": "done", "updated": ts(30)},
            "j-9": {"id": "j-9", "state": "failed", "updated": ts(7200)},
        },
    )
    assert [j["id"] for j in recent(state, now=NOW)] == ["j-2", "j-10"]
    assert [j["id"] for j in recent(state, now=NOW, everything=True)] == ["j-2", "j-9", "j-10"]
