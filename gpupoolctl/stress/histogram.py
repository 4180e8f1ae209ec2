"""Latency histograms: a thin layer over HdrHistogram that speaks seconds.

Values are stored as integer microseconds from 1 us to 24 h with 3 significant digits, so
every percentile is within 0.1 % of the true sample (plus the 1 us rounding). The encoded
form is HdrHistogram's base64 "histoblob" (V2), which the Java, C and Go ports read too,
so a saved run can be re-analysed or merged with other tools.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from gpupoolctl.errors import GpupoolError
from gpupoolctl.stress.model import Distribution

if TYPE_CHECKING:
    from hdrh.histogram import HdrHistogram

LOWEST_US = 1
HIGHEST_US = 24 * 3600 * 1_000_000
SIGNIFICANT_DIGITS = 3
US_PER_S = 1_000_000

# The percentiles a Distribution carries, by field name.
PERCENTILES: dict[str, float] = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0}


def _new() -> HdrHistogram:
    from hdrh.histogram import HdrHistogram

    return HdrHistogram(LOWEST_US, HIGHEST_US, SIGNIFICANT_DIGITS)


def to_us(seconds: float) -> int:
    """Seconds as the integer microseconds the histogram stores, clamped to its range
    (a value above 24 h is recorded as 24 h rather than lost)."""
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"a latency must be a finite number of seconds >= 0, got {seconds!r}")
    return min(round(seconds * US_PER_S), HIGHEST_US)


class LatencyHistogram:
    """Recorded latencies in seconds; percentiles come back in seconds."""

    def __init__(self, hist: HdrHistogram | None = None) -> None:
        self._hist = hist if hist is not None else _new()

    def record(self, seconds: float) -> None:
        self._hist.record_value(to_us(seconds))

    def record_all(self, values_s: Iterable[float]) -> None:
        # Many latencies share a microsecond value: one histogram update per distinct value.
        for value_us, count in Counter(to_us(v) for v in values_s).items():
            self._hist.record_value(value_us, count)

    @property
    def count(self) -> int:
        return int(self._hist.get_total_count())

    def percentile(self, percentile: float) -> float | None:
        """The value at `percentile` (0..100), None when nothing was recorded."""
        return self.percentiles([percentile])[percentile]

    def percentiles(self, percentiles: Sequence[float]) -> dict[float, float | None]:
        """Several percentiles in one pass over the counts."""
        if not self.count:
            return {p: None for p in percentiles}
        found = self._hist.get_percentile_to_value_dict(list(percentiles))
        top = self._hist.get_max_value()
        # HdrHistogram answers with the top of the value's bucket; never report more than
        # the largest value seen (its bucket top, too).
        return {p: min(found[p], top) / US_PER_S for p in percentiles}

    @property
    def max(self) -> float | None:
        return self._hist.get_max_value() / US_PER_S if self.count else None

    @property
    def mean(self) -> float | None:
        return self._hist.get_mean_value() / US_PER_S if self.count else None

    def merge(self, other: LatencyHistogram) -> None:
        """Add `other`'s counts to this histogram."""
        self._hist.add(other._hist)

    def encode(self) -> str:
        """The base64 histoblob (V2, zlib-compressed)."""
        blob: bytes = self._hist.encode()
        return blob.decode("ascii")

    @classmethod
    def decode(cls, blob: str) -> LatencyHistogram:
        """Read a histoblob written by encode() (or by another HdrHistogram port)."""
        from hdrh.histogram import HdrHistogram

        try:
            hist = HdrHistogram.decode(blob.encode("ascii"))
        except Exception as exc:  # hdrh raises binascii, zlib, struct and its own errors
            raise GpupoolError(f"not an HdrHistogram histoblob: {exc}") from exc
        return cls(hist)


def merge(blobs: Iterable[str]) -> LatencyHistogram:
    """One histogram holding every value of the given histoblobs."""
    merged = LatencyHistogram()
    for blob in blobs:
        merged.merge(LatencyHistogram.decode(blob))
    return merged


def distribution(values_s: Sequence[float]) -> Distribution:
    """Count, mean, percentiles and max of latencies in seconds, with the histoblob.

    Mean and max are exact (from the values); percentiles come from the histogram and are
    never above max. No values: count 0 and None everywhere."""
    if not values_s:
        return Distribution(count=0, mean=None, p50=None, p90=None, p95=None, p99=None, max=None)
    hist = LatencyHistogram()
    hist.record_all(values_s)
    top = max(values_s)
    found = hist.percentiles(list(PERCENTILES.values()))
    stats = {name: min(_known(found[p]), top) for name, p in PERCENTILES.items()}
    return Distribution(
        count=len(values_s),
        mean=math.fsum(values_s) / len(values_s),
        max=top,
        hist=hist.encode(),
        **stats,
    )


def distribution_of(hist: LatencyHistogram) -> Distribution:
    """A Distribution read from a histogram alone (a decoded or merged one): mean and max
    are then the histogram's (within its precision)."""
    if not hist.count:
        return Distribution(count=0, mean=None, p50=None, p90=None, p95=None, p99=None, max=None)
    found = hist.percentiles(list(PERCENTILES.values()))
    return Distribution(
        count=hist.count,
        mean=hist.mean,
        max=hist.max,
        hist=hist.encode(),
        **{name: _known(found[p]) for name, p in PERCENTILES.items()},
    )


def _known(value: float | None) -> float:
    # Percentiles of a non-empty histogram always exist.
    assert value is not None
    return value
