"""The `sim` driver: on a simulated node, put the fake pynvml/amdsmi in place of the real ones.

It is not a driver class of its own on purpose: the `nvml` and `amdsmi` drivers then run
unchanged against the simulator, so tests exercise the code that talks to real hardware.
"""

from __future__ import annotations

from typing import Any

from gpupoolctl.agent.protocol import AgentError


def activate(host: str, sim: dict[str, Any]) -> None:
    """Load (or create from its template) the node's state and install the fake modules."""
    from gpupoolctl import sim as simulation

    template = sim.get("template")
    if not isinstance(template, str) or not template:
        raise AgentError("sim request names no template", "BadRequest")
    try:
        state = simulation.SimState.open(host, template, sim.get("state_dir"))
    except KeyError as exc:
        raise AgentError(str(exc.args[0]) if exc.args else str(exc), "SimError") from exc
    simulation.activate(state)


def reset(host: str, sim: dict[str, Any]) -> dict[str, str]:
    from gpupoolctl.sim import SimState

    template = str(sim.get("template") or "")
    try:
        SimState.reset(host, template, sim.get("state_dir"))
    except KeyError as exc:
        raise AgentError(str(exc.args[0]) if exc.args else str(exc), "SimError") from exc
    return {"reset": host, "template": template}
