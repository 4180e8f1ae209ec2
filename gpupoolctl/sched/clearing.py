"""Clearing cards for a merge: reclaim that empties cut cards so the elastic pass can make
them whole again for a team's guaranteed work.

With teams and an elastic section, a team within its nominal quota may wait for whole
cards while every card in its scopes is cut small and held by other teams' borrowed work
(by day the elastic pass cut them for inference; at night training's nominal comes back).
Reclaim (sched.shares.choose_reclaim) stops only holds whose slices would serve the request
as they are, so it cannot help, and a cut card whose free slices borrowers keep refilling
never becomes idle for the elastic pass to merge. A clearing plan picks the cut cards in the
team's scopes whose merge would serve the request, emptied by stopping the fewest holds that
reclaim may take (borrowed or preemptible work of teams above their nominal, never taking a
team below its nominal: sched.shares.reclaimable). The pass reclaims those holds and, while
the request waits for the merge (victims stopping, then the card's min-idle), does not lend
the planned cards: work that would borrow gets none of their free slices and no re-cut of
them (work within its own nominal still may use them: it has the same right). Nothing is
remembered between passes: every pass plans again from the pool as it is.

Only merges: work that waits for a bigger MIG profile than any card has today is served by
reclaim of existing slices or by a card that empties on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gpupoolctl.sched.cards import AmdHive, AnyCard
from gpupoolctl.sched.elastic import ElasticInputs, on_host, wants_whole, whole_entry
from gpupoolctl.sched.ids import natural
from gpupoolctl.sched.request import JobRequest
from gpupoolctl.sched.shares import Usage, reclaimable, within_nominal

if TYPE_CHECKING:
    from gpupoolctl.sched.pool import PoolView


@dataclass(frozen=True)
class ClearingPlan:
    """Cut cards whose merge serves a request, and the holds to stop to empty them."""

    cards: tuple[AnyCard, ...]
    victims: tuple[str, ...]  # victim ids (Holder.victim_id); () when the cards are idle
    # Card keys of the whole cards free now that the request counts on besides the merges
    # (a job on two cards of one node, one of them whole already): kept with the others,
    # else the elastic pass may cut them for other work while the merges wait.
    ready: tuple[str, ...]
    # What the request would hold once the cards are whole: the pass counts it against the
    # team's nominal in its later plans, so two waiting requests never plan the same room.
    entries: tuple[dict[str, Any], ...]

    def detail(self) -> dict[str, Any]:
        """What a "clearing" no-fit reason tells of the plan (sched.explain)."""
        return {"cards": tuple(card.key for card in self.cards), "victims": len(self.victims)}


def plan_clearing(
    team: str,
    request: JobRequest,
    pool: PoolView,
    usage: Usage,
    elastic: ElasticInputs,
    *,
    spare: frozenset[str] = frozenset(),
    kept: Mapping[str, str] | None = None,
    planned: Sequence[Mapping[str, Any]] = (),
) -> ClearingPlan | None:
    """The cheapest set of cut cards in the team's scopes whose merge gives the request
    the whole cards it lacks (on one host when it must stay on one node): fewest holds to
    stop, then fewest cards. None when no such set can be emptied by reclaim or when the
    request would take the team above its nominal. Merges beyond one pass's
    max-cards-per-pass are made over several passes (sched.elastic), this plan made again
    in each. `spare`: holds placed by this pass (never victims); `kept`: cards already kept
    for other work in this pass (not planned again); `planned`: what the team's earlier
    plans in this pass will hold (counted as held)."""
    scopes = usage.scopes(team)
    if not scopes:
        return None
    mergeable: list[AnyCard] = []
    for card in elastic.cards.values():
        if card.whole or card.key in elastic.blocked or (kept and card.key in kept):
            continue
        if not any(scope.selects(card.common) for scope in scopes):
            continue
        rule = elastic.rule(card)
        if rule is not None and wants_whole(card, rule, request):
            mergeable.append(card)
    if not mergeable:
        return None
    slices = {sid for card in mergeable for sid in card.slices}
    stoppable = {
        h.alloc: h
        for h in reclaimable(team, usage, pool, spare, lambda h: any(s in slices for s in h.slices))
    }
    costs: list[tuple[AnyCard, frozenset[str]]] = []  # a card and the holds that empty it
    for card in mergeable:
        holds: set[str] = set()
        for sid in card.slices:
            if pool.is_free(sid):
                continue
            holder = pool.holder(sid)
            if holder is None or holder.alloc not in stoppable:
                break  # held by work reclaim may not stop, or kept by this pass
            holds.add(holder.alloc)
        else:
            costs.append((card, frozenset(holds)))
    owner = {sid: card.key for card in elastic.cards.values() for sid in card.slices}

    def usable(sid: str) -> bool:
        """A free slice the request may count on: in the team's scopes, kept for no one."""
        taken = kept is not None and owner.get(sid) in kept
        return not taken and any(scope.selects(pool.slices[sid]) for scope in scopes)

    plans = [
        plan
        for group in _groups(request, costs)
        if (plan := _cheapest(request, pool, group, usable))
    ]
    if not plans:
        return None
    cards, holds, ready = min(
        plans, key=lambda p: (len(p[1]), len(p[0]), natural(p[0][0].host), p[0][0].key)
    )
    # All the request would hold: the free whole cards it counts on and the merged ones.
    on_ready = [dict(pool.slices[sid]) for sid in ready]
    entries = tuple(on_ready + _whole_entries(cards, request.gpus - len(ready)))
    if not within_nominal(team, [*planned, *entries], usage):
        return None
    victims = sorted({stoppable[alloc].victim_id for alloc in holds}, key=natural)
    ready_cards = tuple(dict.fromkeys(owner[sid] for sid in ready if sid in owner))
    return ClearingPlan(tuple(cards), tuple(victims), ready=ready_cards, entries=entries)


