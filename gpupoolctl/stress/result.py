"""A stress run as a JSON file, and back.

The file is sorted, indented JSON with `"format": "gpupoolctl-stress/1"`. Reading checks
every key and type it relies on, so that a damaged or foreign file (a baseline from
another tool, a hand edit gone wrong) is a one-line harness error naming the file and the
key, never a traceback and never a "regression".
"""

from __future__ import annotations

import json
import math
import os
import socket
import subprocess
import time
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpupoolctl.errors import SourceError
from gpupoolctl.jsonsource import load_json_file
from gpupoolctl.stress.model import (
    FORMAT,
    LINK_CLASSES,
    PHASES,
    Distribution,
    KneePoint,
    Knees,
    LevelResult,
    RunResult,
    ThresholdCheck,
)

GIT_TIMEOUT_S = 2.0
FILE_MODE = 0o644  # a result holds no secrets; others may read it


# -- writing -------------------------------------------------------------------------------


def _finite(value: Any) -> Any:
    # Fit parameters may arrive as numpy scalars or arrays: plain Python values for JSON.
    if hasattr(value, "tolist") and not isinstance(value, str | bytes):
        value = value.tolist()
    # JSON has no NaN or infinity: write null rather than a file other tools reject.
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def to_dict(result: RunResult) -> dict[str, Any]:
    """The run as plain JSON values (non-finite floats become None)."""
    data: dict[str, Any] = _finite(asdict(result))
    return data


def dumps(result: RunResult) -> str:
    """The file's text: sorted keys, indent 2, a final newline."""
    return json.dumps(to_dict(result), sort_keys=True, indent=2, allow_nan=False) + "\n"


def save(result: RunResult, path: str | os.PathLike[str]) -> None:
    """Write the run to `path` atomically, so a reader (or a crash) never sees half a file."""
    from gpupoolctl.atomic import write_file

    write_file(Path(path), dumps(result), mode=FILE_MODE)


# -- reading -------------------------------------------------------------------------------


def load(path: str | os.PathLike[str]) -> RunResult:
    """Read a run saved by save(). Any problem -> SourceError (exit 1) naming the file and
    the line (not JSON) or the key (wrong shape)."""
    name = str(path)
    data = load_json_file(name, "stress result")
    return from_dict(data, name)


