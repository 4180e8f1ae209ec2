"""logs: a job's output, read from its node by the agent's `logs` verb."""

from __future__ import annotations

from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.jobs.errors import JobError
from gpupoolctl.jobs.service import JobsCore, find


def _read_logs(
    jobs: JobsCore, job_id: str, args: dict[str, Any], host: str | None = None
) -> tuple[str, dict[str, Any]]:
    """Ask the job's node (its first, or the one on `host`) the agent's `logs` verb with
    `args`: (that host, its answer)."""
    job = find(jobs, job_id)
    nodes = job.get("nodes") or []
    if host is not None and nodes:
        chosen = [n for n in nodes if n["host"] == host]
        if not chosen:
            names = ", ".join(str(n["host"]) for n in nodes)
            raise UsageError(f"--host {host}: {job_id} has no node there (its nodes: {names})")
        nodes = chosen
    if not nodes:
        raise JobError(f"{job_id} has not been launched yet ({job.get('state')}): no output")
    node = nodes[0]
    result = jobs.nodes.one(node["host"], "logs", {"job_id": node["node_id"], **args})
    if not result.ok:
        raise JobError(f"{node['host']}: {result.outcome}: {result.error}")
    return node["host"], dict(result.data)


def both_streams(jobs: JobsCore, job_id: str, offsets: dict[str, int]) -> dict[str, Any]:
    """The next chunk of stdout and of stderr of the job's first node, in one round trip:
    {"streams": {name: chunk}, "state"}."""
    return _read_logs(jobs, job_id, {"streams": dict(offsets)})[1]


def logs(
    jobs: JobsCore,
    job_id: str,
    *,
    stream: str = "stdout",
    offset: int = 0,
    max_bytes: int = 65536,
    host: str | None = None,
) -> dict[str, Any]:
    """One chunk of the job's output from its node: {text, next_offset, state, ...}."""
    args = {"stream": stream, "offset": offset, "max_bytes": max_bytes}
    where, data = _read_logs(jobs, job_id, args, host)
    return {**data, "host": where, "job": job_id}
