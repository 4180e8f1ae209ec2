"""What each stress job runs (Workload) and what it asks the scheduler for (RequestShape).

Built-in workloads run on the node as `gpupoolctl-workload <kind> ...` (see
gpupoolctl.agent.workloads); `cmd` runs any command line. Errors are UsageErrors.
"""

from __future__ import annotations

import contextlib
import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.agent.workloads import WORKLOAD_COMMAND, matmul, sim, train
from gpupoolctl.errors import UsageError
from gpupoolctl.hw.shown import shown
from gpupoolctl.ledger.units import parse_memory_mib
from gpupoolctl.sched.request import JobRequest, parse_priority, sized_profile
from gpupoolctl.stress.levels import bounded_seconds, number_text
from gpupoolctl.yamlsource import did_you_mean

__all__ = [
    "DTYPES",
    "MAX_MATMUL_SECONDS",
    "MAX_MATMUL_SIZE",
    "MAX_WORK_S",
    "MIN_MATMUL_SIZE",
    "SHAPE_FIELDS",
    "WORKLOAD_KINDS",
    "RequestShape",
    "Workload",
    "check_workload_arg",
    "shape_from_dict",
]

WORKLOAD_KINDS = ("sim", "sleep", "cmd", "matmul", "train")
# The node's own limits (its workloads refuse anything else): checked here first, so that a
# bad scenario fails on the workstation before any job is sent. The agent's workload modules
# are stdlib only and define nothing but constants and functions at import.
MAX_WORK_S = sim.MAX_WORK_S  # sim --work and sleep --seconds
MAX_MATMUL_SECONDS = matmul.MAX_SECONDS
DTYPES = matmul.DTYPES
MIN_MATMUL_SIZE, MAX_MATMUL_SIZE = matmul.MIN_SIZE, matmul.MAX_SIZE
# gpupoolctl.jobs.spec.MAX_RESTARTS (a unit test keeps them equal), not imported: the jobs
# package pulls in the whole job stack, which reading a scenario or a result does not need.
MAX_RESTARTS = 100

# --- workload ----------------------------------------------------------------------------

_WORKLOAD_DEFAULTS: dict[str, dict[str, Any]] = {
    "sim": {"work_s": 1.0, "sigma": None, "kappa": None},
    "sleep": {"seconds": 1.0},
    "cmd": {"argv": None},
    "matmul": {"seconds": 10.0, "size": 4096, "dtype": "float16"},
    "train": {
        "params": train.DEFAULT_PARAMS,
        "batch": train.DEFAULT_BATCH,
        "steps": train.DEFAULT_STEPS,
        "flops_per_sample": None,
        "time_scale": 1.0,
    },
}
# train's arguments: (lowest, highest, whole number, may be None)
_TRAIN_LIMITS: dict[str, tuple[float, float, bool, bool]] = {
    "params": (1.0, train.MAX_PARAMS, False, False),
    "batch": (1, train.MAX_BATCH, True, False),
    "steps": (1, train.MAX_STEPS, True, False),
    "flops_per_sample": (1.0, 1e21, False, True),
    "time_scale": (1e-6, train.MAX_TIME_SCALE, False, False),
}


