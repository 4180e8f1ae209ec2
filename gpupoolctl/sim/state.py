"""SimState: one simulated node's state file, created from its template on first use.

The file mechanics are gpupoolctl.sim.statefile's; this layer adds the templates, which
build MIG layouts through the fakes' own rules and so sit above them.
"""

from __future__ import annotations

import os
from typing import Any

from gpupoolctl.sim.statefile import STATE_VERSION, StateFile, default_state_dir, locked

__all__ = ["STATE_VERSION", "SimState", "build_initial", "default_state_dir"]


class SimState(StateFile):
    """A node's state file, plus creating or resetting it from a named template."""

    @classmethod
    def open(
        cls,
        host: str,
        template: str,
        state_dir: str | os.PathLike[str] | None = None,
        nics: list[dict[str, Any]] | None = None,
    ) -> SimState:
        """Load the node's state, creating it from its template on first use. `nics`: the
        node's NICs instead of the template's (the inventory's sim_nics, checked by
        gpupoolctl.hw.nics); None gives back the template's if an inventory had replaced
        them. Everything else (MIG layouts, jobs, faults) stays as it is."""
        path = cls.path_for(host, state_dir)
        with locked(path):
            if path.exists():
                state = cls.load(path)
                if state.template == template:
                    if _set_network(state.data, host, template, nics):
                        state._write()
                    return state
            state = cls(path, build_initial(host, template))
            _set_network(state.data, host, template, nics)
            state._write()
            return state

    @classmethod
    def reset(
        cls,
        host: str,
        template: str,
        state_dir: str | os.PathLike[str] | None = None,
        nics: list[dict[str, Any]] | None = None,
    ) -> SimState:
        """Replace the node's state with its template's initial state (and `nics`, as for
        open)."""
        path = cls.path_for(host, state_dir)
        with locked(path):
            state = cls(path, build_initial(host, template))
            _set_network(state.data, host, template, nics)
            state._write()
            return state


# The state's network section says where its NICs came from when an inventory set them, so
# that taking sim_nics out of the inventory gives the template's back.
_FROM_INVENTORY = "inventory"


def _set_network(
    data: dict[str, Any], host: str, template: str, nics: list[dict[str, Any]] | None
) -> bool:
    """Make data's network the one wanted; whether it changed."""
    network = data.get("network")
    if nics is not None:
        wanted: dict[str, Any] | None = {"nics": nics, "from": _FROM_INVENTORY}
    elif isinstance(network, dict) and network.get("from") != _FROM_INVENTORY:
        return False
    else:
        # No network yet (a file written before templates had NICs), or the inventory's
        # NICs that are no longer asked for.
        wanted = build_initial(host, template).get("network")
    if wanted is None or network == wanted:
        return False
    data["network"] = wanted
    return True


def build_initial(host: str, template: str) -> dict[str, Any]:
    from gpupoolctl.sim.templates import build

    data: dict[str, Any] = {"version": STATE_VERSION, "host": host, "template": template}
    data.update(build(template, host))
    return data
