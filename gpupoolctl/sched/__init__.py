"""Scheduling: requests, a pool view, placement policies, queue order, preemption.

    from gpupoolctl.sched import JobRequest, PoolView, place, Placement
    pool = PoolView.from_state(ledger.read().state)            # free/held slices, indexed
    result = place(JobRequest(memory_mib=9537), pool)         # pure; "best-fit" by default
    if isinstance(result, Placement): result.slices, result.why
    else: result.reason, result.never                          # never -> exit 5 at submit

Nothing here prints or touches the ledger: the jobs side records what it decides.
"""

from gpupoolctl.sched.place import NoFit, Placement, place
from gpupoolctl.sched.policies import ALLOC_POLICY, POLICIES
from gpupoolctl.sched.pool import Holder, PoolView
from gpupoolctl.sched.preempt import choose_preemption
from gpupoolctl.sched.queue import (
    AGING_CAP,
    AGING_INTERVAL,
    PassResult,
    QueueEntry,
    effective_priority,
    order_queue,
    queue_entries,
    schedule_pass,
)
from gpupoolctl.sched.request import PRIORITIES, JobRequest, matches, parse_priority

__all__ = [
    "AGING_CAP",
    "AGING_INTERVAL",
    "ALLOC_POLICY",
    "POLICIES",
    "PRIORITIES",
    "Holder",
    "JobRequest",
    "NoFit",
    "PassResult",
    "Placement",
    "PoolView",
    "QueueEntry",
    "choose_preemption",
    "effective_priority",
    "matches",
    "order_queue",
    "parse_priority",
    "place",
    "queue_entries",
    "schedule_pass",
]
