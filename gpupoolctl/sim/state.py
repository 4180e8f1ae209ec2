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
        cls, host: str, template: str, state_dir: str | os.PathLike[str] | None = None
    ) -> SimState:
        """Load the node's state, creating it from its template on first use."""
        path = cls.path_for(host, state_dir)
        with locked(path):
            if path.exists():
                state = cls.load(path)
                if state.template == template:
                    if "network" not in state.data:
                        # Written before templates had NICs: add the template's, leaving
                        # everything else (MIG layouts, jobs) as it is.
                        network = build_initial(host, template).get("network")
                        if network is not None:
                            state.data["network"] = network
                            state._write()
                    return state
            state = cls(path, build_initial(host, template))
            state._write()
            return state

    @classmethod
    def reset(
        cls, host: str, template: str, state_dir: str | os.PathLike[str] | None = None
    ) -> SimState:
        """Replace the node's state with its template's initial state."""
        path = cls.path_for(host, state_dir)
        with locked(path):
            state = cls(path, build_initial(host, template))
            state._write()
            return state


def build_initial(host: str, template: str) -> dict[str, Any]:
    from gpupoolctl.sim.templates import build

    data: dict[str, Any] = {"version": STATE_VERSION, "host": host, "template": template}
    data.update(build(template, host))
    return data
