"""NICs written by hand: the inventory var `sim_nics`, a simulated node's network.

    sg-a100-01:
      sim: a100-pcie-4
      sim_nics:
        - {name: ib0, kind: infiniband, speed_gbps: 400}
        - {name: ib1, kind: infiniband, speed_gbps: 400}

A simulated node has the NICs of its machine class's template; `sim_nics` replaces that list
(all of it), which is how a what-if such as "the same pool with a faster network" is run on
the sim. A real node's NICs are what sysfs says (agent/network.py): the var is read for
simulated hosts only. Each entry: name, kind (ethernet, infiniband or roce, as the facts
name them), speed_gbps (the line rate in Gb/s), and optionally state (up, the default, or
down) and numa_node. Stdlib only: the agent checks what it is sent with the same code.
"""

from __future__ import annotations

import math
from typing import Any

from gpupoolctl.hw.entries import entry_problem
from gpupoolctl.hw.shown import shown

VAR = "sim_nics"
KINDS = ("ethernet", "infiniband", "roce")
_KEYS = ("name", "kind", "speed_gbps", "state", "numa_node")
_REQUIRED = ("name", "kind", "speed_gbps")
MAX_NICS = 64  # a node has a handful of ports; this bounds what a bad file can cost
MAX_NAME = 64
MAX_GBPS = 100_000.0  # 100 Tb/s: far beyond any port sold, so a typo in units is caught


class NicSpecError(ValueError):
    """sim_nics is malformed; the message says which entry and what, in one line."""


def parse_nics(value: Any) -> list[dict[str, Any]]:
    """The var's value as the facts' NIC list ([{name, kind, speed_gbps, state, numa_node}],
    gpupoolctl.hw.model.Nic). Raises NicSpecError."""
    if not isinstance(value, list):
        raise NicSpecError(
            f"{VAR} must be a list of {{name, kind, speed_gbps}}, got {type(value).__name__}"
        )
    if len(value) > MAX_NICS:
        raise NicSpecError(f"{VAR} has {len(value)} entries, more than {MAX_NICS}")
    nics: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for index, entry in enumerate(value):
        where = f"{VAR}[{index}]"
        problem = entry_problem(where, entry, _KEYS, _REQUIRED)
        if problem:
            raise NicSpecError(problem)
        name = _name(where, entry["name"])
        if name in seen:
            raise NicSpecError(f"{where}: {shown(name)} is already given in {VAR}[{seen[name]}]")
        seen[name] = index
        nics.append(
            {
                "name": name,
                "kind": _choice(where, "kind", entry["kind"], KINDS),
                "speed_gbps": _speed(where, entry["speed_gbps"]),
                "state": _choice(where, "state", entry.get("state", "up"), ("up", "down")),
                "numa_node": _numa(where, entry.get("numa_node")),
            }
        )
    return nics


def _name(where: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_NAME:
        raise NicSpecError(f"{where}: name must be a port name such as ib0, got {shown(value)}")
    if any(c.isspace() for c in value):
        raise NicSpecError(f"{where}: name must not contain spaces, got {shown(value)}")
    return value


def _choice(where: str, key: str, value: Any, allowed: tuple[str, ...]) -> str:
    text = value.lower() if isinstance(value, str) else value
    if text not in allowed:
        raise NicSpecError(
            f"{where}: {key} must be one of {', '.join(allowed)}, got {shown(value)}"
        )
    return str(text)


def _speed(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise NicSpecError(f"{where}: speed_gbps must be a number of Gb/s, got {shown(value)}")
    number = float(value)
    if not math.isfinite(number) or not 0 < number <= MAX_GBPS:
        raise NicSpecError(
            f"{where}: speed_gbps must be more than 0 and at most {MAX_GBPS:g} Gb/s, "
            f"got {shown(value)}"
        )
    return number


def _numa(where: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise NicSpecError(f"{where}: numa_node must be a whole number >= 0, got {shown(value)}")
    return value
