"""Partitioning operations: what the workstation's planner sends and the agent executes.

A plan is, per GPU, an ordered list of small operations in JSON. The planner (partition/,
workstation side) emits them in a safe order; the agent's `partition` verb executes them on
one GPU at a time and, if one fails, restores that GPU's previous layout. Stdlib only: this
module ships inside the agent payload.

Order the planner must follow for one GPU (mig-parted's order, with explicit placements):
    destroy_ci*, destroy_gi*, set_sriov_vfs(0)?, set_mig_mode?, set_memory_partition?,
    set_compute_partition?, create_gi* (each at an explicit placement), create_ci*,
    set_sriov_vfs(N>0)?
"""

from __future__ import annotations

from typing import Any, Literal, NotRequired, TypedDict


class DestroyCi(TypedDict):
    op: Literal["destroy_ci"]
    gi: int  # GPU instance id
    ci: int  # compute instance id


class DestroyGi(TypedDict):
    op: Literal["destroy_gi"]
    gi: int


class SetMigMode(TypedDict):
    op: Literal["set_mig_mode"]
    enabled: bool


class CreateGi(TypedDict):
    op: Literal["create_gi"]
    profile: str  # "3g.40gb": for people and for error messages
    profile_id: int  # nvidia-smi / NVML info.id, looked up on the node's own driver
    start: int  # explicit placement: never left to the driver's order
    size: int
    # Compute instances to create inside it, by CI profile name; the default is one CI
    # spanning the whole GI (what `nvidia-smi mig -cgi ... -C` does).
    compute_instances: NotRequired[list[str]]


class SetComputePartition(TypedDict):
    op: Literal["set_compute_partition"]
    mode: str  # "SPX", "DPX", "QPX", "CPX"


class SetMemoryPartition(TypedDict):
    op: Literal["set_memory_partition"]
    mode: str  # "NPS1", "NPS2", "NPS4"


class SetSriovVfs(TypedDict):
    op: Literal["set_sriov_vfs"]
    count: int  # the kernel takes 0 first, then N: the planner emits both when changing


Operation = (
    DestroyCi
    | DestroyGi
    | SetMigMode
    | CreateGi
    | SetComputePartition
    | SetMemoryPartition
    | SetSriovVfs
)

OP_NAMES: tuple[str, ...] = (
    "destroy_ci",
    "destroy_gi",
    "set_mig_mode",
    "create_gi",
    "set_compute_partition",
    "set_memory_partition",
    "set_sriov_vfs",
)


class GpuPlan(TypedDict):
    """What the agent's `partition` verb receives for one GPU."""

    index: int  # the GPU's index in the node's facts
    uuid: str  # checked by the agent: a plan made for another card is refused
    vendor: Literal["nvidia", "amd"]
    ops: list[Operation]
    # The state the plan was made from (agent.partition.expect): a GPU no longer in it is
    # refused.
    expect: NotRequired[dict[str, Any]]


class PartitionRequestArgs(TypedDict):
    """`args` of the agent request {"verb": "partition", "args": ...}."""

    gpus: list[GpuPlan]
    force: bool  # act even when processes run on the GPU
    hooks: NotRequired[dict[str, list[list[str]]]]  # hook name -> argv lists (mig-parted style)


class GpuOutcome(TypedDict):
    """What the agent answers per GPU."""

    index: int
    uuid: str
    ok: bool
    applied: int  # how many ops ran before the end (all of them when ok)
    error: str | None
    rolled_back: bool  # a failure happened and the previous layout was restored
    rollback_error: str | None  # restoring failed too: the GPU needs a person
    reset_required: bool  # e.g. MIG mode change pending on Ampere until a GPU reset


def describe(op: dict[str, Any]) -> str:
    """An op in a few words, for messages: "create_gi 3g.40gb@4:4"."""
    name = op.get("op")
    if name == "create_gi":
        text = f"create_gi {op['profile']}@{op['start']}:{op['size']}"
        cis = op.get("compute_instances")
        return text + (f" with {', '.join(cis)}" if cis else "")
    if name == "destroy_gi":
        return f"destroy_gi {op['gi']}"
    if name == "destroy_ci":
        return f"destroy_ci {op['gi']}/{op['ci']}"
    if name == "set_mig_mode":
        return f"set_mig_mode {'enabled' if op['enabled'] else 'disabled'}"
    if name in ("set_compute_partition", "set_memory_partition"):
        return f"{name} {op['mode']}"
    if name == "set_sriov_vfs":
        return f"set_sriov_vfs {op['count']}"
    return str(name)
