"""The environment that lets one job's processes on several nodes find each other.

Every node of a job gets its rank, the node count and a rendezvous address and port, both
as GPUPOOL_* and in the forms launchers read: torchrun's PET_* (so `torchrun train.py`
needs no flags) and MASTER_ADDR/MASTER_PORT. The job's own `--env` wins over all of them.
Node 0 (the first host of the placement) is the rendezvous point.
"""

from __future__ import annotations

import zlib
from typing import Any

# torchrun's default port is 29500; each job gets its own port from a span above it, so
# two jobs whose node 0 is the same host do not collide (unless their ids hash alike: set
# MASTER_PORT and PET_MASTER_PORT with --env then).
BASE_PORT = 29500
PORT_SPAN = 2000


def rendezvous_port(job_id: str) -> int:
    return BASE_PORT + zlib.crc32(job_id.encode()) % PORT_SPAN


def node_env(job_id: str, nodes: list[dict[str, Any]], index: int, address: str) -> dict[str, str]:
    """The variables for node `index` of `nodes` (the job's per-host records), whose node 0
    is reached at `address`."""
    port = str(rendezvous_port(job_id))
    count, rank = str(len(nodes)), str(index)
    gpus = str(len(nodes[index].get("slices") or []))
    # GPUPOOL_JOB_ID (the pool's id, the same on every try) and GPUPOOL_RUN come from
    # jobs.restarts; GPUPOOL_JOB_DIR (this run's folder on the node) from the agent.
    return {
        "GPUPOOL_NODE_RANK": rank,
        "GPUPOOL_NNODES": count,
        "GPUPOOL_NODES": ",".join(str(n["host"]) for n in nodes),
        "GPUPOOL_GPUS_ON_NODE": gpus,
        "GPUPOOL_MASTER_ADDR": address,
        "GPUPOOL_MASTER_PORT": port,
        "MASTER_ADDR": address,
        "MASTER_PORT": port,
        "PET_NNODES": count,
        "PET_NODE_RANK": rank,
        "PET_NPROC_PER_NODE": gpus,
        "PET_MASTER_ADDR": address,
        "PET_MASTER_PORT": port,
    }
