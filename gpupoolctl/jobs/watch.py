"""The scheduling loop in the foreground (`schedule --watch`): one pass every interval.

    for round in watch(jobs, interval_s=15.0, passes=None):   # until the caller stops
        render(round.at, round.events); report(round.warnings)

Each round is one `refresh` (recover, reap, place, launch: jobs.refreshing), then a wait for
what is left of the interval: a pass that takes longer than the interval is followed at
once, never twice at a time. The caller renders each round as it comes and stops the loop
by leaving it (Ctrl-C: KeyboardInterrupt goes through). The clock and the sleep are
parameters, so that a test runs rounds in virtual time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime

from gpupoolctl.jobs.events import Event
from gpupoolctl.jobs.refreshing import refresh
from gpupoolctl.jobs.service import JobsCore
from gpupoolctl.timestamps import format_ts, utc_now


@dataclass(frozen=True)
class Round:
    """One pass of the loop: its number (1, 2, ...), when it ended (wall clock, ledger
    time), what it did (the pass's events) and the warnings it gave."""

    number: int
    at: str
    events: list[Event]
    warnings: list[str]


def watch(
    jobs: JobsCore,
    interval_s: float,
    passes: int | None = None,
    *,
    sleep: Callable[[float], object] = time.sleep,
    monotonic: Callable[[], float] = time.monotonic,
    now: Callable[[], datetime] = utc_now,
) -> Iterator[Round]:
    """Run a pass every `interval_s` seconds, `passes` times (None: until the caller stops),
    yielding each round when it has run."""
    number = 0
    while True:
        started = monotonic()
        outcome = refresh(jobs)
        warnings = list(jobs.warnings)
        jobs.warnings.clear()
        number += 1
        yield Round(number, format_ts(now()), outcome.events, warnings)
        if passes is not None and number >= passes:
            return
        sleep(max(0.0, interval_s - (monotonic() - started)))
