"""Cards as elastic re-cutting sees them, from the ledger's slice map alone; what a new layout
of a card would hand out (its slices, predicted exactly as the ledger will record them).

A card is one physical NVIDIA GPU that MIG can cut, with the slices it has now. It may be
re-cut only in ways that need no GPU reset: on Hopper and newer MIG mode can be switched on
an idle card (whole <-> cut); on Ampere a mode change needs a reset (of more than one GPU on
NVSwitch systems), so a card there is elastic only while MIG is on, and "whole" means its
full-size instance. Cards without MIG (an L40S) are never elastic.

AMD cards are re-cut a hive at a time (AmdHive: every AMD card of a node's xGMI island,
all in one compute/memory mode). A memory-partition change reloads the driver on every card
of the hive, and a compute-partition change renumbers the logical GPUs of the node, so
re-cutting one card would rename its neighbours' slices (ending their holds): the unit that
can change without touching anyone's work is the whole hive, and only when all of it is
idle.

The predicted slices follow gpupoolctl.ledger.slices (ids name the GPU, the profile and the
placement), so the same layout gets the same ids whether the benchmark predicts it or a real
node reports it; a test holds the two against each other through the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupoolctl.hw import amd_modes, catalog
from gpupoolctl.hw.slice import Slice, card_key, gpu_id, hive_key, mig_id, partition_id
from gpupoolctl.sched.ids import natural

# A layout: the MIG placements, ((profile, start), ...); () = the card whole (MIG off).
Layout = tuple[tuple[str, int], ...]
WHOLE: Layout = ()


@dataclass(frozen=True)
class Card:
    key: str  # "host/gpu3": the PoolView's GPU key of its slices
    host: str
    index: int
    model: str
    geometry: catalog.MigGeometry
    mig_toggle: bool  # MIG mode may change without a GPU reset (Hopper and newer)
    layout: Layout  # what it has now (WHOLE when MIG is off)
    slices: tuple[str, ...]  # the slice ids it has now
    memory_mib: int  # the whole card's memory
    common: Mapping[str, Any]  # fields every slice of the card carries (island, uuid, ...)

    @property
    def whole(self) -> bool:
        """Handed out as one slice: MIG off, or (MIG on) only the full-size instance."""
        return self.layout == WHOLE or self.layout == self.full_layout

    @property
    def full_layout(self) -> Layout:
        return ((self.full_profile.name, 0),)

    @property
    def full_profile(self) -> catalog.GpuInstanceProfile:
        return max(self.geometry.profiles, key=lambda p: (p.compute_slices, p.memory_mib))

    @property
    def whole_layout(self) -> Layout:
        """The layout that gives the card to one job: MIG off where that needs no reset."""
        return WHOLE if self.mig_toggle else self.full_layout


@dataclass(frozen=True)
class AmdHive:
    key: str  # "host/amd-island0"
    host: str
    model: str
    product: amd_modes.AmdProduct
    cards: int  # physical cards in the hive
    indexes: tuple[int, ...]  # its logical GPUs' indexes now (what a spec's devices name)
    layout: AmdLayout  # ("SPX", "NPS1")
    slices: tuple[str, ...]
    memory_mib: int  # one whole card's memory
    common: Mapping[str, Any]

    @property
    def whole(self) -> bool:
        return self.product.compute_modes.get(self.layout[0]) == 1

    @property
    def whole_layout(self) -> AmdLayout:
        modes = [pair for pair in self.product.allowed if self.product.compute_modes[pair[0]] == 1]
        return min(modes, key=lambda pair: self.product.memory_modes[pair[1]])

    def per_card(self, layout: AmdLayout) -> int:
        return self.product.compute_modes[layout[0]]


AmdLayout = tuple[str, str]  # (compute mode, memory mode): ("CPX", "NPS4")
AnyCard = Card | AmdHive
AnyLayout = Layout | AmdLayout


def gpu_keys(card: AnyCard) -> list[str]:
    """The GPU keys ("host/gpuN", as placement and the ledger name GPUs) of a card, or of
    every logical GPU of an AMD hive."""
    if isinstance(card, AmdHive):
        return [gpu_id(card.host, i) for i in card.indexes]
    return [card.key]


def layout_text(layout: AnyLayout, card: AnyCard | None = None) -> str:
    """'whole card' or '7 x 1g.10gb' / '1 x 3g.40gb + 2 x 1g.10gb', largest first; for an
    AMD hive '8 cards x SPX/NPS1' / '8 cards x CPX/NPS4 (64 x 24 GiB)'."""
    if isinstance(card, AmdHive):
        compute, memory = layout  # type: ignore[misc]
        count = card.per_card((compute, memory)) * card.cards
        each = round(card.memory_mib / card.per_card((compute, memory)) / 1024)
        split = f" ({count} x {each} GiB)" if count > card.cards else ""
        return f"{card.cards} cards x {compute}/{memory}{split}"
    return _mig_text(layout)  # type: ignore[arg-type]


def _mig_text(layout: Layout) -> str:
    if not layout:
        return "whole card"
    counts: dict[str, int] = {}
    for profile, _ in layout:
        counts[profile] = counts.get(profile, 0) + 1
    order = sorted(counts, key=lambda name: (-_size(name), name))
    return " + ".join(f"{counts[name]} x {name}" for name in order)


def _size(profile: str) -> int:
    head = profile.split("g.", 1)[0]
    return int(head) if head.isdigit() else 0


def cards_of(slices: Iterable[Mapping[str, Any]]) -> dict[str, AnyCard]:
    """Every elastic-capable card (NVIDIA) and hive (AMD) of the slice map, by key."""
    by_gpu: dict[str, list[Mapping[str, Any]]] = {}
    by_hive: dict[str, list[Mapping[str, Any]]] = {}
    for entry in slices:
        if entry.get("gpu") is None:
            continue
        vendor = str(entry.get("vendor") or "").lower()
        if vendor == "nvidia" and entry.get("kind") in ("gpu", "mig"):
            by_gpu.setdefault(str(card_key(entry)), []).append(entry)
        elif vendor == "amd":
            by_hive.setdefault(str(hive_key(entry)), []).append(entry)
    cards: dict[str, AnyCard] = {}
    for key, entries in by_gpu.items():
        card = _card(key, entries)
        if card is not None:
            cards[key] = card
    hives_on: dict[str, int] = {}
    for key in by_hive:
        host = key.rsplit("/amd-", 1)[0]
        hives_on[host] = hives_on.get(host, 0) + 1
    for key, entries in by_hive.items():
        # A compute change renumbers every AMD logical GPU of the node, so with two hives
        # on one node neither can change alone: such nodes stay with `partition apply`.
        if hives_on[key.rsplit("/amd-", 1)[0]] > 1:
            continue
        hive = _hive(key, entries)
        if hive is not None:
            cards[key] = hive
    return cards


def _hive(key: str, entries: list[Mapping[str, Any]]) -> AmdHive | None:
    """An AMD hive in one mode throughout, or None (mixed modes, VFs, an unknown product:
    left to `partition apply`)."""
    first = entries[0]
    product = amd_modes.find_product(market_name=str(first.get("model") or ""))
    if product is None:
        return None
    kinds = {e.get("kind") for e in entries}
    profiles = {str(e.get("profile") or "") for e in entries}
    if kinds == {"gpu"}:
        layout = product.default  # whole cards: SPX and the memory mode it is in
        per_card = 1
    elif kinds == {"partition"} and len(profiles) == 1:
        compute, _, memory = profiles.pop().upper().partition("/")
        if (compute, memory) not in product.allowed:
            return None
        layout, per_card = (compute, memory), product.compute_modes[compute]
    else:
        return None
    if len(entries) % per_card:
        return None
    memory_each = int(first.get("memory_mib") or 0)
    common = {k: first.get(k) for k in ("island", "host", "vendor", "model", "bandwidth_class")}
    if first.get("site"):  # as ledger.slices: only when the inventory gives one
        common["site"] = first["site"]
    ordered = sorted(entries, key=lambda e: int(e["gpu"]))
    return AmdHive(
        key=key,
        host=str(first["host"]),
        model=str(first.get("model") or ""),
        product=product,
        cards=len(entries) // per_card,
        indexes=tuple(int(e["gpu"]) for e in ordered),
        layout=layout,
        slices=tuple(str(e["id"]) for e in ordered),
        memory_mib=memory_each * per_card,
        common=common,
    )


def _card(key: str, entries: list[Mapping[str, Any]]) -> Card | None:
    first = entries[0]
    model = catalog.find_nvidia_model(name=str(first.get("model") or ""))
    if model is None or model.mig is None:
        return None
    kinds = {e.get("kind") for e in entries}
    if kinds == {"gpu"} and len(entries) == 1:
        layout: Layout = WHOLE
    elif kinds == {"mig"}:
        layout = tuple(sorted((str(e["profile"]), _start(e)) for e in entries))
        if any(start < 0 for _, start in layout):
            return None  # a slice id this version does not understand: leave the card alone
    else:
        return None
    mig_toggle = model.architecture != "ampere"
    if layout == WHOLE and not mig_toggle:
        return None  # MIG off on Ampere: turning it on needs a reset
    full = max(p.memory_mib for p in model.mig.profiles)
    memory = int(first.get("gpu_memory_mib") or 0) or (
        int(first.get("memory_mib") or 0) if layout == WHOLE else full
    )
    common = {
        k: first.get(k)
        for k in ("island", "host", "gpu", "gpu_uuid", "vendor", "model", "bandwidth_class")
    }
    common["gpu_memory_mib"] = memory  # MIG slices carry it (ledger.slices)
    if first.get("site"):
        common["site"] = first["site"]
    ids = tuple(sorted((str(e["id"]) for e in entries), key=natural))
    return Card(
        key=key,
        host=str(first["host"]),
        index=int(first["gpu"]),
        model=str(first.get("model") or ""),
        geometry=model.mig,
        mig_toggle=mig_toggle,
        layout=layout,
        slices=ids,
        memory_mib=memory,
        common=common,
    )


def _start(entry: Mapping[str, Any]) -> int:
    tail = str(entry["id"]).rsplit("@", 1)
    return int(tail[1]) if len(tail) == 2 and tail[1].isdigit() else -1


def predicted_slices(card: AnyCard, layout: AnyLayout) -> list[Slice]:
    """The slices the card will have after `layout` is applied, as the ledger records them
    (uuids are unknown until the node reports them: placeholders that name the card)."""
    if isinstance(card, AmdHive):
        return _hive_slices(card, layout)  # type: ignore[arg-type]
    if layout == WHOLE:
        common = {k: v for k, v in card.common.items() if k != "gpu_memory_mib"}
        return [
            {
                "id": gpu_id(card.host, card.index),
                "kind": "gpu",
                "profile": None,
                "memory_mib": card.memory_mib,
                "uuid": card.common.get("gpu_uuid"),
                "devices": [card.common["gpu_uuid"]] if card.common.get("gpu_uuid") else [],
                **common,
            }
        ]
    out = []
    for profile, start in sorted(layout, key=lambda p: p[1]):
        gi = card.geometry.by_name(profile)
        assert gi is not None, profile
        out.append(
            {
                "id": mig_id(card.host, card.index, profile, start),
                "kind": "mig",
                "profile": profile,
                "memory_mib": gi.memory_mib,
                "uuid": f"{card.common.get('gpu_uuid')}/mig@{start}",
                "devices": [],
                **card.common,
            }
        )
    return out


def _hive_slices(hive: AmdHive, layout: AmdLayout) -> list[Slice]:
    """Logical GPUs are numbered across the node in card order, each card's partitions in
    turn (what the driver and gpupoolctl.ledger.slices do); memory splits evenly."""
    compute, memory = layout
    per_card = hive.per_card(layout)
    split = per_card > 1
    out: list[Slice] = []
    first = hive.indexes[0] if hive.indexes else 0
    for k in range(hive.cards * per_card):
        index = first + k
        uuid = gpu_id(hive.key, index)  # a placeholder, named under the hive, until read
        out.append(
            {
                "id": partition_id(hive.host, index, compute if split else None, memory),
                "kind": "partition" if split else "gpu",
                "profile": f"{compute}/{memory}" if split else None,
                "memory_mib": hive.memory_mib // per_card,
                "uuid": uuid,
                "devices": [uuid],
                "gpu": index,
                "gpu_uuid": uuid,
                **hive.common,
            }
        )
    return out
