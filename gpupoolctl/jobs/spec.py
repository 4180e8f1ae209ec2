"""What a user submits: the command, its environment, and the request for slices."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from gpupoolctl.errors import UsageError
from gpupoolctl.hw.shown import shown
from gpupoolctl.redact import looks_secret
from gpupoolctl.sched import JobRequest

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
DEFAULT_GRACE_S = 30.0
MAX_NAME = 64  # a name to know a job by, one cell of the `jobs` table; not a description
MAX_GRACE_S = 3600  # longer than an hour is a job that ignores SIGTERM, not a grace
MAX_RESTARTS = 100  # more is a job that fails every time, not bad luck
MAX_TIME_LIMIT_S = 366 * 86400.0
DEFAULT_SIGNAL_S = 60.0  # --signal USR1 without @S: 60 s before the limit, as Slurm's default
MAX_SIGNAL_S = 86400.0
# Signals a job can catch (KILL and STOP cannot be, so they warn of nothing). The agent's
# `signal` verb sends the same names.
SIGNALS = ("HUP", "INT", "QUIT", "USR1", "USR2", "ALRM", "TERM", "CONT", "URG", "WINCH")
TIME_FORMS = "90s, 30m, 4h, 1d, 1h30m, HH:MM:SS, D-HH:MM:SS or a number of seconds"
_CLOCK = re.compile(r"(?:(\d+)-)?(\d+):([0-5]\d):([0-5]\d)")


@dataclass(frozen=True)
class JobSpec:
    argv: list[str]
    request: JobRequest
    name: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    workdir: str | None = None
    requeue: bool = False  # when preempted, wait in the queue again
    grace_s: float = DEFAULT_GRACE_S  # SIGTERM -> SIGKILL when preempted or cancelled
    policy: str = "best-fit"
    max_restarts: int = 0  # runs again after a failure exit or a node loss, this many times
    checkpoint_dir: str | None = None  # the node's path (%j: the job id), every try the same
    time_limit_s: float | None = None  # wall-clock on the node: then SIGTERM, grace, SIGKILL
    signal: str | None = None  # sent signal_s before the time limit and before preemption
    signal_s: float | None = None

    def validate(self) -> None:
        if not self.argv or not all(isinstance(a, str) for a in self.argv):
            raise UsageError("no command given: put it after --, e.g. submit -- python run.py")
        if any("\0" in a for a in self.argv):
            raise UsageError("the command must not contain NUL bytes")
        if self.name is not None:
            check_job_name(self.name)
        for key, value in self.env.items():
            if not _ENV_NAME.fullmatch(key):
                raise UsageError(f"bad environment variable name {key!r}")
            if "\0" in value:
                raise UsageError(f"environment variable {key} must not contain NUL bytes")
            if looks_secret(key):
                # The ledger is read with less and grep: secrets never go in it.
                raise UsageError(
                    f"refusing --env {key}: secrets are never recorded in the ledger; set it "
                    "on the node (e.g. in a file the job reads)"
                )
        if not 0 <= self.grace_s <= MAX_GRACE_S:  # also refuses NaN and infinity
            raise UsageError(f"--grace must be between 0 and {MAX_GRACE_S} seconds")
        check_restarts(self.max_restarts)
        if self.checkpoint_dir is not None:
            check_checkpoint_dir(self.checkpoint_dir)
        if self.time_limit_s is not None:
            check_time_limit(self.time_limit_s)
        if self.signal is not None:
            name, before = check_signal(self.signal, self.signal_s)
            if self.time_limit_s is not None and before >= self.time_limit_s:
                raise UsageError(
                    f"--signal {name}@{before:g}: the signal must come before the time limit "
                    f"({duration_text(self.time_limit_s)}); give fewer seconds"
                )
        self.request.validate()

    def record(self) -> dict[str, Any]:
        """The fields every job record starts with."""
        return {
            "name": self.name,
            "argv": list(self.argv),
            "env": dict(self.env),
            "workdir": self.workdir,
            "request": self.request.to_dict(),
            "requeue": self.requeue,
            "grace_s": self.grace_s,
            "policy": self.policy,
            "max_restarts": self.max_restarts,
            "restarts": 0,
            "checkpoint_dir": self.checkpoint_dir,  # as given: submit expands %j
            "time_limit_s": self.time_limit_s,
            # Not "signal": a job record's "signal" is the one that ended its last try.
            "warn_signal": self.signal,
            "warn_signal_s": self.signal_s if self.signal is not None else None,
        }


def check_job_name(name: str) -> str:
    """A job's name: 1 to MAX_NAME printable characters (tables and logs show it on one
    line, so no newline, tab or other control character)."""
    rule = f"a job name is 1 to {MAX_NAME} printable characters (no control characters)"
    if not name.strip():
        raise UsageError(f"--name must not be empty: {rule}")
    if len(name) > MAX_NAME:
        raise UsageError(f"--name of {len(name)} characters: {rule}")
    try:
        name.encode("utf-8")  # a byte that is not UTF-8 on the command line: a lone surrogate
    except UnicodeEncodeError:
        raise UsageError(f"--name {shown(name)} is not valid UTF-8 text: {rule}") from None
    if not name.isprintable():
        raise UsageError(f"--name {shown(name)} has a control character: {rule}")
    return name


def parse_env(items: list[str]) -> dict[str, str]:
    """['A=1', 'B=x=y'] -> {'A': '1', 'B': 'x=y'}; values are data, never expanded."""
    env: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"bad --env {item!r}: use NAME=VALUE")
        env[key] = value
    return env


# -- restarts, checkpoints, time limits and signals --------------------------------------


def check_restarts(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_RESTARTS:
        raise UsageError(f"--max-restarts must be a whole number from 0 to {MAX_RESTARTS}")
    return value


def check_checkpoint_dir(template: str) -> None:
    """A path on the node; %j (the job id) and %% (a %) are the only % sequences."""
    if not isinstance(template, str) or not template.strip():
        raise UsageError("--checkpoint-dir must not be empty")
    if "\0" in template:
        raise UsageError("--checkpoint-dir must not contain NUL bytes")
    expand_checkpoint_dir(template, "j-0")


def expand_checkpoint_dir(template: str, job_id: str) -> str:
    """`/ckpt/%j` -> `/ckpt/j-12`; `%%` -> `%`; any other % sequence is a UsageError."""
    out: list[str] = []
    index = 0
    while index < len(template):
        char = template[index]
        if char != "%":
            out.append(char)
            index += 1
            continue
        code = template[index + 1 : index + 2]
        if code == "j":
            out.append(job_id)
        elif code == "%":
            out.append("%")
        else:
            shown = repr(f"%{code}") if code else "a % at the end"  # repr: one line
            raise UsageError(
                f"--checkpoint-dir {template!r}: unknown {shown}; use %j for the job id, %% for a %"
            )
        index += 2
    return "".join(out)


def duration_text(seconds: float) -> str:
    from gpupoolctl.policy.values import duration_text as text

    return text(seconds)


def parse_time_limit(text: str, what: str = "--time-limit") -> float:
    """'90s', '30m', '4h', '1d', '1h30m', 'HH:MM:SS', 'D-HH:MM:SS' or seconds -> seconds > 0.
    Anything else is a UsageError, one line."""
    from gpupoolctl.policy.values import duration_s

    if not isinstance(text, str) or len(text) > 64:
        raise UsageError(f"{what}: bad time {shown(text)}; expected {TIME_FORMS}")
    clock = _CLOCK.fullmatch(text.strip())
    if clock:
        days, hours, minutes, seconds = (int(g or 0) for g in clock.groups())
        value = float(days * 86400 + hours * 3600 + minutes * 60 + seconds)
    else:
        try:
            value = duration_s(text, what, most_s=math.inf)
        except UsageError:
            raise UsageError(f"{what}: bad time {shown(text)}; expected {TIME_FORMS}") from None
    check_time_limit(value, what)
    return value


def check_time_limit(value: float, what: str = "--time-limit") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{what}: expected a time ({TIME_FORMS})")
    if not 0 < value <= MAX_TIME_LIMIT_S:  # also refuses NaN and infinity
        raise UsageError(
            f"{what}: {value:g} s is out of range; give more than 0 and at most "
            f"{duration_text(MAX_TIME_LIMIT_S)}"
        )
    return float(value)


def parse_signal(text: str) -> tuple[str, float]:
    """'USR1@120', 'SIGUSR1@2m', 'TERM' (60 s) -> (name without SIG, seconds before)."""
    if not isinstance(text, str) or not text.strip() or len(text) > 64:
        raise UsageError(f"--signal: bad value {shown(text)}; expected e.g. USR1@120")
    name, at, when = text.strip().partition("@")
    if ":" in name:
        raise UsageError(
            f"--signal {text!r}: no R:/B: prefix here; the signal goes to the job's whole "
            "process group"
        )
    before = DEFAULT_SIGNAL_S
    if at:
        from gpupoolctl.policy.values import duration_s

        try:
            before = duration_s(when, "--signal", most_s=math.inf)
        except UsageError:
            raise UsageError(
                f"--signal {text!r}: bad time after @; give seconds, e.g. USR1@120"
            ) from None
    return check_signal(name, before)


def check_signal(name: str, before: float | None) -> tuple[str, float]:
    """The canonical name (USR1) and seconds before; UsageError for what cannot be caught."""
    upper = str(name).strip().upper()
    bare = upper[3:] if upper.startswith("SIG") else upper
    if bare in ("KILL", "STOP"):
        raise UsageError(
            f"--signal {name}: SIG{bare} cannot be caught, so it warns of nothing; use e.g. "
            "USR1 or TERM"
        )
    if bare not in SIGNALS:
        raise UsageError(f"--signal: unknown signal {shown(name)}; use one of {', '.join(SIGNALS)}")
    seconds = DEFAULT_SIGNAL_S if before is None else before
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise UsageError("--signal: the time after @ must be a number of seconds")
    if not 0 < seconds <= MAX_SIGNAL_S:
        raise UsageError(
            f"--signal {bare}@{seconds:g}: give more than 0 seconds before the limit, at most "
            f"{duration_text(MAX_SIGNAL_S)}"
        )
    return bare, float(seconds)
