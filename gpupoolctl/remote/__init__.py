"""How a request reaches a node: transports (ssh, local), fan-out, per-host results.

Names are loaded on first use (PEP 562), so `from gpupoolctl.remote.target import Target`,
which every command needs at start-up, does not also load the fan-out, the payload builder
and their imports; paramiko and fabric load only when a run has an ssh target.
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "DEFAULT_FORKS": "fanout",
    "host_request": "fanout",
    "run_agent": "fanout",
    "run_agent_each": "fanout",
    "Payload": "payload",
    "agent_payload": "payload",
    "build_payload": "payload",
    "FAILED": "results",
    "OK": "results",
    "OUTCOMES": "results",
    "TIMED_OUT": "results",
    "UNREACHABLE": "results",
    "HostResult": "results",
    "SimSpec": "target",
    "Target": "target",
    "target_from_vars": "target",
    "Timeouts": "timeouts",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
