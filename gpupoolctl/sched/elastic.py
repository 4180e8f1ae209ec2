"""Elastic re-cutting: which idle cards get which new layout, so that waiting work fits.

Pure: from the pool view (slices and holds), the cards (sched.cards), the queue, the
policy's `elastic:` section and the clock. Nothing here touches a node or the ledger; the
scheduling pass records and executes what this returns, and the benchmark replays it.

The rules, in the order they are applied:

- Only a card every slice of which is free, that no reshape holds or backs off, that has
  been idle (no hold, no re-cut) for the policy's `min-idle`, and that a rule of the policy
  allows, may be re-cut; at most `max-cards-per-pass` per pass. A node keeps `keep-whole`
  of its cards under a rule whole. A card with a running process is refused later, by the
  node itself (the partition verb's busy check): that cannot be known from here.
- Work triggers a re-cut only after waiting `batch-window` (pending work is batched, so one
  re-cut serves several jobs), highest effective priority first (priority and aging).
- Cut: for a job that a MIG slice smaller than the card would serve, the smallest allowed
  profile that satisfies it; the card's new layout packs that and the profiles of the work
  waiting behind it, then fills what is left with the smallest profile allowed (exact
  placements from partition.planner). Cards already cut are preferred to whole ones (the
  whole cards stay whole for work that needs them), then the layout that serves the most
  waiting work, then the card with the least memory.
- Merge: for work that needs whole cards, idle cut cards become whole again (MIG off where
  that needs no reset; the full-size instance on Ampere), on the host that needs fewest.
- A small job never takes a whole idle card that could be cut for it (see `hidden_for`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from gpupoolctl.hw import catalog
from gpupoolctl.sched.cards import (
    WHOLE,
    AmdHive,
    AnyCard,
    AnyLayout,
    Card,
    gpu_keys,
    layout_text,
    predicted_slices,
)
from gpupoolctl.sched.explain import due_in, reach_text
from gpupoolctl.sched.ids import natural
from gpupoolctl.sched.place import NoFit
from gpupoolctl.sched.pool import island_key
from gpupoolctl.sched.request import JobRequest, host_matches, shape_matches

if TYPE_CHECKING:
    from gpupoolctl.policy import ElasticPolicy, ElasticRule
    from gpupoolctl.sched.entry import QueueEntry
    from gpupoolctl.sched.pool import PoolView

InHosts = Callable[[str, str], bool]  # (--limit pattern, host) -> selected


def glob_hosts(pattern: str, host: str) -> bool:
    """The host test without an inventory: comma-separated globs (what the benchmark uses;
    production resolves group names through its inventory)."""
    import fnmatch

    return any(fnmatch.fnmatchcase(host, p.strip()) for p in pattern.split(",") if p.strip())


@dataclass(frozen=True)
class ElasticInputs:
    """What elastic decisions read beyond the pool view: the policy and each card's clock."""

    policy: ElasticPolicy
    cards: Mapping[str, AnyCard]
    in_hosts: InHosts = glob_hosts
    # card key -> when it last changed (a hold ended or began, a re-cut); absent: long ago
    changed: Mapping[str, datetime] = field(default_factory=dict)
    # card key -> why it may not be re-cut now (being re-cut, backing off after a failure)
    blocked: Mapping[str, str] = field(default_factory=dict)

    def rule(self, card: AnyCard) -> ElasticRule | None:
        vendor = "amd" if isinstance(card, AmdHive) else "nvidia"
        return self.policy.rule_for(card.host, vendor, card.model, self.in_hosts)

    def changed_at(self, card: AnyCard) -> datetime | None:
        """When the card last changed; for an AMD hive, the latest of its logical GPUs."""
        keys = {card.key, *gpu_keys(card)}
        times = [self.changed[k] for k in keys if k in self.changed]
        return max(times) if times else None


@dataclass(frozen=True)
class Recut:
    card: AnyCard
    layout: AnyLayout  # the new layout
    reason: str
    jobs: tuple[str, ...]  # the jobs it is made for (queue entry ids where no job is named)
    idle_s: float | None  # how long the card had been idle (None: since before the ledger)

    @property
    def before(self) -> str:
        return layout_text(self.card.layout, self.card)

    @property
    def after(self) -> str:
        return layout_text(self.layout, self.card)

    def slices(self) -> list[dict[str, Any]]:
        return predicted_slices(self.card, self.layout)

    def describe(self) -> str:
        idle = f", idle {_minutes(self.idle_s)}" if self.idle_s is not None else ""
        return f"re-cut idle {self.card.key} ({self.before}{idle}) into {self.after}"


