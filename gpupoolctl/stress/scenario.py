"""Stress scenarios: what a ramp runs, from a YAML file, from flags, or both.

    name: nightly                 # default: the file's name without .yaml
    model: closed                 # closed (concurrent submitters) or open (arrivals per s)
    levels: 1..32x2               # see parse_levels; also [1, 2, 4] or {from, to, factor|step}
    warmup: 5s                    # per level, not measured
    hold: 30s                     # per level, measured
    drain: 60s                    # per level, waiting for jobs still running
    job-timeout: 10m              # a job still running after this counts as failed
    poll: 200ms                   # how often the pool is polled for ended jobs
    workload: {kind: sim, work: 1s, sigma: 0.05, kappa: 0.001}   # or just: sim
    requests:                     # weighted shapes of what each job asks for
      - {weight: 8, mem: 10G}
      - {weight: 1, profile: gpu, gpus: 2, same-island: true}
    thresholds: ["queue_wait.p95 < 5s", "failure_rate < 1%"]
    stop-after-breaks: 2          # stop the ramp after this many levels in a row broke one
    seed: 0
    policy: best-fit

Durations are '500ms', '30s', '2m', '1h', '1h30m' or a number of seconds. Every error in a
file names file:line and what was expected. Threshold syntax: gpupoolctl.stress.thresholds.
"""

from __future__ import annotations

import difflib
import math
import os
import re
import shlex
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import yaml

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.ledger.units import parse_duration, parse_memory_mib
from gpupoolctl.sched.policies import POLICIES
from gpupoolctl.sched.request import JobRequest, parse_priority
from gpupoolctl.stress.thresholds import Threshold, parse_threshold

__all__ = [
    "MAX_LEVELS",
    "MODELS",
    "WORKLOAD_KINDS",
    "RequestShape",
    "Scenario",
    "Threshold",
    "Workload",
    "check_levels",
    "format_levels",
    "level_range",
    "load_scenario",
    "parse_levels",
    "parse_scenario",
    "parse_seconds",
    "parse_threshold",
    "scenario_from_dict",
    "scenario_from_flags",
]

MODELS = ("closed", "open")
MAX_LEVELS = 64
MAX_CONCURRENCY = 1024  # closed model: submitter threads on the workstation
MAX_RATE = 1000.0  # open model: arrivals per second
MAX_PHASE_S = 86400.0  # warm-up, hold, drain, job time-out: a day is already a soak test
MAX_POLL_S = 60.0
MAX_WORK_S = 3600.0
WORKLOAD_COMMAND = "gpupoolctl-workload"  # the node's agent resolves it to a built-in workload
WORKLOAD_KINDS = ("sim", "sleep", "cmd", "matmul")
DTYPES = ("float16", "bfloat16", "float32")
MAX_MATMUL_SIZE = 65536

# --- numbers and durations ---------------------------------------------------------------

_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?"
_SUBSECOND = re.compile(rf"^({_NUMBER})\s*(ms|us)$")
_SUBSECOND_SCALE = {"ms": 1e-3, "us": 1e-6}
_ZERO = re.compile(r"^0+(?:\.0*)?\s*(?:ms|us|[smhdw])?$")


