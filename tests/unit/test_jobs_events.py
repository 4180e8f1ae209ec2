"""The loop's typed events (jobs/events.py): each kind's `to_dict` is the dict the loop
printed before its events were typed (same keys, order and values: `-o json` is a
contract), a kind outside a family's closed set is refused, and `schedule -o json` prints
exactly the events' dicts."""

from __future__ import annotations

import csv
import io
import json
from types import SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.jobs import events as ev
from gpupoolctl.jobs.events import (
    Event,
    Launched,
    NodeLost,
    NodeReturned,
    Preempted,
    RecutDue,
    Refused,
    Reshaped,
    StaleRunKilled,
    Waiting,
    WouldPreempt,
    WouldRecut,
    WouldStart,
)
from tests.property.test_cli_sequences import gpupoolctl


def old_launched(state: str, job: dict[str, Any], launched: dict[str, Any]) -> dict[str, Any]:
    """jobs/scheduling.py's launch event as it was built before it was typed (a copy)."""
    event = {"running": "started", "queued": "requeued"}.get(str(state), "launch-failed")
    return {
        "event": event,
        "job": job["id"],
        "hosts": [n["host"] for n in job["nodes"]],
        "error": launched.get("error"),
        **({"reason": launched.get("reason")} if state == "queued" else {}),
    }


def old_waiting(job: str, reason: str, code: str, recut: dict[str, str] | None) -> dict[str, Any]:
    """jobs/scheduling.py's waiting_event as it was built before it was typed (a copy)."""
    event: dict[str, Any] = {"event": "waiting", "job": job, "reason": reason, "code": code}
    if recut is not None:
        event["recut"] = recut
    return event


JOB = {"id": "j-7", "nodes": [{"host": "n1"}, {"host": "n2"}]}
DUE = {"gpu": "dgx/gpu0", "after": "7x 1g.10gb", "due": "2026-12-01T09:00:25.000000Z"}

# (the typed event, the dict the loop emitted for it before)
CASES: list[tuple[Event, dict[str, Any]]] = [
    (
        Waiting("j-1", "0 matching slice(s) free of 4", "not-free"),
        old_waiting("j-1", "0 matching slice(s) free of 4", "not-free", None),
    ),
    (
        Waiting("j-1", "waits for a re-cut", "recut", RecutDue(**DUE)),
        old_waiting("j-1", "waits for a re-cut", "recut", DUE),
    ),
    (
        Refused("j-2", "two vendors on one host"),
        {"event": "refused", "job": "j-2", "reason": "two vendors on one host"},
    ),
    (
        Refused("j-2", "no slice matches", "no-match"),
        {"event": "refused", "job": "j-2", "reason": "no slice matches", "code": "no-match"},
    ),
    (
        Refused("j-2", "no slice matches", "no-match", kind="would-refuse"),
        {"event": "would-refuse", "job": "j-2", "reason": "no slice matches", "code": "no-match"},
    ),
    (
        Launched("j-7", ("n1", "n2"), None, kind="started"),
        old_launched("running", JOB, {"state": "running"}),
    ),
    (
        Launched("j-7", ("n1", "n2"), "no answer", "n2 did not answer", kind="requeued"),
        old_launched("queued", JOB, {"error": "no answer", "reason": "n2 did not answer"}),
    ),
    (
        Launched("j-7", ("n1", "n2"), None, None, kind="requeued"),
        old_launched("queued", JOB, {}),
    ),
    (
        Launched("j-7", ("n1", "n2"), "exec failed", kind="launch-failed"),
        old_launched("failed", JOB, {"error": "exec failed"}),
    ),
    (
        Preempted("j-3", ("j-1", "j-2")),
        {"event": "preempted", "job": "j-3", "victims": ["j-1", "j-2"]},
    ),
    (
        Reshaped("dgx/gpu0", "gpu", "7x 1g.10gb", ("j-4",), None),
        {
            "event": "reshaped",
            "gpu": "dgx/gpu0",
            "before": "gpu",
            "after": "7x 1g.10gb",
            "jobs": ["j-4"],
            "error": None,
        },
    ),
    (
        Reshaped("dgx/gpu0", "gpu", "7x 1g.10gb", (), "busy", kind="reshape-failed"),
        {
            "event": "reshape-failed",
            "gpu": "dgx/gpu0",
            "before": "gpu",
            "after": "7x 1g.10gb",
            "jobs": [],
            "error": "busy",
        },
    ),
    (
        NodeLost("n1", "2026-12-01T09:00:00Z", None, ("j-5",)),
        {
            "event": "node-lost",
            "host": "n1",
            "since": "2026-12-01T09:00:00Z",
            "answered": None,
            "jobs": ["j-5"],
        },
    ),
    (
        NodeReturned("n1", True),
        {"event": "node-returned", "host": "n1", "undrained": True},
    ),
    (
        StaleRunKilled("j-5", "n1", "j-5.1"),
        {"event": "stale-run-killed", "job": "j-5", "host": "n1", "run": "j-5.1"},
    ),
    (
        WouldStart("j-6", ("n1/gpu0",), "fits now on n1/gpu0"),
        {
            "event": "would-start",
            "job": "j-6",
            "slices": ["n1/gpu0"],
            "reason": "fits now on n1/gpu0",
        },
    ),
    (
        WouldPreempt("j-6", ("j-1",), False, "would stop j-1 to make room"),
        {
            "event": "would-preempt",
            "job": "j-6",
            "victims": ["j-1"],
            "reclaim": False,
            "reason": "would stop j-1 to make room",
        },
    ),
    (
        WouldRecut("j-6,j-8", "dgx/gpu0", "gpu", "7x 1g.10gb", "would re-cut: idle"),
        {
            "event": "would-re-cut",
            "job": "j-6,j-8",
            "gpu": "dgx/gpu0",
            "before": "gpu",
            "after": "7x 1g.10gb",
            "reason": "would re-cut: idle",
        },
    ),
]