class _Reader:
    """Typed access to a JSON document, with the key path in every complaint."""

    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> SourceError:
        return SourceError(self.source, None, f"{where}: {message}")

    def expected(self, where: str, what: str, got: Any) -> SourceError:
        return self.fail(where, f"expected {what}, got {_show(got)}")

    def obj(self, value: Any, where: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise self.expected(where or "the file", "an object", value)
        return value

    def key(self, obj: dict[str, Any], key: str, where: str) -> Any:
        if key not in obj:
            raise self.fail(_join(where, key), "missing")
        return obj[key]

    def number(self, obj: dict[str, Any], key: str, where: str, *, null: bool = False) -> Any:
        value = self.key(obj, key, where)
        if value is None and null:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.expected(_join(where, key), "a number" + (" or null" if null else ""), value)
        if not math.isfinite(value):  # NaN compares false both ways: it would pass compare
            raise self.expected(_join(where, key), "a finite number", value)
        # Kept as read (4 stays 4, not 4.0) so that loading and saving again is byte-stable.
        return value

    def integer(self, obj: dict[str, Any], key: str, where: str) -> int:
        value = self.key(obj, key, where)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.expected(_join(where, key), "a whole number >= 0", value)
        return value

    def string(self, obj: dict[str, Any], key: str, where: str, *, null: bool = False) -> Any:
        value = self.key(obj, key, where)
        if value is None and null:
            return None
        if not isinstance(value, str):
            raise self.expected(_join(where, key), "a string" + (" or null" if null else ""), value)
        return value

    def boolean(self, obj: dict[str, Any], key: str, where: str) -> bool:
        value = self.key(obj, key, where)
        if not isinstance(value, bool):
            raise self.expected(_join(where, key), "true or false", value)
        return value

    def mapping(self, obj: dict[str, Any], key: str, where: str) -> dict[str, Any]:
        return self.obj(self.key(obj, key, where), _join(where, key))

    def array(self, obj: dict[str, Any], key: str, where: str) -> list[Any]:
        value = self.key(obj, key, where)
        if not isinstance(value, list):
            raise self.expected(_join(where, key), "a list", value)
        return value


def _join(where: str, key: str) -> str:
    return f"{where}.{key}" if where else key


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


def from_dict(data: Any, source: str) -> RunResult:
    """A RunResult from the JSON values of a result file; `source` names the file in
    errors. Keys it does not know are ignored (later versions may add some)."""
    r = _Reader(source)
    top = r.obj(data, "")
    if "format" not in top:
        raise r.fail("format", f"missing (not a gpupoolctl stress result; expected {FORMAT!r})")
    if top["format"] != FORMAT:
        raise r.expected("format", repr(FORMAT), top["format"])
    levels = [
        _level(r, r.obj(item, f"levels[{i}]"), f"levels[{i}]")
        for i, item in enumerate(r.array(top, "levels", ""))
    ]
    knees_data = r.key(top, "knees", "")
    return RunResult(
        scenario=r.mapping(top, "scenario", ""),
        levels=levels,
        knees=None if knees_data is None else _knees(r, r.obj(knees_data, "knees"), "knees"),
        backend=r.string(top, "backend", ""),
        transport=r.string(top, "transport", "", null=True),
        tool_version=r.string(top, "tool_version", ""),
        created=r.string(top, "created", ""),
        host=r.string(top, "host", ""),
        commit=r.string(top, "commit", "", null=True),
        stopped_early=r.string(top, "stopped_early", "", null=True)
        if "stopped_early" in top
        else None,
    )


def _level(r: _Reader, d: dict[str, Any], where: str) -> LevelResult:
    phases = r.mapping(d, "phases", where)
    for phase, value in phases.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise r.expected(f"{where}.phases.{phase}", "a number", value)
    errors = r.mapping(d, "errors", where)
    for message, count in errors.items():
        if isinstance(count, bool) or not isinstance(count, int):
            raise r.expected(f"{where}.errors[{message!r}]", "a whole number", count)
    checks = [
        _threshold(r, r.obj(item, f"{where}.thresholds[{i}]"), f"{where}.thresholds[{i}]")
        for i, item in enumerate(r.array(d, "thresholds", where))
    ]
    return LevelResult(
        level=r.number(d, "level", where),
        model=r.string(d, "model", where),
        warmup_s=r.number(d, "warmup_s", where),
        hold_s=r.number(d, "hold_s", where),
        window_s=r.number(d, "window_s", where),
        submitted=r.integer(d, "submitted", where),
        completed=r.integer(d, "completed", where),
        failed=r.integer(d, "failed", where),
        dropped=r.integer(d, "dropped", where),
        throughput=r.number(d, "throughput", where),
        failure_rate=r.number(d, "failure_rate", where),
        queue_wait=_distribution(r, r.mapping(d, "queue_wait", where), f"{where}.queue_wait"),
        turnaround=_distribution(r, r.mapping(d, "turnaround", where), f"{where}.turnaround"),
        phases=dict(phases),
        harness_s=r.number(d, "harness_s", where),
        errors=dict(errors),
        thresholds=checks,
        # Results saved before launch had its own figure have none: nothing measured.
        launch=_distribution(r, r.mapping(d, "launch", where), f"{where}.launch")
        if "launch" in d
        else Distribution.empty(),
        # Results saved before restarts and lost nodes were counted have none: 0, as then.
        **{key: r.integer(d, key, where) for key in _RECOVERY_COUNTS if key in d},
        # Results saved before jobs reported their own split have none: None and {}.
        work_throughput=r.number(d, "work_throughput", where, null=True)
        if "work_throughput" in d
        else None,
        comm_links=_seconds(r, d, "comm_links", where) if "comm_links" in d else {},
        bound_by=_counts(r, d, "bound_by", where) if "bound_by" in d else {},
    )


def _seconds(r: _Reader, d: dict[str, Any], key: str, where: str) -> dict[str, float]:
    values = r.mapping(d, key, where)
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise r.expected(f"{where}.{key}.{name}", "a number", value)
        if not math.isfinite(value):
            raise r.expected(f"{where}.{key}.{name}", "a finite number", value)
    return dict(values)


def _counts(r: _Reader, d: dict[str, Any], key: str, where: str) -> dict[str, int]:
    values = r.mapping(d, key, where)
    for name, value in values.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise r.expected(f"{where}.{key}.{name}", "a whole number >= 0", value)
    return dict(values)


_RECOVERY_COUNTS = ("restarts", "recovered", "lost_nodes")


def _distribution(r: _Reader, d: dict[str, Any], where: str) -> Distribution:
    stats = {stat: r.number(d, stat, where, null=True) for stat in Distribution.STATS}
    return Distribution(
        count=r.integer(d, "count", where),
        hist=r.string(d, "hist", where, null=True) if "hist" in d else None,
        **stats,
    )


def _threshold(r: _Reader, d: dict[str, Any], where: str) -> ThresholdCheck:
    return ThresholdCheck(
        expr=r.string(d, "expr", where),
        value=r.number(d, "value", where, null=True),
        ok=r.boolean(d, "ok", where),
    )


def _knees(r: _Reader, d: dict[str, Any], where: str) -> Knees:
    return Knees(
        kneedle=_knee(r, r.mapping(d, "kneedle", where), f"{where}.kneedle"),
        usl=_knee(r, r.mapping(d, "usl", where), f"{where}.usl"),
        latency=_knee(r, r.mapping(d, "latency", where), f"{where}.latency"),
    )


def _knee(r: _Reader, d: dict[str, Any], where: str) -> KneePoint:
    return KneePoint(
        method=r.string(d, "method", where),
        meaning=r.string(d, "meaning", where),
        level=r.number(d, "level", where, null=True),
        value=r.number(d, "value", where, null=True) if "value" in d else None,
        note=r.string(d, "note", where, null=True) if "note" in d else None,
        extra=r.mapping(d, "extra", where) if "extra" in d else {},
    )


# -- flat rows -----------------------------------------------------------------------------

_ROW_STATS = ("p50", "p90", "p95", "p99", "max")


def to_csv_rows(result: RunResult) -> list[dict[str, Any]]:
    """One flat row per level, every row with the same keys in the same order (for -o csv).
    Values not measured are None."""
    rows = []
    for lv in result.levels:
        row: dict[str, Any] = {
            "level": lv.level,
            "model": lv.model,
            "window_s": lv.window_s,
            "submitted": lv.submitted,
            "completed": lv.completed,
            "failed": lv.failed,
            "dropped": lv.dropped,
            "throughput": lv.throughput,
            "work_throughput": lv.work_throughput,
            "failure_rate": lv.failure_rate,
            "restarts": lv.restarts,
            "recovered": lv.recovered,
            "lost_nodes": lv.lost_nodes,
        }
        for name in ("queue_wait", "turnaround", "launch"):
            dist: Distribution = getattr(lv, name)
            row.update({f"{name}_{stat}": dist.get(stat) for stat in _ROW_STATS})
        row.update({f"phase_{phase}": lv.phases.get(phase) for phase in PHASES})
        row.update({f"comm_{link}": lv.comm_links.get(link) for link in LINK_CLASSES})
        row["harness_s"] = lv.harness_s
        row["thresholds_ok"] = lv.thresholds_ok
        rows.append(row)
    return rows


# -- where a run came from -----------------------------------------------------------------


def environment() -> dict[str, Any]:
    """tool_version, host, commit and created for a RunResult made here and now."""
    return {
        "tool_version": _tool_version(),
        "host": socket.gethostname(),
        "commit": source_commit(),
        "created": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def _tool_version() -> str:
    import gpupoolctl

    version = getattr(gpupoolctl, "__version__", None)
    if isinstance(version, str):
        return version
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version("gpupoolctl")
    except PackageNotFoundError:
        return "unknown"


def source_commit(timeout_s: float = GIT_TIMEOUT_S) -> str | None:
    """The commit of the git checkout gpupoolctl was imported from, "-dirty" when tracked
    files differ from it (untracked files, such as saved results, do not count, as with
    `git describe --dirty`). None when the package is not tracked in a checkout (an
    installed copy), git is missing or slow. Never waits longer than `timeout_s` in all."""
    import gpupoolctl

    package = Path(gpupoolctl.__file__).resolve().parent
    deadline = time.monotonic() + timeout_s
    # The package's own file must be tracked: a virtualenv inside some other project's
    # checkout would otherwise report that project's commit.
    if _git(package, deadline, "ls-files", "--error-unmatch", "__init__.py") is None:
        return None
    head = _git(package, deadline, "rev-parse", "--verify", "HEAD")
    if not head:
        return None
    status = _git(package, deadline, "status", "--porcelain", "--untracked-files=no")
    if status is None:
        return None
    return f"{head}-dirty" if status else head


def _git(cwd: Path, deadline: float, *args: str) -> str | None:
    left = deadline - time.monotonic()
    if left <= 0:
        return None
    # No optional locks: status must not contend with someone committing in the same tree.
    env = {**os.environ, "GIT_OPTIONAL_LOCKS": "0", "LC_ALL": "C"}
    try:
        done = subprocess.run(
            ["git", *args],
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=left,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip()
