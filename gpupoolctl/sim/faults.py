"""Health faults of a simulated node: written into its state file, read back by the fakes.

`gpupoolctl sim fault HOST[/gpuN] FAULT...` parses FAULTs on the workstation (parse_faults)
and sends them to the node's agent, which applies them here (apply_faults): the fake pynvml and
amdsmi then answer the real health calls from this state, so the real drivers are what a test
exercises. Stdlib only.

    xid=N                 NVIDIA: a critical XID event (in the kernel log and as an NVML event)
    ecc=N                 uncorrected (NVIDIA: volatile) / uncorrectable (AMD) ECC errors
    ecc-deferred=N        AMD: deferred ECC errors
    row-remap=pending|failed     NVIDIA Ampere and later
    retired-pages=pending NVIDIA before Ampere
    bad-pages=N           AMD: retired pages
    ring-hang, reset      AMD: driver events RING_HANG, GPU_PRE_RESET
    temp=C                the temperature the card reports
    lost                  NVIDIA: every call on the GPU raises GPU_IS_LOST
    node-down             the node stops answering (a partition: what runs there goes on)

A host-level `clear` removes every fault of the node, node-down included; a GPU's removes
that GPU's.
"""

from __future__ import annotations

import time
from typing import Any

from gpupoolctl.sim.statefile import StateFile

# name -> (takes a value, vendors it applies to, what the value must be)
KINDS: dict[str, tuple[bool, tuple[str, ...], str]] = {
    "xid": (True, ("nvidia",), "an XID number"),
    "ecc": (True, ("nvidia", "amd"), "an error count"),
    "ecc-deferred": (True, ("amd",), "an error count"),
    "row-remap": (True, ("nvidia",), "pending or failed"),
    "retired-pages": (True, ("nvidia",), "pending"),
    "bad-pages": (True, ("amd",), "a page count"),
    "ring-hang": (False, ("amd",), ""),
    "reset": (False, ("amd",), ""),
    "temp": (True, ("nvidia", "amd"), "degrees C"),
    "lost": (False, ("nvidia",), ""),
    "node-down": (False, (), ""),  # the node's, not a GPU's
}
_CHOICES = {"row-remap": ("pending", "failed"), "retired-pages": ("pending",)}


class FaultError(ValueError):
    """A fault spec that cannot apply: one line naming what is wrong."""


def parse_faults(specs: list[str]) -> list[tuple[str, Any]]:
    """["xid=79", "lost"] -> [("xid", 79), ("lost", None)]; FaultError on bad input."""
    out: list[tuple[str, Any]] = []
    for spec in specs:
        name, sep, raw = spec.strip().partition("=")
        name = name.strip().lower()
        if name not in KINDS:
            raise FaultError(f"unknown fault {spec!r}: use {', '.join(KINDS)}")
        takes_value, _, expected = KINDS[name]
        if takes_value and not sep:
            raise FaultError(f"fault {name} needs a value: {name}=<{expected}>")
        if not takes_value and sep:
            raise FaultError(f"fault {name} takes no value (got {spec!r})")
        if not takes_value:
            out.append((name, None))
        elif name in _CHOICES:
            value = raw.strip().lower()
            if value not in _CHOICES[name]:
                raise FaultError(f"{name}={raw}: use {' or '.join(_CHOICES[name])}")
            out.append((name, value))
        else:
            try:
                number = int(raw.strip())
            except ValueError:
                raise FaultError(f"{name}={raw}: expected {expected} (an integer)") from None
            if number < 0 or (name == "xid" and number == 0):
                raise FaultError(f"{name}={raw}: expected {expected} above zero")
            out.append((name, number))
    if not out:
        raise FaultError("name at least one fault, or --clear")
    return out


def is_down(data: dict[str, Any]) -> bool:
    return bool(data.get("down"))


def _vendor(data: dict[str, Any]) -> str:
    for vendor in ("nvidia", "amd"):
        if isinstance(data.get(vendor), dict):
            return vendor
    raise FaultError("the simulated node has no GPUs")


def _gpu(data: dict[str, Any], vendor: str, index: int) -> dict[str, Any]:
    gpus = data[vendor].get("gpus") or []
    for gpu in gpus:
        if int(gpu.get("index", -1)) == index:
            return gpu
    raise FaultError(f"no gpu{index} on this node (it has gpu0..gpu{len(gpus) - 1})")


def apply_faults(
    state: StateFile, gpu: int | None, faults: list[tuple[str, Any]], now: float | None = None
) -> dict[str, Any]:
    """Record the faults in the node's state; FaultError (nothing written) when one cannot
    apply to this node or GPU."""
    now = time.time() if now is None else now
    with state.mutate() as data:
        vendor = _vendor(data)
        for name, _ in faults:
            if name == "node-down":
                continue
            if gpu is None:
                raise FaultError(f"fault {name} is a GPU's: name one as HOST/gpuN")
            if vendor not in KINDS[name][1]:
                owners = " and ".join(KINDS[name][1])
                raise FaultError(f"fault {name} is for {owners} GPUs; this node's are {vendor}")
        entry = _gpu(data, vendor, gpu) if gpu is not None else None
        for name, value in faults:
            if name == "node-down":
                data["down"] = True
                continue
            assert entry is not None
            health = entry.setdefault("health", {})
            if vendor == "nvidia":
                _nvidia(entry, health, name, value, now)
            else:
                _amd(health, name, value)
    return {"gpu": gpu, "faults": [f"{n}={v}" if v is not None else n for n, v in faults]}


def _nvidia(entry: dict[str, Any], health: dict[str, Any], name: str, value: Any, now: float):
    if name == "xid":
        health.setdefault("xids", []).append({"xid": value, "at": now, "delivered": False})
    elif name == "ecc":
        health["ecc_uncorrected_volatile"] = value
        health["ecc_uncorrected_aggregate"] = max(value, health.get("ecc_uncorrected_aggregate", 0))
    elif name == "row-remap":
        rows = health.setdefault("remapped_rows", {})
        rows[value] = True
        rows["uncorrectable"] = int(rows.get("uncorrectable", 0)) + 1
    elif name == "retired-pages":
        health["retired_pages_pending"] = True
    elif name == "temp":
        health["temperature_c"] = value
        if value >= 90:  # the card slows its clocks down at that heat
            health["clocks_event_reasons"] = 0x20 | 0x40
    elif name == "lost":
        entry["lost"] = True


def _amd(health: dict[str, Any], name: str, value: Any) -> None:
    if name == "ecc":
        health["ecc_uncorrectable"] = value
    elif name == "ecc-deferred":
        health["ecc_deferred"] = value
    elif name == "bad-pages":
        health["bad_pages"] = value
    elif name == "ring-hang":
        health.setdefault("events", []).append("RING_HANG")
    elif name == "reset":
        health.setdefault("events", []).extend(["GPU_PRE_RESET", "GPU_POST_RESET"])
    elif name == "temp":
        health["temperature_c"] = value


def clear_faults(state: StateFile, gpu: int | None) -> dict[str, Any]:
    """Remove the faults of one GPU, or of the whole node (node-down included)."""
    with state.mutate() as data:
        vendor = _vendor(data)
        if gpu is None:
            data.pop("down", None)
            entries = list(data[vendor].get("gpus") or [])
        else:
            entries = [_gpu(data, vendor, gpu)]
        for entry in entries:
            entry.pop("health", None)
            entry.pop("lost", None)
    return {"gpu": gpu, "cleared": True}
