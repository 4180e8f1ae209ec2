"""Why a slice is out of placement: one answer, read by every surface that needs it.

Placement (PoolView.from_state holds such slices in the name of what blocks them), the
no-fit reasons (how many matching slices each reason keeps out), `pool`, `top` and the
exports all read `blocks()`: a pure function of the ledger's state (sched.recorded). A slice
held by a live allocation stays its holder's; its block, if any, still says what is wrong
with its card.

The reasons, the first that applies winning:

    node-lost    its node was declared lost (jobs.lost)
    silent       its node's last contact failed (a poll or a launch got no answer): no
                 work goes there until it answers again (a pass's poll, or its facts)
    card-lost    the node's driver reports the card lost (facts: GPU_IS_LOST)
    failed       drained by the health check (the card's, else its host's drain)
    drained      drained by a person (the card's, else its host's)
    stale-run    a run the ledger gave up on may still be there: fenced until its node
                 answers and it is killed (a lost node's runs, `cancel --forget`)
    stray        the node showed processes there that no hold or job accounts for
    quarantined  held by an allocation whose record `ledger repair` quarantined, until a
                 pool admin releases it
    re-cutting   its card is reserved for a re-cut
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from gpupoolctl.hw.slice import card_key

if TYPE_CHECKING:
    from gpupoolctl.sched.recorded import RecordedState

KINDS = (
    "node-lost",
    "silent",
    "card-lost",
    "failed",
    "drained",
    "stale-run",
    "stray",
    "quarantined",
    "re-cutting",
)
# The slice's state as `pool` and `top` show it.
STATES = {
    "node-lost": "lost",
    "silent": "blocked",
    "card-lost": "lost",
    "failed": "drained",
    "drained": "drained",
    "stale-run": "blocked",
    "stray": "blocked",
    "quarantined": "blocked",
    "re-cutting": "re-cutting",
}
# How a no-fit reason counts them: "4 drained, 8 on a lost node".
LABELS = {
    "node-lost": "on a lost node",
    "silent": "on a node that does not answer",
    "card-lost": "on a lost card",
    "failed": "failed their health check",
    "drained": "drained",
    "stale-run": "with a stale run to kill",
    "stray": "with processes the ledger does not know",
    "quarantined": "quarantined by ledger repair",
    "re-cutting": "being re-cut",
}


@dataclass(frozen=True)
class Block:
    kind: str  # one of KINDS
    source: str  # what blocks it: a host, a card, a fenced run, an allocation, a reshape
    why: str  # one line for people

    @property
    def state(self) -> str:
        return STATES[self.kind]

    @property
    def label(self) -> str:
        return LABELS[self.kind]


class Finder:
    """The block of any one slice of a state: what `blocks` asks of every slice, for callers
    that look at a few (a live view redrawing the hosts that changed)."""

    def __init__(self, state: RecordedState) -> None:
        self.state = state
        self.index = _index_of(state.slices)
        self.flagged = self.index.flagged
        self.fenced = {s: f for f in state.fences.values() for s in f.get("slices") or ()}
        self.quarantined = {
            s: hold for hold in state.quarantined.values() for s in hold.get("slices") or ()
        }
        self.recutting = state.recutting_slices() if state.reshapes else {}
        self.any = bool(
            state.lost
            or state.silent
            or state.drains
            or self.flagged
            or self.fenced
            or self.quarantined
            or self.recutting
        )

    def of(self, sid: str, entry: Mapping[str, Any]) -> Block | None:
        """The block of slice `sid` (its ledger entry `entry`), or None."""
        if not self.any:
            return None
        state, host, card = self.state, str(entry["host"]), card_key(entry)
        # A silent or lost host is told by its last answer, as the drain and the jobs'
        # reasons tell it; the first poll it missed only when no answer was ever recorded.
        lost = state.lost.get(host)
        if lost is not None:
            last = state.answered.get(host)
            told = f": no answer since {last}" if last else f" since {lost.get('since')}"
            return Block("node-lost", host, f"node {host} lost{told}")
        silent = state.silent.get(host)
        if silent is not None:
            return Block(
                "silent",
                host,
                f"{host} has not answered since {state.answered.get(host) or silent}: it takes "
                "no work until it answers a `schedule` or `jobs` pass, or its facts are read "
                "(`gpupoolctl pool`)",
            )
        marks = self.flagged.get(sid) or {}
        if marks.get("lost"):
            where = card or sid
            return Block("card-lost", where, f"{where}: the driver reports the card lost")
        for kind, source in (("failed", "health"), ("drained", "admin")):
            for target in (card, host):
                drain = (state.drains.get(target) or {}).get(source) if target else None
                if drain is not None:
                    return Block(kind, str(target), _drain_why(drain))
        run = self.fenced.get(sid)
        if run is not None:
            return Block(
                "stale-run",
                f"{run['host']}:{run['node_id']}",
                f"a run of {run.get('job') or '?'} may still be there: it is killed when "
                f"{run['host']} answers a `schedule` or `jobs` pass",
            )
        pids = marks.get("stray_pids")
        if pids:
            listed = ", ".join(str(p) for p in pids[:5]) + (" ..." if len(pids) > 5 else "")
            return Block(
                "stray",
                card or sid,
                f"process(es) no hold or job accounts for: pid {listed}; stop them, then "
                "`gpupoolctl pool` reads the card again",
            )
        hold = self.quarantined.get(sid)
        if hold is not None:
            return Block(
                "quarantined",
                str(hold["id"]),
                f"held by {hold['id']} ({hold.get('owner')}), whose record `ledger repair` "
                f"quarantined: a pool admin releases it (`gpupoolctl release {hold['id']}`)",
            )
        reshape = self.recutting.get(sid)
        if reshape is not None:
            return Block("re-cutting", reshape, f"its card is being re-cut ({reshape})")
        return None

    def state_of(self, sid: str, now: str) -> str:
        """The slice's state as people see it at `now`: "held" while a live allocation holds
        it, else its block's state (lost, drained, blocked, re-cutting), else "free"."""
        if self.state.holder(sid, now) is not None:
            return "held"
        entry = self.state.slices.get(sid)
        block = self.of(sid, entry) if entry is not None else None
        return block.state if block is not None else "free"


