"""How a request reaches a node: transports (ssh, local), fan-out, per-host results.

Importing this package does not import paramiko or fabric; the ssh transport loads them when
a run has an ssh target.
"""

from gpupoolctl.remote.fanout import DEFAULT_FORKS, host_request, run_agent, run_agent_each
from gpupoolctl.remote.payload import Payload, agent_payload, build_payload
from gpupoolctl.remote.results import (
    FAILED,
    OK,
    OUTCOMES,
    TIMED_OUT,
    UNREACHABLE,
    HostResult,
)
from gpupoolctl.remote.target import SimSpec, Target, target_from_vars
from gpupoolctl.remote.timeouts import Timeouts

__all__ = [
    "DEFAULT_FORKS",
    "FAILED",
    "OK",
    "OUTCOMES",
    "TIMED_OUT",
    "UNREACHABLE",
    "HostResult",
    "Payload",
    "SimSpec",
    "Target",
    "Timeouts",
    "agent_payload",
    "build_payload",
    "host_request",
    "run_agent",
    "run_agent_each",
    "target_from_vars",
]
