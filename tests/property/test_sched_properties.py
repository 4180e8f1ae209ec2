"""Placement, queue and preemption properties against brute force on random small pools."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from gpupoolctl.sched import (
    AGING_CAP,
    AGING_INTERVAL,
    Holder,
    JobRequest,
    NoFit,
    Placement,
    PoolView,
    QueueEntry,
    choose_preemption,
    matches,
    order_queue,
    place,
)
from gpupoolctl.sched.ids import natural
from gpupoolctl.sched.place import fits
from gpupoolctl.sched.policies import ALLOC_POLICY, POLICIES, slot_key

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
T0 = datetime(2025, 6, 1, tzinfo=UTC)

# (model, vendor, bandwidth class, whole-card MiB, MIG layouts as (profile, MiB) lists)
CARDS = [
    ("H100 80GB", "nvidia", "ultra", 81559, [[("1g.10gb", 9984)] * 7, [("3g.40gb", 40448)] * 2]),
    ("A100 40GB", "nvidia", "high", 40960, [[("2g.10gb", 9856)] * 2 + [("3g.20gb", 19968)]]),
    ("L40S", "nvidia", "standard", 46068, []),
    ("MI300X", "amd", "ultra", 196592, []),
]


@st.composite
def pools(draw: st.DrawFn) -> list[dict]:
    slices = []
    for h in range(draw(st.integers(1, 4))):
        host = f"n{h}"
        site = draw(st.sampled_from([None, "s0", "s1"]))  # None: the inventory gives none
        model, vendor, bw, whole, layouts = CARDS[draw(st.integers(0, len(CARDS) - 1))]
        gpus = draw(st.integers(1, 4))
        islands = [draw(st.integers(0, 1)) for _ in range(gpus)]
        for g in range(gpus):
            common = {
                "host": host,
                "gpu": g,
                "gpu_uuid": f"GPU-{host}-{g}",
                "vendor": vendor,
                "model": f"NVIDIA {model}" if vendor == "nvidia" else model,
                "bandwidth_class": bw,
                "island": f"{host}/island{islands[g]}",
                **({"site": site} if site else {}),
            }
            layout = draw(st.sampled_from([None, *layouts]))
            if layout is None:
                slices.append(
                    {
                        "id": f"{host}/gpu{g}",
                        "kind": "gpu",
                        "profile": None,
                        "memory_mib": whole,
                        **common,
                    }
                )
            else:
                for k, (profile, mib) in enumerate(layout):
                    slices.append(
                        {
                            "id": f"{host}/gpu{g}/mig-{profile}@{k}",
                            "kind": "mig",
                            "profile": profile,
                            "memory_mib": mib,
                            **common,
                        }
                    )
    return slices


@st.composite
def held_pools(draw: st.DrawFn, busy: bool = False) -> tuple[list[dict], list[Holder]]:
    """A pool and holds on it; `busy`: nearly every slice held (for preemption)."""
    slices = draw(pools())
    ids = [s["id"] for s in slices]
    if busy:
        held = draw(st.permutations(ids))[: max(1, len(ids) - draw(st.integers(0, 1)))]
    else:
        held = draw(st.lists(st.sampled_from(ids), unique=True, max_size=len(ids)))
    holders: list[Holder] = []
    index = 0
    while index < len(held):
        size = draw(st.integers(1, 3))
        part = tuple(held[index : index + size])
        index += size
        number = len(holders)
        holders.append(
            Holder(
                alloc=f"a-{number}",
                slices=part,
                job=f"j-{number}",
                priority=draw(st.sampled_from([10, 50, 90])),
                preemptible=draw(st.booleans()),
                since=f"2025-06-01T00:{number:02d}:00.000Z",
            )
        )
    return slices, holders


requests = st.builds(
    JobRequest,
    gpus=st.integers(1, 4),
    profile=st.sampled_from([None, None, "gpu", "1g.10gb", "3g.40gb", "2g.10gb", "mig"]),
    memory_mib=st.sampled_from([None, None, 9000, 9900, 20000, 40000, 80000]),
    vendor=st.sampled_from([None, None, "nvidia", "amd"]),
    model=st.sampled_from([None, None, "h100", "A100"]),
    bandwidth_class=st.sampled_from([None, None, "high", "ultra"]),
    same_node=st.booleans(),
    same_island=st.booleans(),
    host=st.sampled_from([None, None, None, "n[01]"]),
    priority=st.sampled_from([10, 50, 90, 100]),
)
policies = st.sampled_from(POLICIES)
# For preemption: requests that usually fit an empty pool, from high priorities.
contested = st.builds(
    JobRequest,
    gpus=st.integers(1, 4),
    profile=st.sampled_from([None, "gpu", "1g.10gb"]),
    same_node=st.booleans(),
    same_island=st.booleans(),
    priority=st.sampled_from([50, 90, 100]),
)


def candidates(slices: list[dict], holders: list[Holder], request: JobRequest) -> list[dict]:
    held = {s for h in holders for s in h.slices}
    return [s for s in slices if s["id"] not in held and matches(s, request)]


def group_of(entry: dict, level: str) -> str:
    return entry["island"] if level == "island" else entry["host"]


def fits_somewhere(entries: list[dict], request: JobRequest, policy: str) -> bool:
    """Brute force: can `request` be satisfied by these (free, matching) slices?"""
    if len(entries) < request.gpus:
        return False
    levels = (
        ["island"]
        if request.same_island
        else ["host"]
        if request.same_node and not (policy == "topology" and request.gpus > 1)
        else ["island", "host"]
        if request.same_node
        else [None]
    )
    if levels == [None]:
        return True
    for level in levels:
        counts: dict[str, int] = {}
        for e in entries:
            counts[group_of(e, level)] = counts.get(group_of(e, level), 0) + 1
        if max(counts.values()) >= request.gpus:
            return True
    return False


@SETTINGS
@given(held_pools(), requests, policies)
def test_placements_are_valid_and_never_overcommit(pool_and_holds, request, policy):
    slices, holders = pool_and_holds
    view = PoolView(slices, holders)
    before = set(view.free)
    result = place(request, view, policy)
    assert set(view.free) == before  # pure: tentative picks undone
    free = candidates(slices, holders, request)
    if isinstance(result, NoFit):
        assert not fits_somewhere(free, request, policy)
        return
    assert fits_somewhere(free, request, policy)
    assert len(result.slices) == request.gpus == len(set(result.slices))
    by_id = {s["id"]: s for s in slices}
    held = {s for h in holders for s in h.slices}
    for sid in result.slices:
        assert sid not in held and matches(by_id[sid], request)
    chosen = [by_id[s] for s in result.slices]
    if request.same_island:
        assert len({c["island"] for c in chosen}) == 1
    if request.same_node:
        assert len({c["host"] for c in chosen}) == 1
    if policy == "topology" and request.gpus > 1:
        islands: dict[str, int] = {}
        for e in free:
            islands[e["island"]] = islands.get(e["island"], 0) + 1
        if max(islands.values()) >= request.gpus:
            assert len({c["island"] for c in chosen}) == 1
    assert result.hosts == sorted({c["host"] for c in chosen}, key=natural)
    view.hold(result.slices, Holder(alloc="new", slices=tuple(result.slices)))  # no clash


# Multi-GPU requests free to span nodes: the ones the site level is for.
spanning = st.builds(
    JobRequest,
    gpus=st.integers(2, 8),
    profile=st.sampled_from([None, None, "gpu", "1g.10gb", "mig"]),
    vendor=st.sampled_from([None, None, "nvidia"]),
    host=st.sampled_from([None, None, None, "n[01]"]),
)


@SETTINGS
@given(held_pools(), spanning)
def test_topology_keeps_a_job_on_one_site_on_the_fewest_hosts_when_one_site_can(
    pool_and_holds, request
):
    slices, holders = pool_and_holds
    result = place(request, PoolView(slices, holders), "topology")
    free = candidates(slices, holders, request)
    if isinstance(result, NoFit):
        assert len(free) < request.gpus
        return
    by_id = {s["id"]: s for s in slices}
    chosen = [by_id[s] for s in result.slices]
    per_host: dict[str, int] = {}
    site_of: dict[str, str | None] = {}
    for e in free:
        per_host[e["host"]] = per_host.get(e["host"], 0) + 1
        site_of[e["host"]] = e.get("site")
    per_site: dict[str, int] = {}
    for host, count in per_host.items():
        if site_of[host]:
            per_site[site_of[host]] = per_site.get(site_of[host], 0) + count
    if max(per_host.values()) >= request.gpus:
        assert len(result.hosts) == 1  # one island or one host comes first
    elif per_site and max(per_site.values()) >= request.gpus:
        sites = {c.get("site") for c in chosen}
        assert len(sites) == 1 and None not in sites
        (site,) = sites
        assert per_site[site] >= request.gpus
        # As few of that site's hosts as can hold it (largest first is the fewest).
        counts = sorted((n for h, n in per_host.items() if site_of[h] == site), reverse=True)
        fewest = next(k for k in range(1, len(counts) + 1) if sum(counts[:k]) >= request.gpus)
        assert len(result.hosts) == fewest
    else:
        assert len(result.hosts) > 1  # nowhere smaller holds it: anywhere


@SETTINGS
@given(held_pools(), requests, st.sampled_from([*POLICIES, ALLOC_POLICY]))
def test_single_slice_pick_is_the_brute_force_best(pool_and_holds, request, policy):
    slices, holders = pool_and_holds
    request = JobRequest(**{**request.to_dict(), "gpus": 1})
    view = PoolView(slices, holders)
    result = place(request, view, policy)
    free = candidates(slices, holders, request)
    if not free:
        assert isinstance(result, NoFit)
        return
    assert isinstance(result, Placement)
    best = min((view.slot(s["id"]) for s in free), key=lambda s: slot_key(view, s, policy))
    assert result.slices == [best.id]
    if policy in ("best-fit", "topology", ALLOC_POLICY):
        # best-fit never wastes more than any other valid choice
        assert view.slot(result.slices[0]).memory == min(s["memory_mib"] for s in free)
        if request.memory_mib:
            assert result.waste_mib == min(s["memory_mib"] for s in free) - request.memory_mib


@SETTINGS
@given(held_pools(), requests)
def test_best_fit_multi_slice_waste_is_minimal(pool_and_holds, request):
    slices, holders = pool_and_holds
    view = PoolView(slices, holders)
    result = place(request, view, "best-fit")
    assume(isinstance(result, Placement))
    free = candidates(slices, holders, request)
    used = sum(view.slot(s).memory for s in result.slices)
    level = "island" if request.same_island else "host" if request.same_node else None
    if level is None:
        groups = {"": free}
    else:
        groups = {}
        for e in free:
            groups.setdefault(group_of(e, level), []).append(e)
    best = min(
        sum(sorted(e["memory_mib"] for e in g)[: request.gpus])
        for g in groups.values()
        if len(g) >= request.gpus
    )
    assert used == best


@SETTINGS
@given(held_pools(), requests, policies)
def test_never_exactly_when_an_empty_pool_cannot(pool_and_holds, request, policy):
    slices, holders = pool_and_holds
    result = place(request, PoolView(slices, holders), policy)
    empty = place(request, PoolView(slices), policy)
    if isinstance(result, NoFit):
        assert result.never == isinstance(empty, NoFit)
    assert isinstance(empty, NoFit) == (
        not fits_somewhere(candidates(slices, [], request), request, policy)
    )
    if isinstance(empty, NoFit):
        assert empty.never


@given(held_pools(), requests, policies)
def test_fits_answers_as_place_does(pool_and_holds, request, policy):
    """`fits` (preemption's what-ifs) skips only the reason, never the decision."""
    slices, holders = pool_and_holds
    view = PoolView(slices, holders)
    placed = place(request, view, policy)
    assert fits(request, view, policy) == isinstance(placed, Placement)
    assert view.holds == PoolView(slices, holders).holds  # neither takes what it finds


@SETTINGS
@given(
    held_pools(),
    st.lists(st.tuples(st.booleans(), st.integers(0, 50)), max_size=30),
    requests,
    policies,
)
def test_incremental_view_equals_a_fresh_one(pool_and_holds, steps, request, policy):
    """hold/unhold keep the index (tier lists) exact: same answers as a view built anew."""
    slices, holders = pool_and_holds
    view = PoolView(slices, holders)
    place(JobRequest(), view)  # build some tier lists before the changes
    live = {h.alloc: h for h in holders}
    ids = [s["id"] for s in slices]
    for number, (add, pick) in enumerate(steps):
        if add:
            sid = ids[pick % len(ids)]
            if sid in view.free:
                holder = Holder(alloc=f"x-{number}", slices=(sid,))
                view.hold([sid], holder)
                live[holder.alloc] = holder
        elif live:
            alloc = sorted(live)[pick % len(live)]
            view.unhold(alloc)
            del live[alloc]
    fresh = PoolView(slices, list(live.values()))
    assert set(view.free) == set(fresh.free)
    assert place(request, view, policy) == place(request, fresh, policy)
    # alloc's rule reads free counts and lowest free ids without building the tier lists:
    # the same answers as a view whose lists are built
    assert place(request, PoolView(slices, list(live.values())), ALLOC_POLICY) == place(
        request, view, ALLOC_POLICY
    )
    for shape in view.shapes_for(JobRequest()):
        assert (
            fresh.shape_free(shape)
            == view.shape_free(shape)
            == sum(1 for slot in shape.members if slot.id in fresh.free)
        )


# -- queue --------------------------------------------------------------------------------

entries = st.lists(
    st.tuples(st.sampled_from([10, 50, 90]), st.integers(0, 600)), min_size=1, max_size=30
)


def make_entries(raw: list[tuple[int, int]]) -> list[QueueEntry]:
    ordered = sorted(raw, key=lambda r: r[1])  # seq follows arrival time
    return [
        QueueEntry(id=f"q-{n}", priority=p, seq=n, enqueued=T0 + timedelta(minutes=m))
        for n, (p, m) in enumerate(ordered)
    ]


@SETTINGS
@given(entries)
def test_queue_is_priority_then_fifo_without_aging(raw):
    queue = make_entries([(p, 0) for p, _ in raw])
    ordered = order_queue(queue, T0)
    assert [(e.priority, e.seq) for e in ordered] == sorted(
        ((e.priority, e.seq) for e in queue), key=lambda x: (-x[0], x[1])
    )


@SETTINGS
@given(entries, st.integers(0, 2000))
def test_queue_order_is_a_total_fifo_within_an_effective_priority(raw, minutes):
    queue = make_entries(raw)
    now = T0 + timedelta(minutes=600 + minutes)
    ordered = order_queue(queue, now)
    assert sorted(e.id for e in ordered) == sorted(e.id for e in queue)
    from gpupoolctl.sched import effective_priority

    keys = [(-effective_priority(e, now), e.seq) for e in ordered]
    assert keys == sorted(keys)


@SETTINGS
@given(st.sampled_from([0, 10, 50]), st.integers(1, 30), st.integers(0, 400))
def test_aging_bounds_the_wait_of_a_low_job_under_a_stream_of_high_ones(low, every, extra):
    """A job of priority p is ahead of everything that arrived after it once it has waited
    (cap - p) aging intervals, however many higher-priority jobs keep arriving."""
    bound = AGING_INTERVAL * (AGING_CAP - low)
    now = T0 + bound + timedelta(minutes=extra)
    victim = QueueEntry(id="low", priority=low, seq=0, enqueued=T0)
    stream = [
        QueueEntry(id=f"h-{n}", priority=100, seq=n + 1, enqueued=T0 + timedelta(minutes=m))
        for n, m in enumerate(range(1, int((now - T0).total_seconds() // 60) + 1, every))
    ]
    assert order_queue([*stream, victim], now)[0].id == "low"
    # and before the bound, a fresh high job is still ahead
    early = T0 + bound - AGING_INTERVAL
    fresh = QueueEntry(id="fresh", priority=100, seq=10**6, enqueued=early)
    assert order_queue([fresh, victim], early)[0].id == "fresh"


# -- preemption ---------------------------------------------------------------------------


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(held_pools(), held_pools(busy=True)), st.one_of(contested, requests), policies)
def test_preemption_takes_the_fewest_eligible_victims(pool_and_holds, request, policy):
    slices, holders = pool_and_holds
    view = PoolView(slices, holders)
    victims = choose_preemption(request, view, T0, policy)
    assert {h.alloc for h in view.holds.values()} == {h.alloc for h in holders}  # restored
    eligible = [
        h
        for h in holders
        if h.preemptible and h.priority is not None and h.priority < request.priority
    ]

    def fits_without(chosen: tuple[Holder, ...]) -> bool:
        gone = {h.alloc for h in chosen}
        rest = [h for h in holders if h.alloc not in gone]
        return isinstance(place(request, PoolView(slices, rest), policy), Placement)

    if fits_without(()):
        assert victims == []
        return
    smallest = None
    for size in range(1, len(eligible) + 1):
        if any(fits_without(c) for c in itertools.combinations(eligible, size)):
            smallest = size
            break
    if smallest is None:
        assert victims is None
        return
    assert victims is not None and len(victims) == smallest
    by_job = {h.job: h for h in holders}
    chosen = tuple(by_job[v] for v in victims)
    assert all(h in eligible for h in chosen)
    assert fits_without(chosen)


@given(st.integers(min_value=1, max_value=4 * 1024 * 1024))
def test_the_memory_a_slice_shows_is_memory_it_has(mib: int) -> None:
    """Asking `--mem` for the figure a slice shows (GiB, one decimal) always fits that slice."""
    from gpupoolctl.hw.units import gib_text
    from gpupoolctl.ledger.units import parse_memory_mib

    shown = gib_text(mib)
    assert shown == "0.0" or parse_memory_mib(f"{shown}GiB") <= mib
    # and it is the largest such tenth: one tenth more would not fit
    more = f"{(int(shown.replace('.', '')) + 1) / 10}GiB"
    assert parse_memory_mib(more) > mib