def _number_text(value: float) -> str:
    """1.0 -> '1', 0.5 -> '0.5': the shortest text that reads back as the same float."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else repr(value)


def parse_seconds(value: str | float, what: str = "duration", *, allow_zero: bool = False) -> float:
    """'500ms', '30s', '2m', '1h30m', '250us', or a number of seconds -> seconds.
    Everything but ms/us goes through ledger.units.parse_duration."""
    if isinstance(value, bool):
        raise UsageError(f"{what}: expected a duration such as 30s, got {value!r}")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        sub = _SUBSECOND.match(text)
        if re.fullmatch(_NUMBER, text):
            seconds = float(text)
        elif sub:
            seconds = float(sub.group(1)) * _SUBSECOND_SCALE[sub.group(2)]
        elif _ZERO.match(text):
            seconds = 0.0
        else:
            try:
                seconds = parse_duration(text).total_seconds()
            except UsageError as exc:
                raise UsageError(f"{what}: {exc} (or 500ms)") from None
    else:
        raise UsageError(f"{what}: expected a duration such as 30s, got {value!r}")
    if not math.isfinite(seconds) or seconds < 0:
        raise UsageError(f"{what}: expected a duration such as 30s, got {value!r}")
    if seconds == 0 and not allow_zero:
        raise UsageError(f"{what}: must be more than zero")
    return seconds


def _bounded_seconds(value: Any, what: str, *, allow_zero: bool, most: float) -> float:
    seconds = parse_seconds(value, what, allow_zero=allow_zero)
    if seconds > most:
        raise UsageError(f"{what}: at most {_number_text(most)}s (got {_number_text(seconds)}s)")
    return seconds


# --- levels ------------------------------------------------------------------------------

LEVEL_FORMS = (
    "'1,2,4,8' (a list), '1..64x2' (start..stop x factor: 1,2,4,...,64) "
    "or '1..33+8' (start..stop + step: 1,9,17,25,33)"
)
_RANGE = re.compile(rf"^({_NUMBER})\s*\.\.\s*({_NUMBER})\s*([x+])\s*({_NUMBER})$")
_SIGNIFICANT = 12  # drops float noise: 0.1 + 2 * 0.1 is 0.3, not 0.30000000000000004


def _clean(value: float) -> float:
    return float(f"{value:.{_SIGNIFICANT}g}")


def _level_number(text: str) -> float:
    text = text.strip()
    if not re.fullmatch(_NUMBER, text):
        raise UsageError(f"bad level {text!r}: expected a number > 0; use {LEVEL_FORMS}")
    return float(text)


def level_range(
    start: float, stop: float, *, factor: float | None = None, step: float | None = None
) -> tuple[float, ...]:
    """Geometric (factor) or linear (step) levels from start up to stop; a stop that is
    not on the grid ends the range at the last value below it."""
    if (factor is None) == (step is None):
        raise UsageError("a level range needs either a factor (1..64x2) or a step (1..33+8)")
    for name, value in (("start", start), ("stop", stop), ("factor", factor), ("step", step)):
        if value is not None and (not math.isfinite(value) or value <= 0):
            raise UsageError(f"bad level range: {name} must be a number > 0 (got {value!r})")
    if start > stop:
        raise UsageError(
            f"bad level range {_number_text(start)}..{_number_text(stop)}: start is above stop"
        )
    if factor is not None and factor <= 1:
        raise UsageError(f"bad level range: the factor must be more than 1 (got {factor!r})")
    limit = stop * (1 + 1e-9)
    out: list[float] = [start]  # exactly as written
    grown = start
    for k in range(1, MAX_LEVELS + 1):
        grown = grown * factor if factor is not None else start + k * (step or 0)
        if grown > limit:
            return _increasing(out)
        # Float noise off (0.1 + 2 * 0.1 is 0.3); a value at stop is stop as written.
        value = stop if math.isclose(grown, stop, rel_tol=1e-9) else _clean(grown)
        if value <= out[-1]:
            raise UsageError(
                "bad level range: the factor or step is too small for levels to differ"
            )
        out.append(value)
    raise UsageError(f"too many levels: at most {MAX_LEVELS}; use a bigger factor or step")


def _increasing(levels: Sequence[float]) -> tuple[float, ...]:
    if not levels:
        raise UsageError(f"no levels given; use {LEVEL_FORMS}")
    if len(levels) > MAX_LEVELS:
        raise UsageError(f"too many levels ({len(levels)}): at most {MAX_LEVELS}")
    for before, after in pairwise(levels):
        if after == before:
            raise UsageError(f"level {_number_text(after)} is given twice; levels must increase")
        if after < before:
            raise UsageError(
                f"levels must increase: {_number_text(after)} comes after {_number_text(before)}"
            )
    for value in levels:
        if not math.isfinite(value) or value <= 0:
            raise UsageError(f"bad level {value!r}: levels are numbers > 0")
    return tuple(float(v) for v in levels)


def parse_levels(text: str) -> tuple[float, ...]:
    """'1,2,4,8', '1..64x2' or '1..33+8' -> strictly increasing levels (at most 64).
    Whether they suit the model (whole numbers for closed, bounds) is check_levels' job."""
    if not isinstance(text, str) or not text.strip():
        raise UsageError(f"no levels given; use {LEVEL_FORMS}")
    compact = text.strip()
    ranged = _RANGE.match(compact)
    if ranged:
        start, stop, kind, by = ranged.groups()
        numbers = float(start), float(stop), float(by)
        if kind == "x":
            return level_range(numbers[0], numbers[1], factor=numbers[2])
        return level_range(numbers[0], numbers[1], step=numbers[2])
    if ".." in compact:
        raise UsageError(f"bad level range {compact!r}: use {LEVEL_FORMS}")
    parts = compact.split(",")
    if len(parts) > MAX_LEVELS:
        raise UsageError(f"too many levels ({len(parts)}): at most {MAX_LEVELS}")
    return _increasing([_level_number(p) for p in parts])


def format_levels(levels: Sequence[float]) -> str:
    """The list form, '1,2,4,8', that parse_levels reads back to the same values."""
    return ",".join(_number_text(v) for v in levels)


