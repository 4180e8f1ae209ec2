"""The environment that lets one job's processes on several nodes find each other.

Every node of a job gets its rank, the node count and a rendezvous address and port, both
as GPUPOOL_* and in the forms launchers read: torchrun's PET_* (so `torchrun train.py`
needs no flags) and MASTER_ADDR/MASTER_PORT. The job's own `--env` wins over all of them.
Node 0 (the first host of the placement) is the rendezvous point.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

# torchrun's default port is 29500; each job gets its own port from a span above it, so
# two jobs whose node 0 is the same host do not collide (unless their ids hash alike: set
# MASTER_PORT and PET_MASTER_PORT with --env then).
BASE_PORT = 29500
PORT_SPAN = 2000


def rendezvous_port(job_id: str) -> int:
    return BASE_PORT + zlib.crc32(job_id.encode()) % PORT_SPAN


def node_env(
    job_id: str,
    nodes: list[dict[str, Any]],
    index: int,
    address: str,
    targets: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The variables for node `index` of `nodes` (the job's per-host records), whose node 0
    is reached at `address`. With the job's `targets` (host -> remote.Target), also where
    each node is: GPUPOOL_NODE_SITES (a comma list parallel to GPUPOOL_NODES, empty where a
    host has no site) and GPUPOOL_SITE_LINKS (JSON [{"sites": [a, b], "gbps", "rtt_ms"}], the
    links between the sites the job spans), for workloads that model the WAN (train)."""
    port = str(rendezvous_port(job_id))
    count, rank = str(len(nodes)), str(index)
    per_node = [str(len(node.get("slices") or [])) for node in nodes]
    gpus = per_node[index]
    # GPUPOOL_JOB_ID (the pool's id, the same on every try) and GPUPOOL_RUN come from
    # jobs.restarts; GPUPOOL_JOB_DIR (this run's folder on the node) from the agent.
    return {
        "GPUPOOL_NODE_RANK": rank,
        "GPUPOOL_NNODES": count,
        "GPUPOOL_NODES": ",".join(str(n["host"]) for n in nodes),
        "GPUPOOL_GPUS_ON_NODE": gpus,
        # Every node's count, parallel to GPUPOOL_NODES: a global rank needs the ones before.
        "GPUPOOL_GPUS_PER_NODE": ",".join(per_node),
        "GPUPOOL_MASTER_ADDR": address,
        "GPUPOOL_MASTER_PORT": port,
        "MASTER_ADDR": address,
        "MASTER_PORT": port,
        "PET_NNODES": count,
        "PET_NODE_RANK": rank,
        "PET_NPROC_PER_NODE": gpus,
        "PET_MASTER_ADDR": address,
        "PET_MASTER_PORT": port,
        **(_site_env(nodes, targets) if targets is not None else {}),
    }


def _site_env(nodes: list[dict[str, Any]], targets: Mapping[str, Any]) -> dict[str, str]:
    sites = []
    links: dict[tuple[str, str], dict[str, Any]] = {}
    for node in nodes:
        target = targets.get(str(node["host"]))
        site = getattr(target, "site", None)
        sites.append(site if isinstance(site, str) else "")
        for link in getattr(target, "site_links", ()) or ():
            pair = tuple(sorted(str(s) for s in link.sites))
            links[pair] = {"sites": list(pair), "gbps": link.gbps, "rtt_ms": link.rtt_ms}
    spanned = {s for s in sites if s}
    wanted = [v for pair, v in sorted(links.items()) if set(pair) <= spanned]
    return {
        "GPUPOOL_NODE_SITES": ",".join(sites),
        "GPUPOOL_SITE_LINKS": json.dumps(wanted, sort_keys=True),
    }
