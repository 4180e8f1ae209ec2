"""Restarts, recovered jobs and lost nodes per ramp level: counted from samples and node
events, carried by the backends, saved and read back, shown only when there are some."""

from __future__ import annotations

import copy
import json
import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.jobs import refreshing
from gpupoolctl.jobs.events import Event, Launched, NodeLost, NodeReturned
from gpupoolctl.jobs.spec import MAX_RESTARTS
from gpupoolctl.stress import workload
from gpupoolctl.stress.backend import Finished, NoopBackend, Ticket, Work, job_spec
from gpupoolctl.stress.metrics import metric_value, summarize_level
from gpupoolctl.stress.model import METRICS, Sample
from gpupoolctl.stress.pool_backend import PoolBackend, finished_from
from gpupoolctl.stress.report_html import render_html
from gpupoolctl.stress.report_text import LEVEL_COLUMNS, level_columns, level_rows
from gpupoolctl.stress.result import dumps, from_dict, to_csv_rows, to_dict
from gpupoolctl.stress.runner import Ramp
from gpupoolctl.stress.scenario import parse_scenario, scenario_from_flags
from gpupoolctl.stress.thresholds import evaluate, parse_threshold
from gpupoolctl.stress.workload import RequestShape
from tests.unit.test_stress_pool_backend import DONE, StandInBackend, wait_in_slices
from tests.unit.test_stress_result import run_result
from tests.unit.test_stress_runner import scenario

WINDOW = (100.0, 110.0)
LOST = {"event": "node-lost", "host": "n1", "since": "2024-01-01T00:00:00Z", "jobs": []}
RETURNED = {"event": "node-returned", "host": "n1", "undrained": True}
# The same as a pass hands them over (jobs.events), and a job's event the backend leaves out.
PASS_LOST = NodeLost("n1", "2024-01-01T00:00:00Z", None, ())
PASS_RETURNED = NodeReturned("n1", True)


def sample(submitted: float, *, ok: bool, restarts: int = 0) -> Sample:
    return Sample(
        level=2,
        submitted=submitted,
        accepted=submitted,
        started=submitted + 0.1,
        ended=submitted + 1.0,
        ok=ok,
        error=None if ok else "exit code 1",
        restarts=restarts,
    )


def summarize(samples: list[Sample], **extra: Any) -> Any:
    return summarize_level(
        samples, level=2, model="closed", warmup_s=1.0, hold_s=10.0, window=WINDOW, **extra
    )


# -- summarize_level -------------------------------------------------------------------------


def test_restarts_sum_and_recovered_counts_ok_jobs_that_needed_a_restart() -> None:
    result = summarize(
        [
            sample(101.0, ok=True, restarts=2),  # recovered
            sample(102.0, ok=True, restarts=1),  # recovered
            sample(103.0, ok=True),  # never failed: not recovered
            sample(104.0, ok=False, restarts=3),  # used its restarts and failed anyway
        ]
    )
    assert (result.restarts, result.recovered) == (6, 2)
    assert (result.completed, result.failed) == (3, 1)
    assert result.failure_rate == pytest.approx(0.25)


def test_restarts_count_only_jobs_submitted_in_the_steady_window() -> None:
    result = summarize(
        [
            sample(99.0, ok=True, restarts=1),  # warm-up
            sample(105.0, ok=True, restarts=1),
            sample(110.0, ok=True, restarts=1),  # drain: the window is [start, end)
        ]
    )
    assert (result.submitted, result.restarts, result.recovered) == (1, 1, 1)


def test_lost_nodes_count_the_node_lost_events_given_whatever_the_window() -> None:
    # The runner picks the events of the whole level (warm-up to drain): a node lost during
    # warm-up counts, so summarize_level does not filter them by the steady window.
    events = [
        {**LOST, "seen": 95.0},
        {**RETURNED, "seen": 96.0},
        {**LOST, "host": "n2", "seen": 115.0},
    ]
    assert summarize([sample(101.0, ok=True)], node_events=events).lost_nodes == 2
    assert summarize([sample(101.0, ok=True)]).lost_nodes == 0


def test_the_new_counts_are_metrics_for_thresholds() -> None:
    for name in ("restarts", "recovered", "lost_nodes"):
        assert name in METRICS
    level = summarize(
        [sample(101.0, ok=True, restarts=4), sample(102.0, ok=True, restarts=2)],
        node_events=[{**LOST, "seen": 101.0}],
    )
    assert metric_value(level, "restarts") == 6.0
    assert metric_value(level, "recovered") == 2.0
    assert metric_value(level, "lost_nodes") == 1.0
    checks = evaluate((parse_threshold("restarts < 5"), parse_threshold("lost_nodes <= 1")), level)
    assert [(c.expr, c.value, c.ok) for c in checks] == [
        ("restarts < 5", 6.0, False),
        ("lost_nodes <= 1", 1.0, True),
    ]
    with pytest.raises(UsageError, match="count"):
        parse_threshold("restarts < 5s")


# -- the runner asks the backend for the level's node events ---------------------------------