@pytest.mark.parametrize(("event", "old"), CASES, ids=[e.kind for e, _ in CASES])
def test_each_kind_gives_the_dict_the_loop_emitted_before(event: Event, old: dict) -> None:
    # Keys, their order and values: what `-o json` prints, byte for byte.
    assert list(event.to_dict().items()) == list(old.items())
    assert json.dumps(event.to_dict()) == json.dumps(old)


def test_the_cases_cover_every_kind() -> None:
    assert {e.kind for e, _ in CASES} == ev.KINDS


FAMILIES = [
    lambda kind: Waiting("j", "r", "c", kind=kind),
    lambda kind: Refused("j", "r", kind=kind),
    lambda kind: Launched("j", (), None, kind=kind),
    lambda kind: Preempted("j", (), kind=kind),
    lambda kind: Reshaped("g", "b", "a", (), None, kind=kind),
    lambda kind: NodeLost("h", "s", None, (), kind=kind),
    lambda kind: NodeReturned("h", False, kind=kind),
    lambda kind: StaleRunKilled("j", "h", "r", kind=kind),
    lambda kind: WouldStart("j", (), "r", kind=kind),
    lambda kind: WouldPreempt("j", (), False, "r", kind=kind),
    lambda kind: WouldRecut("j", "g", "b", "a", "r", kind=kind),
]


@pytest.mark.parametrize("make", FAMILIES)
@pytest.mark.parametrize("kind", ["exploded", "would-wait", "", "waiting ", "started"])
def test_a_kind_outside_the_family_is_refused(make: Any, kind: str) -> None:
    try:
        event = make(kind)
    except ValueError as exc:
        assert repr(kind) in str(exc)
    else:  # the one family whose kind it is
        assert kind in type(event).KINDS


def test_an_unknown_kind_is_refused_and_a_known_one_of_another_family_too() -> None:
    with pytest.raises(ValueError, match="'would-wait'"):
        Waiting("j-1", "r", "c", kind="would-wait")
    with pytest.raises(ValueError, match="'waiting'"):
        Refused("j-1", "r", kind="waiting")
    with pytest.raises(ValueError):
        Event()


# -- schedule -o json prints the events' dicts ---------------------------------------------

text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")), max_size=12)
maybe = st.none() | text
names = st.tuples(text) | st.tuples(text, text) | st.just(())
recuts = st.none() | st.builds(RecutDue, text, text, text)
one_event = st.one_of(
    st.builds(Waiting, text, text, text, recuts),
    st.builds(Refused, maybe, text, maybe, kind=st.sampled_from(Refused.KINDS)),
    st.builds(Launched, text, names, maybe, maybe, kind=st.sampled_from(Launched.KINDS)),
    st.builds(Preempted, maybe, names),
    st.builds(Reshaped, text, text, text, names, maybe, kind=st.sampled_from(Reshaped.KINDS)),
    st.builds(NodeLost, text, text, maybe, names),
    st.builds(NodeReturned, text, st.booleans()),
    st.builds(StaleRunKilled, text, text, text),
    st.builds(WouldStart, maybe, names, text),
    st.builds(WouldPreempt, maybe, names, st.booleans(), text),
    st.builds(WouldRecut, text, text, text, text, text),
)


def cli(*args: str) -> tuple[int, str]:
    code, out, err = gpupoolctl(*args)  # in this process, as the console script runs
    assert "Traceback" not in err, err
    return code, out


@settings(max_examples=25, deadline=None)
@given(events=st.lists(one_event, max_size=6))
def test_schedule_prints_the_events_to_dict_gives(events: list[Event]) -> None:
    """`schedule` and `schedule --dry-run`, JSON, YAML and the table: the JSON is exactly
    the events' dicts, in order, and every kind renders as a row of the table and CSV."""
    from gpupoolctl.cli import jobs_cmd
    from gpupoolctl.jobs import dryrun, refreshing

    fake = SimpleNamespace(warnings=[], hosts_failed=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(jobs_cmd, "open_jobs", lambda *a, **k: fake)
        patch.setattr(refreshing, "refresh", lambda jobs: SimpleNamespace(events=list(events)))
        patch.setattr(dryrun, "dry_pass", lambda jobs: list(events))
        for dry in ((), ("--dry-run",)):
            code, out = cli("-o", "json", "schedule", *dry)
            assert code == 0
            assert json.loads(out) == [e.to_dict() for e in events]
            assert out == json.dumps([e.to_dict() for e in events], indent=2) + "\n"
            code, out = cli("-o", "csv", "schedule", *dry)
            assert code == 0 and len(list(csv.reader(io.StringIO(out)))) == 1 + len(events)
            code, out = cli("-o", "yaml", "schedule", *dry)
            assert code == 0
            code, out = cli("schedule", *dry)
            assert code == 0


def test_a_dry_run_re_cut_row_names_the_jobs_it_is_made_for() -> None:
    """The table's JOB column of a would-re-cut row was always empty (the jobs were in
    -o json only); it names them as a reshaped row does."""
    from gpupoolctl.cli.jobs_cmd import _event_rows

    recut = WouldRecut("j-6,j-8", "dgx/gpu0", "gpu", "7x 1g.10gb", "would re-cut: idle")
    (row,) = _event_rows([recut])
    assert row["job"] == "j-6,j-8"
    assert row["detail"] == "dgx/gpu0: gpu -> 7x 1g.10gb"
