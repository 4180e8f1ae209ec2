"""The stress harness's shared vocabulary: what one submission records, what one level
sums up to, the knee findings and a whole run. Plain dataclasses; result.py turns them
into JSON and back.

Times are seconds. Clock readings (`submitted`, `started`, ...) are `time.time()` values
on the workstation, except `started`, which the node reports (the same clock on loopback;
on real fleets NTP keeps them within milliseconds). `ended` is when the harness learned
that the job ended, on the workstation; the job's end on its node is `started` plus the
"run" phase, so the "reap" phase (the wait between the two) compares the node's clock with
the workstation's, as an inferred queue wait does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

FORMAT = "gpupoolctl-stress/1"

# Where a job's turnaround went. Backends fill what they can measure; the rest stay absent
# (not zero: zero would claim a measurement).
# "reap" follows the run: from the job's end on its node to the backend learning of it.
# "compute" and "comm" are parts of "run": the job's own split of its run time, as the
# workload reported it (the train workload's report.json); they are not added to the others.
PHASES = ("ledger", "launch", "queue", "run", "reap", "compute", "comm")
PHASE_HELP = {
    "ledger": "time inside ledger transactions during submit (lock wait, replay, append, fsync)",
    "launch": "starting the job: from its slice being granted to its launch call returning "
    "(SSH or local exec, start on the node); for Slurm, the sbatch call",
    "queue": "waiting for a slice: from the job entering the queue to its placement (where the "
    "backend cannot see the placement: submit call to start on the node, less ledger and "
    "launch)",
    "run": "the job's own run time on its node",
    "reap": "noticing the job's end: from its end on its node to the backend learning of it "
    "(the reaper's poll over the nodes, or squeue's for Slurm); until then its slice is not "
    "freed",
    "compute": "part of run: the job's own compute time (forward and backward passes), as its "
    "workload reported it",
    "comm": "part of run: the job's own communication time (gradient all-reduce over NVLink/"
    "xGMI, PCIe, the NIC or the WAN), as its workload reported it; by link class in comm_links",
}

# Link classes a job's communication can go over, fastest first: inside an NVLink or xGMI
# island, over PCIe inside a node, over the node's NICs between nodes, over the WAN between
# sites.
LINK_CLASSES = ("nvlink", "xgmi", "pcie", "nic", "wan")


@dataclass
class Sample:
    """One submission, from the harness's point of view."""

    level: float  # the level's x: concurrency (closed model) or arrival rate per s (open)
    submitted: float  # just before the submit call
    accepted: float | None = None  # the submit call returned (the job is in the system)
    started: float | None = None  # the job started on its node
    ended: float | None = None  # the harness learned that the job ended
    ok: bool = False  # ended with exit code 0
    error: str | None = None  # why not ok (submit refused, non-zero exit, timed out, ...)
    job_id: str | None = None
    phases: dict[str, float] = field(default_factory=dict)  # PHASES -> seconds
    harness_s: float = 0.0  # the harness's own bookkeeping for this sample
    restarts: int = 0  # times the job was run again (failure exit, lost node) before it ended
    # What the job itself reported (the train workload's report.json), None/{} otherwise:
    # work units done (training samples), seconds of communication per LINK_CLASSES entry,
    # and the link class that bounded its all-reduce (the slowest link in its ring).
    work: float | None = None
    comm_links: dict[str, float] = field(default_factory=dict)
    bound_by: str | None = None

    @property
    def recovered(self) -> bool:
        """Ended ok after at least one restart: a failure the system recovered from."""
        return self.ok and self.restarts > 0

    @property
    def queue_wait(self) -> float | None:
        """Waiting for a slice: the "queue" phase where the backend measured it, else
        inferred from the node's start (see inferred_queue). Launch is not part of it."""
        measured = self.phases.get("queue")
        return measured if measured is not None else inferred_queue(self)

    @property
    def launch(self) -> float | None:
        """Starting the job, once it had its slice (the "launch" phase), where measured."""
        return self.phases.get("launch")

    @property
    def turnaround(self) -> float | None:
        """Submit call to the harness learning the job ended."""
        if self.ended is None:
            return None
        return max(0.0, self.ended - self.submitted)


def inferred_queue(sample: Sample) -> float | None:
    """Queue wait for a backend that cannot see the placement: submit call to start on the
    node, less the ledger and launch time measured in between (never below 0). None when
    the job never started."""
    if sample.started is None:
        return None
    measured = sample.phases.get("ledger", 0.0) + sample.phases.get("launch", 0.0)
    return max(0.0, sample.started - sample.submitted - measured)


