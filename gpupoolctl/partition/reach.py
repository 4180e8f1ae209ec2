"""Which other GPUs of a node one GPU's operations change as well, and what a label may ask
of the cards of one xGMI hive.

The facts list an AMD card once per compute partition (logical GPU), but its compute
partition and its SR-IOV VFs belong to the physical card: every logical GPU of the card
changes with them. A memory partition belongs to the xGMI hive: setting it reloads the
driver on every card of the hive and moves their compute partitions along where needed
(partition research, section 4). NVIDIA operations stay on their GPU.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpupoolctl.hw.topology import islands
from gpupoolctl.partition import layout as lay

_CARD_OPS = frozenset({"set_compute_partition", "set_memory_partition", "set_sriov_vfs"})


def _card(gpu: Mapping[str, Any]) -> str:
    """The physical card of a logical GPU: its PCI address without the function number."""
    bus = str(gpu.get("pci_bus_id") or "")
    return bus.rsplit(".", 1)[0] if bus else f"index {gpu.get('index')}"


def hives(facts: Mapping[str, Any]) -> dict[int, int]:
    """AMD GPU index -> its hive number. Without a link matrix covering every GPU, every
    AMD GPU of the node counts as one hive: what a memory change can reach is not guessed
    smaller than it may be."""
    gpus = list(facts.get("gpus") or [])
    matrix = (facts.get("topology") or {}).get("matrix") or []
    numbers = islands(matrix) if matrix and len(matrix) == len(gpus) else [0] * len(gpus)
    return {
        int(gpu["index"]): number
        for gpu, number in zip(gpus, numbers, strict=True)
        if gpu.get("vendor") == "amd"
    }


def also_changed(
    facts: Mapping[str, Any], index: int, ops: Sequence[Mapping[str, Any]]
) -> list[int]:
    """The other GPUs of the node that `ops` on GPU `index` change too (sorted)."""
    names = {op.get("op") for op in ops}
    if not names & _CARD_OPS:
        return []
    gpus = {int(g["index"]): g for g in facts.get("gpus") or []}
    if index not in gpus:
        return []
    reached = {i for i, g in gpus.items() if _card(g) == _card(gpus[index])}
    if "set_memory_partition" in names:
        hive = hives(facts)
        reached |= {i for i, number in hive.items() if number == hive.get(index)}
    reached.discard(index)
    return sorted(reached)


def spans(indexes: Sequence[int]) -> str:
    """1, 3-7: sorted indexes with runs folded."""
    out: list[str] = []
    for i in sorted(indexes):
        if out and out[-1].rsplit("-", 1)[-1] == str(i - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{i}"
        else:
            out.append(str(i))
    return ", ".join(out)


def _hive_asks(
    facts: Mapping[str, Any], targets: Sequence[lay.GpuTarget]
) -> list[tuple[list[lay.GpuTarget], set[str] | None, dict[str, list[tuple[int, str]]]]]:
    """Per hive the label sets: its cards, the memory modes that suit every card's ask
    (None: no card asks anything of memory), and what was asked (for messages)."""
    hive = hives(facts)
    members: dict[int, list[lay.GpuTarget]] = {}
    for target in targets:
        if target.amd is not None and target.index in hive:
            members.setdefault(hive[target.index], []).append(target)
    out = []
    for group in members.values():
        suits: set[str] | None = None
        asks: dict[str, list[tuple[int, str]]] = {}  # what is asked -> (GPU, file:line)
        for target in group:
            entry, product = target.amd, lay.amd_product(target.gpu)
            assert entry is not None
            if product is None:
                continue
            if entry.memory_partition in product.memory_modes:
                modes, what, key = {entry.memory_partition}, entry.memory_partition, "memory"
            elif (
                entry.memory_partition is None and entry.compute_partition in product.compute_modes
            ):
                modes = set(product.memory_modes_for(entry.compute_partition))
                what = f"{entry.compute_partition} (needs {' or '.join(sorted(modes))})"
                key = "compute"
            else:
                continue  # a mode the card lacks: amd_want already says so
            suits = modes if suits is None else suits & modes
            asks.setdefault(str(what), []).append((target.index, entry.where(f"{key}-partition")))
        out.append((group, suits, asks))
    return out


def hive_memory(facts: Mapping[str, Any], targets: Sequence[lay.GpuTarget]) -> dict[int, str]:
    """GPU index -> the memory partition its hive must end in, for hives where one suits
    every card the label sets. A card that names only a compute partition must take that
    mode, not one chosen from its own current mode alone: the last memory change applied
    wins for the whole hive. The hive's current mode is kept when it suits."""
    chosen: dict[int, str] = {}
    for group, suits, _ in _hive_asks(facts, targets):
        if not suits:
            continue
        current = {str((t.gpu.get("partition") or {}).get("memory")) for t in group}
        kept = sorted(suits & current)
        mode = kept[0] if len(current) == 1 and kept else sorted(suits)[0]
        chosen.update({t.index: mode for t in group})
    return chosen


def hive_conflicts(
    host: str, facts: Mapping[str, Any], targets: Sequence[lay.GpuTarget]
) -> list[lay.PlanError]:
    """One error per hive for which no memory partition suits every card the label sets:
    such a label can never hold, and each apply would reload the hive's driver back and
    forth. A card that names only a compute partition suits the memory modes it pairs with."""
    errors = []
    for group, suits, asks in _hive_asks(facts, targets):
        if suits is None or suits:
            continue
        first = group[0].amd
        assert first is not None
        text = "; ".join(
            f"{what} for GPU(s) {', '.join(str(i) for i, _ in gpus)} ({gpus[0][1]})"
            for what, gpus in asks.items()
        )
        errors.append(
            lay.PlanError(
                first.source,
                first.lines.get("memory-partition", first.line),
                f"{host}: the cards of one xGMI hive share one memory partition, and none "
                f"suits all this label asks: {text}",
            )
        )
    return errors
