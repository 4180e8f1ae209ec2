"""Pool and stress metrics in Prometheus' text exposition format, for node_exporter's
textfile collector (or any scraper of a .prom file).

Pool metrics come from the ledger alone (no node is contacted): slices by host, kind,
profile and state, their memory, allocations held, jobs by state, queue entries, the
ledger's record count and problems, and when it was read. Stress metrics from saved runs
are stress/prometheus.py's, written with this module's Family.

Names follow Prometheus' conventions: a `gpupoolctl_` prefix, base units (seconds, bytes,
ratios), `_total` only on counters. A value that was not measured is left out, never
written as 0 (0 would claim a measurement).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from gpupoolctl.errors import UsageError

if TYPE_CHECKING:
    from gpupoolctl.ledger.state import State

TEXTFILE_NAME = "gpupoolctl.prom"
TEXTFILE_MODE = 0o644  # node_exporter runs as its own user and must read it
METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = ("counter", "gauge", "untyped")
MIB = 1024 * 1024
# Jobs the ledger keeps as state; ended jobs are history (see ledger.state.JOB_TERMINAL).
ACTIVE_JOB_STATES = ("queued", "pending", "running")

Labels = tuple[tuple[str, str], ...]


@dataclass
class Family:
    """One metric: its name, type, help, and samples (label pairs -> value)."""

    name: str
    type: str
    help: str
    samples: dict[Labels, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not METRIC_NAME.fullmatch(self.name) or self.type not in TYPES:
            raise ValueError(f"bad metric {self.name!r} of type {self.type!r}")
        if self.type == "counter" and not self.name.endswith("_total"):
            raise ValueError(f"counter {self.name!r} must end in _total")

    def add(self, value: float, **labels: str) -> None:
        for name in labels:
            if not LABEL_NAME.fullmatch(name) or name.startswith("__"):
                raise ValueError(f"bad label name {name!r} on {self.name}")
        key = tuple(sorted(labels.items()))
        if key in self.samples:
            raise ValueError(f"{self.name}{dict(key)} given twice")
        self.samples[key] = value


# -- rendering -----------------------------------------------------------------------------


def render(families: Iterable[Family]) -> str:
    """The exposition text: per family `# HELP`, `# TYPE`, then its samples. Families
    without samples are left out; the text ends with a newline."""
    lines: list[str] = []
    seen: set[str] = set()
    for family in families:
        if not family.samples:
            continue
        if family.name in seen:
            raise ValueError(f"metric {family.name} rendered twice")
        seen.add(family.name)
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for labels, value in family.samples.items():
            lines.append(f"{family.name}{_label_text(labels)} {format_value(value)}")
    return "\n".join(lines) + "\n" if lines else ""


def format_value(value: float) -> str:
    if isinstance(value, bool):
        return str(int(value))
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def escape_label_value(text: str) -> str:
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _label_text(labels: Labels) -> str:
    if not labels:
        return ""
    return "{" + ",".join(f'{k}="{escape_label_value(v)}"' for k, v in labels) + "}"


# -- pool metrics from the ledger ----------------------------------------------------------


def pool_families(state: State, now: str, read_at: float) -> list[Family]:
    """The ledger's view of the pool at `now` (its own time text), read at `read_at`
    (seconds since the epoch)."""
    slices = Family(
        "gpupoolctl_slices",
        "gauge",
        "Slices the ledger knows, by host, kind (gpu, mig, partition, vf), profile and "
        "state (free, held, or lost, drained, blocked, re-cutting).",
    )
    memory = Family(
        "gpupoolctl_slice_memory_bytes",
        "gauge",
        "GPU memory of those slices, by host, kind, profile and state.",
    )
    from gpupoolctl.sched.unavailable import Finder

    finder = Finder(state)
    counts: Counter[tuple[str, str, str, str]] = Counter()
    mem: Counter[tuple[str, str, str, str]] = Counter()
    for slice_id, entry in state.slices.items():
        key = (
            str(entry.get("host") or ""),
            str(entry.get("kind") or ""),
            str(entry.get("profile") or entry.get("kind") or ""),  # whole cards: "gpu"
            finder.state_of(slice_id, now),
        )
        counts[key] += 1
        mem[key] += int(entry.get("memory_mib") or 0) * MIB
    for key in sorted(counts):
        host, kind, profile, status = key
        slices.add(counts[key], host=host, kind=kind, profile=profile, state=status)
        memory.add(mem[key], host=host, kind=kind, profile=profile, state=status)

    jobs = Family(
        "gpupoolctl_jobs",
        "gauge",
        "Jobs the ledger holds, by state (queued, pending, running; ended jobs are history).",
    )
    by_state = Counter(str(job.get("state")) for job in state.jobs.values())
    for name in ACTIVE_JOB_STATES:
        jobs.add(by_state.get(name, 0), state=name)

    reshapes = Family(
        "gpupoolctl_reshapes_total",
        "counter",
        "Elastic re-cuts of idle cards that ended, by outcome (done, failed); from the ledger.",
    )
    for outcome in ("done", "failed"):
        reshapes.add(state.reshape_totals.get(outcome, 0), outcome=outcome)

    return [
        slices,
        memory,
        reshapes,
        _single(
            "gpupoolctl_reshapes_in_flight",
            "Cards reserved for a re-cut now (nothing is placed on them meanwhile).",
            len(state.reshapes),
        ),
        _single("gpupoolctl_allocations_held", "Allocations holding slices now.",
                len(state.active(now))),
        jobs,
        _single("gpupoolctl_queue_entries", "Requests waiting in the queue.", len(state.queue)),
        _single(
            "gpupoolctl_ledger_records_total",
            "Records written to the ledger (its last sequence number).",
            state.seq,
            kind="counter",
        ),
        _single(
            "gpupoolctl_ledger_problems",
            "Problems replay found in the ledger (see `gpupoolctl ledger verify`).",
            len(state.problems),
        ),
        _single(
            "gpupoolctl_ledger_read_timestamp_seconds",
            "When this export read the ledger, in seconds since the epoch.",
            read_at,
        ),
    ]  # fmt: skip


def usage_families(state: State, now: str) -> list[Family]:
    """What was held, by team and user, from the ledger's running totals (State.usage_totals:
    every hold that ended, plus the open ones so far): counters, since holds only add up.
    Cheap at any history length (no archive is read); `gpupoolctl usage` sums any period."""
    gpu = Family(
        "gpupoolctl_usage_gpu_hours_total",
        "counter",
        "GPU-hours held, by team and user: hours times each slice's share of its card "
        "(memory over the card's for MIG; 1 for a whole card); see `gpupoolctl usage`.",
    )
    gib = Family(
        "gpupoolctl_usage_gib_hours_total",
        "counter",
        "GiB-hours held, by team and user: hours times each slice's memory in GiB.",
    )
    for (team, user), (gib_s, gpu_s) in sorted(state.usage_counters(now).items()):
        gpu.add(gpu_s / 3600, team=team, user=user)
        gib.add(gib_s / 3600, team=team, user=user)
    return [gpu, gib]


def _single(name: str, help_text: str, value: float, kind: str = "gauge") -> Family:
    family = Family(name, kind, help_text)
    family.add(value)
    return family


# -- the textfile --------------------------------------------------------------------------


def write_textfile(folder: Path, text: str, name: str = TEXTFILE_NAME) -> Path:
    """Write `folder/name` atomically: node_exporter may read the folder at any moment, so
    the text goes to a temp file there (not ending in .prom, which the collector ignores),
    is fsynced, then renamed over the old file; the folder is fsynced after."""
    if not folder.is_dir():
        raise UsageError(
            f"--textfile {folder}: not a folder (give node_exporter's textfile folder)"
        )
    from gpupoolctl.atomic import write_file

    target = folder / name
    write_file(target, text, mode=TEXTFILE_MODE)
    return target