def check_workload_arg(kind: str, key: str, value: Any) -> Any:
    """One argument of a `kind` workload, checked and normalised (a duration to seconds,
    a command line to its argv); UsageError names the workload and the argument."""
    valid = _WORKLOAD_DEFAULTS[kind]
    if key not in valid:
        raise UsageError(
            f"workload {kind}: unknown argument {shown(key)}; valid: {', '.join(valid)}"
        )
    if kind == "train":
        low, high, whole, nullable = _TRAIN_LIMITS[key]
        if value is None and nullable:
            return None
        if isinstance(value, str):
            with contextlib.suppress(ValueError):
                value = float(value)  # 1.3e9 reads as text in YAML 1.1
        is_number = isinstance(value, int | float) and not isinstance(value, bool)
        if not is_number or not math.isfinite(value) or not low <= value <= high:
            raise UsageError(
                f"workload train {key}: expected a number within {low:g}..{high:g}, got "
                f"{shown(value)}"
            )
        if whole:
            if value != int(value):
                raise UsageError(
                    f"workload train {key}: expected a whole number, got {shown(value)}"
                )
            return int(value)
        return float(value)
    if key in ("work_s", "seconds"):
        most = MAX_MATMUL_SECONDS if kind == "matmul" else MAX_WORK_S
        return bounded_seconds(value, f"workload {kind} {key}", allow_zero=False, most=most)
    if key in ("sigma", "kappa"):
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise UsageError(
                f"workload sim {key}: expected a number within 0..1, got {shown(value)}"
            )
        return float(value)
    if key == "size":
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"workload matmul size: expected a whole number, got {shown(value)}")
        if not MIN_MATMUL_SIZE <= value <= MAX_MATMUL_SIZE:
            raise UsageError(
                f"workload matmul size: expected {MIN_MATMUL_SIZE}..{MAX_MATMUL_SIZE}, got {value}"
            )
        return value
    if key == "dtype":
        if value not in DTYPES:
            raise UsageError(
                f"workload matmul dtype: use one of {', '.join(DTYPES)}; got {shown(value)}"
            )
        return value
    # argv
    if isinstance(value, str):
        value = _split_command(value)
    if (
        not isinstance(value, list | tuple)
        or not value
        or not all(isinstance(a, str) for a in value)
    ):
        raise UsageError(
            f"workload cmd argv: expected a non-empty list of strings, got {shown(value)}"
        )
    if not value[0].strip() or any("\0" in a for a in value):
        raise UsageError("workload cmd argv: the command must be named and contain no NUL bytes")
    return list(value)


def _split_command(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"workload cmd: cannot split {shown(text)}: {exc}") from None


@dataclass(frozen=True)
class Workload:
    """What each job runs. `args` is completed with the kind's defaults and checked:
    sim: work_s (1.0, in (0, 3600]), sigma, kappa (0..1 or None for the node's default);
    sleep: seconds (1.0); cmd: argv (required, non-empty); matmul: seconds (10), size
    (4096), dtype (float16, bfloat16 or float32); train: params (1e9), batch (4 per GPU),
    steps (20), flops_per_sample (None: 6 * params * 512 tokens), time_scale (1.0)."""

    kind: str = "sim"
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            raise UsageError(
                f"unknown workload {shown(self.kind)}; valid: {', '.join(WORKLOAD_KINDS)}"
            )
        if not isinstance(self.args, Mapping):
            raise UsageError(f"workload {self.kind}: arguments must be a mapping")
        args = dict(_WORKLOAD_DEFAULTS[self.kind])
        for key, value in self.args.items():
            args[key] = check_workload_arg(self.kind, key, value)
        if self.kind == "cmd" and args["argv"] is None:
            raise UsageError("workload cmd: argv is required (the command each job runs)")
        object.__setattr__(self, "args", args)

    @property
    def run_s(self) -> float | None:
        """How long one job runs when alone, where the workload says (cmd does not)."""
        value = self.args.get("work_s", self.args.get("seconds"))
        return float(value) if value is not None else None

    def argv(self) -> list[str]:
        """The job's command line."""
        args = self.args
        if self.kind == "cmd":
            return list(args["argv"])
        if self.kind == "sleep":
            return ["sleep", number_text(args["seconds"])]
        if self.kind == "train":
            out = [
                WORKLOAD_COMMAND,
                "train",
                "--params",
                f"{args['params']:g}",
                "--batch",
                str(args["batch"]),
                "--steps",
                str(args["steps"]),
                "--time-scale",
                f"{args['time_scale']:g}",
            ]
            if args["flops_per_sample"] is not None:
                out += ["--flops-per-sample", f"{args['flops_per_sample']:g}"]
            return out
        if self.kind == "matmul":
            return [
                WORKLOAD_COMMAND,
                "matmul",
                "--seconds",
                str(float(args["seconds"])),
                "--size",
                str(args["size"]),
                "--dtype",
                args["dtype"],
            ]
        out = [WORKLOAD_COMMAND, "sim", "--work", str(float(args["work_s"]))]
        for key in ("sigma", "kappa"):
            if args[key] is not None:
                out += [f"--{key}", str(float(args[key]))]
        return out

    def to_dict(self) -> dict[str, Any]:
        args = {k: (list(v) if isinstance(v, list) else v) for k, v in self.args.items()}
        return {"kind": self.kind, "args": args}


