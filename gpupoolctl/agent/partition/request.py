"""Check a `partition` request before anything touches hardware.

A malformed request is refused whole (AgentError "BadRequest"): a typo in one GPU's ops must
not leave the node half changed because the other GPUs already ran.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.agent.protocol import AgentError
from gpupoolctl.hw.ops import OP_NAMES

HOOK_NAMES = ("apply-start", "pre-apply-mode", "pre-apply-config", "apply-exit")

# Which vendor can run which op. SR-IOV through raw sysfs is AMD-only on purpose: NVIDIA vGPU
# hosts must use sriov-manage (partition research, section 4.3).
VENDOR_OPS: dict[str, frozenset[str]] = {
    "nvidia": frozenset({"destroy_ci", "destroy_gi", "set_mig_mode", "create_gi"}),
    "amd": frozenset({"set_compute_partition", "set_memory_partition", "set_sriov_vfs"}),
}
MODE_OPS = frozenset({"set_mig_mode", "set_compute_partition", "set_memory_partition"})

# Required fields of each op and their types (bool is refused where an int is wanted).
_FIELDS: dict[str, dict[str, type]] = {
    "destroy_ci": {"gi": int, "ci": int},
    "destroy_gi": {"gi": int},
    "set_mig_mode": {"enabled": bool},
    "create_gi": {"profile": str, "profile_id": int, "start": int, "size": int},
    "set_compute_partition": {"mode": str},
    "set_memory_partition": {"mode": str},
    "set_sriov_vfs": {"count": int},
}


@dataclass
class GpuRequest:
    index: int
    uuid: str
    vendor: str
    ops: list[dict[str, Any]]
    expect: dict[str, Any] | None = None  # the state the plan was made from (partition.expect)


@dataclass
class Request:
    gpus: list[GpuRequest]
    force: bool = False
    hooks: dict[str, list[list[str]]] = field(default_factory=dict)

    @property
    def changes_mode(self) -> bool:
        return any(op["op"] in MODE_OPS for gpu in self.gpus for op in gpu.ops)

    @property
    def changes_config(self) -> bool:
        return any(gpu.ops for gpu in self.gpus)


def _bad(message: str) -> AgentError:
    return AgentError(message, "BadRequest")


def _is(value: Any, kind: type) -> bool:
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


def check_op(op: Any, where: str) -> dict[str, Any]:
    if not isinstance(op, dict) or not isinstance(op.get("op"), str):
        raise _bad(f"{where}: an operation must be an object with an 'op' name")
    name = op["op"]
    if name not in OP_NAMES:
        raise _bad(f"{where}: unknown operation {name!r}; known: {', '.join(OP_NAMES)}")
    for key, kind in _FIELDS[name].items():
        if not _is(op.get(key), kind):
            raise _bad(f"{where}: {name} needs {key!r} ({kind.__name__})")
    if name == "create_gi":
        names = op.get("compute_instances")
        if names is not None and (
            not isinstance(names, list) or not all(isinstance(n, str) for n in names)
        ):
            raise _bad(f"{where}: create_gi 'compute_instances' must be a list of profile names")
        if op["start"] < 0 or op["size"] < 1:
            raise _bad(f"{where}: create_gi placement {op['start']}:{op['size']} is impossible")
    if name == "set_sriov_vfs" and op["count"] < 0:
        raise _bad(f"{where}: set_sriov_vfs count must be 0 or more")
    return op


def _check_gpu(raw: Any, position: int) -> GpuRequest:
    where = f"gpus[{position}]"
    if not isinstance(raw, dict):
        raise _bad(f"{where}: must be an object")
    index, uuid, vendor, ops = raw.get("index"), raw.get("uuid"), raw.get("vendor"), raw.get("ops")
    if not _is(index, int) or index < 0:
        raise _bad(f"{where}: 'index' must be a GPU index")
    if not isinstance(uuid, str) or not uuid:
        raise _bad(f"{where}: 'uuid' is required (a plan is bound to one card)")
    if vendor not in VENDOR_OPS:
        raise _bad(f"{where}: 'vendor' must be 'nvidia' or 'amd', not {vendor!r}")
    if not isinstance(ops, list):
        raise _bad(f"{where}: 'ops' must be a list")
    checked = [check_op(op, f"{where}.ops[{i}]") for i, op in enumerate(ops)]
    for i, op in enumerate(checked):
        if op["op"] not in VENDOR_OPS[vendor]:
            raise _bad(f"{where}.ops[{i}]: {op['op']} is not an operation for {vendor} GPUs")
    expect = raw.get("expect")
    if expect is not None and not isinstance(expect, dict):
        raise _bad(f"{where}: 'expect' must be an object (the state the plan was made from)")
    return GpuRequest(index=index, uuid=uuid, vendor=vendor, ops=checked, expect=expect)


def _check_hooks(raw: Any) -> dict[str, list[list[str]]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise _bad("'hooks' must map hook names to lists of argv lists")
    hooks: dict[str, list[list[str]]] = {}
    for name, commands in raw.items():
        if name not in HOOK_NAMES:
            raise _bad(f"unknown hook {name!r}; known: {', '.join(HOOK_NAMES)}")
        if not isinstance(commands, list) or not all(
            isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv)
            for argv in commands
        ):
            raise _bad(f"hook {name!r}: each command must be a non-empty list of strings")
        hooks[name] = [list(argv) for argv in commands]
    return hooks


def parse(args: Any) -> Request:
    """The request, checked; AgentError("BadRequest") naming the first problem."""
    if not isinstance(args, dict):
        raise _bad("partition args must be an object")
    gpus = args.get("gpus")
    if not isinstance(gpus, list):
        raise _bad("partition args need 'gpus': a list of per-GPU plans")
    force = args.get("force", False)
    if not isinstance(force, bool):
        raise _bad("'force' must be true or false")
    checked = [_check_gpu(raw, i) for i, raw in enumerate(gpus)]
    seen: set[int] = set()
    for gpu in checked:
        if gpu.index in seen:
            raise _bad(f"GPU {gpu.index} appears twice; send one plan per GPU")
        seen.add(gpu.index)
    return Request(gpus=checked, force=force, hooks=_check_hooks(args.get("hooks")))
