"""Per-level summaries from hand-built samples, metric names, and the latency histogram."""

from __future__ import annotations

import numpy as np
import pytest

from gpupoolctl.errors import GpupoolError
from gpupoolctl.stress.histogram import (
    HIGHEST_US,
    LatencyHistogram,
    distribution,
    distribution_of,
    merge,
    to_us,
)
from gpupoolctl.stress.metrics import METRICS, metric_value, normalize_error, summarize_level
from gpupoolctl.stress.model import LevelResult, Sample, ThresholdCheck

T0 = 1_700_000_000.0  # a time.time() reading
WINDOW = (T0 + 10.0, T0 + 20.0)  # warm-up 10 s, then a 10 s steady window


def job(
    submitted: float,
    *,
    wait: float | None = 0.5,
    run: float | None = 1.0,
    ok: bool = True,
    error: str | None = None,
    phases: dict[str, float] | None = None,
    harness_s: float = 0.0,
) -> Sample:
    """A sample submitted at T0 + `submitted`, started `wait` later, ended `run` after that
    (None: never started / never ended)."""
    at = T0 + submitted
    started = at + wait if wait is not None else None
    ended = started + run if started is not None and run is not None else None
    return Sample(
        level=4,
        submitted=at,
        accepted=at + 0.01,
        started=started,
        ended=ended,
        ok=ok,
        error=error,
        phases=phases or {},
        harness_s=harness_s,
    )


def summarize(samples: list[Sample], **kwargs) -> LevelResult:
    options = {"level": 4, "model": "closed", "warmup_s": 10.0, "hold_s": 10.0, "window": WINDOW}
    options.update(kwargs)
    return summarize_level(samples, **options)


# -- window and counts ---------------------------------------------------------------------


def test_window_is_half_open_and_warmup_is_excluded():
    samples = [
        job(9.999),  # warm-up: not counted as submitted, but it ends inside the window
        job(10.0),  # exactly at the start: counted
        job(15.0),
        job(19.999, run=None, wait=None, ok=False),  # still in flight at the end
        job(20.0),  # exactly at the end: belongs to the next part (drain)
    ]
    level = summarize(samples)
    assert level.submitted == 3
    assert level.window_s == pytest.approx(10.0)
    # The in-flight one is neither completed nor failed.
    assert (level.completed, level.failed) == (2, 0)


def test_throughput_credits_each_ok_job_with_the_share_of_its_life_inside_the_window():
    samples = [
        job(8.0, wait=0.5, run=1.0),  # 8.0 .. 9.5: before the window, no credit
        job(9.0, wait=0.5, run=1.0),  # 9.0 .. 10.5: one third inside
        job(12.0, wait=0.5, run=1.0),  # 12.0 .. 13.5: all inside
        job(19.0, wait=0.5, run=1.0),  # 19.0 .. 20.5: two thirds inside
        job(13.0, ok=False, error="exit code 1"),  # inside, but not ok: no credit
    ]
    level = summarize(samples)
    assert level.throughput == pytest.approx((1 / 3 + 1 + 2 / 3) / 10.0)


def test_back_to_back_jobs_give_the_same_throughput_wherever_their_waves_fall():
    # One closed-model submitter running 3 s jobs back to back: 1/3 job per second, whether
    # its completions fall just inside or just outside the window's edges.
    for offset in (0.0, 0.5, 1.0, 2.9):
        samples = [job(offset + 3.0 * k, wait=0.0, run=3.0) for k in range(-2, 10)]
        assert summarize(samples).throughput == pytest.approx(1 / 3)


def test_failures_include_refusals_bad_exits_and_timeouts_without_ended():
    samples = [
        job(11.0),
        job(12.0),
        job(13.0, ok=False, error="exit code 3"),  # ran, failed
        job(14.0, wait=None, ok=False, error="submit refused: nothing fits"),
        job(15.0, run=None, ok=False, error="timed out after 600 s"),  # no `ended`
    ]
    level = summarize(samples)
    assert (level.submitted, level.completed, level.failed) == (5, 2, 3)
    assert level.failure_rate == pytest.approx(3 / 5)
    # Only the samples that have the time are in each distribution.
    assert level.queue_wait.count == 4  # the refused one never started
    assert level.turnaround.count == 3  # the refused and timed-out ones never ended


def test_failure_rate_is_zero_when_nothing_ended():
    level = summarize([job(11.0, wait=None, run=None, ok=False)])
    assert (level.completed, level.failed, level.failure_rate) == (0, 0, 0.0)
    assert level.throughput == 0.0
    assert level.queue_wait.count == 0 and level.queue_wait.p95 is None


