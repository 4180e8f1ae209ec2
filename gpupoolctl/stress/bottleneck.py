"""The ramp's verdict on its bottleneck: which part of a job's time grew most from the
baseline level to the knee, how much of each job's time it is there, and a sentence saying
so from the measured numbers.

A job's time is split into parts that do not overlap (`time_split`): ledger, launch and
queue as the backend measured them, the run (compute, communication and the rest of the
run where the workload reported that split, else the run whole), and the reap after it
(from the job's end on its node to the backend noticing it). Whatever of the turnaround no
measured part covers is "unattributed". A part that was not measured is
absent, never zero, and the sentence says what is unknown rather than guess.

The baseline is the first measured level. The knee is Kneedle's level (diminishing
returns), else the measured level nearest the USL capacity peak, else the last measured
level; `knee_source` says which. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from gpupoolctl.stress.formats import format_duration, format_level, format_percent
from gpupoolctl.stress.model import LINK_CLASSES, Knees, LevelResult

__all__ = [
    "LEAVES",
    "LINK_WORDS",
    "UNATTRIBUTED",
    "Bottleneck",
    "find_bottleneck",
    "link_split",
    "occupancy",
    "time_split",
]

# The parts of a job's time, in display (and tie-break) order: a job's life, from submit
# to its end being noticed. "run" is the run whole, only where the workload did not split
# it; "run_other" is the run less compute and comm.
LEAVES = ("ledger", "launch", "queue", "compute", "comm", "run_other", "run", "reap")
UNATTRIBUTED = "unattributed"
_TOP = ("ledger", "launch", "queue")
_SPLIT = ("compute", "comm")
_AFTER = ("reap",)  # after the run
# The phases every backend may measure: missing ones are named as unknown. (Not "reap":
# results saved before it was measured have none, and their unattributed share says it.)
_EXPECTED = ("ledger", "launch", "queue", "run")

PART_WORDS = {
    "ledger": "time in the ledger (submit's transactions)",
    "launch": "launch",
    "queue": "queue wait (for a slice)",
    "compute": "compute",
    "comm": "communication",
    "run_other": "the run outside compute and communication",
    "run": "the job's own run time",
    "reap": "the wait until the job's end was noticed (the reaper's poll)",
    UNATTRIBUTED: "time in no measured phase",
}
SHORT_WORDS = {
    "ledger": "ledger",
    "launch": "launch",
    "queue": "queue",
    "compute": "compute",
    "comm": "comm",
    "run_other": "other run",
    "run": "run",
    "reap": "reap",
    UNATTRIBUTED: "unattributed",
}
LINK_WORDS = {
    "nvlink": "the GPU fabric inside an island",
    "xgmi": "the GPU fabric inside an island",
    "pcie": "PCIe inside a node",
    "nic": "the network between nodes",
    "wan": "the WAN between sites",
}
KNEE_SOURCES = {  # knee_source -> what the knee level is, for people
    "kneedle": "the diminishing-returns knee",
    "usl": "the level nearest the USL capacity peak",
    "last": "the last level: no knee found",
}
# Jobs running at once (Little's law) counts as still growing past this factor.
_GROWING = 1.2
# A link carrying at least this share of the communication is named alone.
_MOSTLY = 0.9


def _num(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def time_split(level: LevelResult, *, split: bool = True) -> dict[str, float]:
    """Mean seconds per job in each part of LEAVES that was measured at `level`: ledger,
    launch and queue as measured; the run split into compute, comm and run_other (the run
    less both, never below 0) where the workload reported compute or comm and `split`,
    else the run whole; reap as measured. Parts not measured are absent."""
    phases = {p: v for p, raw in level.phases.items() if (v := _num(raw)) is not None}
    out = {p: max(0.0, phases[p]) for p in _TOP if p in phases}
    parts = {p: max(0.0, phases[p]) for p in _SPLIT if p in phases}
    run = phases.get("run")
    if split and parts:
        out.update(parts)
        if run is not None:
            out["run_other"] = max(0.0, run - math.fsum(parts.values()))
    elif run is not None:
        out["run"] = max(0.0, run)
    elif parts:  # no run time, but its parts: what there is
        out.update(parts)
    out.update({p: max(0.0, phases[p]) for p in _AFTER if p in phases})
    return {p: out[p] for p in LEAVES if p in out}


def is_split(level: LevelResult) -> bool:
    """Whether the workload reported its run's split (compute or comm) at `level`."""
    return any(_num(level.phases.get(p)) is not None for p in _SPLIT)


