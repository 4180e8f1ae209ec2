"""Launching a placed (pending) job on its node(s), and recording what became of it."""

from __future__ import annotations

from typing import Any

from gpupoolctl.jobs import hooks, reaping, rendezvous, restarts, stopping
from gpupoolctl.jobs.nodes import Call
from gpupoolctl.jobs.service import JobsCore
from gpupoolctl.ledger import Transaction

# Agent errors that prove a launch did not happen (anything else: ask the node).
NOT_LAUNCHED = {"BadRequest", "BadDevices", "BadWorkdir", "LaunchFailed", "SimError"}


# -- launch -----------------------------------------------------------------------------


def launch(jobs: JobsCore, job: dict[str, Any]) -> dict[str, Any]:
    """Start a pending job on its node(s) and record running, or failed (released)."""
    nodes_of_job = job["nodes"]
    first = jobs.nodes.targets.get(nodes_of_job[0]["host"])
    address = first.peer_address() if first is not None else str(nodes_of_job[0]["host"])
    calls = [
        Call(
            node["host"],
            "launch",
            {
                "job_id": node["node_id"],
                "argv": job["argv"],
                "env": {
                    **rendezvous.node_env(
                        job["id"], nodes_of_job, index, address, jobs.nodes.targets
                    ),
                    **(job.get("env") or {}),
                    **restarts.run_env(job),  # the pool's own: not overridden by --env
                },
                "workdir": job.get("workdir"),
                "devices": node["devices"],
                **restarts.launch_args(job),
            },
        )
        for index, node in enumerate(nodes_of_job)
    ]
    results = jobs.nodes.call(calls)
    hooks.crash_point("launched")
    nodes = [dict(n) for n in job["nodes"]]
    unsure: list[int] = []
    errors: list[str] = []
    for index, result in enumerate(results):
        if result.ok:
            nodes[index]["pid"] = result.data.get("pid")
            nodes[index]["started"] = result.data.get("started")
        elif result.outcome == "unreachable" or result.error_type in NOT_LAUNCHED:
            errors.append(f"{result.name}: {result.error}")
        else:
            unsure.append(index)  # timed out, or no answer: did it start? ask the node
    if unsure:
        recorded = reaping.settle_pending(jobs, job, submitter_gone=True)
    else:
        recorded = _record_launch(jobs, job, nodes, errors)
    if recorded.get("state") == "running" and recorded.get("cancel"):
        # Cancelled while it was being launched (see control.cancel): stop it now.
        return stopping.stop_cancelled(jobs, recorded)
    return recorded


def _record_launch(
    jobs: JobsCore, job: dict[str, Any], nodes: list[dict[str, Any]], errors: list[str]
) -> dict[str, Any]:
    started = [n for n in nodes if n.get("pid")]

    def build(tx: Transaction) -> dict[str, Any] | None:
        current = jobs.still(tx, job, "pending")
        if current is None:
            return None  # a recovery pass (or cancel) settled it meanwhile
        if not errors:
            tx.append(
                "job",
                {"id": job["id"], "state": "running", "nodes": nodes, "submitter": None},
            )
        else:
            # A job cancelled while being launched ends cancelled, whatever the launch did.
            cancelled = current.get("cancel")
            tx.append(
                "job",
                {
                    "id": job["id"],
                    "state": "cancelled" if cancelled else "failed",
                    "reason": "cancelled" if cancelled else None,
                    "error": "launch failed: " + "; ".join(errors),
                    "nodes": nodes,
                    "submitter": None,
                },
            )
            tx.release(job["alloc"])
        return tx.state.jobs.get(job["id"]) or tx.state.finished.get(job["id"])

    done = jobs.ledger.write(build)
    if errors and started:  # a multi-node job half started: stop the started part
        jobs.nodes.call(
            [Call(n["host"], "signal", {"job_id": n["node_id"], "signal": "KILL"}) for n in started]
        )
    hooks.crash_point("recorded")
    return done.value or {}
