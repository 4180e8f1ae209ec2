"""The node's GPUs in the order the `facts` verb numbers them, opened for changing.

facts numbers NVIDIA GPUs first (NVML order), then AMD logical GPUs (amdsmi handle order);
a plan names a GPU by that index and its uuid, which is checked here. All GPUs of a request
are resolved before any op runs: an AMD compute-partition change renumbers the logical GPUs
that follow it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.agent.partition.amd import AmdCard
from gpupoolctl.agent.partition.base import Card
from gpupoolctl.agent.partition.nvidia import NvidiaCard
from gpupoolctl.hw import pci


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass
class _Entry:
    vendor: str
    uuid: str
    make: Any  # () -> Card


@dataclass
class Node:
    entries: list[_Entry] = field(default_factory=list)
    problems: dict[str, str] = field(default_factory=dict)  # vendor -> why it did not open
    _closers: list[Any] = field(default_factory=list)

    def resolve(self, index: int, uuid: str, vendor: str) -> Card | str:
        """The card at `index` if it is the one the plan names; else why not (one line)."""
        if not 0 <= index < len(self.entries):
            why = self.problems.get(vendor)
            extra = f" ({vendor}: {why})" if why else ""
            return f"GPU {index} does not exist on this node{extra}"
        entry = self.entries[index]
        if entry.uuid != uuid:
            return (
                f"GPU {index} is {entry.uuid}, but the plan was made for {uuid}: "
                "take facts and plan again"
            )
        if entry.vendor != vendor:
            return f"GPU {index} is an {entry.vendor} GPU, the plan says {vendor}"
        card: Card = entry.make()
        return card

    def close(self) -> None:
        for closer in reversed(self._closers):
            with contextlib.suppress(Exception):
                closer()


def open_node() -> Node:
    node = Node()
    _add_nvidia(node)
    _add_amd(node)
    return node


def _add_nvidia(node: Node) -> None:
    try:
        import pynvml
    except ImportError:
        return
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        node.problems["nvidia"] = f"nvmlInit failed: {exc}"
        return
    node._closers.append(pynvml.nvmlShutdown)
    try:
        count = int(pynvml.nvmlDeviceGetCount())
        for index in range(count):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            bus_id = pci.bus_id(_text(pynvml.nvmlDeviceGetPciInfo(handle).busId))

            def make(h: Any = handle, i: int = index, u: str = uuid, b: str = bus_id) -> Card:
                return NvidiaCard(pynvml, h, i, u, b)

            node.entries.append(_Entry("nvidia", uuid, make))
    except pynvml.NVMLError as exc:
        node.problems["nvidia"] = f"listing GPUs failed: {exc}"


def _add_amd(node: Node) -> None:
    from gpupoolctl.agent.drivers.amdsmi import (
        _ABSENT_STATUSES,
        DriverUnavailable,
        _describe,
        _import_amdsmi,
        sysfs_for,
    )

    try:
        lib = _import_amdsmi()
    except DriverUnavailable as exc:
        if str(exc):
            node.problems["amd"] = str(exc)
        return
    try:
        lib.amdsmi_init(lib.AmdSmiInitFlags.INIT_AMD_GPUS)
    except Exception as exc:
        if getattr(exc, "err_code", None) not in _ABSENT_STATUSES:
            node.problems["amd"] = f"amdsmi_init failed: {_describe(exc)}"
        return
    node._closers.append(lib.amdsmi_shut_down)
    sysfs = sysfs_for(lib)
    offset = len(node.entries)
    try:
        for position, handle in enumerate(lib.amdsmi_get_processor_handles()):
            uuid = str(lib.amdsmi_get_gpu_device_uuid(handle))
            bdf = str(lib.amdsmi_get_gpu_device_bdf(handle))
            index = offset + position

            def make(b: str = bdf, i: int = index, u: str = uuid) -> Card:
                return AmdCard(lib, sysfs, b, i, u)

            node.entries.append(_Entry("amd", uuid, make))
    except Exception as exc:
        node.problems["amd"] = f"listing GPUs failed: {_describe(exc)}"
