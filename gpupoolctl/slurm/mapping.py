"""A gpupoolctl job (JobSpec / JobRequest) as an sbatch call: options and a batch script.

What maps:

- GPUs: `--gres=gpu:<type>:<n>` with `--nodes=1` (GRES counts are per node, so the n GPUs
  are always on one node: `--same-node` is what every job gets). The type is found among the
  GRES types the cluster has, named as `gpupoolctl export slurm` names them:
  `--profile gpu` (the default) -> a whole-card type (`h100`); `--profile 1g.10gb` -> a MIG
  type (`h100_1g.10gb`); `--profile cpx` -> an AMD partition type (`mi300x_cpx.nps4`).
  `--model` narrows to types of that card, given as a part of the name (`H100`) or the full
  model name (`NVIDIA H100 80GB HBM3`, matched by the short name the export gives it). One
  matching type is used; several are refused (Slurm cannot ask for "any of these types"),
  saying what tells them apart: the card (add --model) or the memory mode (name it:
  `--profile cpx/nps4`, as the ledger writes AMD modes); none is a capacity error (exit 5).
  A cluster without typed GPUs gets an untyped `--gres=gpu:<n>`.
- `--mem`: Slurm's GRES know no memory size, so it becomes `--gres=gpu:<n>` (any GPU type)
  and a note says the size was not checked.
- `--host NAME` -> `--nodelist=NAME`; `--priority` -> `--nice` (below normal: a positive
  nice anyone may set; above normal: a negative nice, which Slurm allows operators only);
  `--requeue` -> `--requeue`, else `--no-requeue`; `--time-limit` -> `--time=D-HH:MM:SS`;
  `--signal SIG@S` -> `--signal=SIG@S`; `--name` -> `--job-name` (default: the
  command's name); `--workdir` -> `--chdir` (default: the current folder, as sbatch does).
- The command and `--env` go into the batch script, every word quoted with shlex: nothing the
  user gave is ever read by a shell as code. (`--export=VAR=...` is not used: it splits
  values at commas.)

Refused up front (UsageError, exit 2): `--same-island` (no Slurm equivalent), `--preemptible`
(preemption is the cluster's configuration), `--bandwidth` and `--vendor` (not in GRES), a
`--policy` other than best-fit (Slurm's select plugin places jobs), a `--grace` other than the
default (Slurm's KillWait sets it), `--max-restarts` and `--checkpoint-dir`, a `--host`
glob, and the bare kinds mig/partition/vf.
"""

from __future__ import annotations

import math
import os
import re
import shlex
from collections.abc import Collection, Sequence
from dataclasses import dataclass

from gpupoolctl.errors import UsageError
from gpupoolctl.export.slurm import SliceKind, model_long_name, model_short_name, type_names
from gpupoolctl.jobs.spec import DEFAULT_GRACE_S, JobSpec
from gpupoolctl.sched.request import PRIORITIES, JobRequest
from gpupoolctl.slurm.client import SlurmCapacityError

NICE_PER_POINT = 100  # one priority point (0..100) is this much nice
MAX_JOB_NAME = 200
WHOLE_CARD = "gpu"
BARE_KINDS = ("mig", "partition", "vf")
_NODE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._\-,\[\]]*")
_PROBE_MODEL = "x1"  # a model name that is its own short name: see profile_suffix


@dataclass(frozen=True)
class SbatchRequest:
    """What to run sbatch with: its options, the script for stdin, and notes for the user
    about what Slurm could not check."""

    args: tuple[str, ...]
    script: str
    gres: str
    notes: tuple[str, ...] = ()


def profile_suffix(profile: str) -> str:
    """`1g.10gb` -> `_1g.10gb`, `cpx/nps4` -> `_cpx.nps4`: the part of a GRES type name after
    the card, exactly as the export writes it (asked of the export's own naming, with a probe
    model whose name is known)."""
    probe = SliceKind(model=_PROBE_MODEL, vendor="", kind="mig", profile=profile)
    return type_names([probe])[probe][len(_PROBE_MODEL) :]


def _model_part(gres_type: str) -> str:
    return gres_type.split("_", 1)[0]


def _serves_profile(gres_type: str, suffix: str) -> bool:
    """`h100_1g.10gb` serves `_1g.10gb`; `mi300x_cpx.nps4` serves `_cpx` (any memory mode)."""
    if "_" not in gres_type:
        return False
    rest = gres_type[len(_model_part(gres_type)) :]
    return rest == suffix or rest.startswith(suffix + ".")


def matching_types(request: JobRequest, types: Collection[str]) -> list[str]:
    """The cluster's GRES types that serve this request's profile and model."""
    profile = (request.profile or WHOLE_CARD).strip().lower()
    if profile == WHOLE_CARD:
        found = [t for t in types if "_" not in t]
    else:
        suffix = profile_suffix(profile)
        found = [t for t in types if _serves_profile(t, suffix)]
    if request.model:
        # `H100` is a part of the type's card name; `NVIDIA H100 80GB HBM3` is the card's full
        # name, which the export shortens to `h100` unless two cards share that short name.
        wanted = model_long_name(request.model)
        short = model_short_name(request.model)
        found = [t for t in found if wanted in _model_part(t) or _model_part(t) == short]
    return sorted(found)


def _memory_mode(gres_type: str, suffix: str) -> str | None:
    """`mi300x_cpx.nps4` with `_cpx` -> `nps4`; None when the type names no mode beyond it."""
    rest = gres_type[len(_model_part(gres_type)) :]
    return rest[len(suffix) + 1 :] if rest.startswith(suffix + ".") else None