def check_levels(levels: Sequence[float], model: str) -> tuple[float, ...]:
    """Levels that suit the model: closed -> whole submitters 1..1024; open -> arrival
    rates per second in (0, 1000]. Also strictly increasing, at most 64."""
    if model not in MODELS:
        raise UsageError(f"unknown model {model!r}: use {' or '.join(MODELS)}")
    values = []
    for value in levels:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise UsageError(f"bad level {value!r}: levels are numbers")
        values.append(float(value))
    result = _increasing(values)
    for value in result:
        if model == "closed":
            if not value.is_integer() or not 1 <= value <= MAX_CONCURRENCY:
                raise UsageError(
                    f"bad level {_number_text(value)}: closed-model levels are whole numbers of "
                    f"concurrent submitters, 1..{MAX_CONCURRENCY}"
                )
        elif value > MAX_RATE:
            raise UsageError(
                f"bad level {_number_text(value)}: open-model levels are arrivals per second, "
                f"at most {_number_text(MAX_RATE)}"
            )
    return result


# --- workload ----------------------------------------------------------------------------

_WORKLOAD_DEFAULTS: dict[str, dict[str, Any]] = {
    "sim": {"work_s": 1.0, "sigma": None, "kappa": None},
    "sleep": {"seconds": 1.0},
    "cmd": {"argv": None},
    "matmul": {"seconds": 10.0, "size": 4096, "dtype": "float16"},
}


