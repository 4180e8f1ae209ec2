"""The ramp's bottleneck verdict from synthetic per-level splits: the phase that grew, its
share, the link class, capacity against scheduler, what was not measured; and the text and
HTML reports that show it."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.stress.bottleneck import (
    LEAVES,
    UNATTRIBUTED,
    find_bottleneck,
    link_split,
    time_split,
)
from gpupoolctl.stress.model import Distribution, KneePoint, Knees, LevelResult, RunResult
from gpupoolctl.stress.report_html import render_html
from gpupoolctl.stress.report_text import bottleneck_lines, dominant_phase, level_rows


def _dist(mean: float | None) -> Distribution:
    if mean is None:
        return Distribution.empty()
    return Distribution(10, mean, mean, mean, mean, mean, mean)


def _level(
    n: float,
    phases: dict[str, float],
    throughput: float = 1.0,
    *,
    links: dict[str, float] | None = None,
    bound: dict[str, int] | None = None,
    turnaround: float | None = None,
    measured: bool = True,
) -> LevelResult:
    if turnaround is None:
        top = [v for k, v in phases.items() if k not in ("compute", "comm")]
        turnaround = sum(top) if top else None
    return LevelResult(
        level=float(n),
        model="closed",
        warmup_s=1.0,
        hold_s=10.0,
        window_s=10.0,
        submitted=10 if measured else 0,
        completed=10 if measured else 0,
        failed=0,
        dropped=0,
        throughput=throughput,
        failure_rate=0.0,
        queue_wait=_dist(phases.get("queue")),
        turnaround=_dist(turnaround),
        phases=dict(phases),
        harness_s=0.0,
        comm_links=dict(links or {}),
        bound_by=dict(bound or {}),
    )


def _knees(kneedle: float | None = None, usl: float | None = None) -> Knees:
    return Knees(
        kneedle=KneePoint("kneedle", "diminishing returns", kneedle, note=None),
        usl=KneePoint("usl", "capacity peak", usl),
        latency=KneePoint("latency", "latency knee", None, note="none"),
    )


def _train(knee_link: str = "nic") -> list[LevelResult]:
    """A training ramp whose all-reduce leaves its island at level 8."""
    return [
        _level(
            1,
            {"ledger": 0.01, "launch": 0.2, "queue": 0.05, "run": 1.0, "compute": 0.8, "comm": 0.1},
            1.0,
            links={"nvlink": 0.1},
        ),
        _level(
            8,
            {"ledger": 0.01, "launch": 0.2, "queue": 0.05, "run": 3.0, "compute": 1.0, "comm": 1.9},
            3.0,
            links={knee_link: 1.8, "nvlink": 0.1},
            bound={knee_link: 9},
        ),
        _level(
            16,
            {"ledger": 0.01, "launch": 0.2, "queue": 3.0, "run": 3.0, "compute": 1.0, "comm": 1.9},
            3.1,
            links={knee_link: 1.8, "nvlink": 0.1},
        ),
    ]


def _queue_ramp(last_throughput: float) -> list[LevelResult]:
    """Queue wait grows from level 16; throughput at level 32 decides capacity or not."""
    rows = [(1, 0.1, 1.0), (4, 0.1, 4.0), (8, 0.3, 7.5), (16, 4.2, 8.0), (32, 8.0, last_throughput)]
    return [
        _level(n, {"ledger": 0.01, "launch": 0.2, "queue": q, "run": 1.0}, t) for n, q, t in rows
    ]


# -- the sentence ------------------------------------------------------------------------------


def test_communication_over_the_network_is_named_with_its_share_and_compute():
    found = find_bottleneck(_train(), _knees(kneedle=8))
    assert found is not None
    assert (found.baseline_level, found.knee_level, found.knee_source) == (1, 8, "kneedle")
    assert found.phase == "comm" and found.link == "nic"
    assert found.growth == pytest.approx(19)
    assert found.share == pytest.approx(1.9 / 3.26)
    assert found.sentence.startswith("from level 8, 58% of each job's time is communication")
    assert "the network between nodes (nic)" in found.sentence
    assert "compute is 31%" in found.sentence
    assert found.sentence.endswith("the bottleneck is the interconnect, not the GPUs")


@pytest.mark.parametrize(
    ("link", "words"),
    [
        ("nvlink", "the GPU fabric inside an island"),
        ("xgmi", "the GPU fabric inside an island"),
        ("pcie", "PCIe inside a node"),
        ("wan", "the WAN between sites"),
    ],
)
def test_each_link_class_has_its_words(link, words):
    levels = _train(knee_link=link)
    for lv in levels:  # only the one link class, so that it carries all of it
        lv.comm_links = {link: lv.phases["comm"]}
    found = find_bottleneck(levels, _knees(kneedle=8))
    assert found is not None and found.link == link
    assert f"{words} ({link})" in found.sentence


def test_link_named_by_bound_jobs_when_no_time_by_link():
    levels = _train()
    for lv in levels:
        lv.comm_links = {}
    levels[1].bound_by = {"pcie": 2, "wan": 7}
    found = find_bottleneck(levels, _knees(kneedle=8))
    assert found is not None and found.link == "wan"
    assert "bounded most jobs" in found.sentence


def test_communication_without_link_class_says_so():
    levels = _train()
    for lv in levels:
        lv.comm_links, lv.bound_by = {}, {}
    found = find_bottleneck(levels, _knees(kneedle=8))
    assert found is not None and found.phase == "comm" and found.link is None
    assert "did not name" in found.sentence


def test_queue_wait_with_jobs_at_once_flat_is_capacity():
    found = find_bottleneck(_queue_ramp(8.0), _knees(kneedle=16))
    assert found is not None and found.phase == "queue"
    assert found.growth == pytest.approx(42)
    assert "queue wait (for a slice) grew from 100 ms to 4.2 s per job (42x)" in found.sentence
    assert "at level 16" in found.sentence
    assert "out of slices (capacity), not the scheduler" in found.sentence


def test_queue_wait_while_more_jobs_ran_at_once_later_is_the_scheduler():
    found = find_bottleneck(_queue_ramp(16.0), _knees(kneedle=16))
    assert found is not None and found.phase == "queue"
    assert "capacity" not in found.sentence
    assert "slices were still free" in found.sentence and "scheduler" in found.sentence


def test_queue_wait_without_run_time_does_not_guess_the_cause():
    levels = _queue_ramp(8.0)
    for lv in levels:
        del lv.phases["run"]
    found = find_bottleneck(levels, _knees(kneedle=16))
    assert found is not None and found.phase == "queue"
    assert "capacity" not in found.sentence
    assert "unknown" in found.sentence and "not measured: run" in found.sentence


def test_launch_and_ledger_growth_have_their_words():
    launch = [
        _level(n, {"ledger": 0.01, "launch": 0.1 * n, "queue": 0.1, "run": 1}, n) for n in (1, 4)
    ]
    found = find_bottleneck(launch, None)
    assert found is not None and found.phase == "launch" and found.knee_source == "last"
    assert "the launch path (SSH, agent start) is the bottleneck" in found.sentence
    ledger = [
        _level(n, {"ledger": 0.01 * n * n, "launch": 0.2, "queue": 0.1, "run": 1}) for n in (1, 8)
    ]
    found = find_bottleneck(ledger, None)
    assert found is not None and found.phase == "ledger"
    assert "lock contention" in found.sentence


def test_compute_growth_names_the_gpus_not_the_interconnect():
    levels = [
        _level(1, {"queue": 0.1, "run": 1.0, "compute": 0.8, "comm": 0.1}),
        _level(8, {"queue": 0.1, "run": 4.0, "compute": 3.8, "comm": 0.1}),
    ]
    found = find_bottleneck(levels, None)
    assert found is not None and found.phase == "compute"
    assert (
        "the bottleneck is the GPUs" in found.sentence and "not the interconnect" in found.sentence
    )
    assert "not measured: ledger, launch" in found.sentence


def test_sleep_workload_says_what_it_can():
    """Only queue and run, as a sleep or cmd workload gives: the run grew, and what inside
    it is unknown; ledger and launch are named as not measured."""
    levels = [
        _level(n, {"queue": 0.1, "run": 1.0 + 0.1 * n}, n / (1 + 0.1 * n)) for n in (1, 2, 4, 8)
    ]
    found = find_bottleneck(levels, _knees(kneedle=4))
    assert found is not None and found.phase == "run"
    assert "compute or communication is unknown" in found.sentence
    assert "not measured: ledger, launch" in found.sentence
    assert "interconnect" not in found.sentence and "GPUs" not in found.sentence


def test_nothing_measured_at_all():
    assert find_bottleneck([], None) is None
    assert find_bottleneck([_level(1, {}, measured=False)], None) is None
    found = find_bottleneck([_level(1, {}), _level(2, {})], None)
    assert found is not None and found.phase is None
    assert "unknown" in found.sentence


def test_one_level_or_knee_at_the_baseline_compares_nothing():
    one = find_bottleneck([_level(1, {"queue": 0.1, "run": 1.0})], None)
    assert one is not None and one.phase is None and "only level 1" in one.sentence
    levels = _queue_ramp(8.0)
    found = find_bottleneck(levels, _knees(kneedle=1))
    assert found is not None and found.phase is None and "baseline level 1" in found.sentence


def test_no_phase_grew():
    levels = [
        _level(n, {"queue": 0.1, "run": 1.0, "launch": 0.2, "ledger": 0.01}) for n in (1, 2, 4)
    ]
    found = find_bottleneck(levels, None)
    assert found is not None and found.phase is None
    assert found.sentence.startswith("no measured phase grew from level 1 to level 4")


def test_knee_falls_back_to_the_level_nearest_the_usl_peak_then_the_last():
    levels = _queue_ramp(8.0)
    found = find_bottleneck(levels, _knees(usl=23.0))
    assert found is not None and (found.knee_level, found.knee_source) == (32, "usl")
    found = find_bottleneck(levels, _knees(usl=22.0))
    assert found is not None and (found.knee_level, found.knee_source) == (16, "usl")
    found = find_bottleneck(levels, _knees())
    assert found is not None and (found.knee_level, found.knee_source) == (32, "last")
    # An unmeasured level is never the baseline nor the knee.
    levels.insert(0, _level(0.5, {"queue": 9.0}, measured=False))
    found = find_bottleneck(levels, _knees())
    assert found is not None and found.baseline_level == 1


def test_unattributed_time_is_said_when_larger_than_the_named_part():
    levels = [
        _level(1, {"queue": 0.1, "run": 1.0}, turnaround=1.2),
        _level(8, {"queue": 0.5, "run": 1.0}, turnaround=6.0),
    ]
    found = find_bottleneck(levels, None)
    assert found is not None and found.phase == "queue"
    assert found.shares_at_knee[UNATTRIBUTED] == pytest.approx(4.5 / 6.0)
    assert "is in no measured phase" in found.sentence


def _reaped(reaps: tuple[float, float]) -> list[LevelResult]:
    """Jobs that wait longer for their end to be noticed as load grows (a reaper pass over
    every node takes longer), everything else flat."""
    return [
        _level(n, {"ledger": 0.01, "launch": 0.02, "queue": 0.01, "run": 0.1, "reap": r}, n)
        for n, r in zip((1, 8), reaps, strict=True)
    ]


def test_reap_growth_says_the_time_is_in_noticing_jobs_ends_not_the_gpus():
    found = find_bottleneck(_reaped((0.05, 0.4)), None)
    assert found is not None and found.phase == "reap"
    assert found.growth == pytest.approx(8)
    assert found.share == pytest.approx(0.4 / 0.54)
    assert found.sentence.startswith(
        "the wait until the job's end was noticed (the reaper's poll) grew from 50 ms to "
        "400 ms per job (8.0x) and is 74% of each job's time at level 8"
    )
    assert "noticing jobs' ends (the harness's or scheduler's reap pass)" in found.sentence
    assert found.sentence.endswith("not in the GPUs")
    line = bottleneck_lines(_run(_reaped((0.05, 0.4))))[1]
    assert line.startswith("Time per job at level 8 (the last level: no knee found): reap 74%")


def test_reap_is_a_part_after_the_run_and_shrinks_the_unattributed_time():
    with_reap = _level(8, {"queue": 0.1, "run": 1.0, "reap": 0.3}, turnaround=1.5)
    assert list(time_split(with_reap)) == ["queue", "run", "reap"]
    split = _level(8, {"run": 1.0, "compute": 0.5, "reap": 0.3}, turnaround=1.5)
    assert list(time_split(split)) == ["compute", "run_other", "reap"]
    without = _level(8, {"queue": 0.1, "run": 1.0}, turnaround=1.5)
    base = _level(1, {"queue": 0.1, "run": 0.5, "reap": 0.3}, turnaround=1.0)
    found = find_bottleneck([base, with_reap], None)
    before = find_bottleneck([_level(1, {"queue": 0.1, "run": 0.5}), without], None)
    assert found is not None and before is not None
    assert before.shares_at_knee[UNATTRIBUTED] == pytest.approx(0.4 / 1.5)
    assert found.shares_at_knee[UNATTRIBUTED] == pytest.approx(0.1 / 1.5)
    assert found.shares_at_knee["reap"] == pytest.approx(0.3 / 1.5)
    # The rule is the same: the run grew, not the reap; it is named, with no unknown reap.
    assert found.phase == before.phase == "run"
    assert "reap" not in found.sentence and "reap" not in before.sentence


def test_split_at_one_level_only_compares_the_run_whole():
    levels = [
        _level(1, {"queue": 0.1, "run": 1.0}),
        _level(8, {"queue": 0.1, "run": 3.0, "compute": 1.0, "comm": 1.9}),
    ]
    found = find_bottleneck(levels, None)
    assert found is not None and found.phase == "run"
    assert set(found.seconds_at_knee) == {"queue", "run"}


def test_time_split_and_link_split():
    level = _level(
        1, {"ledger": 0.1, "run": 2.0, "compute": 1.0, "comm": 0.6}, links={"nic": 0.2, "pcie": 0.1}
    )
    assert time_split(level) == pytest.approx(
        {"ledger": 0.1, "compute": 1.0, "comm": 0.6, "run_other": 0.4}
    )
    assert time_split(level, split=False) == {"ledger": 0.1, "run": 2.0}
    # Scaled to the comm phase, fastest link class first.
    assert list(link_split(level)) == ["pcie", "nic"]
    assert link_split(level) == pytest.approx({"pcie": 0.2, "nic": 0.4})


def test_to_dict_is_plain_json():
    import json

    found = find_bottleneck(_train(), _knees(kneedle=8))
    assert found is not None
    data = json.loads(json.dumps(found.to_dict(), allow_nan=False))
    assert data["phase"] == "comm" and data["link"] == "nic" and data["knee_source"] == "kneedle"
    assert data["grew_s"] == pytest.approx(1.8)
    assert data["seconds_at_baseline"]["comm"] == pytest.approx(0.1)
    assert data["shares_at_knee"]["compute"] == pytest.approx(1.0 / 3.26)


# -- the property ------------------------------------------------------------------------------

_SECONDS = st.floats(min_value=0.0, max_value=100.0, allow_nan=False)


@st.composite
def _splits(draw):
    """2-6 measured levels, each phase measured everywhere or nowhere (random subsets),
    compute and comm sometimes, a turnaround that may be above or below the parts' sum."""
    names = draw(st.sets(st.sampled_from(["ledger", "launch", "queue", "run", "reap"])))
    split = draw(st.sampled_from([(), ("compute",), ("comm",), ("compute", "comm")]))
    count = draw(st.integers(2, 6))
    levels = []
    for i in range(count):
        phases = {p: draw(_SECONDS) for p in names}
        phases.update({p: draw(_SECONDS) for p in split})
        turnaround = draw(st.one_of(st.none(), _SECONDS))
        links = draw(st.dictionaries(st.sampled_from(["nvlink", "pcie", "nic", "wan"]), _SECONDS))
        levels.append(
            _level(2**i, phases, draw(_SECONDS), links=links, turnaround=turnaround or None)
        )
    knee = draw(st.one_of(st.none(), st.sampled_from([2**i for i in range(count)])))
    return levels, _knees(kneedle=knee)