class EventfulBackend(NoopBackend):
    """Ends each job at once after `restarts` restarts. The first job of level i (its
    name: stress-<i>-<worker>-<count>) sees i + 1 nodes lost as it is submitted."""

    def __init__(self, restarts: int = 0) -> None:
        super().__init__()
        self.restarts = restarts
        self.asked: list[tuple[float, float]] = []
        self.events: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def submit(self, work: Work) -> Ticket:
        index, _, count = work.name.split("-")[1:]
        if count == "1":
            with self.lock:
                for n in range(int(index) + 1):
                    self.events.append({**LOST, "host": f"n{index}{n}", "seen": time.time()})
        return super().submit(work)

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        time.sleep(0.01)
        return Finished(ok=True, started=ticket.accepted, ended=time.time(), restarts=self.restarts)

    def events_between(self, start: float, end: float) -> list[dict[str, Any]]:
        with self.lock:
            self.asked.append((start, end))
            return [e for e in self.events if start <= e["seen"] < end]


def test_each_level_counts_the_nodes_lost_from_its_start_to_its_end_drain_included() -> None:
    backend = EventfulBackend(restarts=1)
    began = time.time()
    # Seen before the ramp and long after it: no level's.
    backend.events = [{**LOST, "seen": began - 60}, {**LOST, "seen": began + 3600}]
    # Level 1 has one submitter, level 2 two: each one's first job (in warm-up, not in the
    # steady window) sees 1 node lost in level 1, 2 in level 2.
    result = Ramp(scenario(levels=(1, 2), warmup_s=0.2, hold_s=0.2), backend).run()
    first, second = result.levels
    assert (first.lost_nodes, second.lost_nodes) == (1, 4)
    # The levels follow one another: each asked window starts after the previous one ended,
    # and spans at least warm-up and hold.
    [(start1, end1), (start2, _)] = backend.asked
    assert began <= start1 and end1 <= start2 and end1 - start1 >= 0.4
    assert first.restarts == first.recovered == first.completed > 0


def test_a_backend_without_events_between_lost_no_nodes() -> None:
    class Plain:
        name, transport = "plain", None

        def submit(self, work: Work) -> Ticket:
            return Ticket(job_id="p", accepted=time.time())

        def wait(self, ticket: Ticket, timeout: float) -> Finished:
            return Finished(ok=True, started=ticket.accepted, ended=time.time())

        def abandon(self, ticket: Ticket) -> None: ...

        def warnings(self) -> list[str]:
            return []

        def close(self) -> None: ...

    result = Ramp(scenario(levels=(1,), hold_s=0.05), Plain()).run()
    assert result.levels[0].lost_nodes == 0 and result.levels[0].restarts == 0


# -- the pool backend ------------------------------------------------------------------------


def test_finished_from_takes_the_restarts_the_job_used() -> None:
    assert finished_from({**DONE, "restarts": 2, "max_restarts": 3}, 200.0).restarts == 2
    assert finished_from(DONE, 200.0).restarts == 0  # a record from before restarts
    for odd in (None, -1, "2", True):
        assert finished_from({**DONE, "restarts": odd}, 200.0).restarts == 0


def test_the_reaper_keeps_node_events_with_when_it_saw_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    passes: list[float] = []
    finished: dict[str, dict[str, Any]] = {}

    def refresh(jobs: Any) -> Any:
        passes.append(time.time())
        events: list[Event] = [Launched("j-9", (), None, kind="started")]
        if len(passes) == 1:  # the first pass found a host lost
            events.insert(0, PASS_LOST)
        if len(passes) == 2:  # the second, that it came back; the job ended
            events.insert(0, PASS_RETURNED)
            finished["j-1"] = DONE
        return SimpleNamespace(events=events)

    monkeypatch.setattr(refreshing, "refresh", refresh)
    backend = StandInBackend(finished)
    for_fakes = backend._new_jobs

    def still_running() -> Any:
        fake, meter = for_fakes()
        fake.read = lambda: SimpleNamespace(
            state=SimpleNamespace(finished=finished, jobs={} if finished else {"j-1": {}})
        )
        return fake, meter

    backend._new_jobs = still_running  # type: ignore[method-assign]
    before = time.time()
    ticket = Ticket(job_id="j-1", accepted=before)
    try:
        assert wait_in_slices(backend, ticket, within=5.0) is not None
    finally:
        backend.close()
    after = time.time()
    assert len(passes) == 2
    seen = backend.events_between(before, after + 1)
    assert [e["event"] for e in seen] == ["node-lost", "node-returned"]  # no job events
    assert seen[0]["host"] == "n1" and passes[0] <= seen[0]["seen"] <= passes[1]
    assert backend.events_between(after + 1, after + 2) == []
    assert backend.events_between(before, seen[0]["seen"]) == []  # [start, end)


def test_node_events_a_submit_s_pass_saw_are_kept_too() -> None:
    backend = StandInBackend({})
    fake = SimpleNamespace(warnings=[], hosts_failed=False, node_events=[PASS_LOST])
    before = time.time()
    backend._collect(fake)  # type: ignore[arg-type]
    assert fake.node_events == []  # taken, so that it is not counted twice
    backend._collect(fake)  # type: ignore[arg-type]
    [event] = backend.events_between(before, time.time() + 1)
    assert event["event"] == "node-lost"