def _workload_arg(kind: str, key: str, value: Any) -> Any:
    """One workload argument, checked and normalised."""
    valid = _WORKLOAD_DEFAULTS[kind]
    if key not in valid:
        raise UsageError(f"workload {kind}: unknown argument {key!r}; valid: {', '.join(valid)}")
    if key in ("work_s", "seconds"):
        return _bounded_seconds(value, f"workload {kind} {key}", allow_zero=False, most=MAX_WORK_S)
    if key in ("sigma", "kappa"):
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
            raise UsageError(f"workload sim {key}: expected a number within 0..1, got {value!r}")
        return float(value)
    if key == "size":
        if isinstance(value, bool) or not isinstance(value, int):
            raise UsageError(f"workload matmul size: expected a whole number, got {value!r}")
        if not 1 <= value <= MAX_MATMUL_SIZE:
            raise UsageError(f"workload matmul size: expected 1..{MAX_MATMUL_SIZE}, got {value}")
        return value
    if key == "dtype":
        if value not in DTYPES:
            raise UsageError(
                f"workload matmul dtype: use one of {', '.join(DTYPES)}; got {value!r}"
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
        raise UsageError(f"workload cmd argv: expected a non-empty list of strings, got {value!r}")
    if not value[0].strip() or any("\0" in a for a in value):
        raise UsageError("workload cmd argv: the command must be named and contain no NUL bytes")
    return list(value)


def _split_command(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError as exc:
        raise UsageError(f"workload cmd: cannot split {text!r}: {exc}") from None


@dataclass(frozen=True)
class Workload:
    """What each job runs. `args` is completed with the kind's defaults and checked:
    sim: work_s (1.0, in (0, 3600]), sigma, kappa (0..1 or None for the node's default);
    sleep: seconds (1.0); cmd: argv (required, non-empty); matmul: seconds (10), size
    (4096), dtype (float16, bfloat16 or float32)."""

    kind: str = "sim"
    args: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in WORKLOAD_KINDS:
            raise UsageError(f"unknown workload {self.kind!r}; valid: {', '.join(WORKLOAD_KINDS)}")
        if not isinstance(self.args, Mapping):
            raise UsageError(f"workload {self.kind}: arguments must be a mapping")
        args = dict(_WORKLOAD_DEFAULTS[self.kind])
        for key, value in self.args.items():
            args[key] = _workload_arg(self.kind, key, value)
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
            return ["sleep", _number_text(args["seconds"])]
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
)


@dataclass(frozen=True)
class RequestShape:
    """What one submitted job asks for, and how often (weight) among the scenario's shapes.
    Neither profile nor mem means whole cards, as `gpupoolctl submit` does."""

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

    def __post_init__(self) -> None:
        weight = self.weight
        if isinstance(weight, bool) or not isinstance(weight, int | float):
            raise UsageError(f"request weight: expected a number > 0, got {weight!r}")
        if not math.isfinite(weight) or weight <= 0:
            raise UsageError(f"request weight: expected a number > 0, got {weight!r}")
        object.__setattr__(self, "weight", float(weight))
        if isinstance(self.gpus, bool) or not isinstance(self.gpus, int) or self.gpus < 1:
            raise UsageError(f"request gpus: expected a whole number >= 1, got {self.gpus!r}")
        for name in ("profile", "mem", "vendor", "model", "bandwidth"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise UsageError(f"request {name}: expected text, got {value!r}")
        for name in ("same_node", "same_island", "preemptible"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"request {name}: expected true or false")
        priority = self.priority
        if isinstance(priority, bool) or not isinstance(priority, str | int):
            raise UsageError(f"request priority: use low, normal, high or 0..100; got {priority!r}")
        parse_priority(str(priority))
        object.__setattr__(self, "priority", str(priority).strip().lower())
        if self.mem is not None:
            parse_memory_mib(self.mem)
        # What the scheduler itself would refuse (profile and mem, unknown vendor, ...).
        self.job_request().validate()

    def job_fields(self) -> dict[str, Any]:
        """Keyword arguments for gpupoolctl.sched.JobRequest, named as it names them."""
        return {
            "gpus": self.gpus,
            "profile": self.profile if self.profile or self.mem else "gpu",
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


def _shape_from_dict(data: Mapping[str, Any]) -> RequestShape:
    unknown = [k for k in data if k not in SHAPE_FIELDS]
    if unknown:
        raise UsageError(
            f"request: unknown field {unknown[0]!r}{_did_you_mean(unknown[0], SHAPE_FIELDS)}; "
            f"valid: {', '.join(SHAPE_FIELDS)}"
        )
    return RequestShape(**dict(data))


# --- the scenario ------------------------------------------------------------------------

# The key in files (flags: with _ for -), the Scenario field, whether zero is allowed,
# the most it may be.
_TIMINGS: tuple[tuple[str, str, bool, float], ...] = (
    ("warmup", "warmup_s", True, MAX_PHASE_S),
    ("hold", "hold_s", False, MAX_PHASE_S),
    ("drain", "drain_s", True, MAX_PHASE_S),
    ("job-timeout", "job_timeout_s", False, MAX_PHASE_S),
    ("poll", "poll_s", False, MAX_POLL_S),
)


@dataclass(frozen=True)
class Scenario:
    """A ramp: levels, per-level timing, the workload, request shapes and thresholds.
    Closed levels are concurrent submitters; open levels are arrivals per second. Times
    are seconds. `stop_after_breaks` >= 1: the ramp stops once that many levels in a row
    broke a threshold (set it to the number of levels to never stop early)."""

    name: str
    model: str = "closed"
    levels: tuple[float, ...] = (1.0,)
    warmup_s: float = 5.0
    hold_s: float = 30.0
    drain_s: float = 60.0
    job_timeout_s: float = 600.0
    workload: Workload = field(default_factory=Workload)
    requests: tuple[RequestShape, ...] = (RequestShape(mem="10G"),)
    thresholds: tuple[Threshold, ...] = ()
    stop_after_breaks: int = 2
    seed: int = 0
    policy: str = "best-fit"
    poll_s: float = 0.2
    source: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip() or len(self.name) > 200:
            raise UsageError(
                f"scenario name: expected text of 1..200 characters, got {self.name!r}"
            )
        set_ = object.__setattr__
        set_(self, "levels", check_levels(tuple(self.levels), self.model))
        for _, attr, allow_zero, most in _TIMINGS:
            value = _bounded_seconds(getattr(self, attr), attr, allow_zero=allow_zero, most=most)
            set_(self, attr, value)
        if not isinstance(self.workload, Workload):
            raise UsageError(f"workload: expected a Workload, got {self.workload!r}")
        check_job_timeout(self.job_timeout_s, self.workload)
        requests = tuple(self.requests)
        if not requests or not all(isinstance(r, RequestShape) for r in requests):
            raise UsageError("requests: expected at least one request shape")
        set_(self, "requests", requests)
        thresholds = tuple(self.thresholds)
        if not all(isinstance(t, Threshold) for t in thresholds):
            raise UsageError("thresholds: expected parsed thresholds (see parse_threshold)")
        set_(self, "thresholds", thresholds)
        set_(self, "stop_after_breaks", check_stop_after_breaks(self.stop_after_breaks))
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise UsageError(f"seed: expected a whole number, got {self.seed!r}")
        if self.policy not in POLICIES:
            raise UsageError(f"unknown policy {self.policy!r}; valid: {', '.join(POLICIES)}")

    def to_dict(self) -> dict[str, Any]:
        """JSON-friendly; scenario_from_dict reads it back to an equal Scenario."""
        return {
            "name": self.name,
            "model": self.model,
            "levels": [int(v) if v.is_integer() else v for v in self.levels],
            "warmup_s": self.warmup_s,
            "hold_s": self.hold_s,
            "drain_s": self.drain_s,
            "job_timeout_s": self.job_timeout_s,
            "workload": self.workload.to_dict(),
            "requests": [shape.to_dict() for shape in self.requests],
            "thresholds": [t.expr for t in self.thresholds],
            "stop_after_breaks": self.stop_after_breaks,
            "seed": self.seed,
            "policy": self.policy,
            "poll_s": self.poll_s,
            "source": self.source,
        }


def check_job_timeout(job_timeout_s: float, workload: Workload) -> None:
    run_s = workload.run_s
    if run_s is not None and job_timeout_s <= run_s:
        raise UsageError(
            f"the job time-out ({_number_text(job_timeout_s)}s) must be longer than the "
            f"{workload.kind} workload's own run time ({_number_text(run_s)}s)"
        )


def check_stop_after_breaks(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LEVELS:
        raise UsageError(
            f"stop-after-breaks: expected a whole number 1..{MAX_LEVELS}, got {value!r}"
        )
    return value


SCENARIO_DICT_KEYS = tuple(Scenario.__dataclass_fields__)


def scenario_from_dict(data: Mapping[str, Any]) -> Scenario:
    """The inverse of Scenario.to_dict (a result file's 'scenario'); UsageError if malformed."""
    if not isinstance(data, Mapping):
        raise UsageError("scenario: expected a mapping")
    unknown = [k for k in data if k not in SCENARIO_DICT_KEYS]
    if unknown:
        raise UsageError(
            f"scenario: unknown field {unknown[0]!r}; valid: {', '.join(SCENARIO_DICT_KEYS)}"
        )
    values = dict(data)
    if "levels" in values:
        levels = values["levels"]
        if not isinstance(levels, list | tuple):
            raise UsageError(f"scenario levels: expected a list of numbers, got {levels!r}")
        values["levels"] = tuple(levels)
    if "workload" in values:
        workload = values["workload"]
        if not isinstance(workload, Mapping) or set(workload) - {"kind", "args"}:
            raise UsageError("scenario workload: expected {kind, args}")
        values["workload"] = Workload(str(workload.get("kind")), dict(workload.get("args") or {}))
    if "requests" in values:
        shapes = values["requests"]
        if not isinstance(shapes, list | tuple) or not all(isinstance(s, Mapping) for s in shapes):
            raise UsageError("scenario requests: expected a list of mappings")
        values["requests"] = tuple(_shape_from_dict(s) for s in shapes)
    if "thresholds" in values:
        exprs = values["thresholds"]
        if not isinstance(exprs, list | tuple) or not all(isinstance(t, str) for t in exprs):
            raise UsageError("scenario thresholds: expected a list of strings")
        values["thresholds"] = tuple(parse_threshold(t) for t in exprs)
    if "name" not in values:
        raise UsageError("scenario: missing field 'name'")
    return Scenario(**values)


# --- YAML files --------------------------------------------------------------------------

FILE_KEYS = (
    "name",
    "model",
    "levels",
    "warmup",
    "hold",
    "drain",
    "job-timeout",
    "poll",
    "workload",
    "requests",
    "thresholds",
    "stop-after-breaks",
    "seed",
    "policy",
)
# In files, request fields and workload arguments use dashes and short names.
FILE_SHAPE_KEYS = {name.replace("_", "-"): name for name in SHAPE_FIELDS}
FILE_WORKLOAD_KEYS: dict[str, dict[str, str]] = {
    "sim": {"work": "work_s", "sigma": "sigma", "kappa": "kappa"},
    "sleep": {"seconds": "seconds"},
    "cmd": {"argv": "argv"},
    "matmul": {"seconds": "seconds", "size": "size", "dtype": "dtype"},
}


class _NotScalarType:
    def __repr__(self) -> str:
        return "a list or mapping"


_NOT_SCALAR: Any = _NotScalarType()


class _Doc:
    """A composed YAML document whose nodes keep their lines (as partition.spec reads)."""

    def __init__(self, text: str, source: str) -> None:
        self.source = source
        self.loader = yaml.SafeLoader(text)

    def line(self, node: yaml.Node | None) -> int | None:
        return node.start_mark.line + 1 if node is not None else None

    def fail(self, node: yaml.Node | None, message: str) -> SourceError:
        return SourceError(self.source, self.line(node), message)

    @contextmanager
    def at(self, node: yaml.Node) -> Iterator[None]:
        """UsageErrors raised inside become SourceErrors at this node's line."""
        try:
            yield
        except UsageError as exc:
            raise self.fail(node, str(exc)) from None

    def root(self) -> yaml.Node | None:
        try:
            return self.loader.get_single_node()
        except yaml.MarkedYAMLError as exc:
            mark = exc.problem_mark or exc.context_mark
            line = mark.line + 1 if mark else None
            raise SourceError(self.source, line, f"not valid YAML: {exc.problem}") from None
        except yaml.YAMLError as exc:
            raise SourceError(self.source, None, f"not valid YAML: {exc}") from None

    def scalar(self, node: yaml.Node) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            return _NOT_SCALAR
        try:
            return self.loader.construct_object(node, deep=True)
        except yaml.YAMLError as exc:
            raise self.fail(node, f"bad value: {exc}") from None

    def mapping(
        self, node: yaml.Node, what: str, valid: Sequence[str]
    ) -> dict[str, tuple[yaml.Node, yaml.Node]]:
        """key -> (key node, value node); duplicate and unknown keys are refused."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping")
        out: dict[str, tuple[yaml.Node, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node)
            if not isinstance(key, str):
                raise self.fail(key_node, f"{what}: keys must be plain strings")
            if key in out:
                raise self.fail(key_node, f"{what}: duplicate key {key!r}")
            if key not in valid:
                raise self.fail(
                    key_node,
                    f"{what}: unknown key {key!r}{_did_you_mean(key, valid)}; "
                    f"valid: {', '.join(valid)}",
                )
            out[key] = (key_node, value_node)
        return out

    def items(self, node: yaml.Node) -> list[yaml.Node]:
        """A list's items; a single value counts as a list of one."""
        return list(node.value) if isinstance(node, yaml.SequenceNode) else [node]


def _did_you_mean(key: str, valid: Sequence[str]) -> str:
    close = difflib.get_close_matches(key, list(valid), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read a scenario file. Any problem, a missing file included, is a SourceError."""
    name = os.fspath(path)
    try:
        text = Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise SourceError(name, None, f"cannot read: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise SourceError(name, None, "not UTF-8 text") from None
    default_name = Path(name).stem or "scenario"
    return parse_scenario(text, name, default_name=default_name)


def parse_scenario(
    text: str, source: str = "<stdin>", *, default_name: str = "scenario"
) -> Scenario:
    """Parse a scenario from YAML text; errors name source:line and what was expected."""
    doc = _Doc(text, source)
    root = doc.root()
    if root is None:
        raise SourceError(
            source,
            None,
            f"empty file; expected a mapping with 'levels' and "
            f"optionally {', '.join(k for k in FILE_KEYS if k != 'levels')}",
        )
    top = doc.mapping(root, "the scenario", FILE_KEYS)
    if "levels" not in top:
        raise doc.fail(root, f"missing required key 'levels'; use {LEVEL_FORMS}")
    values: dict[str, Any] = {"source": source, "name": default_name}

    def text_of(key: str, expected: str) -> str:
        node = top[key][1]
        value = doc.scalar(node)
        if isinstance(value, int) and not isinstance(value, bool) and key == "name":
            value = str(value)
        if not isinstance(value, str) or not value.strip():
            raise doc.fail(node, f"{key}: expected {expected}, got {value!r}")
        return value.strip()

    if "name" in top:
        values["name"] = text_of("name", "text")
    if "model" in top:
        model = text_of("model", " or ".join(MODELS))
        if model not in MODELS:
            raise doc.fail(top["model"][1], f"model: expected {' or '.join(MODELS)}, got {model!r}")
        values["model"] = model
    values["levels"] = _file_levels(doc, *top["levels"], values.get("model", "closed"))
    for key, attr, zero, most in _TIMINGS:
        if key in top:
            node = top[key][1]
            with doc.at(node):
                values[attr] = _bounded_seconds(doc.scalar(node), key, allow_zero=zero, most=most)
    if "workload" in top:
        values["workload"] = _file_workload(doc, *top["workload"])
    if "job-timeout" in top or "workload" in top:
        blame = top["job-timeout"][1] if "job-timeout" in top else top["workload"][1]
        with doc.at(blame):
            check_job_timeout(
                values.get("job_timeout_s", Scenario.job_timeout_s),
                values.get("workload", Workload()),
            )
    if "requests" in top:
        values["requests"] = _file_requests(doc, top["requests"][1])
    if "thresholds" in top:
        values["thresholds"] = _file_thresholds(doc, top["thresholds"][1])
    if "stop-after-breaks" in top:
        node = top["stop-after-breaks"][1]
        with doc.at(node):
            values["stop_after_breaks"] = check_stop_after_breaks(doc.scalar(node))
    if "seed" in top:
        seed = doc.scalar(top["seed"][1])
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise doc.fail(top["seed"][1], f"seed: expected a whole number, got {seed!r}")
        values["seed"] = seed
    if "policy" in top:
        policy = doc.scalar(top["policy"][1])
        if policy not in POLICIES:
            raise doc.fail(
                top["policy"][1], f"policy: expected one of {', '.join(POLICIES)}, got {policy!r}"
            )
        values["policy"] = policy
    with doc.at(root):
        return Scenario(**values)


def _file_levels(doc: _Doc, owner: yaml.Node, node: yaml.Node, model: str) -> tuple[float, ...]:
    """Errors about the whole value name the `levels:` line (`owner`), errors about one
    number name that number's line."""
    expected = f"levels: use {LEVEL_FORMS}, a list of numbers, or {{from, to, factor|step}}"
    if isinstance(node, yaml.SequenceNode):
        numbers = []
        for item in node.value:
            value = doc.scalar(item)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise doc.fail(item, f"levels: expected a number > 0, got {value!r}")
            with doc.at(item):
                check_levels([value], model)
            numbers.append(float(value))
        with doc.at(owner):
            return check_levels(numbers, model)
    if isinstance(node, yaml.MappingNode):
        parts = doc.mapping(node, "levels", ("from", "to", "factor", "step"))
        numbers_of: dict[str, float] = {}
        for name, (_, value_node) in parts.items():
            value = doc.scalar(value_node)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise doc.fail(value_node, f"levels {name}: expected a number > 0, got {value!r}")
            numbers_of[name] = float(value)
        if "from" not in numbers_of or "to" not in numbers_of:
            raise doc.fail(owner, "levels: a range needs 'from' and 'to', and 'factor' or 'step'")
        if ("factor" in numbers_of) == ("step" in numbers_of):
            raise doc.fail(owner, "levels: give either 'factor' (geometric) or 'step' (linear)")
        with doc.at(owner):
            levels = level_range(
                numbers_of["from"],
                numbers_of["to"],
                factor=numbers_of.get("factor"),
                step=numbers_of.get("step"),
            )
            return check_levels(levels, model)
    value = doc.scalar(node)
    with doc.at(node):
        if isinstance(value, str):
            return check_levels(parse_levels(value), model)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return check_levels([float(value)], model)
    raise doc.fail(node, f"{expected}; got {value!r}")


def _file_workload(doc: _Doc, owner: yaml.Node, node: yaml.Node) -> Workload:
    """Errors about the whole mapping name the `workload:` line (`owner`)."""
    if isinstance(node, yaml.ScalarNode):
        kind = doc.scalar(node)
        with doc.at(node):
            return Workload(str(kind), {})
    valid_all = ("kind", *sorted({k for keys in FILE_WORKLOAD_KEYS.values() for k in keys}))
    parts = doc.mapping(node, "workload", valid_all)
    if "kind" not in parts:
        raise doc.fail(owner, f"workload: missing 'kind' ({', '.join(WORKLOAD_KINDS)})")
    kind_node = parts["kind"][1]
    kind = doc.scalar(kind_node)
    if kind not in WORKLOAD_KINDS:
        raise doc.fail(
            kind_node, f"workload kind: expected one of {', '.join(WORKLOAD_KINDS)}, got {kind!r}"
        )
    names = FILE_WORKLOAD_KEYS[kind]
    args: dict[str, Any] = {}
    for key, (key_node, value_node) in parts.items():
        if key == "kind":
            continue
        if key not in names:
            raise doc.fail(
                key_node, f"workload {kind}: unknown key {key!r}; valid: kind, {', '.join(names)}"
            )
        if key == "argv" and isinstance(value_node, yaml.SequenceNode):
            value: Any = [doc.scalar(item) for item in value_node.value]
        else:
            value = doc.scalar(value_node)
        with doc.at(value_node):
            args[names[key]] = _workload_arg(kind, names[key], value)
    with doc.at(owner):
        return Workload(kind, args)


def _file_requests(doc: _Doc, node: yaml.Node) -> tuple[RequestShape, ...]:
    items = doc.items(node)
    if not items:
        raise doc.fail(node, "requests: expected at least one request shape")
    shapes = []
    valid = tuple(FILE_SHAPE_KEYS)
    for item in items:
        parts = doc.mapping(item, "request", valid)
        fields: dict[str, Any] = {}
        for key, (_, value_node) in parts.items():
            value = doc.scalar(value_node)
            if value is _NOT_SCALAR:
                raise doc.fail(value_node, f"request {key}: expected a single value")
            if key in ("mem", "profile", "model") and isinstance(value, int | float):
                value = str(value)  # mem: 10 means 10G, as on the command line
            fields[FILE_SHAPE_KEYS[key]] = value
            with doc.at(value_node):  # each field alone, so that its own line is named
                RequestShape(**{FILE_SHAPE_KEYS[key]: value})
        with doc.at(item):
            shapes.append(RequestShape(**fields))
    return tuple(shapes)


def _file_thresholds(doc: _Doc, node: yaml.Node) -> tuple[Threshold, ...]:
    out = []
    for item in doc.items(node):
        text = doc.scalar(item)
        if not isinstance(text, str):
            raise doc.fail(
                item, f"thresholds: expected text such as 'queue_wait.p95 < 5s', got {text!r}"
            )
        out.append(parse_threshold(text, f"{doc.source}:{doc.line(item)}"))
    return tuple(out)


# --- flags -------------------------------------------------------------------------------

FLAG_KEYS = (
    "name",
    "model",
    "levels",
    "warmup",
    "hold",
    "drain",
    "job_timeout",
    "poll",
    "workload",
    "work",
    "sigma",
    "kappa",
    "seconds",
    "size",
    "dtype",
    "cmd",
    "profile",
    "mem",
    "gpus",
    "thresholds",
    "seed",
    "policy",
    "stop_after_breaks",
)
# flag -> {workload kind it applies to: the argument it sets}
_WORKLOAD_FLAGS: dict[str, dict[str, str]] = {
    "work": {"sim": "work_s", "sleep": "seconds", "matmul": "seconds"},  # run time alone
    "seconds": {"sleep": "seconds", "matmul": "seconds"},
    "sigma": {"sim": "sigma"},
    "kappa": {"sim": "kappa"},
    "size": {"matmul": "size"},
    "dtype": {"matmul": "dtype"},
    "cmd": {"cmd": "argv"},
}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def scenario_from_flags(base: Scenario | None = None, **overrides: Any) -> Scenario:
    """A scenario from command-line flags over an optional base (a scenario file).

    Overrides that are None are flags not given. Keys: name, model, levels (text, see
    parse_levels), warmup, hold, drain, job_timeout, poll (durations), workload (kind),
    work (how long one job runs alone: sim, sleep, matmul), seconds (the same, for sleep
    and matmul), sigma / kappa (sim), size / dtype (matmul), cmd (one
    shell-like string, split with shlex; implies workload cmd), profile / mem / gpus (any of
    them replaces the base's request shapes with one shape), thresholds (a list of
    expressions that REPLACES the base's thresholds, it does not add to them; an empty list
    keeps them), seed, policy, stop_after_breaks. Errors are UsageErrors naming the flag."""
    unknown = [k for k in overrides if k not in FLAG_KEYS]
    if unknown:
        raise TypeError(f"scenario_from_flags: unknown override {unknown[0]!r}")
    given = {k: v for k, v in overrides.items() if v is not None}
    values: dict[str, Any] = {}
    if base is not None:
        values = {name: getattr(base, name) for name in SCENARIO_DICT_KEYS}
    elif "levels" not in given:
        raise UsageError("no levels: give --levels (e.g. 1..64x2) or --scenario FILE")
    values.setdefault("name", "adhoc")

    if "name" in given:
        values["name"] = str(given["name"])
    if "model" in given:
        values["model"] = given["model"]
    if "levels" in given:
        with _flag_errors("--levels"):
            values["levels"] = parse_levels(str(given["levels"]))
    for key, attr, zero, most in _TIMINGS:
        flag = key.replace("-", "_")
        if flag in given:
            values[attr] = _bounded_seconds(given[flag], _flag(flag), allow_zero=zero, most=most)
    values["workload"] = _flag_workload(values.get("workload"), given)
    if any(k in given for k in ("profile", "mem", "gpus")):
        gpus = given.get("gpus", 1)
        if isinstance(gpus, str) and gpus.strip().isdigit():
            gpus = int(gpus)
        with _flag_errors("--profile/--mem/--gpus"):
            shape = RequestShape(gpus=gpus, profile=given.get("profile"), mem=given.get("mem"))
        values["requests"] = (shape,)
    if given.get("thresholds"):
        values["thresholds"] = tuple(parse_threshold(str(t)) for t in given["thresholds"])
    if "seed" in given:
        values["seed"] = given["seed"]
    if "policy" in given:
        values["policy"] = given["policy"]
    if "stop_after_breaks" in given:
        values["stop_after_breaks"] = given["stop_after_breaks"]
    return Scenario(**values)


@contextmanager
def _flag_errors(flag: str) -> Iterator[None]:
    """Prefixes a UsageError's message with the flag it came from."""
    try:
        yield
    except UsageError as exc:
        if str(exc).startswith("--"):
            raise
        raise UsageError(f"{flag}: {exc}") from None


def _flag_workload(base: Workload | None, given: Mapping[str, Any]) -> Workload:
    base = base or Workload()
    kind = given.get("workload") or ("cmd" if "cmd" in given else base.kind)
    if kind not in WORKLOAD_KINDS:
        raise UsageError(f"--workload: unknown kind {kind!r}; valid: {', '.join(WORKLOAD_KINDS)}")
    args: dict[str, Any] = dict(base.args) if kind == base.kind else {}
    for flag, arg_of in _WORKLOAD_FLAGS.items():
        if flag not in given:
            continue
        if kind not in arg_of:
            kinds = list(arg_of)
            raise UsageError(
                f"{_flag(flag)} applies to the {' and '.join(kinds)} workload, not {kind} "
                f"(add --workload {kinds[0]})"
            )
        with _flag_errors(_flag(flag)):
            args[arg_of[kind]] = _workload_arg(kind, arg_of[kind], given[flag])
    with _flag_errors("--workload"):
        return Workload(kind, args)
