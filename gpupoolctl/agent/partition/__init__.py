"""The agent's `partition` verb: apply per-GPU partition plans, restoring a GPU on failure.

Request (`args` of {"verb": "partition"}; gpupoolctl.hw.ops.PartitionRequestArgs):
    {"gpus": [{"index": 3, "uuid": "GPU-...", "vendor": "nvidia", "ops": [<op>, ...],
               "expect": {...}}, ...],     # optional: the state it was planned from (expect.py)
     "force": false,
     "hooks": {"apply-start": [["argv0", "arg", ...], ...], "pre-apply-mode": [...],
               "pre-apply-config": [...], "apply-exit": [...]}}      # optional

Response data:
    {"gpus": [<GpuOutcome>, ...],      # one per requested GPU, in request order
     "hooks": [{"hook": "apply-start", "argv": [...], "rc": 0, "ok": true,
                "error": null, "output": "<tail of stdout+stderr>", "elapsed_s": 0.01}, ...],
     "stopped_by": null | "<hook name>",   # a pre-hook failed: no GPU was touched
     "warnings": ["..."]}               # e.g. a GPU moved by another GPU's hive-wide change

GpuOutcome (gpupoolctl.hw.ops): index, uuid, ok, applied, error, rolled_back,
rollback_error, reset_required.

The whole run holds the node's partition lock (lock.py): a second run meanwhile is refused
whole, before any hook. Every GPU is found by index and its uuid checked (a plan made for
another card is refused), and compared with the state its plan was made from (a GPU that
changed since is refused); then per GPU, in order: running processes, and SR-IOV VFs in use
when its VF count changes (gpupoolctl.agent.sriov), refuse it unless `force`; its layout is
snapshotted; the ops run in the given order. If one fails, the snapshot is restored (what was
created is destroyed, what was destroyed is recreated at the same placements, modes are put
back) and the result is verified against the snapshot. GPUs are independent of each other.

Hooks run like NVIDIA mig-parted's: apply-start first, pre-apply-mode when some GPU changes a
mode, pre-apply-config when some GPU changes at all, apply-exit always, last. A failing
pre-hook stops the host before any GPU is touched. Stdlib only: this ships to the nodes.
"""

from __future__ import annotations

from typing import Any

from gpupoolctl.agent.partition.executor import apply

__all__ = ["apply", "handle"]


def handle(args: Any) -> dict[str, Any]:
    """The verb's entry point: validate `args`, then apply (AgentError on a malformed request)."""
    from gpupoolctl.agent.partition.request import parse

    return apply(parse(args))
