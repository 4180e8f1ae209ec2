"""Fan-out: send one agent request to many targets, bounded by --forks, one result each.

Every host ends as ok / failed / unreachable / timed-out with its reason; a per-host problem
never raises and never stops the other hosts.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpupoolctl.agent.protocol import PROTOCOL_VERSION
from gpupoolctl.errors import UsageError
from gpupoolctl.remote.bootstrap import encode_stdin
from gpupoolctl.remote.local import local_python, run_local
from gpupoolctl.remote.payload import Payload, agent_payload
from gpupoolctl.remote.results import (
    FAILED,
    NODE_DOWN,
    UNREACHABLE,
    HostFailure,
    HostResult,
    classify_exec,
)
from gpupoolctl.remote.target import Target
from gpupoolctl.remote.timeouts import Timeouts
from gpupoolctl.remote.workers import run_each

if TYPE_CHECKING:
    from gpupoolctl.remote.ssh import SshContext

DEFAULT_FORKS = 32  # pdsh's default fan-out

ProgressCallback = Callable[[HostResult], None]


def host_request(target: Target, request: Mapping[str, Any]) -> dict[str, Any]:
    """The request as one target sees it: its inventory name, and its sim spec if simulated."""
    sim = None
    if target.sim is not None:
        sim = {"template": target.sim.template, "state_dir": target.sim.state_dir}
        if target.sim.nics is not None:
            sim["nics"] = [dict(nic) for nic in target.sim.nics]
    return {**request, "v": PROTOCOL_VERSION, "host": target.name, "sim": sim}


def run_agent(
    targets: Sequence[Target],
    request: Mapping[str, Any],
    **options: Any,
) -> list[HostResult]:
    """Run the agent once on every target with the same request; results in target order.

    `request` is the agent request without "host"/"sim" (added per target, with "v", the
    protocol version this workstation speaks). Options as for run_agent_each."""
    return run_agent_each([(target, request) for target in targets], **options)


def run_agent_each(
    requests: Sequence[tuple[Target, Mapping[str, Any]]],
    *,
    forks: int = DEFAULT_FORKS,
    timeouts: Timeouts | None = None,
    accept_new: bool = False,
    known_hosts: str | os.PathLike[str] | None = None,
    ssh_config: str | os.PathLike[str] | None = None,
    on_progress: ProgressCallback | None = None,
) -> list[HostResult]:
    """Run the agent once per (target, request) pair, each host its own request (partition
    plans differ per host); results in the given order, one connection per target.

    `known_hosts` / `ssh_config` default to the user's files. Raises only for problems of
    the whole run (bad forks, unreadable ssh config)."""
    if forks < 1:
        raise UsageError(f"forks must be at least 1, got {forks}")
    if not requests:
        return []
    targets = [target for target, _ in requests]
    timeouts = timeouts or Timeouts()
    payload = agent_payload()
    ctx: SshContext | None = None
    if any(target.transport == "ssh" and not target.invalid for target in targets):
        from gpupoolctl.remote.ssh import SshContext  # paramiko only when needed

        ctx = SshContext.create(
            timeouts, accept_new=accept_new, known_hosts=known_hosts, ssh_config=ssh_config
        )
    # _run_one never raises for a host's problem: every host ends with its own result.
    return run_each(
        requests,
        lambda pair: _run_one(pair[0], pair[1], payload, ctx, timeouts),
        max_workers=forks,
        on_done=on_progress,
        name="gpupool-host",
    )


def finish_result(target: Target, request: Mapping[str, Any], result: HostResult) -> HostResult:
    """What every transport's answer gets before a caller sees it (one-shot or session)."""
    if result.error_type == NODE_DOWN and target.sim is not None:
        # A simulated node-down (gpupoolctl sim fault HOST node-down): the agent ran, so
        # that `sim fault --clear` can reach it, but the host stands for one that does
        # not answer. A real host never gets this outcome from an agent's answer.
        result.outcome = UNREACHABLE
    if result.ok and request.get("verb") == "facts" and isinstance(result.data, dict):
        # The site is the inventory's word, not the node's: added here, where the
        # facts of every command come back, so slices and placement know it.
        result.data["site"] = target.site
    return result


def _run_one(
    target: Target,
    request: Mapping[str, Any],
    payload: Payload,
    ctx: SshContext | None,
    timeouts: Timeouts,
) -> HostResult:
    started = time.monotonic()
    if target.invalid:
        return HostResult(target.name, FAILED, error=target.invalid, error_type="BadHostVars")
    try:
        stdin_data = encode_stdin(payload, host_request(target, request))
        if target.transport == "local":
            raw = run_local(target, stdin_data, timeouts.command)
            python = local_python(target)
        else:
            from gpupoolctl.remote.ssh import run_ssh

            assert ctx is not None
            raw = run_ssh(target, stdin_data, ctx)
            python = target.python
        result = classify_exec(target.name, python, raw, time.monotonic() - started)
        return finish_result(target, request, result)
    except HostFailure as failure:
        return HostResult(
            target.name,
            failure.outcome,
            error=failure.message,
            error_type=failure.error_type,
            elapsed=time.monotonic() - started,
        )
    except Exception as exc:  # a bug here must cost one host, not the run
        return HostResult(
            target.name,
            FAILED,
            error=f"internal error: {type(exc).__name__}: {exc}",
            error_type="InternalError",
            elapsed=time.monotonic() - started,
        )
