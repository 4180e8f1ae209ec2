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
      - {weight: 1, profile: gpu, gpus: 2, same-island: true, max-restarts: 1}
    thresholds: ["queue_wait.p95 < 5s", "failure_rate < 1%"]
    stop-after-breaks: 2          # stop the ramp after this many levels in a row broke one
    seed: 0
    policy: best-fit

Durations are '500ms', '30s', '2m', '1h', '1h30m' or a number of seconds. Every error in a
file names file:line and what was expected. Threshold syntax: gpupoolctl.stress.thresholds.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from gpupoolctl.errors import SourceError, UsageError
from gpupoolctl.hw.shown import shown
from gpupoolctl.sched.policies import POLICIES
from gpupoolctl.stress.levels import (
    LEVEL_FORMS,
    MAX_LEVELS,
    MODELS,
    bounded_seconds,
    check_levels,
    format_levels,
    level_range,
    number_text,
    parse_levels,
    parse_seconds,
)
from gpupoolctl.stress.thresholds import Threshold, parse_threshold
from gpupoolctl.stress.workload import (
    SHAPE_FIELDS,
    WORKLOAD_KINDS,
    RequestShape,
    Workload,
    check_workload_arg,
    shape_from_dict,
)
from gpupoolctl.yamlsource import NOT_SCALAR, YamlSource

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

MAX_PHASE_S = 86400.0  # warm-up, hold, drain, job time-out: a day is already a soak test
MAX_POLL_S = 60.0


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
                f"scenario name: expected text of 1..200 characters, got {shown(self.name)}"
            )
        set_ = object.__setattr__
        set_(self, "levels", check_levels(tuple(self.levels), self.model))
        for _, attr, allow_zero, most in _TIMINGS:
            value = bounded_seconds(getattr(self, attr), attr, allow_zero=allow_zero, most=most)
            set_(self, attr, value)
        if not isinstance(self.workload, Workload):
            raise UsageError(f"workload: expected a Workload, got {shown(self.workload)}")
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
            raise UsageError(f"seed: expected a whole number, got {shown(self.seed)}")
        if self.policy not in POLICIES:
            raise UsageError(f"unknown policy {shown(self.policy)}; valid: {', '.join(POLICIES)}")

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
            f"the job time-out ({number_text(job_timeout_s)}s) must be longer than the "
            f"{workload.kind} workload's own run time ({number_text(run_s)}s)"
        )


def check_stop_after_breaks(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_LEVELS:
        raise UsageError(
            f"stop-after-breaks: expected a whole number 1..{MAX_LEVELS}, got {shown(value)}"
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
            f"scenario: unknown field {shown(unknown[0])}; valid: {', '.join(SCENARIO_DICT_KEYS)}"
        )
    values = dict(data)
    if "levels" in values:
        levels = values["levels"]
        if not isinstance(levels, list | tuple):
            raise UsageError(f"scenario levels: expected a list of numbers, got {shown(levels)}")
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
        values["requests"] = tuple(shape_from_dict(s) for s in shapes)
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
    "train": {
        "params": "params",
        "batch": "batch",
        "steps": "steps",
        "flops_per_sample": "flops_per_sample",
        "time_scale": "time_scale",
    },
}


def load_scenario(path: str | os.PathLike[str]) -> Scenario:
    """Read a scenario file. Any problem, a missing file included, is a SourceError."""
    from gpupoolctl.textfile import read_user_text

    name = os.fspath(path)
    # Bounded (a log or an image given by mistake is refused before it is read), UTF-8 with
    # the line of a bad byte, a byte-order mark dropped: as every other user file is read.
    text = read_user_text(name, "scenario file")
    default_name = Path(name).stem or "scenario"
    return parse_scenario(text, name, default_name=default_name)


def parse_scenario(
    text: str, source: str = "<stdin>", *, default_name: str = "scenario"
) -> Scenario:
    """Parse a scenario from YAML text; errors name source:line and what was expected."""
    doc = YamlSource(text, source)
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
            raise doc.fail(node, f"{key}: expected {expected}, got {shown(value)}")
        return value.strip()

    if "name" in top:
        values["name"] = text_of("name", "text")
    if "model" in top:
        model = text_of("model", " or ".join(MODELS))
        if model not in MODELS:
            raise doc.fail(
                top["model"][1], f"model: expected {' or '.join(MODELS)}, got {shown(model)}"
            )
        values["model"] = model
    values["levels"] = _file_levels(doc, *top["levels"], values.get("model", "closed"))
    for key, attr, zero, most in _TIMINGS:
        if key in top:
            node = top[key][1]
            with doc.at(node):
                values[attr] = bounded_seconds(doc.scalar(node), key, allow_zero=zero, most=most)
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
            raise doc.fail(top["seed"][1], f"seed: expected a whole number, got {shown(seed)}")
        values["seed"] = seed
    if "policy" in top:
        policy = doc.scalar(top["policy"][1])
        if policy not in POLICIES:
            raise doc.fail(
                top["policy"][1],
                f"policy: expected one of {', '.join(POLICIES)}, got {shown(policy)}",
            )
        values["policy"] = policy
    with doc.at(root):
        return Scenario(**values)


