"""The flat-file allocation ledger: journal, locking, replay, snapshot, verify, repair.

    from gpupoolctl.ledger import Ledger
    ledger = Ledger(path)                      # None: ~/.local/state/gpupoolctl/ledger.jsonl
    ledger = Ledger.from_env(path)             # no fsync when GPUPOOL_LEDGER_NO_FSYNC=1
    done = ledger.alloc(choose, owner="alice", ttl=timedelta(hours=8))
                                               # choose(state, now) -> slice ids: placement
                                               # is sched's (sched.alloc.choose; jobs.alloc)
    done.value.id, done.warnings               # "a-17", [] (warnings are for stderr)
    ledger.release("a-17")
    view = ledger.read()                       # view.state: slices, allocations, jobs, queue
    with ledger.transaction() as tx:           # your own all-or-nothing batch
        tx.append("enqueue", {"id": f"q-{tx.next_seq}", "owner": "bob", "request": {}})

Nothing here prints: results and warnings are returned, problems raised as typed errors.
"""

from typing import TYPE_CHECKING, Any

from gpupoolctl.ledger.errors import LedgerBusy, LedgerDamaged, LedgerError, NothingFits
from gpupoolctl.ledger.history import History
from gpupoolctl.ledger.ledger import (
    Done,
    Ledger,
    Transaction,
    View,
    current_user,
    default_actor,
    durable_from_env,
)
from gpupoolctl.ledger.paths import LedgerPaths, default_path
from gpupoolctl.ledger.repair import RepairResult
from gpupoolctl.ledger.report import pool_report
from gpupoolctl.ledger.state import JOB_STATES, OPS, Allocation, State
from gpupoolctl.ledger.verify import Problem, Report

if TYPE_CHECKING:
    from gpupoolctl.ledger.slices import slices_from_facts

__all__ = [
    "JOB_STATES",
    "OPS",
    "Allocation",
    "Done",
    "History",
    "Ledger",
    "LedgerBusy",
    "LedgerDamaged",
    "LedgerError",
    "LedgerPaths",
    "NothingFits",
    "Problem",
    "RepairResult",
    "Report",
    "State",
    "Transaction",
    "View",
    "current_user",
    "default_actor",
    "default_path",
    "durable_from_env",
    "pool_report",
    "slices_from_facts",
]


def __getattr__(name: str) -> Any:
    # Facts -> slices needs the hardware model (~5 ms); commands that only read the ledger
    # never turn facts into slices.
    if name == "slices_from_facts":
        from gpupoolctl.ledger.slices import slices_from_facts

        return slices_from_facts
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