def test_the_other_backends_see_no_node_events() -> None:
    assert NoopBackend().events_between(0, time.time() + 1) == []
    assert hasattr(PoolBackend, "events_between")


# -- max-restarts in request shapes ----------------------------------------------------------


def test_request_max_restarts_reaches_the_job_spec() -> None:
    shape = RequestShape(mem="10G", max_restarts=3)
    spec = job_spec(Work(argv=["true"], name="stress-1", shape=shape), "best-fit")
    assert spec.max_restarts == 3
    assert "max_restarts" not in shape.job_fields()  # the job's budget, not the request's
    assert job_spec(Work(["true"], "stress-2", RequestShape()), "best-fit").max_restarts == 0


def test_request_max_restarts_is_bounded_as_submit_s() -> None:
    assert workload.MAX_RESTARTS == MAX_RESTARTS
    for bad in (-1, MAX_RESTARTS + 1, 1.5, True, "2"):
        with pytest.raises(UsageError, match="max-restarts"):
            RequestShape(max_restarts=bad)  # type: ignore[arg-type]


def test_scenario_files_and_flags_set_max_restarts() -> None:
    text = "levels: 1\nrequests:\n  - {mem: 10G, max-restarts: 2}\n  - {gpus: 2}\n"
    parsed = parse_scenario(text, "s.yaml")
    assert [s.max_restarts for s in parsed.requests] == [2, 0]
    with pytest.raises(SourceError, match=r"s\.yaml:3.*max-restarts"):
        parse_scenario("levels: 1\nrequests:\n  - {max-restarts: 500}\n", "s.yaml")
    # The flag sets every shape's budget, also one made from --mem.
    assert [s.max_restarts for s in scenario_from_flags(parsed, max_restarts=0).requests] == [
        0,
        0,
    ]
    flagged = scenario_from_flags(levels="1", mem="5G", max_restarts=1)
    assert [(s.mem, s.max_restarts) for s in flagged.requests] == [("5G", 1)]
    with pytest.raises(UsageError, match="--max-restarts"):
        scenario_from_flags(levels="1", max_restarts=101)
    # The scenario as saved in a result reads back the same.
    from gpupoolctl.stress.scenario import scenario_from_dict

    assert scenario_from_dict(parsed.to_dict()) == parsed


# -- results and reports ---------------------------------------------------------------------


def _with_recovery() -> Any:
    result = run_result()
    result.levels[1].restarts, result.levels[1].recovered = 5, 3
    result.levels[2].lost_nodes = 1
    return result


def test_a_result_round_trips_restarts_recovered_and_lost_nodes() -> None:
    result = _with_recovery()
    again = from_dict(json.loads(dumps(result)), "r.json")
    assert [(lv.restarts, lv.recovered, lv.lost_nodes) for lv in again.levels] == [
        (0, 0, 0),
        (5, 3, 0),
        (0, 0, 1),
    ]
    assert dumps(again) == dumps(result)


def test_a_result_saved_before_recovery_was_counted_reads_as_none() -> None:
    old = to_dict(run_result())
    for level in old["levels"]:
        for key in ("restarts", "recovered", "lost_nodes"):
            del level[key]
    read = from_dict(old, "old.json")
    assert all((lv.restarts, lv.recovered, lv.lost_nodes) == (0, 0, 0) for lv in read.levels)


@pytest.mark.parametrize("bad", [-1, 1.5, "3", None, True])
def test_a_damaged_restart_count_is_one_clear_error(bad: object) -> None:
    data = copy.deepcopy(to_dict(_with_recovery()))
    data["levels"][1]["restarts"] = bad
    with pytest.raises(SourceError, match=r"levels\[1\]\.restarts: expected a whole number"):
        from_dict(data, "r.json")


def test_csv_rows_carry_the_counts() -> None:
    rows = to_csv_rows(_with_recovery())
    assert [(r["restarts"], r["recovered"], r["lost_nodes"]) for r in rows] == [
        (0, 0, 0),
        (5, 3, 0),
        (0, 0, 1),
    ]


def test_the_table_shows_recovery_columns_only_when_some_level_has_one() -> None:
    quiet = run_result()
    assert level_columns(quiet) == LEVEL_COLUMNS
    assert all(list(row) == list(LEVEL_COLUMNS) for row in level_rows(quiet))
    assert "restarts" not in render_html(quiet).lower()
    loud = _with_recovery()
    columns = list(level_columns(loud))
    at = columns.index("failure")
    assert columns[at + 1 : at + 4] == ["restarts", "recovered", "lost_nodes"]
    rows = level_rows(loud)
    assert all(list(row) == columns for row in rows)
    assert (rows[1]["restarts"], rows[1]["recovered"], rows[2]["lost_nodes"]) == (5, 3, 1)
    page = render_html(loud)
    assert "<th>restarts</th>" in page and "<th>lost nodes</th>" in page
