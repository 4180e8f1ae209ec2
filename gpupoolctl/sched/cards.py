"""Cards as elastic re-cutting sees them, from the ledger's slice map alone; what a new layout
of a card would hand out (its slices, predicted exactly as the ledger will record them).

A card is one physical NVIDIA GPU that MIG can cut, with the slices it has now. It may be
re-cut only in ways that need no GPU reset: on Hopper and newer MIG mode can be switched on
an idle card (whole <-> cut); on Ampere a mode change needs a reset (of more than one GPU on
NVSwitch systems), so a card there is elastic only while MIG is on, and "whole" means its
full-size instance. Cards without MIG (an L40S) and AMD cards are not elastic here: an AMD
compute-partition change renumbers the logical GPUs of the node, so re-cutting one card
would rename the slices of its neighbours (their holds would end); that stays with
`partition apply` on an idle node.

The predicted slices follow gpupoolctl.ledger.slices (ids name the GPU, the profile and the
placement), so the same layout gets the same ids whether the benchmark predicts it or a real
node reports it; a test holds the two against each other through the simulator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from gpupoolctl.hw import catalog
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


def layout_text(layout: Layout) -> str:
    """'whole card' or '7 x 1g.10gb' / '1 x 3g.40gb + 2 x 1g.10gb', largest first."""
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


def cards_of(slices: Iterable[Mapping[str, Any]]) -> dict[str, Card]:
    """Every elastic-capable card of the slice map, by GPU key."""
    by_gpu: dict[str, list[Mapping[str, Any]]] = {}
    for entry in slices:
        if entry.get("gpu") is None or str(entry.get("vendor") or "").lower() != "nvidia":
            continue
        if entry.get("kind") not in ("gpu", "mig"):
            continue
        by_gpu.setdefault(f"{entry['host']}/gpu{entry['gpu']}", []).append(entry)
    cards = {}
    for key, entries in by_gpu.items():
        card = _card(key, entries)
        if card is not None:
            cards[key] = card
    return cards


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
    if first.get("gpu_memory_mib"):
        common["gpu_memory_mib"] = first["gpu_memory_mib"]
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


def predicted_slices(card: Card, layout: Layout) -> list[dict[str, Any]]:
    """The slices the card will have after `layout` is applied, as the ledger records them
    (uuids are unknown until the node reports them: placeholders that name the card)."""
    base = f"{card.host}/gpu{card.index}"
    if layout == WHOLE:
        return [
            {
                "id": base,
                "kind": "gpu",
                "profile": None,
                "memory_mib": card.memory_mib,
                "uuid": card.common.get("gpu_uuid"),
                "devices": [card.common["gpu_uuid"]] if card.common.get("gpu_uuid") else [],
                **card.common,
            }
        ]
    out = []
    for profile, start in sorted(layout, key=lambda p: p[1]):
        gi = card.geometry.by_name(profile)
        assert gi is not None, profile
        out.append(
            {
                "id": f"{base}/mig-{profile}@{start}",
                "kind": "mig",
                "profile": profile,
                "memory_mib": gi.memory_mib,
                "uuid": f"{card.common.get('gpu_uuid')}/mig@{start}",
                "devices": [],
                **card.common,
            }
        )
    return out