@settings(max_examples=300, deadline=None)
@given(_splits())
def test_the_named_phase_grew_most_and_the_shares_never_exceed_the_whole(case):
    levels, knees = case
    found = find_bottleneck(levels, knees)
    assert found is not None
    base, knee = found.seconds_at_baseline, found.seconds_at_knee
    both = [p for p in LEAVES if p in base and p in knee]
    growth = {p: knee[p] - base[p] for p in both}
    if found.phase is None:
        assert found.knee_level == found.baseline_level or all(g <= 0 for g in growth.values())
    else:
        assert growth[found.phase] == max(growth.values()) > 0
        assert found.phase in found.sentence or found.phase in ("comm", "run_other", "run")
    assert math.fsum(found.shares_at_knee.values()) <= 1 + 1e-9
    assert all(0 <= share <= 1 + 1e-9 for share in found.shares_at_knee.values())
    assert math.fsum(found.links_at_knee.values()) <= 1 + 1e-9


# -- the reports -------------------------------------------------------------------------------


def _run(levels: list[LevelResult], knees: Knees | None = None, name: str = "train") -> RunResult:
    return RunResult(
        scenario={"name": name, "model": "closed", "levels": [lv.level for lv in levels]},
        levels=levels,
        knees=knees,
        backend="pool",
        transport="local",
        tool_version="0.9.0",
        created="2025-06-01T02:00:00Z",
        host="admin-1",
        commit=None,
    )