def link_split(level: LevelResult) -> dict[str, float]:
    """The comm phase's mean seconds per job by link class (LINK_CLASSES order, then any
    others), scaled so that the classes sum to the comm phase where both were measured;
    {} when the level has no comm time by link."""
    links = {k: v for k, raw in level.comm_links.items() if (v := _num(raw)) and v > 0}
    if not links:
        return {}
    ordered = [k for k in LINK_CLASSES if k in links] + sorted(set(links) - set(LINK_CLASSES))
    comm = _num(level.phases.get("comm"))
    if comm is None:
        return {k: links[k] for k in ordered}
    # Relative to the largest first: a sum of huge (finite) values must not overflow to inf.
    largest = max(links.values())
    relative = {k: v / largest for k, v in links.items()}
    total = math.fsum(relative.values())
    return {k: comm * relative[k] / total for k in ordered}


def occupancy(level: LevelResult) -> float | None:
    """Jobs running at once on average, by Little's law: throughput x mean run time. None
    where the run time was not measured or the level measured nothing."""
    run = _num(level.phases.get("run"))
    if run is None or not level.measured:
        return None
    return level.throughput * run


def _shares(split: dict[str, float], level: LevelResult) -> dict[str, float]:
    """Each part's share of the job's turnaround (the mean), and the unattributed rest.
    Phase means and the turnaround come from slightly different samples, so the whole is
    never less than the parts' sum: the shares never add up to more than 1."""
    attributed = math.fsum(split.values())
    turnaround = _num(level.turnaround.mean)
    whole = max(attributed, turnaround or 0.0)
    if whole <= 0:
        return {p: 0.0 for p in split}
    shares = {p: v / whole for p, v in split.items()}
    if turnaround is not None and turnaround > attributed:
        shares[UNATTRIBUTED] = (turnaround - attributed) / whole
    return shares


@dataclass
class Bottleneck:
    """What grew most between the baseline level and the knee, and the sentence."""

    baseline_level: float
    knee_level: float
    knee_source: str  # "kneedle", "usl" or "last" (see KNEE_SOURCES)
    phase: str | None  # the LEAVES entry that grew most (absolute seconds), None if none grew
    growth: float | None  # its factor, knee over baseline (None: it was 0 at the baseline)
    share: float | None  # its share of each job's time at the knee
    link: str | None  # when phase is "comm": the link class that carried most of it
    shares_at_knee: dict[str, float]  # LEAVES (and "unattributed") -> share at the knee
    sentence: str
    seconds_at_baseline: dict[str, float] = field(default_factory=dict)  # LEAVES -> s per job
    seconds_at_knee: dict[str, float] = field(default_factory=dict)
    links_at_knee: dict[str, float] = field(default_factory=dict)  # link -> share of the job
    unknown: list[str] = field(default_factory=list)  # phases not measured at both levels

    @property
    def grew_s(self) -> float | None:
        """How many seconds per job the named phase grew by."""
        if self.phase is None:
            return None
        return self.seconds_at_knee[self.phase] - self.seconds_at_baseline[self.phase]

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["grew_s"] = self.grew_s
        return {k: _finite(v) for k, v in data.items()}

    def shares_text(self) -> str:
        """'queue 80%, run 15%, launch 3.1%, ...' at the knee, largest first."""
        ranked = sorted(self.shares_at_knee.items(), key=lambda kv: -kv[1])
        parts = []
        for phase, share in ranked:
            text = f"{SHORT_WORDS.get(phase, phase)} {format_percent(share)}"
            if phase == "comm" and self.links_at_knee:
                links = sorted(self.links_at_knee.items(), key=lambda kv: -kv[1])
                text += f" ({', '.join(f'{k} {format_percent(v)}' for k, v in links)})"
            parts.append(text)
        return ", ".join(parts)


