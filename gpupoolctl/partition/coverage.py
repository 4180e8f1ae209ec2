"""Does a label reach the GPUs it is written for? The checks a plan makes across hosts.

plan_host sees one host, where an entry written for other hosts or other cards rightly
selects nothing. Across every host read, an entry is wrong (a PlanError naming its file:line
and its label) when:

- it names its hosts (`hosts:`), every one of them was read, and it selects no GPU on any
  of them (its `devices:` or `device-filter:` match nothing there);
- the GPUs it selects cannot take what it asks: mig-enabled: true of cards without MIG,
  AMD compute/memory modes of cards without them, VFs of cards without an SR-IOV PF. Under
  `devices: all` such a GPU is skipped (as mig-parted does) so that one entry can serve a
  mixed host; when no selected GPU takes it, the entry does nothing, which is never what was
  meant. (A GPU named by index is refused by layout.select already.)

An entry whose `hosts:` name no host or group of the inventory at all is a typo, or written
for another inventory (one layouts file may serve several): `unknown_hosts`, said but not
refused, unless the label then selects no GPU at all. With `-l`, an entry for hosts outside
the selection is not wrong either: it is only out of reach. An entry for cards by
device-filter alone may find none in this pool, as in mig-parted's own files.

And the label as a whole may select no GPU on the hosts read (`nothing_selected`): a plan
of nothing, which `assert` reports as not holding and `plan`/`apply` refuse
(`label_errors`), naming the entries whose hosts: the inventory does not know where any.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.partition import layout as lay
from gpupoolctl.partition.check import selected_gpus
from gpupoolctl.partition.reach import spans
from gpupoolctl.partition.spec import Spec, SpecEntry

_SHOWN = 3  # hosts or GPU groups named in one message before "and N more"

# aspect -> what the GPUs it needs have (for "none of the GPUs it selects ...")
_HAVE = {
    "mig": "is MIG-capable",
    "amd": "has AMD compute/memory partition modes (an AMD Instinct card the catalog knows)",
    "sriov": "has an SR-IOV physical function",
}


@dataclass(frozen=True)
class HostRead:
    """A host whose facts came back: its inventory name and groups, and the facts."""

    name: str
    groups: Sequence[str]
    facts: Mapping[str, Any]


@dataclass
class Coverage:
    """`errors`: entries that select no GPU or ask the impossible (refused);
    `unknown_hosts`: entries whose hosts: name nothing of the inventory (said)."""

    errors: list[lay.PlanError] = field(default_factory=list)
    unknown_hosts: list[lay.PlanError] = field(default_factory=list)


def entry_problems(
    spec: Spec,
    label: str,
    read: Sequence[HostRead],
    known: Sequence[tuple[str, Sequence[str]]],
    inventory: str | None = None,
) -> Coverage:
    """What is wrong with the label's entries across the hosts read (see the module).

    `known`: every host of the inventory as (name, groups), read or not; `inventory` names
    it in messages."""
    read_names = {host.name for host in read}
    out = Coverage()
    for entry in spec.config(label):
        scope = [name for name, groups in known if entry.matches_host(name, groups)]
        if entry.hosts is not None and not scope:
            where = inventory or "the inventory"
            out.unknown_hosts.append(
                lay.PlanError(
                    entry.source,
                    entry.lines.get("hosts", entry.line),
                    f"{label}: hosts: {', '.join(entry.hosts)} names no host or group of "
                    f"{where}, so this entry selects no GPU",
                )
            )
            continue
        selected = [
            (host, gpu)
            for host in read
            if entry.matches_host(host.name, host.groups)
            for gpu in host.facts.get("gpus") or []
            if entry.matches_device(int(gpu["index"]), gpu.get("pci_device_id"))
        ]
        if not selected:
            if entry.hosts is not None and all(name in read_names for name in scope):
                out.errors.append(
                    lay.PlanError(
                        entry.source,
                        entry.line,
                        f"{label}: this entry selects no GPU on the host(s) it names "
                        f"({_names(scope)}): check its devices: and device-filter:",
                    )
                )
            continue
        out.errors.extend(_untaken(entry, label, selected))
    return out


def label_errors(
    spec: Spec,
    label: str,
    read: Sequence[HostRead],
    known: Sequence[tuple[str, Sequence[str]]],
    inventory: str | None = None,
) -> tuple[list[lay.PlanError], list[str]]:
    """What `plan` and `apply` refuse a label for before anything changes, and what they
    only say: its entries' errors; when there are none and the label selects no GPU at
    all, the entries whose hosts: the inventory does not know (or, without such, that the
    label selects nothing) are errors too, else they are warnings."""
    coverage = entry_problems(spec, label, read, known, inventory)
    errors = list(coverage.errors)
    unknown = list(coverage.unknown_hosts)
    if not errors and nothing_selected(spec, label, read):
        errors = unknown or [lay.PlanError(spec.source, None, nothing_selected_message(label))]
        unknown = []
    return errors, [str(e) for e in unknown]


def nothing_selected(spec: Spec, label: str, read: Sequence[HostRead]) -> bool:
    """Whether the label selects no GPU at all on the hosts read (some host was read)."""
    return bool(read) and not any(
        selected_gpus(spec, label, host.name, host.groups, host.facts) for host in read
    )


def nothing_selected_message(label: str) -> str:
    return (
        f"{label} selects no GPU on the hosts read (check its hosts:, devices: and device-filter:)"
    )


def _untaken(
    entry: SpecEntry, label: str, selected: list[tuple[HostRead, Mapping[str, Any]]]
) -> list[lay.PlanError]:
    """One error per aspect the entry asks that none of its selected GPUs can take."""
    if not entry.all_devices:
        return []  # layout.select refuses each GPU named by index already
    aspects: dict[str, bool] = {}
    for _, gpu in selected:
        for aspect, ok in lay.takes(entry, gpu).items():
            aspects[aspect] = aspects.get(aspect, False) or ok
    out = []
    for aspect, taken in aspects.items():
        if taken or not lay.asks_something(entry, aspect):
            continue
        key, asked = _asked(entry, aspect)
        out.append(
            lay.PlanError(
                entry.source,
                entry.lines.get(key, entry.line),
                f"{label}: this entry asks {asked}, but none of the GPUs it selects "
                f"{_HAVE[aspect]}: {_gpus(selected)}",
            )
        )
    return out


def _asked(entry: SpecEntry, aspect: str) -> tuple[str, str]:
    """The spec key an aspect was asked with, and the ask as written."""
    if aspect == "mig":
        return "mig-enabled", "mig-enabled: true"
    if aspect == "sriov":
        return "sriov-vfs", f"sriov-vfs: {entry.sriov_vfs}"
    modes = [
        f"{key}: {value}"
        for key, value in (
            ("compute-partition", entry.compute_partition),
            ("memory-partition", entry.memory_partition),
        )
        if value is not None
    ]
    key = "compute-partition" if entry.compute_partition is not None else "memory-partition"
    return key, ", ".join(modes)


def _gpus(selected: list[tuple[HostRead, Mapping[str, Any]]]) -> str:
    """ "dxb-l40s-01 GPU 0-3 (NVIDIA L40S)", per host and model, the first few."""
    groups: dict[tuple[str, str], list[int]] = {}
    for host, gpu in selected:
        key = (host.name, str(gpu.get("model") or "unknown model"))
        groups.setdefault(key, []).append(int(gpu["index"]))
    texts = [f"{host} GPU {spans(indexes)} ({model})" for (host, model), indexes in groups.items()]
    return _first(texts)


def _names(names: Sequence[str]) -> str:
    return _first(list(names))


def _first(texts: list[str]) -> str:
    shown = ", ".join(texts[:_SHOWN])
    more = len(texts) - _SHOWN
    return f"{shown} and {more} more" if more > 0 else shown
