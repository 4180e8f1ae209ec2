"""Launching a placed (pending) job on its node(s), and recording what became of it.

A launch that fails for the node's sake, not the job's, requeues the job at once (its
slices released; not counted as a restart: the job never ran): a node that gave no answer
is recorded silent, so that placement leaves it alone until it answers again (jobs.lost);
a node that has no device the job was given (its cards changed behind the ledger) has its
slices read again. Anything else a node refuses (a bad workdir, a command that cannot run)
fails the job, as it would fail on any node.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.jobs import hooks, lost, reaping, rendezvous, restarts, stopping
from gpupoolctl.jobs.nodes import Call
from gpupoolctl.jobs.service import NOT_LAUNCHED, JobsCore
from gpupoolctl.ledger import Transaction
from gpupoolctl.remote.results import UNREACHABLE

NO_SUCH_DEVICE = "NoSuchDevice"  # the agent's answer: this node has no such device


@dataclass
class _Refused:
    """Why the nodes that did not launch the job did not."""

    errors: list[str] = field(default_factory=list)  # the job's own: it fails
    silent: dict[str, str] = field(default_factory=dict)  # host -> why it gave no answer
    stale: dict[str, str] = field(default_factory=dict)  # host -> the device it lacks

    def __bool__(self) -> bool:
        return bool(self.errors or self.silent or self.stale)

    def node_side(self) -> str:
        """What the nodes said, for a requeued job's reason."""
        parts = [f"{host} did not answer" for host in sorted(self.silent)]
        parts += [f"{host}: {why}" for host, why in sorted(self.stale.items())]
        return "; ".join(parts)

    def messages(self) -> list[str]:
        """Every node's refusal, for a failed job's error."""
        by_node = sorted({**self.silent, **self.stale}.items())
        return [*self.errors, *(f"{host}: {why}" for host, why in by_node)]


# -- launch -----------------------------------------------------------------------------


def launch(jobs: JobsCore, job: dict[str, Any]) -> dict[str, Any]:
    """Start a pending job on its node(s) and record it running; failed (released) when a
    node refused it for the job's sake; queued again (released) when only its nodes were at
    fault (see the module's docstring)."""
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
    refused = _Refused()
    for index, result in enumerate(results):
        if result.ok:
            nodes[index]["pid"] = result.data.get("pid")
            nodes[index]["started"] = result.data.get("started")
        elif result.outcome == UNREACHABLE:  # never connected: it did not start
            refused.silent[result.name] = f"{result.outcome}: {result.error}"
            jobs.host_failed(result.name, f"{result.outcome}: {result.error}")
        elif result.error_type == NO_SUCH_DEVICE:
            refused.stale[result.name] = str(result.error)
        elif result.error_type in NOT_LAUNCHED:
            refused.errors.append(f"{result.name}: {result.error}")
        else:
            unsure.append(index)  # timed out, or no answer: did it start? ask the node
    if unsure:
        recorded = reaping.settle_pending(jobs, job, submitter_gone=True)
    else:
        recorded = _record_launch(jobs, job, nodes, refused)
    if refused.stale:  # after the release: no hold is left on a slice that goes away
        jobs.read_slices(sorted(refused.stale))
    if recorded.get("state") == "running" and recorded.get("cancel"):
        # Cancelled while it was being launched (see cancelling.cancel): stop it now.
        return stopping.stop_cancelled(jobs, recorded)
    return recorded


def _record_launch(
    jobs: JobsCore, job: dict[str, Any], nodes: list[dict[str, Any]], refused: _Refused
) -> dict[str, Any]:
    started = [n for n in nodes if n.get("pid")]

    def build(tx: Transaction) -> dict[str, Any] | None:
        for host, why in sorted(refused.silent.items()):
            lost.mark_silent(jobs, tx, host, f"launch: {why}")
        current = jobs.still(tx, job, "pending")
        if current is None:
            return None  # a recovery pass (or cancel) settled it meanwhile
        if not refused:
            tx.append(
                "job",
                {"id": job["id"], "state": "running", "nodes": nodes, "submitter": None},
            )
        elif current.get("cancel") or refused.errors:
            # A job cancelled while being launched ends cancelled, whatever the launch did.
            cancelled = current.get("cancel")
            tx.append(
                "job",
                {
                    "id": job["id"],
                    "state": "cancelled" if cancelled else "failed",
                    "reason": "cancelled" if cancelled else None,
                    "error": "launch failed: " + "; ".join(refused.messages()),
                    "nodes": nodes,
                    "submitter": None,
                },
            )
            tx.release(job["alloc"])
        else:  # the nodes' fault only: the job runs where placement puts it next
            tx.release(job["alloc"])
            jobs.enqueue(
                tx,
                current,
                reason=f"not launched ({refused.node_side()}); requeued, not counted as a restart",
            )
        return tx.state.jobs.get(job["id"]) or tx.state.finished.get(job["id"])

    done = jobs.ledger.write(build)
    jobs.warnings.extend(done.warnings)
    if refused and started:  # a multi-node job half started: stop the started part
        jobs.nodes.call(
            [Call(n["host"], "signal", {"job_id": n["node_id"], "signal": "KILL"}) for n in started]
        )
    hooks.crash_point("recorded")
    return done.value or {}