def _minutes(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


# -- what a card could hand out -----------------------------------------------------------


def _allowed(card: Card, rule: ElasticRule) -> tuple[str, ...]:  # MIG cards only
    """Profiles the card may be cut into (smaller than the card), smallest first."""
    return _allowed_in(card.geometry, rule.profiles)


@functools.lru_cache(maxsize=256)
def _allowed_in(geometry: catalog.MigGeometry, names: tuple[str, ...] | None) -> tuple[str, ...]:
    if names is None:
        # "+me" / "-me" / "+gfx" variants differ in media engines, not in size: not chosen
        # unless a rule names them.
        names = tuple(p.name for p in geometry.profiles if "+" not in p.name and "-" not in p.name)
    full = max(geometry.profiles, key=lambda p: (p.compute_slices, p.memory_mib)).name
    found = [geometry.by_name(n) for n in names]
    profiles = [p for p in found if p is not None and p.name != full]
    ordered = sorted(profiles, key=lambda p: (p.memory_mib, p.compute_slices))
    return tuple(p.name for p in ordered)


def _profile_entry(card: Card, profile: str) -> dict[str, Any]:
    gi = card.geometry.by_name(profile)
    assert gi is not None
    return {"kind": "mig", "profile": profile, "memory_mib": gi.memory_mib, **card.common}


def _whole_entry(card: Card) -> dict[str, Any]:
    return predicted_slices(card, card.whole_layout)[0]


def _amd_pairs(hive: AmdHive, rule: ElasticRule) -> list[tuple[str, str]]:
    """Mode pairs the hive may be cut into (more than one partition a card), smallest
    partition first."""
    product = hive.product
    pairs = [
        pair
        for pair in product.allowed
        if product.compute_modes[pair[0]] > 1 and rule.allows_amd_mode(*pair)
    ]
    return sorted(pairs, key=lambda pair: (-product.compute_modes[pair[0]], pair))


def _pair_entry(hive: AmdHive, pair: tuple[str, str]) -> dict[str, Any]:
    memory = hive.memory_mib // hive.per_card(pair)
    kind = "partition" if hive.per_card(pair) > 1 else "gpu"
    profile = f"{pair[0]}/{pair[1]}" if kind == "partition" else None
    return {"kind": kind, "profile": profile, "memory_mib": memory, **hive.common}


def smallest_profile(card: AnyCard, rule: ElasticRule, request: JobRequest) -> str | None:
    """The smallest allowed cut of the card that satisfies one slice of `request`: a MIG
    profile, or for an AMD hive its mode pair ("CPX/NPS4")."""
    if not host_matches(card.host, request):
        return None
    if isinstance(card, AmdHive):
        for pair in _amd_pairs(card, rule):
            if shape_matches(_pair_entry(card, pair), request):
                return f"{pair[0]}/{pair[1]}"
        return None
    for profile in _allowed(card, rule):
        if shape_matches(_profile_entry(card, profile), request):
            return profile
    return None


def whole_entry(card: AnyCard) -> dict[str, Any]:
    """One slice of the card (of each card of an AMD hive) made whole."""
    return _pair_entry(card, card.whole_layout) if isinstance(card, AmdHive) else _whole_entry(card)


def wants_whole(card: AnyCard, rule: ElasticRule, request: JobRequest) -> bool:
    """Whether the card whole serves `request` and no smaller cut of it would."""
    if not host_matches(card.host, request) or not may_merge(card, rule):
        return False
    if not shape_matches(whole_entry(card), request):
        return False
    return smallest_profile(card, rule, request) is None


@dataclass(frozen=True)
class RecutReach:
    """What re-cutting elastic cards could give a request. `reachable`: some card, re-cut
    (or made whole), could hold one slice of it. For work that must stay on one node or
    island (`level` "host" or "island"), `most` is the most slices one such group could
    hold, each elastic card re-cut or as it is, and `group` names it."""

    reachable: bool
    level: str | None = None
    group: str = ""
    most: int = 0

    def serves(self, request: JobRequest) -> bool:
        return self.reachable and (self.level is None or self.most >= request.gpus)

    def why(self, request: JobRequest) -> str:
        """What to add to a placement's reason: that a re-cut could hold the request (then
        it waits), or, for work kept to one node or island, the most a re-cut could give
        ("" when no card could hold any of it)."""
        if not self.reachable:
            return ""
        return reach_text(self.level, self.most, self.group, self.serves(request))

    def nofit(self, request: JobRequest, placed: NoFit) -> NoFit:
        """Placement's reason (`placed`) with what re-cuts could give the request added (a
        "recut-reach"): it waits when they serve it, else it never fits."""
        serves = self.serves(request)
        detail = {"level": self.level, "most": self.most, "group": self.group, "serves": serves}
        return placed.wrap("recut-reach", never=not serves, **detail)


def recut_reach(
    request: JobRequest,
    inputs: ElasticInputs,
    where: Callable[[Mapping[str, Any]], bool] | None = None,
    slices: Iterable[Mapping[str, Any]] | None = None,
) -> RecutReach:
    """What re-cuts could give the request; work it `serves` waits for a re-cut instead of
    being refused as never fitting. `where`: only cards whose slice fields (host,
    site, vendor, model) it accepts, such as a team's quota scopes. With `slices` (the
    pool's), work that must stay on one node (or island) must also fit one: per host
    (island), the most each elastic card could give (re-cut, or as it is) and the matching
    slices of its other GPUs (a 16-GPU same-node job on 8-GPU nodes, or 60 1g.10gb slices
    in one island of 8 H100s, never fits)."""
    level = "island" if request.same_island else "host" if request.same_node else None
    grouped = slices is not None and request.gpus > 1 and level is not None

    def group_of(entry: Mapping[str, Any]) -> str:
        return island_key(entry) if level == "island" else str(entry["host"])

    by_id = {str(e["id"]): e for e in slices} if grouped and slices is not None else {}
    per_group: dict[str, int] = {}
    elastic_ids: set[str] = set()
    reachable = False
    for card in inputs.cards.values():
        if where is not None and not where(card.common):
            continue
        rule = inputs.rule(card)
        if rule is None:
            continue
        cut = smallest_profile(card, rule, request)
        serves = cut is not None or wants_whole(card, rule, request)
        reachable = reachable or serves
        if grouped:
            elastic_ids.update(card.slices)
            most = _most(card, cut, request) if serves else 0
            as_is = 0  # its slices as they are, on a host the request may use
            if host_matches(card.host, request):
                current = [by_id[sid] for sid in card.slices if sid in by_id]
                as_is = sum(1 for entry in current if shape_matches(entry, request))
            group = group_of({**card.common, "host": card.host, "id": card.key})
            per_group[group] = per_group.get(group, 0) + max(most, as_is)
    if not (reachable and grouped):
        return RecutReach(reachable)
    for entry in by_id.values():  # the other GPUs' slices, as they are
        if entry["id"] in elastic_ids or (where is not None and not where(entry)):
            continue
        if shape_matches(entry, request) and host_matches(str(entry["host"]), request):
            group = group_of(entry)
            per_group[group] = per_group.get(group, 0) + 1
    best = min(per_group, key=lambda g: (-per_group[g], natural(g)))
    return RecutReach(True, level, best, per_group[best])


def _most(card: AnyCard, cut: str | None, request: JobRequest) -> int:
    """The most slices of `request` the card (an AMD hive: all its cards) could hold:
    re-cut into `cut` as many times as its geometry allows, or whole (cut None)."""
    if cut is None:
        return card.cards if isinstance(card, AmdHive) else 1
    if isinstance(card, AmdHive):
        compute, _, memory = cut.partition("/")
        return card.per_card((compute, memory)) * card.cards
    from gpupoolctl.partition.planner import place as plan_layout

    count = 1
    while count < 64 and plan_layout(card.geometry, {cut: count + 1}) is not None:
        count += 1
    return count


# -- which cards may be re-cut now --------------------------------------------------------


def _idle(pool: PoolView, card: AnyCard) -> bool:
    """No slice of the card held or taken (the view counts both per GPU key)."""
    if isinstance(card, AmdHive):
        return not any(pool.gpu_used(key) for key in gpu_keys(card))
    return not pool.gpu_used(card.key)


def _whole_count(cards: Sequence[AnyCard], host: str) -> int:
    """Whole cards on the host (an AMD hive counts its cards)."""
    return sum(
        (c.cards if isinstance(c, AmdHive) else 1) for c in cards if c.host == host and c.whole
    )


def _cuttable_whole(card: AnyCard, rule: ElasticRule, peers: Sequence[AnyCard], cut: int) -> bool:
    """Whether cutting this whole card (or hive) still leaves the node `keep-whole` whole
    cards under the rule; `cut`: whole cards of the node already cut in this pass."""
    gone = card.cards if isinstance(card, AmdHive) else 1
    return _whole_count(peers, card.host) - cut - gone >= rule.keep_whole


# An idle card is kept for a re-cut, not handed to a request, when what it has now for that
# request holds at least this many times the memory of what a re-cut would give it: a
# 10 GB job on a whole 80 GB card (8x) or on a 96 GB MI300X partition (4x+) is the waste
# elastic exists to avoid; a 10 GB job on a 20 GB slice (2x) is best-fit's ordinary slack.
OVERSIZE = 2


def hidden_for(request: JobRequest, pool: PoolView, inputs: ElasticInputs) -> list[str]:
    """Free slices of idle elastic cards that a request must not take (hidden_cards): their
    slice ids (the caller hides them from placement for this request only)."""
    return [s for card in hidden_cards(request, pool, inputs) for s in card.slices]


def kept_text(cards: Sequence[AnyCard], inputs: ElasticInputs, now: datetime) -> str:
    """Why the slices of `cards` (hidden_cards) are not offered: "kept to be cut", and when
    the first of them may be, if it has not been idle for min-idle yet ("in 3m40s")."""
    waits = []
    for card in cards:
        changed = inputs.changed_at(card)
        if changed is not None:
            waits.append(inputs.policy.min_idle_s - (now - changed).total_seconds())
    soonest = min(waits, default=0.0)
    return "kept to be cut" + (f" {due_in(soonest, 'min-idle')}" if soonest > 0 else "")


def hidden_cards(request: JobRequest, pool: PoolView, inputs: ElasticInputs) -> list[AnyCard]:
    """Idle elastic cards that a request must not take, because a re-cut of the card would
    serve it with far less memory (OVERSIZE). Not hidden: a card the policy keeps whole
    (keep-whole), one no allowed cut of which holds the whole request (a same-node job
    larger than one card, a job spread over nodes), one that fits the request well."""
    if not inputs.policy.enabled:
        return []
    hidden: list[AnyCard] = []
    by_rule: dict[int, list[AnyCard]] = {}
    for card in inputs.cards.values():
        # A blocked card (being re-cut, or backing off after a failed re-cut) stays hidden
        # too: it is still an elastic card, and small work taking it whole is the waste
        # elastic exists to avoid; work that needs it whole still sees it.
        if not _idle(pool, card):
            continue
        rule = inputs.rule(card)
        if rule is None:
            continue
        cut = smallest_profile(card, rule, request)
        if cut is None or not _one_card_holds(card, cut, request):
            continue
        fits_now = [
            pool.slices[s]["memory_mib"]
            for s in card.slices
            if shape_matches(pool.slices[s], request)
        ]
        if not fits_now or min(fits_now) < OVERSIZE * _cut_memory(card, cut):
            continue
        if card.whole:
            peers = by_rule.setdefault(id(rule), _rule_cards(inputs, rule))
            if not _cuttable_whole(card, rule, peers, 0):
                continue
        hidden.append(card)
    return hidden


def _cut_memory(card: AnyCard, cut: str) -> int:
    """Memory of one slice of a cut (a MIG profile, or an AMD hive's mode pair)."""
    if isinstance(card, AmdHive):
        compute, _, memory = cut.partition("/")
        return card.memory_mib // card.per_card((compute, memory))
    gi = card.geometry.by_name(cut)
    assert gi is not None
    return gi.memory_mib


def _one_card_holds(card: AnyCard, cut: str, request: JobRequest) -> bool:
    """Whether one re-cut of this card alone could hold the whole request."""
    if request.gpus == 1:
        return True
    if not (request.same_node or request.same_island):
        return False  # spread over nodes: this card is never all of it
    if isinstance(card, AmdHive):
        compute, _, memory = cut.partition("/")
        return card.per_card((compute, memory)) * card.cards >= request.gpus
    from gpupoolctl.partition.planner import place as plan_layout

    return plan_layout(card.geometry, {cut: request.gpus}) is not None


def may_merge(card: AnyCard, rule: ElasticRule) -> bool:
    """Whether the rule lets the card become whole: MIG off needs no profile; Ampere's
    full-size instance and AMD's one-partition mode must be allowed like any other."""
    if isinstance(card, AmdHive):
        return rule.allows_amd_mode(*card.whole_layout)
    return card.mig_toggle or rule.allows_profile(card.full_profile.name)


def _rule_cards(inputs: ElasticInputs, rule: ElasticRule) -> list[AnyCard]:
    return [c for c in inputs.cards.values() if inputs.rule(c) is rule]


@dataclass
class _Candidate:
    card: AnyCard
    rule: ElasticRule
    idle_s: float | None


def candidates(pool: PoolView, inputs: ElasticInputs, now: datetime) -> list[_Candidate]:
    """Cards that may be re-cut in this pass, in natural order."""
    policy = inputs.policy
    if not policy.enabled:
        return []
    out = []
    for key in sorted(inputs.cards, key=natural):
        card = inputs.cards[key]
        if key in inputs.blocked or not _idle(pool, card):
            continue
        rule = inputs.rule(card)
        if rule is None:
            continue
        changed = inputs.changed_at(card)
        idle_s = (now - changed).total_seconds() if changed is not None else None
        if idle_s is not None and idle_s < policy.min_idle_s:
            continue
        out.append(_Candidate(card, rule, idle_s))
    return out


# -- the decision ---------------------------------------------------------------------------


def plan_recuts(
    waiting: Sequence[QueueEntry],
    pool: PoolView,
    inputs: ElasticInputs,
    now: datetime,
    may_recut: Callable[[QueueEntry, AnyCard], bool] | None = None,
) -> list[Recut]:
    """Re-cuts for the work that waits (`waiting` in queue order; placement has already
    failed for each), within the policy's limits. `may_recut(entry, card)`: whether a
    re-cut for the entry may take the card (cards kept for other work: sched.clearing)."""
    policy = inputs.policy
    ready = [e for e in waiting if (now - e.enqueued).total_seconds() >= policy.batch_window_s]
    if not ready:
        return []
    free = candidates(pool, inputs, now)
    if not free:
        return []
    chosen: list[Recut] = []
    # Slices of this pass's re-cuts that no job is given yet: (which re-cut, the slice).
    spare: list[tuple[int, dict[str, Any]]] = []
    served: set[str] = set()
    for index, entry in enumerate(ready):
        if entry.id in served:
            continue
        source = _take_spare(entry.request, spare)
        if source is not None:
            made_for = chosen[source]
            chosen[source] = replace(made_for, jobs=(*made_for.jobs, entry.job or entry.id))
            served.add(entry.id)
            continue
        budget = policy.max_cards_per_pass - len(chosen)
        if budget <= 0:
            continue
        rest = [e for e in ready[index + 1 :] if e.id not in served]
        mine = free if may_recut is None else [c for c in free if may_recut(entry, c.card)]
        for recut, leftover in _for_entry(entry, rest, pool, mine, chosen, budget, inputs):
            spare.extend((len(chosen), s) for s in leftover)
            chosen.append(recut)
            free = [c for c in free if c.card.key != recut.card.key]
            served.update(e.id for e in ready if (e.job or e.id) in recut.jobs)
    return chosen


@dataclass(frozen=True)
class Upcoming:
    """A re-cut for waiting work and when a pass may make it: `wait_s` from now (0: the pass
    that decided it makes it), held until then by `cause` ("batch window": the work has not
    waited long enough yet; "min-idle": the card has not been idle long enough yet)."""

    recut: Recut
    wait_s: float = 0.0
    cause: str | None = None

    def nofit(self) -> NoFit:
        """Why the work waits, typed (a "recut-wait")."""
        detail = {"recut": self.recut.describe(), "wait_s": self.wait_s, "cause": self.cause}
        return NoFit("recut-wait", False, detail)

    def reason(self) -> str:
        return self.nofit().reason


# Later moments foresee_recuts looks at (each one more plan_recuts): a queue whose work
# becomes ready at more distinct moments than this is told the first ones only.
LOOKAHEAD = 8


def foresee_recuts(
    waiting: Sequence[QueueEntry],
    pool: PoolView,
    inputs: ElasticInputs,
    now: datetime,
    made: Sequence[Recut] = (),
    may_recut: Callable[[QueueEntry, AnyCard], bool] | None = None,
) -> dict[str, Upcoming]:
    """Entry id -> the re-cut a later pass would make for it and when, for the `waiting`
    work (plan_recuts' input) that this pass's re-cuts (`made`) do not serve: plan_recuts
    itself, asked at each later moment something changes (a batch window ends, a card's
    min-idle ends), the pool as it stands, without the cards and work of earlier moments.
    Work no re-cut serves even then (every card held, none allowed) is not in it."""
    policy = inputs.policy
    served = {job for recut in made for job in recut.jobs}
    rest = [e for e in waiting if (e.job or e.id) not in served]
    if not policy.enabled or not rest:
        return {}
    window = timedelta(seconds=policy.batch_window_s)
    min_idle = timedelta(seconds=policy.min_idle_s)
    card_ready: dict[str, datetime] = {}  # idle cards whose min-idle has not passed yet
    for card in inputs.cards.values():
        changed = inputs.changed_at(card)
        if changed is not None and changed + min_idle > now and _idle(pool, card):
            card_ready[card.key] = changed + min_idle
    ready_at = {e.id: e.enqueued + window for e in rest}
    moments = sorted({t for t in (*ready_at.values(), *card_ready.values()) if t > now})
    if made:  # the next round of this pass re-cuts what this one's budget left over
        moments.insert(0, now)
    blocked = {**inputs.blocked, **{r.card.key: "re-cut earlier" for r in made}}
    found: dict[str, Upcoming] = {}
    for moment in moments[:LOOKAHEAD]:
        later = replace(inputs, blocked=blocked)
        by_job = {e.job or e.id: e for e in rest}
        for recut in plan_recuts(rest, pool, later, moment, may_recut):
            blocked[recut.card.key] = "re-cut earlier"
            idle = recut.idle_s
            if idle is not None:  # as the card stands now, not at `moment`
                recut = replace(recut, idle_s=idle - (moment - now).total_seconds())
            # What ended at this moment: the card's min-idle, else a batch window (this
            # entry's, or that of the work whose re-cut it shares).
            cause = None
            if moment > now:
                cause = "min-idle" if card_ready.get(recut.card.key) == moment else "batch window"
            for job in recut.jobs:
                entry = by_job.get(job)
                if entry is not None and entry.id not in found:
                    found[entry.id] = Upcoming(recut, (moment - now).total_seconds(), cause)
        rest = [e for e in rest if e.id not in found]
        if not rest:
            break
    return found


def _take_spare(request: JobRequest, spare: list[tuple[int, dict[str, Any]]]) -> int | None:
    """Give a one-slice request a spare slice of this pass's re-cuts: the re-cut's index."""
    if request.gpus != 1:
        return None
    for i, (source, entry) in enumerate(spare):
        if shape_matches(entry, request) and host_matches(str(entry["host"]), request):
            del spare[i]
            return source
    return None


def _for_entry(
    entry: QueueEntry,
    rest: Sequence[QueueEntry],
    pool: PoolView,
    free: Sequence[_Candidate],
    chosen: Sequence[Recut],
    budget: int,
    inputs: ElasticInputs,
) -> list[tuple[Recut, list[dict[str, Any]]]]:
    """The re-cuts made for one entry (with their slices no job takes yet): merges when it
    needs whole cards, else at most one cut."""
    whole_need = [
        c for c in free if wants_whole(c.card, c.rule, entry.request) and not c.card.whole
    ]
    if whole_need:
        return _merge(entry, pool, whole_need, budget)
    cut = _cut(entry, rest, free, chosen, inputs)
    return [cut] if cut is not None else []


def _merge(
    entry: QueueEntry, pool: PoolView, mergeable: Sequence[_Candidate], budget: int
) -> list[tuple[Recut, list[dict[str, Any]]]]:
    """Make idle cut cards whole for work that needs whole cards: on one host when the work
    must stay on one node (the host that needs fewest merges), else the first ones.

    Work that needs more merges than this pass's budget gets the first `budget` of them
    now and the rest in later passes (a node of eight cards, four re-cuts a pass): the
    cards made whole stay out of reach of re-cuts for min-idle, and the next pass plans
    again from the pool as it is, so it finishes the same host's merges (which now need
    fewest). Other whole-card work may take the merged cards meanwhile, even work queued
    behind it (backfill): only the aging reservation of an entry that waited long enough
    keeps them for it."""
    request = entry.request
    need = request.gpus
    by_host: dict[str, list[_Candidate]] = {}
    for cand in mergeable:
        by_host.setdefault(cand.card.host, []).append(cand)
    groups: list[tuple[str, list[_Candidate], int]] = []  # host ("" any), candidates, missing
    if request.gpus > 1 and (request.same_node or request.same_island):
        for host, group in by_host.items():
            have = sum(1 for _ in pool.free_candidates(on_host(request, host)))
            groups.append((host, group, need - have))
    else:
        have = sum(1 for _ in pool.free_candidates(request))
        groups.append(("", list(mergeable), need - have))
    plans: list[tuple[int, str, list[_Candidate]]] = []
    for host, group, missing in groups:
        picked = _enough(group, missing)
        if picked:
            plans.append((len(picked), host, picked))
    if not plans or budget <= 0:
        return []
    _, _, picked = min(plans, key=lambda p: (p[0], natural(p[1])))
    reason = f"{entry.request.describe()} waits for whole cards"
    if len(picked) > budget:
        reason += f" ({budget} of the {len(picked)} merges it needs in this pass)"
        picked = picked[:budget]
    out = []
    for cand in picked:
        layout = cand.card.whole_layout
        recut = Recut(cand.card, layout, reason, (entry.job or entry.id,), cand.idle_s)
        out.append((recut, []))
    return out


def _enough(group: Sequence[_Candidate], missing: int) -> list[_Candidate]:
    """The first candidates that, made whole, give `missing` whole cards ([] if all of them
    cannot); an AMD hive gives all of its cards."""
    if missing <= 0:
        return []
    picked: list[_Candidate] = []
    for cand in group:
        picked.append(cand)
        missing -= cand.card.cards if isinstance(cand.card, AmdHive) else 1
        if missing <= 0:
            return picked
    return []


def on_host(request: JobRequest, host: str) -> JobRequest:
    """One slice of the request, on `host`."""
    return replace(request, host=host, gpus=1)


def _cut(
    entry: QueueEntry,
    rest: Sequence[QueueEntry],
    free: Sequence[_Candidate],
    chosen: Sequence[Recut],
    inputs: ElasticInputs,
) -> tuple[Recut, list[dict[str, Any]]] | None:
    best: tuple[tuple[Any, ...], Recut, list[dict[str, Any]]] | None = None
    cut_on_host: dict[str, int] = {}
    for recut in chosen:
        if recut.card.whole:
            gone = recut.card.cards if isinstance(recut.card, AmdHive) else 1
            cut_on_host[recut.card.host] = cut_on_host.get(recut.card.host, 0) + gone
    for cand in free:
        card, rule = cand.card, cand.rule
        first = smallest_profile(card, rule, entry.request)
        if first is None:
            continue
        if card.whole:
            peers = _rule_cards(inputs, rule)
            if not _cuttable_whole(card, rule, peers, cut_on_host.get(card.host, 0)):
                continue
        packed = (
            _pack_hive(card, rule, entry, rest)
            if isinstance(card, AmdHive)
            else _pack(card, rule, entry, first, rest)
        )
        if packed is None:
            continue
        layout, jobs, weight = packed
        if layout == card.layout:
            continue  # it has this already (its slices did not fit for another reason)
        key = (-weight, 1 if card.whole else 0, card.memory_mib, natural(card.key))
        if best is None or key < best[0]:
            reason = f"{entry.request.describe()} waits; no free slice fits"
            recut = Recut(card, layout, reason, tuple(jobs), cand.idle_s)
            slices = predicted_slices(card, layout)
            leftover = _leftover(slices, [entry, *[e for e in rest if (e.job or e.id) in jobs]])
            best = (key, recut, leftover)
    return None if best is None else (best[1], best[2])


def _pack(
    card: Card, rule: ElasticRule, entry: QueueEntry, first: str, rest: Sequence[QueueEntry]
) -> tuple[AnyLayout, list[str], int] | None:
    """A layout for `entry` (gpus copies of `first`), then as much of `rest` as fits, then
    filled with the smallest profile allowed. None when even `entry` does not fit."""
    # Imported here: the partition package costs ~35 ms, and only elastic passes need it.
    from gpupoolctl.partition.planner import place as plan_layout

    geometry = card.geometry
    counts = {first: entry.request.gpus}
    if entry.request.gpus > 1 and not (entry.request.same_node or entry.request.same_island):
        counts = {first: 1}  # a spread job takes what it can here; the rest comes elsewhere
    if plan_layout(geometry, counts) is None:
        return None
    jobs = [entry.job or entry.id]
    weight = entry.request.gpus
    for other in rest:
        if other.request.gpus != 1:
            continue
        profile = smallest_profile(card, rule, other.request)
        if profile is None:
            continue
        trial = {**counts, profile: counts.get(profile, 0) + 1}
        if plan_layout(geometry, trial) is not None:
            counts = trial
            jobs.append(other.job or other.id)
            weight += 1
    # The rest of the card: as many of the smallest allowed profile as fit. Under a queue
    # of small work, the number of slices (one job each) runs out before memory does, so
    # what no waiting job asked for goes to the most slices (bench/utilization measured
    # this against filling with the smallest profile packed: +3 points of utilization).
    smallest = _allowed(card, rule)[0]
    while True:
        trial = {**counts, smallest: counts.get(smallest, 0) + 1}
        if plan_layout(geometry, trial) is None:
            break
        counts = trial
    placed = plan_layout(geometry, counts)
    assert placed is not None
    return tuple(sorted(placed, key=lambda p: (p[1], p[0]))), jobs, weight


def _pack_hive(
    hive: AmdHive, rule: ElasticRule, entry: QueueEntry, rest: Sequence[QueueEntry]
) -> tuple[tuple[str, str], list[str], int] | None:
    """The mode pair for the hive that holds `entry` and the most of `rest` (one slice
    each), the smaller partitions first on a tie. None when no pair holds `entry`."""
    best: tuple[tuple[int, int], tuple[str, str], list[str]] | None = None
    for pair in _amd_pairs(hive, rule):
        slot = _pair_entry(hive, pair)
        if not shape_matches(slot, entry.request):
            continue
        room = hive.per_card(pair) * hive.cards - entry.request.gpus
        if room < 0:
            continue
        jobs = [entry.job or entry.id]
        for other in rest:
            if room == 0:
                break
            if other.request.gpus == 1 and shape_matches(slot, other.request):
                jobs.append(other.job or other.id)
                room -= 1
        served = entry.request.gpus + len(jobs) - 1
        key = (served, hive.per_card(pair))
        if best is None or key > best[0]:
            best = (key, pair, jobs)
    if best is None:
        return None
    return best[1], best[2], best[0][0]


def _leftover(slices: list[dict[str, Any]], served: Sequence[QueueEntry]) -> list[dict[str, Any]]:
    """The predicted slices that the served entries do not take (smallest fit each)."""
    left = sorted(slices, key=lambda s: (s["memory_mib"], natural(s["id"])))
    for entry in served:
        for _ in range(entry.request.gpus):
            for i, entry_slice in enumerate(left):
                if shape_matches(entry_slice, entry.request):
                    del left[i]
                    break
    return left


__all__ = [
    "WHOLE",
    "ElasticInputs",
    "Recut",
    "RecutReach",
    "Upcoming",
    "candidates",
    "foresee_recuts",
    "glob_hosts",
    "hidden_cards",
    "hidden_for",
    "kept_text",
    "plan_recuts",
    "recut_reach",
    "smallest_profile",
    "wants_whole",
]