@dataclass
class Distribution:
    """Percentiles of one latency (seconds) over a level's samples, with the histogram
    they came from (HdrHistogram's base64 'histoblob', microsecond units) so that runs can
    be merged or re-read with other tools."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p95: float | None
    p99: float | None
    max: float | None
    hist: str | None = None

    STATS = ("mean", "p50", "p90", "p95", "p99", "max")

    def get(self, stat: str) -> float | None:
        if stat not in self.STATS:
            raise KeyError(stat)
        value: float | None = getattr(self, stat)
        return value

    @classmethod
    def empty(cls) -> Distribution:
        """Nothing measured."""
        return cls(0, None, None, None, None, None, None)


@dataclass
class ThresholdCheck:
    """One threshold evaluated on one level: `expr` as written, the measured value."""

    expr: str
    value: float | None
    ok: bool


@dataclass
class LevelResult:
    level: float
    model: str  # "closed" or "open"
    warmup_s: float
    hold_s: float  # as asked
    window_s: float  # as measured: the steady window throughput is counted over
    submitted: int  # samples submitted in the steady window
    completed: int  # of those, ended ok
    failed: int  # of those, refused, non-zero exit or timed out
    dropped: int  # open model: arrivals the harness could not issue on time (saturation)
    throughput: float  # jobs ended ok per second of the steady window
    failure_rate: float  # failed / (completed + failed), 0 when none ended
    queue_wait: Distribution  # waiting for a slice (launch is not part of it)
    turnaround: Distribution
    phases: dict[str, float]  # PHASES -> mean seconds per job, only those measured
    harness_s: float  # mean harness bookkeeping per submission
    errors: dict[str, int] = field(default_factory=dict)  # most frequent errors -> count
    thresholds: list[ThresholdCheck] = field(default_factory=list)
    launch: Distribution = field(default_factory=Distribution.empty)  # starting each job
    # Failures and recovery, over the same samples as the counts: restarts used in all, and
    # jobs that ended ok after >= 1 restart. lost_nodes: node-lost events the backend saw
    # during the whole level (warm-up to the end of its drain), not only its steady window.
    restarts: int = 0
    recovered: int = 0
    lost_nodes: int = 0
    # Inside-the-job attribution, from the jobs' own reports. work_throughput: work units
    # (training samples) per second of the steady window, credited like throughput; None
    # when no job reported work. comm_links: mean seconds of communication per reporting job
    # per LINK_CLASSES entry (a reporting job without time on a class counts 0 there).
    # bound_by: how many jobs (submitted in the steady window) each link class bounded.
    work_throughput: float | None = None
    comm_links: dict[str, float] = field(default_factory=dict)
    bound_by: dict[str, int] = field(default_factory=dict)

    @property
    def thresholds_ok(self) -> bool:
        return all(t.ok for t in self.thresholds)

    @property
    def measured(self) -> bool:
        """Whether the level measured anything: a job submitted inside its steady window
        ended (ok or not), or an arrival was dropped. A hold shorter than one job measures
        nothing: its throughput is only a share of jobs submitted during warm-up, so the
        level is left out of knee fits and its thresholds are not judged."""
        return self.completed + self.failed + self.dropped > 0

    @property
    def succeeded(self) -> bool:
        """Whether at least one job submitted inside the steady window ended ok."""
        return self.completed > 0

    @property
    def measured_failure_rate(self) -> float | None:
        """failure_rate, or None where no job ended: 0 there would claim a measurement."""
        return self.failure_rate if self.completed + self.failed else None


@dataclass
class KneePoint:
    """A point found on a curve, or None with a note saying why there is none."""

    method: str  # "kneedle", "usl", "latency"
    meaning: str  # what the point means, for people
    level: float | None
    value: float | None = None  # the curve's y there (throughput, or latency in s)
    note: str | None = None  # why there is none, or how much to trust it
    extra: dict[str, Any] = field(default_factory=dict)  # fit parameters, errors, R^2, ...


@dataclass
class Knees:
    kneedle: KneePoint  # diminishing returns on throughput
    usl: KneePoint  # capacity peak N* from the USL fit (extra: sigma, kappa, lambda, ...)
    latency: KneePoint  # where queue wait leaves its low-load baseline


@dataclass
class RunResult:
    scenario: dict[str, Any]  # the scenario as run (Scenario.to_dict())
    levels: list[LevelResult]
    knees: Knees | None
    backend: str  # "pool" (gpupoolctl's own path), "noop", later "slurm"
    transport: str | None  # "local", "ssh", "mixed" or None when no nodes are involved
    tool_version: str
    created: str  # UTC ISO-8601
    host: str  # the workstation that ran it
    commit: str | None  # the gpupoolctl source commit, when run from a git checkout
    stopped_early: str | None = None  # why the ramp ended before its last level
    format: str = FORMAT

    @property
    def thresholds_ok(self) -> bool:
        return all(level.thresholds_ok for level in self.levels)


# A level's counts (whole numbers: a threshold on one takes no unit).
COUNT_METRICS: tuple[str, ...] = (
    "submitted",
    "completed",
    "failed",
    "dropped",
    "restarts",
    "recovered",
    "lost_nodes",
)
# Metric names that thresholds and `compare` may use, resolved per level by
# metrics.metric_value.
METRICS: tuple[str, ...] = (
    "throughput",
    "work_throughput",
    "failure_rate",
    *COUNT_METRICS,
    "harness",
    *(f"{d}.{s}" for d in ("queue_wait", "launch", "turnaround") for s in Distribution.STATS),
    *(f"phase.{p}" for p in PHASES),
)
