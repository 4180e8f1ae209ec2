"""The node's network ports, from sysfs: read-only, stdlib only, bounded.

- Ethernet: /sys/class/net/<if>/ with `speed` (Mb/s; -1 or an error when the link is down),
  `operstate`, and `device/numa_node`. Interfaces with no `device` (lo, bridges, veth pairs,
  bonds, VLANs, tunnels) are virtual and left out, as are names that are virtual whatever
  they claim (docker*, veth*, br-*, virbr*).
- InfiniBand and RoCE: /sys/class/infiniband/<dev>/ports/<n>/ with `rate`
  ("400 Gb/sec (4X NDR)"), `state` ("4: ACTIVE") and `link_layer` ("InfiniBand" or
  "Ethernet": the latter is RoCE). A netdev that belongs to an RDMA device (the Ethernet
  side of a RoCE port, an IPoIB ib0) is that port again and is listed once, as the RDMA
  device.

At most MAX_INTERFACES netdevs, MAX_RDMA_DEVICES RDMA devices and MAX_PORTS ports each are
looked at, and each file is read up to _READ bytes: a node with thousands of VFs or a
broken sysfs costs a bounded time and says so in a warning.
"""

from __future__ import annotations

import itertools
import os
import re
from typing import Any

MAX_INTERFACES = 128
MAX_RDMA_DEVICES = 64
MAX_PORTS = 8
_READ = 256
_VIRTUAL_PREFIXES = ("docker", "veth", "br-", "virbr")
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec")


def read_network(root: str = "/") -> tuple[dict[str, Any], list[str]]:
    """({"nics": [Nic, ...]}, warnings) for the node whose sysfs is under `root`."""
    warnings: list[str] = []
    rdma, claimed = _rdma_ports(os.path.join(root, "sys", "class", "infiniband"), warnings)
    ethernet = _ethernet(os.path.join(root, "sys", "class", "net"), claimed, warnings)
    return {"nics": ethernet + rdma}, warnings


def _entries(folder: str, limit: int, what: str, warnings: list[str]) -> list[str]:
    try:
        with os.scandir(folder) as scan:
            names = [entry.name for entry in itertools.islice(scan, limit + 1)]
    except OSError:
        return []
    if len(names) > limit:
        warnings.append(f"network: more than {limit} {what}; only {limit} looked at")
        names = names[:limit]
    return sorted(names, key=_natural)


def _natural(name: str) -> tuple[Any, ...]:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name))


def _read(path: str) -> str | None:
    try:
        with open(path, "rb") as handle:
            return handle.read(_READ).decode("ascii", "replace").strip()
    except OSError:  # EINVAL from `speed` on a down link, or absent
        return None


def _numa(device: str) -> int | None:
    text = _read(os.path.join(device, "numa_node"))
    try:
        value = int(text) if text is not None else -1
    except ValueError:
        return None
    return value if value >= 0 else None


def _ethernet(folder: str, claimed: set[str], warnings: list[str]) -> list[dict[str, Any]]:
    nics = []
    for name in _entries(folder, MAX_INTERFACES, "network interfaces", warnings):
        if name == "lo" or name.startswith(_VIRTUAL_PREFIXES) or name in claimed:
            continue
        base = os.path.join(folder, name)
        device = os.path.join(base, "device")
        if not os.path.exists(device):
            continue  # no hardware behind it: a virtual interface
        if os.path.isdir(os.path.join(device, "infiniband")):
            continue  # the netdev of an RDMA port: listed from /sys/class/infiniband
        nics.append(
            {
                "name": name,
                "kind": "ethernet",
                "speed_gbps": parse_speed(_read(os.path.join(base, "speed"))),
                "state": _operstate(_read(os.path.join(base, "operstate"))),
                "numa_node": _numa(device),
            }
        )
    return nics


def parse_speed(text: str | None) -> float | None:
    """/sys/class/net/*/speed (Mb/s) -> Gb/s; -1, 0, garbage or unreadable -> None."""
    try:
        megabits = int(text) if text is not None else -1
    except ValueError:
        return None
    return megabits / 1000 if megabits > 0 else None


def _operstate(text: str | None) -> str | None:
    if text == "up":
        return "up"
    if text in ("down", "lowerlayerdown", "notpresent"):
        return "down"
    return None  # "unknown", "dormant", "testing": the kernel does not say


def parse_rate(text: str | None) -> float | None:
    """An RDMA port's `rate` ("400 Gb/sec (4X NDR)", "2.5 Gb/sec (1X SDR)") -> Gb/s."""
    match = _RATE.match(text or "")
    return float(match.group(1)) if match else None


def _port_state(text: str | None) -> str | None:
    # "4: ACTIVE"; DOWN, INIT (no subnet manager yet) and ARMED carry no traffic.
    word = (text or "").split(":")[-1].strip().upper()
    if word == "ACTIVE":
        return "up"
    if word in ("DOWN", "INIT", "ARMED"):
        return "down"
    return None


def _rdma_ports(folder: str, warnings: list[str]) -> tuple[list[dict[str, Any]], set[str]]:
    nics: list[dict[str, Any]] = []
    claimed: set[str] = set()  # netdevs that are these ports' Ethernet/IPoIB side
    for dev in _entries(folder, MAX_RDMA_DEVICES, "RDMA devices", warnings):
        base = os.path.join(folder, dev)
        device = os.path.join(base, "device")
        numa = _numa(device)
        claimed.update(_entries(os.path.join(device, "net"), MAX_INTERFACES, "netdevs", []))
        ports = _entries(os.path.join(base, "ports"), MAX_PORTS, f"{dev} ports", warnings)
        for port in ports:
            where = os.path.join(base, "ports", port)
            layer = (_read(os.path.join(where, "link_layer")) or "").lower()
            state = _port_state(_read(os.path.join(where, "state")))
            nics.append(
                {
                    "name": dev if len(ports) == 1 else f"{dev}/{port}",
                    "kind": "roce" if layer == "ethernet" else "infiniband",
                    # A down port still shows a rate (the lowest it could train to).
                    "speed_gbps": None
                    if state == "down"
                    else parse_rate(_read(os.path.join(where, "rate"))),
                    "state": state,
                    "numa_node": numa,
                }
            )
    return nics, claimed
