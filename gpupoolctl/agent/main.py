"""Agent entry point: read one JSON request, answer one JSON envelope on stdout."""

from __future__ import annotations

import json
import sys
from typing import Any

from gpupoolctl.agent import protocol
from gpupoolctl.agent.drivers import sim as sim_driver
from gpupoolctl.agent.protocol import AgentError


def handle(request: Any) -> dict[str, Any]:
    """Answer one request. Never raises: every failure becomes an error envelope."""
    try:
        request = protocol.check_request(request)
        return protocol.ok(_dispatch(request))
    except AgentError as exc:
        return protocol.failure(exc.type_name, str(exc))
    except Exception as exc:  # the workstation must get an envelope, not a traceback
        return protocol.failure(type(exc).__name__, str(exc) or repr(exc))


def _dispatch(request: dict[str, Any]) -> Any:
    verb = request["verb"]
    host = str(request.get("host") or "")
    sim = request.get("sim")
    if verb == "ping":
        return {"pong": True}
    if verb == "sim_reset":
        if not sim:
            raise AgentError("sim_reset is only for simulated nodes", "BadRequest")
        return sim_driver.reset(host, sim)
    if verb == "sim_fault":  # reaches a node that is down: that is how it comes back
        if not sim:
            raise AgentError("sim_fault is only for simulated nodes", "BadRequest")
        return sim_driver.fault(host, sim, request.get("args"))
    state = None
    if sim:
        # A node whose state says down answers NodeDown to everything else (the
        # workstation reports it unreachable): a partition, so its jobs run on.
        state = sim_driver.activate(host, sim)
    if verb == "facts":
        from gpupoolctl.agent import facts

        # The CLI tools of a real node must not leak into a simulated one, nor this
        # machine's NICs: a simulated node has the network its state file describes.
        network = sim_driver.network(state) if state is not None else None
        return facts.collect(host, simulated=bool(sim), allow_cli=not sim, network=network)
    if verb == "partition":
        from gpupoolctl.agent import partition

        return partition.handle(request.get("args"))
    if verb in ("launch", "poll", "signal", "logs"):
        from gpupoolctl.agent import jobs

        return jobs.handle(verb, request.get("args"), host, sim)
    raise AgentError(f"unknown verb {verb!r}", "BadRequest")


def main(raw: str | None = None) -> int:
    """Answer one request: `raw` when the bootstrap already read it from stdin, else stdin."""
    if raw is None:
        raw = sys.stdin.read()
    try:
        request = json.loads(raw)
    except ValueError as exc:
        response = protocol.failure("BadRequest", f"request is not JSON: {exc}")
    else:
        response = handle(request)
    sys.stdout.write(json.dumps(response, separators=(",", ":")))
    sys.stdout.write("\n")
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