def _groups(
    request: JobRequest, costs: list[tuple[AnyCard, frozenset[str]]]
) -> list[list[tuple[AnyCard, frozenset[str]]]]:
    """The cards a plan may combine: one host's when the work stays on one node."""
    if request.gpus > 1 and (request.same_node or request.same_island):
        by_host: dict[str, list[tuple[AnyCard, frozenset[str]]]] = {}
        for item in costs:
            by_host.setdefault(item[0].host, []).append(item)
        return list(by_host.values())
    return [costs]


def _cheapest(
    request: JobRequest,
    pool: PoolView,
    group: list[tuple[AnyCard, frozenset[str]]],
    usable: Callable[[str], bool],
) -> tuple[list[AnyCard], set[str], list[str]] | None:
    """Cards of the group, fewest holds to stop first, until with the whole cards free now
    (in the team's scopes) they give the request its GPUs: (cards, holds, the free slices
    counted on); None when the group cannot."""
    if not group:
        return None
    host = group[0][0].host
    stays = request.gpus > 1 and (request.same_node or request.same_island)
    where = on_host(request, host) if stays else replace(request, gpus=1)
    ready = [s.id for s in pool.free_candidates(where) if usable(s.id)]
    ready = ready[: request.gpus - 1]  # all of them: it would have been placed
    missing = request.gpus - len(ready)
    picked: list[AnyCard] = []
    holds: set[str] = set()
    for card, stop in sorted(group, key=lambda c: (len(c[1]), c[0].key)):
        if missing <= 0:
            break
        picked.append(card)
        holds |= stop
        missing -= card.cards if isinstance(card, AmdHive) else 1
    return (picked, holds, ready) if missing <= 0 and picked else None


def _whole_entries(cards: list[AnyCard], gpus: int) -> list[dict[str, Any]]:
    """The slices the request would hold on the merged cards (at most `gpus`)."""
    out: list[dict[str, Any]] = []
    for card in cards:
        each = whole_entry(card)
        out.extend([each] * (card.cards if isinstance(card, AmdHive) else 1))
    return out[:gpus]
