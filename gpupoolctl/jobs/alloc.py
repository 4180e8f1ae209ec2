"""`alloc`: hold the slices sched's alloc rule picks, in one ledger transaction.

    from gpupoolctl.jobs.alloc import alloc
    done = alloc(ledger, JobRequest(profile="1g.10gb"), owner="alice", ttl=timedelta(hours=8))

The choice is sched.alloc's, made under the ledger's lock (Ledger.alloc runs it there), so
two allocs at once never pick the same slice, nor together more than a team's quota.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from gpupoolctl.sched.alloc import choose, record

if TYPE_CHECKING:
    from gpupoolctl.ledger.ledger import Done, Ledger
    from gpupoolctl.sched import JobRequest
    from gpupoolctl.sched.alloc import Shares


def alloc(
    ledger: Ledger,
    request: JobRequest,
    *,
    owner: str,
    ttl: timedelta | None = None,
    shares: Shares | None = None,
) -> Done:
    """Hold the slices alloc's rule picks for `request`, in one ledger transaction; with a
    team and `shares`, within that team's quota."""
    return ledger.alloc(choose(request, shares), owner=owner, ttl=ttl, request=record(request))
