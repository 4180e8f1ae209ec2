"""Physical cards in the ledger's slice map: which GPUs are one card, and a card's memory.

The ledger keys slices by GPU ("host/gpuN", state.card_key), as the node's driver numbers
them. An NVIDIA card is one such GPU, whatever its MIG layout. An AMD card in a compute
partition mode other than SPX shows as several logical GPUs (DPX two, CPX eight on an
MI300X), numbered across the node in card order, each card's partitions in turn (what the
driver does, and gpupoolctl.ledger.slices and sched.cards follow): they are one card.

A card's memory is what the card has, not what its slices happen to offer: a card cut into
MIG instances that leave part of it unused still has all of it. `top`, `pool --html` and
the held share of the last hour count the pool's memory so, whether or not the nodes'
facts were read.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from gpupoolctl.ledger.state import card_key


def physical_cards(slices: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """GPU key -> the key of the physical card it is on (the card's first logical GPU), for
    every GPU the slices name. A logical GPU whose card cannot be told (an AMD product the
    catalog does not know, a partition mode it does not list) counts as a card."""
    by_gpu: dict[str, Mapping[str, Any]] = {}
    for entry in slices:
        key = card_key(entry)
        if key is not None:
            by_gpu.setdefault(key, entry)
    out: dict[str, str] = {}
    per_host: dict[str, list[tuple[int, str, Mapping[str, Any]]]] = {}
    for key, entry in by_gpu.items():
        if str(entry.get("vendor") or "").lower() == "amd":
            per_host.setdefault(str(entry["host"]), []).append((int(entry["gpu"]), key, entry))
        else:
            out[key] = key
    for logical in per_host.values():
        card, left, mode = "", 0, None
        for _, key, entry in sorted(logical, key=lambda item: item[0]):
            entry_mode = _compute_mode(entry)
            if left == 0 or entry_mode != mode:  # the next card begins
                card, left, mode = key, _partitions(entry), entry_mode
            out[key] = card
            left -= 1
    return out


def card_memory_mib(entries: Iterable[Mapping[str, Any]]) -> int:
    """The memory of the GPU these slices are on (the slices of one GPU key): the card's
    own, as its facts gave it (`gpu_memory_mib`, which MIG instances and SR-IOV VFs carry),
    else what its slices hold together (a whole card; an AMD partition is all of its
    logical GPU)."""
    total = 0
    for entry in entries:
        own = entry.get("gpu_memory_mib")
        if isinstance(own, int) and not isinstance(own, bool) and own > 0:
            return own
        total += int(entry.get("memory_mib") or 0)
    return total


def pool_memory_mib(slices: Iterable[Mapping[str, Any]]) -> int:
    """The memory of every card the slices are on (card_memory_mib of each GPU); a slice
    that names no GPU counts its own."""
    by_gpu: dict[str, list[Mapping[str, Any]]] = {}
    for entry in slices:
        by_gpu.setdefault(card_key(entry) or str(entry.get("id")), []).append(entry)
    return sum(card_memory_mib(entries) for entries in by_gpu.values())


def _compute_mode(entry: Mapping[str, Any]) -> str:
    """An AMD logical GPU's compute partition mode, from its slice ("CPX/NPS4" -> CPX);
    SPX for a whole card."""
    if entry.get("kind") == "partition" and entry.get("profile"):
        return str(entry["profile"]).split("/", 1)[0].upper()
    return "SPX"


def _partitions(entry: Mapping[str, Any]) -> int:
    """How many logical GPUs the card of this one shows in its compute mode (1 unknown)."""
    mode = _compute_mode(entry)
    if mode == "SPX":
        return 1
    from gpupoolctl.hw import amd_modes  # loads the partition catalog: AMD partitions only

    product = amd_modes.find_product(market_name=str(entry.get("model") or ""))
    if product is None or mode not in product.compute_modes:
        return 1
    return product.compute_modes[mode]
