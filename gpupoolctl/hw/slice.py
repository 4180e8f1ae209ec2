"""A slice: what the pool hands to a holder, as the ledger records it and the scheduler reads
it. Stdlib only: the floor that ledger/ and sched/ both stand on.

Slices travel as JSON (the ledger's `slices` records, the scheduler's predicted slices), so
`Slice` is a TypedDict over the plain dict, as node facts are (hw.model). Its ids, and the key
of the card it is on, are formatted here and nowhere else:

- a whole GPU (MIG off or not capable, AMD SPX, no SR-IOV VFs):  host/gpu3
- a MIG GPU instance:                                            host/gpu6/mig-1g.10gb@0
- an AMD compute partition (a logical GPU of its own):           host/gpu12/cpx-nps4
- an SR-IOV virtual function:                                    host/gpu0/vf2

Capacity: how much of a slice can be held, and by how many holders at once. Today a slice
has one holder, who holds all of its memory; `within_capacity` is the one rule that says so,
asked by the pool view (may one more take it), the ledger's state (may this record take it)
and `ledger verify` (does anything hold it beyond its capacity).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Required, TypedDict

SliceKind = Literal["gpu", "mig", "partition", "vf"]
KINDS: tuple[SliceKind, ...] = ("gpu", "mig", "partition", "vf")


class Slice(TypedDict, total=False):
    id: Required[str]
    kind: Required[SliceKind]
    host: Required[str]
    gpu: int  # the card's index on its host (an AMD partition's: its logical GPU's)
    island: str  # the NVLink / xGMI island: "host/island0"
    site: str  # the inventory's site of the host; absent when it has none
    profile: str | None  # "1g.10gb", "CPX/NPS4", "vf/4"; None for a whole GPU
    memory_mib: int
    gpu_memory_mib: int  # the whole card's, on a MIG instance or a VF
    uuid: str | None  # the instance behind the id: a new uuid ends a hold
    devices: list[str]  # what a job's *_VISIBLE_DEVICES names
    gpu_uuid: str | None
    vendor: str | None
    model: str | None
    bandwidth_class: str | None
    lost: bool  # the driver reports the card lost
    stray_pids: list[int]  # processes no hold or job accounts for


@dataclass(frozen=True)
class Capacity:
    """How many holders a slice takes at once, and how much of its memory there is to hold."""

    holders: int
    memory_mib: int


# One holder per slice: sharing a slice (MPS, memory caps) changes this rule and no other.
ONE_HOLDER = 1


def capacity(entry: Mapping[str, Any] | None) -> Capacity:
    """The capacity of a slice (of an unknown one, None: one holder, no memory known)."""
    memory = int((entry or {}).get("memory_mib") or 0)
    return Capacity(holders=ONE_HOLDER, memory_mib=memory)


def within_capacity(entry: Mapping[str, Any] | None, holders: int) -> bool:
    """Whether the slice can carry `holders` holders at once: the pool view asks it with
    one more than it has, `ledger verify` with those it has."""
    return holders <= capacity(entry).holders


# -- ids ----------------------------------------------------------------------------------


def gpu_id(host: str, index: int) -> str:
    """A card's key ("host/gpuN"), which is also the id of the card handed out whole."""
    return f"{host}/gpu{index}"


def mig_id(host: str, index: int, profile: str, start: int) -> str:
    return f"{gpu_id(host, index)}/mig-{profile}@{start}"


def partition_id(host: str, index: int, compute: Any, memory: Any) -> str:
    """An AMD logical GPU. A split card's id names its modes: partition 0 of a card cut to
    CPX is its logical GPU 0, as the whole card was, and a hold on the whole card must not
    quietly become a hold on an eighth of it. SPX (not split) is the whole card's id."""
    if compute in (None, "SPX"):
        return gpu_id(host, index)
    return f"{gpu_id(host, index)}/{str(compute).lower()}-{str(memory).lower()}"


def vf_id(host: str, index: int, number: int) -> str:
    return f"{gpu_id(host, index)}/vf{number}"


def island_id(host: str, number: int) -> str:
    """The NVLink / xGMI island `number` of a host (hw.topology numbers them)."""
    return f"{host}/island{number}"


def card_key(entry: Mapping[str, Any] | None) -> str | None:
    """The card a slice is on ("host/gpuN", as placement and reservations key GPUs), or None."""
    if not entry or entry.get("gpu") is None:
        return None
    return gpu_id(str(entry["host"]), entry["gpu"])


def hive_key(entry: Mapping[str, Any] | None) -> str | None:
    """The AMD hive an AMD slice is in ("host/amd-islandN", as elastic re-cuts name it)."""
    if not entry or str(entry.get("vendor") or "").lower() != "amd":
        return None
    island = str(entry.get("island") or island_id(str(entry["host"]), 0)).rsplit("/", 1)[-1]
    return f"{entry['host']}/amd-{island}"
