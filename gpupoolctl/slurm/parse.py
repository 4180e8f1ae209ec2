"""What Slurm's clients print, read into SlurmJob records.

Four sources, one record: `squeue --json` (21.08 and later; 22.05 prints times as epoch
integers and exit codes as raw wait statuses, 23.02 and later as {"number": ..} objects and
{"return_code": .., "signal": ..}), `squeue --noheader --format` with a separator (older
clients, or where the JSON plugins are missing: no exit code there), `scontrol show job -o`
(one `Key=Value ...` line per job) and `sacct --parsable2 --noheader`.

Slurm keeps its times in whole seconds, so every time here is an epoch second (float).
Every parser raises SlurmParseError (a GpupoolError) on text it cannot read; never a traceback.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from gpupoolctl.errors import GpupoolError

TERMINAL_STATES = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "BOOT_FAIL",
     "DEADLINE", "PREEMPTED", "SPECIAL_EXIT", "REVOKED"}
)  # fmt: skip
# squeue's fixed format: job id, name, state, nodes, gres per node, submit, start, end,
# reason, user, name. '|' cannot occur in any of them but the name, which goes last.
SEPARATOR = "|"
FORMAT_FIELDS = ("%i", "%T", "%N", "%b", "%V", "%S", "%e", "%r", "%u", "%j")
SQUEUE_FORMAT = SEPARATOR.join(FORMAT_FIELDS)
SACCT_FIELDS = ("JobID", "JobName", "State", "NodeList", "Submit", "Start", "End", "ExitCode")

_SHOW_KEY = re.compile(r"(?:^| )([A-Za-z][A-Za-z0-9_:/]*)=")
_JOB_ID = re.compile(r"[0-9]+(?:_[0-9]+)?")
# What squeue's %i lists besides those: a pending array's tasks not yet split off
# (`3_[1-3]`, `3_[1-9%2]`) and a heterogeneous job's components (`123+0`).
_LISTED_ID = re.compile(r"[0-9]+(?:_[0-9]+|_\[[0-9,%\-]+\]|\+[0-9]+)?")
_UNSET = frozenset({"", "N/A", "None", "Unknown", "(null)", "0"})


class SlurmParseError(GpupoolError):
    """A Slurm client printed something this version of gpupoolctl cannot read."""


@dataclass(frozen=True)
class SlurmJob:
    job_id: str
    name: str | None = None
    state: str = "UNKNOWN"  # Slurm's own word: PENDING, RUNNING, COMPLETED, FAILED, ...
    nodes: str | None = None
    gres: str | None = None  # per node, as Slurm prints it: gres:gpu:test:1
    user: str | None = None
    submitted: float | None = None
    started: float | None = None
    ended: float | None = None
    exit_code: int | None = None  # the job's own exit code (None: not known or not ended)
    signal: int | None = None  # the signal that ended it, if one did
    reason: str | None = None  # why pending, or why it failed
    stdout_path: str | None = None  # where its output goes (scontrol's StdOut), on its node
    stderr_path: str | None = None  # the same file unless sbatch was given --error

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def ok(self) -> bool:
        return self.state == "COMPLETED"

    def shell_exit_code(self) -> int | None:
        """What a shell would report: the exit code, or 128 + the signal."""
        if self.signal:
            return 128 + self.signal
        return self.exit_code

    def describe_end(self) -> str:
        """'FAILED (NonZeroExitCode), exit code 3' for messages."""
        text = self.state
        if self.reason and self.reason != "None":
            text += f" ({self.reason})"
        if self.signal:
            text += f", signal {self.signal}"
        elif self.exit_code is not None:
            text += f", exit code {self.exit_code}"
        return text


def is_job_id(text: str) -> bool:
    """A plain job id (123) or an array task (123_4): never an option or a pattern."""
    return _JOB_ID.fullmatch(text) is not None


def is_listed_job_id(text: str) -> bool:
    """A job id as squeue lists it: is_job_id's, a pending array (3_[1-3]) or a het job
    component (123+0)."""
    return _LISTED_ID.fullmatch(text) is not None


def parse_sbatch_parsable(text: str) -> str:
    """`sbatch --parsable` prints `<id>` or `<id>;<cluster>`; the id."""
    line = text.strip().splitlines()[-1] if text.strip() else ""
    job_id = line.split(";")[0].strip()
    if not is_job_id(job_id):
        raise SlurmParseError(f"sbatch --parsable printed {text.strip()[:200]!r}, not a job id")
    return job_id


def decode_wait_status(status: int) -> tuple[int | None, int | None]:
    """A raw wait status (22.05's JSON `exit_code`) -> (exit code, signal)."""
    if status & 0x7F:
        return None, status & 0x7F
    return (status >> 8) & 0xFF, None


def _number(value: Any) -> float | None:
    """An epoch second or count: 22.05's plain integer or 23.02's {"set", "number"} object."""
    if isinstance(value, Mapping):
        if value.get("infinite") or value.get("set") is False:
            return None
        value = value.get("number")
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value > 0 else None


def _json_exit(value: Any) -> tuple[int | None, int | None]:
    if isinstance(value, Mapping):  # 23.02+: {"status": [..], "return_code": .., "signal": ..}
        code = _number(value.get("return_code"))
        signal = value.get("signal")
        sig = _number(signal.get("id") if isinstance(signal, Mapping) else signal)
        return (int(code) if code is not None else 0), (int(sig) if sig else None)
    if isinstance(value, bool) or not isinstance(value, int):
        return None, None
    return decode_wait_status(value)


def _json_state(value: Any) -> str:
    if isinstance(value, list):  # 23.02+: ["RUNNING", "COMPLETING"]
        value = value[0] if value else None
    return str(value) if value else "UNKNOWN"


def _text(value: Any) -> str | None:
    if isinstance(value, Mapping):  # not expected for text fields; be lenient
        return None
    text = str(value).strip() if value is not None else ""
    return text or None


def job_from_json(entry: Mapping[str, Any]) -> SlurmJob:
    """One element of `squeue --json`'s "jobs"."""
    job_id = entry.get("job_id")
    if isinstance(job_id, bool) or not isinstance(job_id, int | str) or not str(job_id):
        raise SlurmParseError(f"squeue --json: a job without a job_id: {str(entry)[:120]}")
    state = _json_state(entry.get("job_state"))
    finished = state in TERMINAL_STATES
    exit_code, signal = _json_exit(entry.get("exit_code")) if finished else (None, None)
    return SlurmJob(
        job_id=str(job_id),
        name=_text(entry.get("name")),
        state=state,
        nodes=_text(entry.get("nodes")),
        gres=_text(entry.get("tres_per_node")),
        user=_text(entry.get("user_name")),
        submitted=_number(entry.get("submit_time")),
        started=_number(entry.get("start_time")),
        # A running job's end_time is its time limit's end: only an ended job has one.
        ended=_number(entry.get("end_time")) if finished else None,
        exit_code=exit_code,
        signal=signal,
        reason=_text(entry.get("state_reason")),
    )


def parse_squeue_json(text: str) -> list[SlurmJob]:
    """`squeue --json` -> its jobs (22.05 ignores filter options: the caller filters)."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise SlurmParseError(f"squeue --json printed no JSON: {exc}") from None
    jobs = document.get("jobs") if isinstance(document, Mapping) else None
    if not isinstance(jobs, list):
        raise SlurmParseError("squeue --json printed no 'jobs' list")
    return [job_from_json(entry) for entry in jobs if isinstance(entry, Mapping)]


def parse_time(text: str | None) -> float | None:
    """Slurm's local `2026-11-30T12:50:43` (or N/A, Unknown, None) -> epoch seconds."""
    if text is None or text.strip() in _UNSET:
        return None
    try:
        return datetime.fromisoformat(text.strip()).timestamp()
    except ValueError:
        raise SlurmParseError(f"not a Slurm time: {text!r}") from None


def parse_exit_pair(text: str | None) -> tuple[int | None, int | None]:
    """`3:0` (exit code 3) or `0:15` (signal 15), as scontrol and sacct print them."""
    if not text or ":" not in text:
        return None, None
    code, _, signal = text.partition(":")
    try:
        exit_code, sig = int(code), int(signal)
    except ValueError:
        raise SlurmParseError(f"not an exit code:signal pair: {text!r}") from None
    return (None, sig) if sig else (exit_code, None)


def _gres_text(text: str | None) -> str | None:
    return None if text is None or text.strip() in _UNSET else text.strip()


def parse_squeue_format(text: str) -> list[SlurmJob]:
    """`squeue --noheader --format=SQUEUE_FORMAT` lines -> jobs (without exit codes)."""
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        # The name is last and may itself hold the separator: split the rest only.
        parts = line.split(SEPARATOR, len(FORMAT_FIELDS) - 1)
        if len(parts) != len(FORMAT_FIELDS) or not is_listed_job_id(parts[0].strip()):
            raise SlurmParseError(f"squeue line {number}: expected {SQUEUE_FORMAT}: {line!r}")
        job_id, state, nodes, gres, submit, start, end, reason, user, name = parts
        state = state.strip() or "UNKNOWN"
        jobs.append(
            SlurmJob(
                job_id=job_id.strip(),
                name=name or None,
                state=state,
                nodes=nodes.strip() or None,
                gres=_gres_text(gres),
                user=user.strip() or None,
                submitted=parse_time(submit),
                started=parse_time(start),
                ended=parse_time(end) if state in TERMINAL_STATES else None,
                reason=reason.strip() or None,
            )
        )
    return jobs


def parse_show_line(line: str) -> dict[str, str]:
    """One `scontrol show ... -o` record as a dict (values may hold spaces)."""
    keys = list(_SHOW_KEY.finditer(line))
    record: dict[str, str] = {}
    for index, match in enumerate(keys):
        end = keys[index + 1].start() if index + 1 < len(keys) else len(line)
        record[match.group(1)] = line[match.end() : end].strip()
    return record


def job_from_show(record: Mapping[str, str]) -> SlurmJob:
    """A `scontrol show job -o` record -> a job."""
    job_id = record.get("JobId", "")
    if not is_job_id(job_id):
        raise SlurmParseError(f"scontrol show job: no JobId in {str(dict(record))[:120]}")
    state = (record.get("JobState") or "UNKNOWN").split()[0]
    finished = state in TERMINAL_STATES
    exit_code, signal = parse_exit_pair(record.get("ExitCode")) if finished else (None, None)
    user = (record.get("UserId") or "").split("(")[0] or None
    nodes = record.get("NodeList")
    return SlurmJob(
        job_id=job_id,
        name=record.get("JobName") or None,
        state=state,
        nodes=None if nodes in (None, "(null)", "") else nodes,
        gres=_gres_text(record.get("TresPerNode")),
        user=user,
        submitted=parse_time(record.get("SubmitTime")),
        started=parse_time(record.get("StartTime")),
        ended=parse_time(record.get("EndTime")) if finished else None,
        exit_code=exit_code,
        signal=signal,
        reason=record.get("Reason") or None,
        stdout_path=_path(record.get("StdOut")),
        stderr_path=_path(record.get("StdErr")),
    )


def _path(value: str | None) -> str | None:
    return value if value and value not in _UNSET else None


def parse_show_jobs(text: str) -> list[SlurmJob]:
    """`scontrol show job -o` output: one job per non-empty line."""
    return [job_from_show(parse_show_line(line)) for line in text.splitlines() if line.strip()]


def parse_sacct(text: str) -> list[SlurmJob]:
    """`sacct --parsable2 --noheader --format=SACCT_FIELDS` -> the jobs (steps left out)."""
    jobs = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        parts = line.split("|")
        if len(parts) != len(SACCT_FIELDS):
            raise SlurmParseError(f"sacct line {number}: expected {len(SACCT_FIELDS)} fields")
        job_id, name, state, nodes, submit, start, end, exit_pair = parts
        if "." in job_id:  # a step (123.batch): its job's line says it all
            continue
        state = state.split()[0] if state.strip() else "UNKNOWN"  # "CANCELLED by 0"
        finished = state in TERMINAL_STATES
        exit_code, signal = parse_exit_pair(exit_pair) if finished else (None, None)
        jobs.append(
            SlurmJob(
                job_id=job_id,
                name=name or None,
                state=state,
                nodes=None if nodes in ("", "None assigned") else nodes,
                submitted=parse_time(submit),
                started=parse_time(start),
                ended=parse_time(end) if finished else None,
                exit_code=exit_code,
                signal=signal,
            )
        )
    return jobs


def gres_types(node_gres: str) -> dict[str, int]:
    """`gpu:h100:6,gpu:h100_1g.10gb:7(S:0)` -> {"h100": 6, "h100_1g.10gb": 7} (typed gpus)."""
    counts: dict[str, int] = {}
    for item in filter(None, node_gres.split(",")):
        parts = item.split("(")[0].strip().split(":")
        if parts[0] == "gpu" and len(parts) == 3 and parts[2].isdigit():
            counts[parts[1]] = counts.get(parts[1], 0) + int(parts[2])
    return counts