def _file_levels(
    doc: YamlSource, owner: yaml.Node, node: yaml.Node, model: str
) -> tuple[float, ...]:
    """Errors about the whole value name the `levels:` line (`owner`), errors about one
    number name that number's line."""
    expected = f"levels: use {LEVEL_FORMS}, a list of numbers, or {{from, to, factor|step}}"
    if isinstance(node, yaml.SequenceNode):
        numbers = []
        for item in node.value:
            value = doc.scalar(item)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise doc.fail(item, f"levels: expected a number > 0, got {shown(value)}")
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
                raise doc.fail(
                    value_node, f"levels {name}: expected a number > 0, got {shown(value)}"
                )
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
    raise doc.fail(node, f"{expected}; got {shown(value)}")


def _file_workload(doc: YamlSource, owner: yaml.Node, node: yaml.Node) -> Workload:
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
            kind_node,
            f"workload kind: expected one of {', '.join(WORKLOAD_KINDS)}, got {shown(kind)}",
        )
    names = FILE_WORKLOAD_KEYS[kind]
    args: dict[str, Any] = {}
    for key, (key_node, value_node) in parts.items():
        if key == "kind":
            continue
        if key not in names:
            raise doc.fail(
                key_node,
                f"workload {kind}: unknown key {shown(key)}; valid: kind, {', '.join(names)}",
            )
        if key == "argv" and isinstance(value_node, yaml.SequenceNode):
            value: Any = [doc.scalar(item) for item in value_node.value]
        else:
            value = doc.scalar(value_node)
        with doc.at(value_node):
            args[names[key]] = check_workload_arg(kind, names[key], value)
    with doc.at(owner):
        return Workload(kind, args)


def _file_requests(doc: YamlSource, node: yaml.Node) -> tuple[RequestShape, ...]:
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
            if value is NOT_SCALAR:
                raise doc.fail(value_node, f"request {key}: expected a single value")
            if key in ("mem", "profile", "model") and isinstance(value, int | float):
                value = str(value)  # mem: 10 means 10G, as on the command line
            fields[FILE_SHAPE_KEYS[key]] = value
            with doc.at(value_node):  # each field alone, so that its own line is named
                RequestShape(**{FILE_SHAPE_KEYS[key]: value})
        with doc.at(item):
            shapes.append(RequestShape(**fields))
    return tuple(shapes)


def _file_thresholds(doc: YamlSource, node: yaml.Node) -> tuple[Threshold, ...]:
    out = []
    for item in doc.items(node):
        text = doc.scalar(item)
        if not isinstance(text, str):
            raise doc.fail(
                item, f"thresholds: expected text such as 'queue_wait.p95 < 5s', got {shown(text)}"
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
    "max_restarts",
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
    work (how long one job runs alone: for sim, on a whole H100 SXM, a slice taking longer
    by its share of its card's bandwidth; for sleep and matmul, as given), seconds (the
    same, for sleep and matmul), sigma / kappa (sim), size / dtype (matmul), cmd (one
    shell-like string, split with shlex; implies workload cmd), profile / mem / gpus (any of
    them replaces the base's request shapes with one shape), max_restarts (every request
    shape's restart budget, after profile / mem / gpus), thresholds (a list of
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
            values[attr] = bounded_seconds(given[flag], _flag(flag), allow_zero=zero, most=most)
    values["workload"] = _flag_workload(values.get("workload"), given)
    if any(k in given for k in ("profile", "mem", "gpus")):
        gpus = given.get("gpus", 1)
        if isinstance(gpus, str) and gpus.strip().isdigit():
            gpus = int(gpus)
        with _flag_errors("--profile/--mem/--gpus"):
            shape = RequestShape(gpus=gpus, profile=given.get("profile"), mem=given.get("mem"))
        values["requests"] = (shape,)
    if "max_restarts" in given:
        with _flag_errors("--max-restarts"):
            values["requests"] = tuple(
                replace(shape, max_restarts=given["max_restarts"])
                for shape in values.get("requests", Scenario.requests)
            )
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
        raise UsageError(
            f"--workload: unknown kind {shown(kind)}; valid: {', '.join(WORKLOAD_KINDS)}"
        )
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
            args[arg_of[kind]] = check_workload_arg(kind, arg_of[kind], given[flag])
    with _flag_errors("--workload"):
        return Workload(kind, args)
