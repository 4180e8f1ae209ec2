"""The `sim` driver: on a simulated node, put the fake pynvml/amdsmi in place of the real ones.

It is not a driver class of its own on purpose: the `nvml` and `amdsmi` drivers then run
unchanged against the simulator, so tests exercise the code that talks to real hardware.
"""

from __future__ import annotations

from typing import Any

from gpupoolctl.agent.protocol import AgentError


def _open(host: str, sim: dict[str, Any]) -> Any:
    from gpupoolctl import sim as simulation

    template = sim.get("template")
    if not isinstance(template, str) or not template:
        raise AgentError("sim request names no template", "BadRequest")
    try:
        return simulation.SimState.open(host, template, sim.get("state_dir"), _nics(sim))
    except KeyError as exc:
        raise AgentError(str(exc.args[0]) if exc.args else str(exc), "SimError") from exc


def _nics(sim: dict[str, Any]) -> list[dict[str, Any]] | None:
    """The request's NICs for the node (inventory var sim_nics), checked as the workstation
    checked them: None when the request sets none."""
    from gpupoolctl.hw.nics import NicSpecError, parse_nics

    if sim.get("nics") is None:
        return None
    try:
        return parse_nics(sim["nics"])
    except NicSpecError as exc:
        raise AgentError(str(exc), "BadRequest") from None


def activate(host: str, sim: dict[str, Any]) -> Any:
    """Load (or create from its template) the node's state and install the fake modules;
    returns the state. A node its state says is down raises NodeDown, which the
    workstation reports as unreachable (for simulated hosts only)."""
    from gpupoolctl import sim as simulation
    from gpupoolctl.sim.faults import is_down

    state = _open(host, sim)
    if is_down(state.data):
        raise AgentError(
            f"simulated node-down: {host} does not answer (`gpupoolctl sim fault {host} "
            "--clear` brings it back)",
            "NodeDown",
        )
    simulation.activate(state)
    return state


def network(state: Any) -> dict[str, Any]:
    """The simulated node's NICs, from its state file (the `network` section)."""
    section = state.data.get("network")
    nics = section.get("nics") if isinstance(section, dict) else None
    return {"nics": [dict(nic) for nic in nics if isinstance(nic, dict)] if nics else []}


def fault(host: str, sim: dict[str, Any], args: Any) -> dict[str, Any]:
    """The `sim_fault` verb: {"gpu": N | null, "faults": ["xid=79", ...], "clear": bool}."""
    from gpupoolctl.sim import faults

    if not isinstance(args, dict):
        raise AgentError("sim_fault needs args", "BadRequest")
    gpu = args.get("gpu")
    if gpu is not None and (not isinstance(gpu, int) or isinstance(gpu, bool) or gpu < 0):
        raise AgentError(f"bad gpu index {gpu!r}", "BadFault")
    state = _open(host, sim)
    try:
        if args.get("clear"):
            return {"host": host, **faults.clear_faults(state, gpu)}
        parsed = faults.parse_faults([str(f) for f in args.get("faults") or []])
        return {"host": host, **faults.apply_faults(state, gpu, parsed)}
    except faults.FaultError as exc:
        raise AgentError(str(exc), "BadFault") from exc


def reset(host: str, sim: dict[str, Any]) -> dict[str, str]:
    from gpupoolctl.sim import SimState

    template = str(sim.get("template") or "")
    try:
        SimState.reset(host, template, sim.get("state_dir"), _nics(sim))
    except KeyError as exc:
        raise AgentError(str(exc.args[0]) if exc.args else str(exc), "SimError") from exc
    return {"reset": host, "template": template}