def test_text_lines_give_the_sentence_and_the_shares():
    lines = bottleneck_lines(_run(_train(), _knees(kneedle=8)))
    assert lines[0].startswith("Bottleneck: From level 8, 58% of each job's time")
    assert lines[0].endswith("not the GPUs.")
    assert lines[1].startswith("Time per job at level 8 (the diminishing-returns knee): comm 58%")
    assert "(nic 55%, nvlink 3.1%)" in lines[1]
    assert bottleneck_lines(_run([])) == []


def test_dominant_phase_looks_inside_the_run():
    level = _train()[1]
    assert dominant_phase(level) == ("comm", pytest.approx(1.9 / 3.26))
    assert level_rows(_run(_train()))[1]["dominant"] == "comm 58%"


def _svgs(page: str) -> list[str]:
    return re.findall(r"<svg\b.*?</svg>", page, flags=re.S)


def test_html_stacks_the_time_by_link_class_and_gives_the_sentence():
    page = render_html(_run(_train(), _knees(kneedle=8)))
    assert "<h2>Bottleneck</h2>" in page
    assert "the bottleneck is the interconnect, not the GPUs." in page
    picture = _svgs(page)[-1]
    assert "Where the time went" in picture
    for label in ("compute", "comm, nic (the network between nodes)", "comm, nvlink", "other run"):
        assert label in picture, label
    # The run is drawn as its parts, never beside them (it would count twice).
    assert not re.search(r">\s*run\s*<", picture)


