"""submit --follow / jobs --follow: follow a job until it ends, keeping the pool moving
while it waits."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.errors import ExitCode
from gpupoolctl.jobs import reaping
from gpupoolctl.jobs.errors import JobError
from gpupoolctl.jobs.events import Event, reasons_for
from gpupoolctl.jobs.events import Waiting as PassWaiting
from gpupoolctl.jobs.logs import both_streams
from gpupoolctl.jobs.refreshing import refresh
from gpupoolctl.jobs.service import JobsCore, find

FOLLOW_INTERVAL_S = (0.1, 1.0)  # first and longest wait between polls while following


@dataclass(frozen=True)
class Output:
    """Text the followed job wrote to its stdout (or to its stderr)."""

    text: str
    stream: str = "stdout"


@dataclass(frozen=True)
class FollowWarning:
    """Something the user should know (for stderr); following goes on."""

    message: str


@dataclass(frozen=True)
class Waiting:
    """The followed job is queued (or being launched) and why: yielded when that changes
    (`key`: what it waits for, without the countdown of a re-cut's reason)."""

    state: str
    reason: str = field(compare=False)
    key: Any = None


@dataclass(frozen=True)
class Ended:
    """The job ended: its last record, and the exit code to leave with (`exit_code_of`)."""

    job: dict[str, Any]
    exit_code: int


def _waiting(job_id: str, state: str, events: list[Event]) -> Waiting:
    """Why the job still waits, as the pass that just ran said it. A re-cut it waits for is
    the same wait however much of the time is left (the reason counts down)."""
    if state == "pending":
        return Waiting(state, "being launched", "being launched")
    for event in reasons_for(events, job_id):
        recut = event.recut if isinstance(event, PassWaiting) else None
        return Waiting(state, str(event.reason), recut or event.reason)
    reason = "waiting in the queue behind earlier or higher-priority jobs"
    return Waiting(state, reason, reason)


def exit_code_of(job: dict[str, Any]) -> int:
    """0 when the job is done; its own status when it has one (128+N when a signal ended
    it); otherwise ExitCode.ERROR."""
    code = job.get("exit_code")
    if job.get("state") == "done":
        return 0
    if isinstance(code, int) and code & 0xFF:
        return code & 0xFF
    return int(ExitCode.ERROR)


def follow(
    jobs: JobsCore,
    job_id: str,
    *,
    output: bool = True,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Output | FollowWarning | Waiting | Ended]:
    """Follow a job until it ends, keeping the pool moving while it waits: while it is
    queued or pending each poll is a whole pass (recover, reap, schedule), since the slices
    it waits for are freed only when the jobs holding them are reaped; while it runs, reap.

    With `output`, yields what it writes to stdout and stderr as Output chunks while it
    runs (both in one round trip per poll), then what it wrote after the last read. Yields
    FollowWarning for problems reading its output and, once it ended, for the warnings
    gathered in `jobs.warnings` (which are then cleared); Waiting whenever it is queued or
    pending for a reason other than the last one said. Ends with one Ended. Polls every
    FOLLOW_INTERVAL_S[0] s, slowing to FOLLOW_INTERVAL_S[1] s while nothing happens.
    """
    offsets = {"stdout": 0, "stderr": 0}
    delay = FOLLOW_INTERVAL_S[0]
    said: Waiting | None = None

    def read() -> tuple[list[Output], str]:
        """What the job wrote since the last read, and its state on its node."""
        answer = both_streams(jobs, job_id, offsets)
        wrote = []
        for name, chunk in answer["streams"].items():
            offsets[name] = chunk["next_offset"]
            if chunk["text"]:
                wrote.append(Output(chunk["text"], name))
        return wrote, str(answer.get("state"))

    while True:
        job = find(jobs, job_id)
        state = job.get("state")
        if state == "running" and output:
            try:
                wrote, on_node = read()
            except JobError as exc:
                yield FollowWarning(str(exc))
                wrote, on_node = [], "running"
            yield from wrote
            if wrote:
                delay = FOLLOW_INTERVAL_S[0]
                continue
            if on_node != "running":
                reaping.reap(jobs)
                continue
        elif state == "running":
            reaping.reap(jobs)
        elif state in ("queued", "pending"):
            events = refresh(jobs).events
            if find(jobs, job_id).get("state") != state:
                delay = FOLLOW_INTERVAL_S[0]
                continue
            waiting = _waiting(job_id, str(state), events)
            if waiting != said:
                said = waiting
                yield waiting
        else:
            break
        sleep(delay)
        delay = min(delay * 1.5, FOLLOW_INTERVAL_S[1])
    warnings = list(jobs.warnings)
    jobs.warnings.clear()
    for message in warnings:
        yield FollowWarning(message)
    if output and job.get("nodes"):
        try:  # what it wrote after our last read
            while True:
                wrote, _ = read()
                if not wrote:
                    break
                yield from wrote
        except JobError:
            pass
    yield Ended(job, exit_code_of(job))