def blocks(state: RecordedState) -> dict[str, Block]:
    """Slice id -> the block that keeps it out of placement, for every slice that has one
    (held or not)."""
    finder = Finder(state)
    if not finder.any:
        return {}
    # Only the slices a mark can reach are looked at: a pool with one drained card pays for
    # that card, not for the pool.
    index = finder.index
    found: set[str] = {*finder.flagged, *finder.fenced, *finder.quarantined, *finder.recutting}
    for target in (*state.lost, *state.silent, *state.drains):
        found.update(index.by_host.get(target) or index.by_card.get(target) or ())
    out = {}
    for sid in found:
        entry = state.slices.get(sid)
        block = finder.of(sid, entry) if entry is not None else None
        if block is not None:
            out[sid] = block
    return out


def _drain_why(drain: Mapping[str, Any]) -> str:
    who = "the health check" if drain.get("source") == "health" else drain.get("actor")
    return f"{drain.get('target')} drained by {who} since {drain.get('ts')}: {drain.get('reason')}"


@dataclass
class _Index:
    flagged: dict[str, dict[str, Any]]  # slices whose own entry is marked: lost, stray_pids
    by_host: dict[str, list[str]]
    by_card: dict[str, list[str]]


# Built once per slice map: the ledger replaces its slice map on every `slices` record and
# never edits it in place, so the map's identity says whether an index is still good
# (sched.pool does the same for its skeletons). The map is kept referenced, so its id
# cannot be reused while cached.
_INDEXES: list[tuple[dict[str, Any], int, _Index]] = []


def _index_of(slices: dict[str, dict[str, Any]]) -> _Index:
    for known, size, index in _INDEXES:
        if known is slices and size == len(slices):
            return index
    index = _Index({}, {}, {})
    for sid, entry in slices.items():
        if entry.get("lost") or entry.get("stray_pids"):
            index.flagged[sid] = entry
        index.by_host.setdefault(str(entry["host"]), []).append(sid)
        card = card_key(entry)
        if card is not None:
            index.by_card.setdefault(card, []).append(sid)
    _INDEXES.insert(0, (slices, len(slices), index))
    del _INDEXES[4:]
    return index