def test_html_of_an_old_result_stacks_the_four_phases():
    levels = _queue_ramp(8.0)
    page = render_html(_run(levels, _knees(kneedle=16)))
    picture = _svgs(page)[-1]
    for label in ("ledger", "launch", "queue", "run"):
        assert re.search(rf">\s*{label}\s*<", picture), label
    assert "comm" not in picture and "compute" not in picture
    assert "out of slices (capacity), not the scheduler." in page


def test_html_stacks_reap_after_the_run_and_explains_it():
    page = render_html(_run(_reaped((0.05, 0.4))))
    picture = _svgs(page)[-1]
    # The legend reads top-down as the segments are stacked: reap on top of the run.
    labels = re.findall(r">\s*([a-z][a-z ]*?)\s*<", picture)
    assert labels[-5:] == ["reap", "run", "queue", "launch", "ledger"], labels
    assert "<li><b>reap</b>: noticing the job&#x27;s end" in page
    assert "noticing jobs&#x27; ends" in page


def test_html_with_a_baseline_gives_both_sentences():
    page = render_html(_run(_train(), _knees(kneedle=8)), _run(_queue_ramp(8.0), _knees(16)))
    assert "<b>This run</b>: Bottleneck: From level 8" in page
    assert "<b>Baseline</b>: Bottleneck: Queue wait (for a slice) grew" in page