def test_empty_level_has_no_latencies():
    level = summarize([])
    assert level.submitted == 0
    assert level.queue_wait.p50 is None and level.turnaround.max is None
    assert level.harness_s == 0.0 and level.phases == {} and level.errors == {}


def test_latency_percentiles_come_from_the_window_samples():
    waits = [0.1, 0.2, 0.3, 0.4, 4.0]
    samples = [job(11.0 + i, wait=w) for i, w in enumerate(waits)]
    samples.append(job(2.0, wait=100.0, run=1.0))  # warm-up outlier: excluded
    level = summarize(samples)
    assert level.queue_wait.count == 5
    assert level.queue_wait.max == pytest.approx(4.0)
    assert level.queue_wait.p50 == pytest.approx(0.3, rel=1e-3)
    assert level.turnaround.p50 == pytest.approx(1.3, rel=1e-3)


def test_window_must_not_end_before_it_starts():
    with pytest.raises(ValueError):
        summarize([], window=(T0 + 5, T0 + 4))


def test_zero_length_window_gives_zero_throughput():
    assert summarize([job(10.0)], window=(T0 + 10, T0 + 10)).throughput == 0.0


# -- phases, harness, dropped --------------------------------------------------------------


def test_phases_mean_over_samples_that_measured_them_and_absent_otherwise():
    samples = [
        job(11.0, phases={"ledger": 0.02, "run": 1.0}),
        job(12.0, phases={"ledger": 0.04}),
        job(13.0, phases={}),
        job(1.0, phases={"launch": 5.0}),  # warm-up: not counted
    ]
    level = summarize(samples)
    assert level.phases == pytest.approx({"ledger": 0.03, "run": 1.0})
    assert "launch" not in level.phases and "queue" not in level.phases


def test_harness_is_the_mean_bookkeeping_per_submission():
    samples = [job(11.0, harness_s=0.001), job(12.0, harness_s=0.003)]
    assert summarize(samples).harness_s == pytest.approx(0.002)


def test_dropped_is_passed_through():
    assert summarize([job(11.0)], model="open", dropped=7).dropped == 7


# -- errors --------------------------------------------------------------------------------


def test_errors_are_normalised_counted_and_capped_at_five():
    samples = [
        job(11.0 + i / 10, ok=False, error=f"job j-{i} timed out after 600 s") for i in range(6)
    ]
    samples += [
        job(
            12.0,
            ok=False,
            error="launch on node-a1 failed: MIG-1b2c3d4e-0f1a-4b5c-9d8e-7f6a5b4c3d2e busy",
        ),
        job(
            12.1,
            ok=False,
            error="launch on node-a2 failed: MIG-aaaaaaaa-0f1a-4b5c-9d8e-000000000000 busy",
        ),
    ]
    samples += [
        job(13.0 + i / 10, ok=False, error=f"unique cause {c}") for i, c in enumerate("abcd")
    ]
    level = summarize(samples)
    assert len(level.errors) == 5
    top = list(level.errors.items())
    assert top[0] == ("job j-<n> timed out after <n> s", 6)
    assert top[1] == ("launch on node-a<n> failed: MIG-<uuid> busy", 2)
    # Ties (one each) are broken by message, so the result does not depend on order.
    assert [message for message, _ in top[2:]] == [
        "unique cause a",
        "unique cause b",
        "unique cause c",
    ]


def test_failed_without_message_is_still_listed():
    level = summarize([job(11.0, ok=False, error=None)])
    assert level.failed == 1
    assert level.errors == {"ended without success": 1}


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ("job j-17 exited 137", "job j-<n> exited <n>"),
        ("took 12.5 s", "took <n> s"),
        ("commit 3f9a2c1d7e not found", "commit <hex> not found"),
        ("  many   spaces\nand lines ", "many spaces and lines"),
        ("", "(empty error message)"),
        ("deadbeefcafe word", "deadbeefcafe word"),  # no digit: an ordinary word
    ],
)
def test_normalize_error(message, expected):
    assert normalize_error(message) == expected


def test_normalize_error_caps_length():
    assert len(normalize_error("x" * 1000)) == 200


# -- thresholds ----------------------------------------------------------------------------


def test_thresholds_empty_unless_given():
    assert summarize([job(11.0)]).thresholds == []


