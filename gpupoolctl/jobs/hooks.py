"""A test hook: die at a named step, to prove every step leaves a state recovery settles.

GPUPOOL_TEST_CRASH_AFTER=<step> (queued, placed, launched, recorded, or 1..4 in that order;
or an elastic re-cut's reshape-reserved / reshape-applied) makes the process SIGKILL itself
right after that step. Unset in real use.
"""

from __future__ import annotations

import os
import signal

ENV = "GPUPOOL_TEST_CRASH_AFTER"
STEPS = ("queued", "placed", "launched", "recorded")


def crash_point(step: str) -> None:
    wanted = os.environ.get(ENV, "").strip()
    if not wanted:
        return
    if wanted.isdigit() and 1 <= int(wanted) <= len(STEPS):
        wanted = STEPS[int(wanted) - 1]
    if wanted == step:
        os.kill(os.getpid(), signal.SIGKILL)