def _finite(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    return value


# -- the knee ----------------------------------------------------------------------------


def _nearest(levels: Sequence[LevelResult], target: float) -> LevelResult:
    """The level nearest `target`: by ratio where every level is positive (levels are
    often geometric), else by difference; the lower one on a tie."""
    if target > 0 and all(lv.level > 0 for lv in levels):
        return min(levels, key=lambda lv: (abs(math.log(lv.level / target)), lv.level))
    return min(levels, key=lambda lv: (abs(lv.level - target), lv.level))


def _knee(measured: Sequence[LevelResult], knees: Knees | None) -> tuple[LevelResult, str]:
    if knees is not None:
        kneedle = _num(knees.kneedle.level)
        if kneedle is not None:
            return _nearest(measured, kneedle), "kneedle"
        peak = _num(knees.usl.level)
        if peak is not None:
            return _nearest(measured, peak), "usl"
    return measured[-1], "last"


# -- the verdict ---------------------------------------------------------------------------


def find_bottleneck(levels: Sequence[LevelResult], knees: Knees | None) -> Bottleneck | None:
    """The bottleneck of a ramp from its levels and knees; None when no level measured
    anything (there is nothing to say)."""
    measured = sorted((lv for lv in levels if lv.measured), key=lambda lv: lv.level)
    if not measured:
        return None
    base = measured[0]
    knee, source = _knee(measured, knees)
    split = is_split(base) and is_split(knee)
    at_base = time_split(base, split=split)
    at_knee = time_split(knee, split=split)
    shares = _shares(at_knee, knee)
    links = link_split(knee) if "comm" in at_knee else {}
    carried = math.fsum(links.values())
    # Each link's share of the comm share: never more than the comm share in all.
    link_shares = {k: shares["comm"] * v / carried for k, v in links.items()} if carried else {}
    unknown = [p for p in _EXPECTED if p not in base.phases or p not in knee.phases]
    unknown = [p for p in unknown if not (p == "run" and split)]

    both = [p for p in LEAVES if p in at_base and p in at_knee]
    phase: str | None = None
    if knee is not base and both:
        growth_of = {p: at_knee[p] - at_base[p] for p in both}
        best = max(both, key=lambda p: growth_of[p])  # the first in LEAVES order on a tie
        if growth_of[best] > 0:
            phase = best
    growth = None
    if phase is not None and at_base[phase] > 0:
        growth = at_knee[phase] / at_base[phase]
    link = _dominant_link(knee) if phase == "comm" else None

    result = Bottleneck(
        baseline_level=base.level,
        knee_level=knee.level,
        knee_source=source,
        phase=phase,
        growth=growth,
        share=shares.get(phase) if phase is not None else None,
        link=link,
        shares_at_knee=shares,
        sentence="",
        seconds_at_baseline=at_base,
        seconds_at_knee=at_knee,
        links_at_knee=link_shares,
        unknown=unknown,
    )
    result.sentence = _sentence(result, measured, base, knee)
    return result


def _dominant_link(level: LevelResult) -> str | None:
    """The link class with the most communication time at `level`, else the one that
    bounded the most jobs; None when the workload reported neither."""
    links = link_split(level)
    if links:
        return max(links, key=lambda k: links[k])  # LINK_CLASSES order on a tie
    bound = {k: n for k, n in level.bound_by.items() if isinstance(n, int) and n > 0}
    if bound:
        order = {k: i for i, k in enumerate(LINK_CLASSES)}
        return min(bound, key=lambda k: (-bound[k], order.get(k, len(order)), k))
    return None


# -- sentences -------------------------------------------------------------------------------


def _lv(level: float) -> str:
    return format_level(level)


def _factor(growth: float | None) -> str:
    if growth is None:
        return ""
    return f" ({growth:.0f}x)" if growth >= 9.95 else f" ({growth:.1f}x)"


def _sentence(
    b: Bottleneck,
    measured: Sequence[LevelResult],
    base: LevelResult,
    knee: LevelResult,
) -> str:
    if not b.seconds_at_knee:
        text = (
            f"no phase of a job's time was measured at level {_lv(b.knee_level)}: where the "
            "time went is unknown"
        )
        return text
    if knee is base:
        return _no_growth_sentence(b, measured) + _unknown_clause(b)
    if b.phase is None:
        text = (
            f"no measured phase grew from level {_lv(b.baseline_level)} to level "
            f"{_lv(b.knee_level)}: jobs took no longer there, so the knee is not in where a "
            f"job's time went (at level {_lv(b.knee_level)}: {b.shares_text()})"
        )
        return text + _unknown_clause(b)
    phase = b.phase
    if phase == "comm":
        text = _comm_sentence(b)
    else:
        text = _grew(b, PART_WORDS[phase])
        if phase == "queue":
            text += ": " + _queue_cause(measured, knee)
        elif phase == "launch":
            text += ": the launch path (SSH, agent start) is the bottleneck"
        elif phase == "ledger":
            text += (
                ": submits wait for each other on the ledger's lock (lock contention), so "
                "the scheduler's bookkeeping is the bottleneck, not the GPUs"
            )
        elif phase == "compute":
            text += _compute_tail(b)
        elif phase == "reap":
            text += (
                ": jobs had ended on their nodes and waited to be noticed, so the time is in "
                "noticing jobs' ends (the harness's or scheduler's reap pass), not in the GPUs"
            )
        elif phase == "run_other":
            text += (
                ": the part of the run that is neither compute nor communication (start-up, "
                "I/O, whatever else the workload does) is the bottleneck"
            )
        else:  # the run, whole
            text += (
                ": jobs run slower side by side on their nodes; whether that is compute or "
                "communication is unknown (the workload reports no split)"
            )
    unattributed = b.shares_at_knee.get(UNATTRIBUTED, 0.0)
    if b.share is not None and unattributed > b.share:
        text += (
            f"; {format_percent(unattributed)} of each job's time at level {_lv(b.knee_level)} "
            "is in no measured phase"
        )
    return text + _unknown_clause(b)


def _grew(b: Bottleneck, words: str) -> str:
    assert b.phase is not None
    before = b.seconds_at_baseline[b.phase]
    after = b.seconds_at_knee[b.phase]
    return (
        f"{words} grew from {format_duration(before)} to {format_duration(after)} per job"
        f"{_factor(b.growth)} and is {format_percent(b.share)} of each job's time at level "
        f"{_lv(b.knee_level)}"
    )


def _comm_sentence(b: Bottleneck) -> str:
    before = b.seconds_at_baseline["comm"]
    after = b.seconds_at_knee["comm"]
    over = _over(b)
    text = (
        f"from level {_lv(b.knee_level)}, {format_percent(b.share)} of each job's time is "
        f"communication{over}, up from {format_duration(before)} per job at level "
        f"{_lv(b.baseline_level)} to {format_duration(after)}{_factor(b.growth)}"
    )
    compute = b.shares_at_knee.get("compute")
    if compute is None:
        return text + "; compute was not measured: the interconnect is what grew"
    text += f"; compute is {format_percent(compute)}"
    if b.share is not None and b.share >= compute:
        return text + ": the bottleneck is the interconnect, not the GPUs"
    return text + (
        ": the interconnect is what grows with load, though compute is still the larger part"
    )


def _over(b: Bottleneck) -> str:
    if b.link is None:
        return " (over links the workload did not name)"
    words = f" over {LINK_WORDS.get(b.link, b.link)} ({b.link}"
    comm = b.share or 0.0
    carried = b.links_at_knee.get(b.link)
    if carried is not None and comm > 0 and carried / comm < _MOSTLY:
        return f" mostly over {LINK_WORDS.get(b.link, b.link)} ({b.link}, " + (
            f"{format_percent(carried / comm)} of it)"
        )
    if carried is None:  # named by the jobs it bounded, not by time
        return words + ", the link that bounded most jobs)"
    return words + ")"


def _compute_tail(b: Bottleneck) -> str:
    comm = b.shares_at_knee.get("comm")
    if comm is None:
        return (
            ": the GPUs are the bottleneck (jobs sharing them compute slower); communication "
            "was not measured"
        )
    return (
        f"; communication is {format_percent(comm)}: the bottleneck is the GPUs (jobs "
        "sharing them compute slower), not the interconnect"
    )


def _queue_cause(measured: Sequence[LevelResult], knee: LevelResult) -> str:
    """Capacity or scheduler, from the jobs running at once (Little's law): slices were
    full when more load ran no more jobs at once; free when a later level ran more."""
    here = occupancy(knee)
    if here is None:
        return (
            "jobs waited for a slice; whether the pool was out of slices or the scheduler "
            "was slow to place them is unknown (run time not measured)"
        )
    later = [(lv, occ) for lv in measured if lv.level > knee.level if (occ := occupancy(lv))]
    if later:
        top, most = max(later, key=lambda item: item[1])
        if most > _GROWING * here:
            return (
                f"yet more jobs ran at once at level {_lv(top.level)} ({most:.1f} against "
                f"{here:.1f} here, throughput x run time), so slices were still free: the "
                "wait is in placing jobs (the scheduler, or requests no free slice fits), "
                "not the pool's size"
            )
        return (
            f"about {here:.1f} jobs ran at once (throughput x run time) from level "
            f"{_lv(knee.level)} on and more load only waited: the pool is out of slices "
            "(capacity), not the scheduler"
        )
    before = [(lv, occ) for lv in measured if lv.level < knee.level if (occ := occupancy(lv))]
    if before and here <= _GROWING * before[-1][1]:
        return (
            f"about {here:.1f} jobs ran at once (throughput x run time) at level "
            f"{_lv(knee.level)}, no more than at level {_lv(before[-1][0].level)}: the pool "
            "is out of slices (capacity), not the scheduler"
        )
    return (
        "jobs waited for a slice; whether the pool was out of slices or the scheduler was "
        "slow to place them is unknown (no level past the knee to tell)"
    )


def _no_growth_sentence(b: Bottleneck, measured: Sequence[LevelResult]) -> str:
    if len(measured) == 1:
        lead = f"only level {_lv(b.knee_level)} was measured: nothing to compare it with"
    else:
        lead = f"the knee is at the baseline level {_lv(b.knee_level)}: nothing grew before it"
    return f"{lead} (at level {_lv(b.knee_level)}: {b.shares_text()})"


def _unknown_clause(b: Bottleneck) -> str:
    unknown = list(b.unknown)
    if not unknown:
        return ""
    return f"; not measured: {', '.join(unknown)}"
