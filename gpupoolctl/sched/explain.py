"""Wording of placement explanations (`submit --dry-run`) and no-fit reasons. Text only."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Protocol

from gpupoolctl.hw.units import MIB_PER_GIB, gib_text
from gpupoolctl.policy.model import GPU_MEMORY
from gpupoolctl.sched.request import JobRequest


class NoFit(Protocol):
    """What the renderer reads of a no-fit reason (sched.place.NoFit): named here rather
    than imported, as place.py imports this module."""

    @property
    def code(self) -> str: ...
    @property
    def detail(self) -> Mapping[str, Any]: ...
    @property
    def inner(self) -> NoFit | None: ...


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


# -- no-fit reasons -----------------------------------------------------------------------
#
# A reason a request does not run now is a typed value, sched.place.NoFit: a `code` from
# the closed set below, the `detail` its words are made from, `never`, and, for a reason
# that adds to another, the `inner` one. Its words are made here, by `render`, and nowhere
# else. Each code's detail keys are listed with its renderer.


def _no_match(d: Mapping[str, Any], inner: str) -> str:  # want
    return f"no slice in the pool matches {d['want']}"


def _too_few_ever(d: Mapping[str, Any], inner: str) -> str:  # want, total
    return f"the pool has only {d['total']} slice(s) matching {d['want']}, even with all free"


def _group_too_small(d: Mapping[str, Any], inner: str) -> str:  # want, level, gpus, most, group
    return (
        f"no {d['level']} has {d['gpus']} slices matching {d['want']}, even with all free "
        f"(the most: {d['most']} on {d['group']})"
    )


def counted(free: int, total: int, taken: Sequence[tuple[str, int]]) -> str:
    """ "2 matching slice(s) free of 8: 4 held, 2 drained" (no-fit reasons, alloc's refusal)."""
    return f"{free} matching slice(s) free of {total}" + not_free(taken)


def _nothing_free(d: Mapping[str, Any], inner: str) -> str:  # want, free, total, taken
    return f"nothing fits {d['want']} now: " + counted(d["free"], d["total"], d["taken"])


def _no_group_free(d: Mapping[str, Any], inner: str) -> str:
    # want, level, most, group (the group with the most free now), free, total, taken
    now = f"the most free on one {d['level']}: {d['most']}" + (
        f" on {d['group']}" if d["most"] else ""
    )
    if d["taken"]:
        now += "; " + counted(d["free"], d["total"], d["taken"])
    return f"nothing fits {d['want']} now: {now}"


def _backoff(d: Mapping[str, Any], inner: str) -> str:  # seconds
    return f"restarting in {max(1, d['seconds'])}s (backoff)"


def clearing_text(cards: Sequence[str], victims: int) -> str:
    """ "gpu-a/gpu0, gpu-a/gpu1 kept to be made whole for it, stopping 2 borrowed job(s)":
    what a clearing plan (sched.clearing) does for the work it is made for."""
    stop = f", stopping {victims} borrowed job(s)" if victims else ""
    return f"{', '.join(cards)} kept to be made whole for it{stop}"


def _clearing(d: Mapping[str, Any], inner: str) -> str:  # cards, victims; inner
    return f"{inner}; {clearing_text(d['cards'], d['victims'])}"


def _recut_kept(d: Mapping[str, Any], inner: str) -> str:  # inner (it counts the kept cards)
    return inner


def reach_text(level: str | None, most: int, group: str, serves: bool) -> str:
    """What re-cuts could give a request (sched.elastic.RecutReach.why, when some card
    could hold a slice of it): that one could hold it, or for work kept to one node or
    island the most one re-cut could give there."""
    if level is None:
        return "an idle card re-cut could hold it"
    most_text = f"the most on one {level.replace('host', 'node')}: {most} on {group}"
    return f"re-cut, {most_text}" if serves else f"nor re-cut ({most_text})"


def _recut_reach(d: Mapping[str, Any], inner: str) -> str:  # level, most, group, serves; inner
    return f"{inner}; {reach_text(d['level'], d['most'], d['group'], d['serves'])}"


def _recut_wait(d: Mapping[str, Any], inner: str) -> str:  # recut, wait_s, cause
    return recut_wait(d["recut"], d["wait_s"], d["cause"])


def _team_no_quota(d: Mapping[str, Any], inner: str) -> str:  # team, want
    return f"team {d['team']} has no quota on any card that could hold {d['want']}"


def amount_text(resource: str, amount: int) -> str:
    """'160 GiB' of GPU memory, '2 cards', '3 1g.10gb'."""
    if resource == GPU_MEMORY:
        return f"{amount / MIB_PER_GIB:g} GiB"
    return f"{amount} {resource}"


def of_text(resource: str, used: int, limit: int) -> str:
    """'120 of 160 GiB', '2 of 2 cards'."""
    if resource == GPU_MEMORY:
        return f"{used / MIB_PER_GIB:g} of {limit / MIB_PER_GIB:g} GiB"
    return f"{used} of {limit} {resource}"


def _quota_limit(d: Mapping[str, Any], inner: str) -> str:
    # team, resource, used, limit, scope (None: the whole pool)
    where = f" on {d['scope']}" if d["scope"] else ""
    return f"team {d['team']} at its limit ({of_text(d['resource'], d['used'], d['limit'])}{where})"


def _quota_off_scope(d: Mapping[str, Any], inner: str) -> str:  # team, host, model
    return f"team {d['team']} has no quota on {d['host']}'s {d['model']} cards"


def _quota_kept(d: Mapping[str, Any], inner: str) -> str:  # team, other, resource, kept
    return (
        f"team {d['team']} is at its nominal quota and the rest is kept for team "
        f"{d['other']} ({amount_text(d['resource'], d['kept'])} it does not lend)"
    )


def _where_quota(d: Mapping[str, Any], inner: str) -> str:  # team; inner
    return f"{inner} where team {d['team']} has quota"


def _behind_queue(d: Mapping[str, Any], inner: str) -> str:
    return "it would wait behind the queue"


def _victims_stopping(d: Mapping[str, Any], inner: str) -> str:  # inner
    return f"{inner}; the jobs preempted for it are still stopping"


def _hosts_limited(d: Mapping[str, Any], inner: str) -> str:  # inner
    return f"{inner} (this pass sees only the hosts given by -l)"


_WORDS: dict[str, Callable[[Mapping[str, Any], str], str]] = {
    # placement (sched.place): never fits, or nothing fits now
    "no-match": _no_match,  # no slice of the pool matches the request
    "too-few-ever": _too_few_ever,  # fewer matching slices than it asks, all free
    "group-too-small": _group_too_small,  # no host/island/site has enough, all free
    "nothing-free": _nothing_free,  # not enough of the matching slices free now
    "no-group-free": _no_group_free,  # no host/island/site has enough free now
    # the pass (sched.queue)
    "backoff": _backoff,  # a restart waiting out its back-off
    "clearing": _clearing,  # + cut cards kept to be made whole for it (inner: why now)
    "recut-kept": _recut_kept,  # elastic cards kept from it to be cut (inner: placement's)
    "recut-reach": _recut_reach,  # + what a re-cut could give it (inner: never fits as is)
    "recut-wait": _recut_wait,  # it waits for a re-cut, made now or by a later pass
    # teams' quotas (sched.shares)
    "team-no-quota": _team_no_quota,  # no card its quota covers could ever hold it
    "quota-limit": _quota_limit,  # its team is at its limit
    "quota-off-scope": _quota_off_scope,  # the slices are on no scope of its team's quota
    "quota-kept": _quota_kept,  # borrowing would take what another team keeps
    "where-quota": _where_quota,  # + only where its team has quota (inner: why)
    # the three questions (sched.modes) and the executor's own (jobs/)
    "behind-queue": _behind_queue,  # what_if: it would wait its turn
    "victims-stopping": _victims_stopping,  # + its victims are still stopping (inner)
    "hosts-limited": _hosts_limited,  # + never fits on the hosts a -l pass sees (inner)
}

# The closed set of no-fit codes: NoFit refuses any other.
CODES: frozenset[str] = frozenset(_WORDS)


def render(nofit: NoFit) -> str:
    """The words of a no-fit reason: the one renderer (NoFit.reason calls it)."""
    inner = render(nofit.inner) if nofit.inner is not None else ""
    return _WORDS[nofit.code](nofit.detail, inner)