# --- request shapes ----------------------------------------------------------------------

SHAPE_FIELDS = (
    "weight",
    "gpus",
    "profile",
    "mem",
    "vendor",
    "model",
    "bandwidth",
    "same_node",
    "same_island",
    "priority",
    "preemptible",
    "max_restarts",
)


@dataclass(frozen=True)
class RequestShape:
    """What one submitted job asks for, and how often (weight) among the scenario's shapes.
    Neither profile nor mem means whole cards, as `gpupoolctl submit` does (one rule:
    sched.request.sized_profile). max_restarts: each job runs again up to this many times
    after a failure exit or a lost node, as `submit --max-restarts` (0..MAX_RESTARTS; the
    scheduler's back-off applies)."""

    weight: float = 1.0
    gpus: int = 1
    profile: str | None = None
    mem: str | None = None
    vendor: str | None = None
    model: str | None = None
    bandwidth: str | None = None
    same_node: bool = False
    same_island: bool = False
    priority: str = "normal"
    preemptible: bool = False
    max_restarts: int = 0

    def __post_init__(self) -> None:
        weight = self.weight
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise UsageError(f"request weight: expected a number > 0, got {shown(weight)}")
        if not math.isfinite(weight) or weight <= 0:
            raise UsageError(f"request weight: expected a number > 0, got {shown(weight)}")
        object.__setattr__(self, "weight", float(weight))
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise UsageError(f"request gpus: expected a whole number >= 1, got {shown(self.gpus)}")
        for name in ("profile", "mem", "vendor", "model", "bandwidth"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise UsageError(f"request {name}: expected text, got {shown(value)}")
        for name in ("same_node", "same_island", "preemptible"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"request {name}: expected true or false")
        priority = self.priority
        if isinstance(priority, bool) or not isinstance(priority, str | int):
            raise UsageError(
                f"request priority: use low, normal, high or 0..100; got {shown(priority)}"
            )
        parse_priority(str(priority))
        restarts = self.max_restarts
        if (
            isinstance(restarts, bool)
            or not isinstance(restarts, int)
            or not 0 <= restarts <= MAX_RESTARTS
        ):
            raise UsageError(
                f"request max-restarts: expected a whole number 0..{MAX_RESTARTS}, got "
                f"{shown(restarts)}"
            )
        object.__setattr__(self, "priority", str(priority).strip().lower())
        if self.mem is not None:
            parse_memory_mib(self.mem)
        # What the scheduler itself would refuse (profile and mem, unknown vendor, ...).
        self.job_request().validate()

    def job_fields(self) -> dict[str, Any]:
        """Keyword arguments for gpupoolctl.sched.JobRequest, named as it names them
        (max_restarts is the job's, not the request's: backend.job_spec passes it)."""
        return {
            "gpus": self.gpus,
            "profile": sized_profile(self.profile, self.mem),  # neither: whole cards
            "memory_mib": parse_memory_mib(self.mem) if self.mem else None,
            "vendor": self.vendor.lower() if self.vendor else None,
            "model": self.model,
            "bandwidth_class": self.bandwidth,
            "same_node": self.same_node,
            "same_island": self.same_island,
            "priority": parse_priority(self.priority),
            "preemptible": self.preemptible,
        }

    def job_request(self) -> JobRequest:
        return JobRequest(**self.job_fields())

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in SHAPE_FIELDS}


def shape_from_dict(data: Mapping[str, Any]) -> RequestShape:
    """The inverse of RequestShape.to_dict; unknown fields are refused."""
    unknown = [k for k in data if k not in SHAPE_FIELDS]
    if unknown:
        raise UsageError(
            f"request: unknown field {shown(unknown[0])}{did_you_mean(unknown[0], SHAPE_FIELDS)}; "
            f"valid: {', '.join(SHAPE_FIELDS)}"
        )
    return RequestShape(**dict(data))
