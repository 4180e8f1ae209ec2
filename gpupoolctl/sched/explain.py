"""Wording of placement explanations (`submit --dry-run`) and no-fit reasons. Text only."""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpupoolctl.hw.units import gib_text
from gpupoolctl.sched.request import JobRequest

_TIES = {
    0: "on a GPU and a host already partly used",
    1: "on a GPU already partly used",
    2: "on a host already partly used",
    3: "on an untouched GPU and host",
}


def gib(mib: int) -> str:
    return f"{gib_text(mib)} GiB"


def header(request: JobRequest, policy: str) -> str:
    return f"request: {request.describe()}; priority {request.priority}; policy {policy}"


def candidates(free: int, total: int, shapes: int) -> str:
    held = total - free
    return (
        f"considered {free} free matching slice(s) of {total} in the pool "
        f"({held} held), in {shapes} slice shape(s)"
    )


def single(
    slice_id: str, memory: int, waste: int | None, same_size: int, tier: int | None, policy: str
) -> str:
    extra = f", waste {gib(waste)}" if waste is not None else ""
    if policy == "spread":
        return (
            f"chose {slice_id} ({gib(memory)}{extra}): least-loaded host, then least-loaded "
            "GPU, then smallest slice, then lowest id"
        )
    why = f"the smallest that fits; {same_size} free candidate(s) of this size"
    if tier is not None and tier < 3 and same_size > 1:
        why += f", preferred as {_TIES[tier]} (keeps whole GPUs/hosts free), then lowest id"
    elif tier == 3 and same_size > 1:
        why += ", none on a GPU or host already partly used, so lowest id"
    elif same_size > 1:
        why += ", lowest id first"
    return f"chose {slice_id} ({gib(memory)}{extra}): {why}"


def group(
    level: str,
    count: int,
    fitting: int,
    considered: int,
    chosen: str,
    memory: int,
    runner_up: str | None,
    policy: str,
) -> str:
    rule = {
        "spread": "least-loaded",
        "smallest": "least memory",
    }.get(policy, "least memory, then already in use, then tightest fit")
    text = (
        f"{fitting} of {considered} {level}(s) with free matching slices can hold all {count}; "
        f"chose {chosen} ({gib(memory)} in total) by {rule}"
    )
    return text + (f"; next best {runner_up}" if runner_up else "")


def picked(ids: Sequence[str], hosts: Sequence[str], waste: int) -> str:
    where = f"on {len(hosts)} host(s): {', '.join(hosts)}"
    return f"placed {len(ids)} slice(s) {where}; waste {gib(waste)}"


def not_free(taken: Sequence[tuple[str, int]]) -> str:
    """ ": 4 held, 4 drained, 8 on a lost node": why the matching slices that are not free
    are not ("" when all are free)."""
    return (": " + ", ".join(f"{n} {why}" for why, n in taken)) if taken else ""


# -- when an elastic re-cut is made -------------------------------------------------------

# Nothing runs on its own: a re-cut that is not due yet is made by the first pass after it
# is, whichever command runs it.
PASS_ACTS = "next `schedule` pass or `submit`/`jobs` acts then"


def due_in(wait_s: float, cause: str) -> str:
    """ "in 25s (batch window)", "in 3m40s (min-idle)": how long until a re-cut may be made,
    in whole seconds rounded up, and the policy setting that holds it until then."""
    from gpupoolctl.policy.values import duration_text

    return f"in {duration_text(max(1, math.ceil(wait_s)))} ({cause})"


def recut_wait(recut: str, wait_s: float = 0.0, cause: str | None = None) -> str:
    """Why work waits for an elastic re-cut, and when it is made: `recut` says what the
    re-cut does (Recut.describe()), `wait_s` how long until a pass may make it and `cause`
    what holds it until then ("batch window", "min-idle"). Without a wait, the pass that
    decided it makes it. The one wording of `submit`'s, `jobs`' and `schedule`'s reasons and
    of `submit --dry-run`."""
    text = f"waits for a re-cut: {recut}"
    if wait_s <= 0 or cause is None:
        return text
    return f"{text} {due_in(wait_s, cause)}, {PASS_ACTS}"