def _tell_apart(request: JobRequest, found: Sequence[str]) -> str:
    """What the user can add to pick one of several types."""
    profile = (request.profile or WHOLE_CARD).strip().lower()
    modes = (
        set()
        if profile == WHOLE_CARD
        else {_memory_mode(t, profile_suffix(profile)) for t in found}
    )
    hints = []
    if len({_model_part(t) for t in found}) > 1:
        hints.append("add --model")
    if len(modes) > 1 and None not in modes:
        choices = " or ".join(f"--profile {profile}/{mode}" for mode in sorted(modes))
        hints.append(f"name the memory mode ({choices})")
    return ", or ".join(hints) or "add --model"


def gres_for(request: JobRequest, types: Collection[str]) -> tuple[str, tuple[str, ...]]:
    """`gpu:<type>:<n>` (or `gpu:<n>`) for a request, and notes on what was not checked."""
    if request.memory_mib is not None:
        note = (
            f"Slurm cannot check a slice's memory (>= {request.memory_mib} MiB asked): "
            "any GPU type may be given; use --profile for a sized slice"
        )
        return f"gpu:{request.gpus}", (note,)
    if not types:
        if request.model or (request.profile or WHOLE_CARD).lower() != WHOLE_CARD:
            raise SlurmCapacityError(
                f"no node in this Slurm cluster has typed GPUs, so {request.describe()} "
                "cannot be asked for"
            )
        return f"gpu:{request.gpus}", ()
    found = matching_types(request, types)
    if not found:
        raise SlurmCapacityError(
            f"no GPU type in this Slurm cluster serves {request.describe()} "
            f"(types: {', '.join(sorted(types))})"
        )
    if len(found) > 1:
        raise UsageError(
            f"{request.describe()} matches several Slurm GPU types ({', '.join(found)}) and "
            f"a job can ask for one only: {_tell_apart(request, found)}"
        )
    return f"gpu:{found[0]}:{request.gpus}", ()


def refuse_unmappable(spec: JobSpec) -> None:
    """UsageError (exit 2) for what Slurm cannot do, before anything is submitted."""
    request = spec.request
    refused = [
        (request.same_island, "--same-island has no Slurm equivalent (GRES know no islands)"),
        (request.preemptible, "--preemptible: preemption is the Slurm cluster's own setting"),
        (request.bandwidth_class is not None, "--bandwidth: Slurm's GRES know no bandwidth"),
        (request.vendor is not None, "--vendor: Slurm's GRES know no vendor; use --model"),
        (spec.policy != "best-fit", "--policy: Slurm's select plugin places jobs"),
        (spec.grace_s != DEFAULT_GRACE_S, "--grace: Slurm's KillWait sets the grace period"),
        (
            spec.max_restarts > 0,
            "--max-restarts: Slurm requeues by its own RequeueExit/MaxBatchRequeue settings",
        ),
        (spec.checkpoint_dir is not None, "--checkpoint-dir: set it with --env in the job"),
    ]
    for refused_here, message in refused:
        if refused_here:
            raise UsageError(f"not with --backend slurm: {message}")
    if request.profile and request.profile.strip().lower() in BARE_KINDS:
        raise UsageError(
            f"--profile {request.profile} with --backend slurm: name the profile "
            "(1g.10gb, cpx, ...), Slurm's GPU types are per profile"
        )
    if request.host is not None and (
        any(ch in request.host for ch in "*?") or not _NODE_NAME.fullmatch(request.host)
    ):
        raise UsageError(
            f"--host {request.host!r} with --backend slurm: give node names or a Slurm host "
            "list (node[1-4]), not a glob"
        )


def nice_for(priority: int) -> int:
    """gpupoolctl's 0..100 (normal 50) as Slurm's nice: lower priority, higher nice."""
    return (PRIORITIES["normal"] - priority) * NICE_PER_POINT


def batch_script(argv: Sequence[str], env: dict[str, str], setup: Sequence[str] = ()) -> str:
    """A /bin/sh script that runs argv exactly: exports and words quoted, nothing expanded.
    `setup` lines are gpupoolctl's own (never user text)."""
    lines = [
        "#!/bin/sh",
        "# Written by gpupoolctl: the command as given, every word quoted.",
        *setup,
        *(f"export {name}={shlex.quote(value)}" for name, value in sorted(env.items())),
        f"exec {shlex.join(argv)}",
    ]
    return "\n".join(lines) + "\n"


def sbatch_request(
    spec: JobSpec, types: Collection[str], *, setup: Sequence[str] = ()
) -> SbatchRequest:
    """The sbatch options and script for a validated JobSpec (see the module doc)."""
    refuse_unmappable(spec)
    request = spec.request
    gres, notes = gres_for(request, types)
    name = spec.name or os.path.basename(spec.argv[0]) or "job"
    args = [f"--job-name={name[:MAX_JOB_NAME]}", "--nodes=1", f"--gres={gres}"]
    args.append("--requeue" if spec.requeue else "--no-requeue")
    if spec.time_limit_s is not None:  # Slurm counts whole minutes and seconds: round up
        days, rest = divmod(math.ceil(spec.time_limit_s), 86400)
        args.append(f"--time={days}-{rest // 3600:02d}:{rest % 3600 // 60:02d}:{rest % 60:02d}")
    if spec.signal is not None:
        args.append(f"--signal={spec.signal}@{math.ceil(spec.signal_s or 60)}")
    if request.host is not None:
        args.append(f"--nodelist={request.host}")
    if request.team is not None:  # a Slurm account is what a team is there (GrpTRES quotas)
        args.append(f"--account={request.team}")
    nice = nice_for(request.priority)
    if nice:
        args.append(f"--nice={nice}")
    if spec.workdir is not None:
        args.append(f"--chdir={spec.workdir}")
    return SbatchRequest(
        args=tuple(args),
        script=batch_script(spec.argv, spec.env, setup),
        gres=gres,
        notes=notes,
    )