def test_evaluate_is_called_with_the_finished_level():
    seen = []

    def evaluate(level: LevelResult) -> list[ThresholdCheck]:
        seen.append(level.completed)
        return [ThresholdCheck("throughput >= 1/s", level.throughput, level.throughput >= 1)]

    given = [ThresholdCheck("failure_rate < 1%", 0.0, True)]
    level = summarize([job(11.0)], thresholds=given, evaluate=evaluate)
    assert seen == [1]
    assert [c.expr for c in level.thresholds] == ["failure_rate < 1%", "throughput >= 1/s"]
    assert not level.thresholds_ok


# -- metric names --------------------------------------------------------------------------


def test_metric_value_resolves_every_name():
    samples = [job(11.0, wait=0.5, run=1.0, phases={"run": 1.0}, harness_s=0.002)]
    level = summarize(samples, dropped=2)
    expected = {
        "throughput": level.throughput,
        "failure_rate": 0.0,
        "submitted": 1.0,
        "completed": 1.0,
        "failed": 0.0,
        "dropped": 2.0,
        "harness": 0.002,
        "queue_wait.p95": level.queue_wait.p95,
        "turnaround.max": pytest.approx(1.5),
        "phase.run": 1.0,
        "phase.ledger": None,
    }
    for name, value in expected.items():
        assert metric_value(level, name) == value, name
    for name in METRICS:  # every exported name resolves without error
        metric_value(level, name)


def test_metric_value_unknown_name_lists_valid_ones():
    level = summarize([])
    with pytest.raises(KeyError) as caught:
        metric_value(level, "queue_wait.p42")
    message = caught.value.args[0]
    assert "queue_wait.p42" in message and "queue_wait.p95" in message and "phase.run" in message


def test_metric_value_of_empty_distribution_is_none():
    assert metric_value(summarize([]), "turnaround.p99") is None


# -- histogram -----------------------------------------------------------------------------


def test_percentiles_match_numpy_within_hdr_precision():
    rng = np.random.default_rng(7)
    values = list(rng.lognormal(mean=-1.0, sigma=1.2, size=5000))
    dist = distribution(values)
    ranked = np.sort(values)
    for stat, p in (("p50", 50), ("p90", 90), ("p95", 95), ("p99", 99)):
        got = dist.get(stat)
        # HdrHistogram reports a recorded rank's bucket; allow one rank either side of
        # numpy's interpolation and the 0.1 % bucket width (plus 1 us rounding).
        lo = ranked[max(0, int(np.floor(p / 100 * (len(ranked) - 1))) - 1)]
        hi = ranked[min(len(ranked) - 1, int(np.ceil(p / 100 * (len(ranked) - 1))) + 1)]
        assert lo * (1 - 1e-3) - 1e-6 <= got <= hi * (1 + 1e-3) + 1e-6, stat
        assert got == pytest.approx(np.percentile(values, p), rel=5e-3), stat
    assert dist.max == max(values)
    assert dist.mean == pytest.approx(np.mean(values))
    assert dist.count == 5000


def test_empty_distribution_is_all_none():
    dist = distribution([])
    assert dist.count == 0
    assert all(dist.get(stat) is None for stat in dist.STATS) and dist.hist is None


def test_histoblob_round_trip():
    values = [0.0, 1e-6, 0.0123, 0.5, 3.0, 42.0, 3600.0]
    dist = distribution(values)
    assert dist.hist is not None and dist.hist.startswith("HIST")
    back = distribution_of(LatencyHistogram.decode(dist.hist))
    assert back.count == len(values)
    for stat in ("p50", "p90", "p99", "max"):
        assert back.get(stat) == pytest.approx(dist.get(stat), rel=1e-3, abs=1e-6)


def test_merge_equals_recording_everything_at_once():
    first, second = [0.1 * i for i in range(1, 50)], [2.0 + 0.3 * i for i in range(30)]
    merged = merge([distribution(first).hist, distribution(second).hist])
    together = LatencyHistogram()
    together.record_all(first + second)
    assert merged.count == together.count == 79
    for p in (50, 90, 99, 100):
        assert merged.percentile(p) == together.percentile(p)
    assert merged.encode() == together.encode()


def test_values_past_24h_are_clamped_not_lost():
    hist = LatencyHistogram()
    hist.record(10 * 24 * 3600.0)
    assert hist.count == 1
    assert to_us(10 * 24 * 3600.0) == HIGHEST_US


@pytest.mark.parametrize("bad", [-0.5, float("nan"), float("inf")])
def test_bad_latencies_are_refused(bad):
    with pytest.raises(ValueError):
        to_us(bad)


def test_decoding_garbage_is_a_typed_error():
    with pytest.raises(GpupoolError, match="histoblob"):
        LatencyHistogram.decode("not a histogram")
