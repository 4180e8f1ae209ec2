"""The `sim` workload: a job whose run time follows a contention model over its node's jobs.

Each running `sim` job registers in a per-node peers folder (`<jobs root>/.workload-peers/`,
one file per pid). Every tick it counts the live peers n (itself included) and advances

    progress += dt * rate / (1 + sigma*(n-1) + kappa*n*(n-1))

until progress reaches `work` seconds. A node running n of them at once therefore completes
X(n) = n*rate/work / (1 + sigma(n-1) + kappa n(n-1)) jobs per second: the Universal
Scalability Law, with its capacity peak at n* = sqrt((1-sigma)/kappa). The ramp harness can
then check that it finds the knee and the peak this model puts there.

`rate` is the card's speed relative to an H100 SXM (memory bandwidth / 3350 GB/s), times the
share of the card a MIG instance or AMD partition holds, read from the simulated node's state
file ($GPUPOOL_SIM_STATE, set by the agent on simulated nodes only). On a real node, or when a
lookup fails, rate is 1.0 and stderr says why, once.

With $GPUPOOL_CHECKPOINT_DIR (submit --checkpoint-dir) the progress is saved there
(`sim.json`, atomically) every `--checkpoint-every` seconds, on SIGUSR1/SIGUSR2 (a
--signal warning), when SIGTERM/SIGHUP/SIGINT stop it and at the end; a try that finds one
resumes from it, and its report says how much it resumed from (`resumed_from`, work seconds).
So the work a try did before its node was lost (up to the last save) is not done again.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import stat
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gpupoolctl.agent.workloads import (
    EXIT_OK,
    EXIT_UNFINISHED,
    EXIT_UNSUPPORTED,
    Stopped,
    raise_stopped,
)
from gpupoolctl.agent.workloads.checkpoint import CheckpointFile

REFERENCE_GBPS = 3350.0  # H100 SXM5 (datasheet): rate 1.0
MAX_WORK_S = 3600.0
HARD_STOP_FACTOR = 20.0  # give up after 20x the uncontended run time
DEFAULT_TICK_S = 0.05
MIN_SLEEP_S = 0.001
PEERS_FOLDER = ".workload-peers"
PRUNE_EVERY_S = 1.0  # dead peers' files are rare (SIGKILL): look for them once a second
DEFAULT_CHECKPOINT_S = 5.0  # with $GPUPOOL_CHECKPOINT_DIR: the progress is saved this often
CHECKPOINT_FILE = "sim.json"

# Contention defaults by interconnect. Plausible, not measured: GPUs on a shared switch fabric
# (NVLink/NVSwitch, xGMI) contend less for host paths than GPUs whose traffic all crosses
# PCIe switches and host bridges. The peaks they give, sqrt((1-sigma)/kappa), are ~22 jobs per
# node with a fabric and ~10 without: inside the range a ramp of 1..256 jobs covers.
FABRIC_COEFFICIENTS: dict[str, tuple[float, float]] = {
    "nvlink": (0.02, 0.002),
    "xgmi": (0.02, 0.002),
    "pcie": (0.05, 0.01),
    "unknown": (0.05, 0.01),  # a real node: assume the plainer machine
}

# Datasheet peak memory bandwidth (GB/s) by model name, for a state without bus width and
# clocks. Matched as case-insensitive substrings, first match wins: specific names first.
_BANDWIDTH_BY_NAME: tuple[tuple[str, float], ...] = (
    ("H200", 4800.0),
    ("H100 NVL", 3900.0),
    ("H100 PCIe", 2000.0),
    ("H100", 3350.0),
    ("A100 80GB PCIe", 1935.0),
    ("A100-SXM4-80GB", 2039.0),
    ("A100", 1555.0),
    ("B200", 8000.0),
    ("L40S", 864.0),
    ("L40", 864.0),
    ("A30", 933.0),
    ("L4", 300.0),
    ("MI355X", 8000.0),
    ("MI350X", 8000.0),
    ("MI325X", 6000.0),
    ("MI300X", 5300.0),
)


class LookupFailed(Exception):
    """The simulated card could not be found or described: the rate falls back to 1.0."""


@dataclass(frozen=True)
class Card:
    """What the job runs on, as far as the contention model needs it."""

    rate: float  # work seconds done per wall second when alone on the node
    fabric: str  # "nvlink" | "xgmi" | "pcie" | "unknown"
    devices: tuple[str, ...]  # the device names the rate was computed from
    note: str | None = None  # why rate is the 1.0 fallback, when it is


def slowdown(n: int, sigma: float, kappa: float) -> float:
    """The USL denominator: how much slower each of n concurrent jobs runs than a lone one."""
    return 1.0 + sigma * (n - 1) + kappa * n * (n - 1)


def usl_peak(sigma: float, kappa: float) -> float | None:
    """n* = sqrt((1-sigma)/kappa), where node throughput peaks; None without coherency cost."""
    if kappa <= 0 or sigma >= 1:
        return None
    return math.sqrt((1.0 - sigma) / kappa)


def coefficients(fabric: str) -> tuple[float, float]:
    return FABRIC_COEFFICIENTS.get(fabric, FABRIC_COEFFICIENTS["unknown"])


# -- the card: rate and fabric from a sim state ------------------------------------------------


def load_state(env: Mapping[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """(the sim state, None) or (None, why not). Read-only: saves are atomic renames."""
    path = env.get("GPUPOOL_SIM_STATE")
    if not path:
        return None, "no simulated card (GPUPOOL_SIM_STATE is not set: a real node)"
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        return None, f"cannot read the sim state {path}: {exc}"
    if not isinstance(data, dict):
        return None, f"{path} is not a sim state (expected a JSON object)"
    return data, None


def describe_card(state: Mapping[str, Any] | None, env: Mapping[str, str]) -> Card:
    """The job's card from a sim state and its environment (the visibility variables)."""
    if state is None:
        return Card(1.0, "unknown", (), "no simulated card")
    fabric = node_fabric(state)
    try:
        devices, rate = _rate(state, env)
    except LookupFailed as exc:
        return Card(1.0, fabric, (), str(exc))
    return Card(rate, fabric, devices)


def node_fabric(state: Mapping[str, Any]) -> str:
    """The node's interconnect: nvlink/xgmi when its GPUs share a switch fabric, else pcie."""
    nvidia = _gpus(state, "nvidia")
    if any(
        isinstance(link, dict) and link.get("active", True)
        for gpu in nvidia
        for link in gpu.get("nvlinks") or []
    ):
        return "nvlink"
    hives: dict[str, int] = {}
    for gpu in _gpus(state, "amd"):
        hive = str(gpu.get("hive") or "")
        if hive:
            hives[hive] = hives.get(hive, 0) + 1
    if any(count > 1 for count in hives.values()):
        return "xgmi"
    return "pcie"


def _gpus(state: Mapping[str, Any], vendor: str) -> list[dict[str, Any]]:
    section = state.get(vendor)
    gpus = section.get("gpus") if isinstance(section, dict) else None
    return [g for g in gpus if isinstance(g, dict)] if isinstance(gpus, list) else []


def _rate(state: Mapping[str, Any], env: Mapping[str, str]) -> tuple[tuple[str, ...], float]:
    cuda = env.get("CUDA_VISIBLE_DEVICES", "").strip()
    rocr = env.get("ROCR_VISIBLE_DEVICES", "").strip()
    hip = env.get("HIP_VISIBLE_DEVICES", "").strip()
    if cuda and _gpus(state, "nvidia"):
        slices = _nvidia_slices(_gpus(state, "nvidia"), cuda)
    elif (rocr or hip) and _gpus(state, "amd"):
        slices = _amd_slices(_gpus(state, "amd"), rocr, hip)
    else:
        raise LookupFailed("no simulated device is visible to this job")
    # A job on several devices spreads its work over them.
    rate = sum(_bandwidth(gpu) / REFERENCE_GBPS * share for _, gpu, share in slices)
    if not rate > 0:
        raise LookupFailed("the simulated card reports no memory bandwidth")
    return tuple(name for name, _, _ in slices), rate


def _nvidia_slices(gpus: list[dict[str, Any]], visible: str) -> list[tuple[str, Any, float]]:
    tokens = [t.strip() for t in visible.split(",") if t.strip()]
    migs = [t for t in tokens if t.upper().startswith("MIG-")]
    if migs:
        tokens = migs[:1]  # with MIG, CUDA uses the first MIG device listed, and only that
    out = []
    for token in tokens:
        out.append((token, *_nvidia_device(gpus, token)))
    return out


def _nvidia_device(gpus: list[dict[str, Any]], token: str) -> tuple[dict[str, Any], float]:
    wanted = token.lower()
    if token.isdigit() and int(token) < len(gpus):
        return gpus[int(token)], 1.0  # a CUDA ordinal
    for gpu in gpus:
        if str(gpu.get("uuid", "")).lower() == wanted:
            return gpu, 1.0
        for gi in (gpu.get("mig") or {}).get("gpu_instances") or []:
            for ci in gi.get("compute_instances") or []:
                if str(ci.get("uuid", "")).lower() == wanted:
                    # Memory bandwidth follows the GI's memory slices; its CIs share them.
                    return gpu, int(gi.get("size") or 0) / _memory_slots(gpu)
    raise LookupFailed(f"no simulated NVIDIA device {token}")


def _memory_slots(gpu: Mapping[str, Any]) -> int:
    try:
        from gpupoolctl.hw import catalog

        geometry = catalog.nvidia_model(str(gpu.get("catalog"))).mig
    except Exception as exc:  # any failure of the catalog means: cannot describe the slice
        raise LookupFailed(f"no MIG geometry for {gpu.get('name')!r}: {exc}") from None
    if geometry is None or geometry.memory_slots <= 0:
        raise LookupFailed(f"no MIG geometry for {gpu.get('name')!r}")
    return geometry.memory_slots


def _amd_slices(gpus: list[dict[str, Any]], rocr: str, hip: str) -> list[tuple[str, Any, float]]:
    # Logical GPUs in amdsmi's handle order (which ROCm follows): each card's partitions.
    logical = []
    for gpu in gpus:
        count = _amd_partitions(gpu)
        logical += [(gpu, p, count) for p in range(count)]
    chosen = list(range(len(logical)))
    try:
        if rocr:  # ROCr narrows the node to these logical GPUs...
            chosen = [chosen[int(t)] for t in rocr.split(",") if t.strip()]
        if hip:  # ...and HIP numbers what is left from 0
            chosen = [chosen[int(t)] for t in hip.split(",") if t.strip()]
    except (ValueError, IndexError):
        raise LookupFailed(
            f"cannot map ROCR_VISIBLE_DEVICES={rocr!r} HIP_VISIBLE_DEVICES={hip!r} to "
            "simulated AMD GPUs"
        ) from None
    out = []
    for position in chosen:
        gpu, partition, count = logical[position]
        out.append((f"amd{gpu.get('index')}.{partition}", gpu, 1.0 / count))
    return out


def _amd_partitions(gpu: Mapping[str, Any]) -> int:
    try:
        from gpupoolctl.hw import amd_modes

        return amd_modes.product(str(gpu.get("product"))).partitions(
            str(gpu.get("compute_partition"))
        )
    except Exception as exc:  # any failure of the catalog means: cannot describe the slice
        raise LookupFailed(f"no partition data for {gpu.get('market_name')!r}: {exc}") from None


def _bandwidth(gpu: Mapping[str, Any]) -> float:
    """Peak memory bandwidth in GB/s, as the agent's drivers would report it."""
    vram = gpu.get("vram")
    if isinstance(vram, dict) and _positive(vram.get("max_bandwidth_gbps")):
        return float(vram["max_bandwidth_gbps"])
    width = gpu.get("memory_bus_width")
    clock = (gpu.get("max_clocks") or {}).get("mem")
    if _positive(width) and _positive(clock):
        return float(width) / 8 * float(clock) * 2 / 1000  # double data rate, MB/s -> GB/s
    if "product" in gpu:
        with contextlib.suppress(Exception):
            from gpupoolctl.hw import amd_modes

            return amd_modes.product(str(gpu["product"])).bandwidth_gbps
    name = str(gpu.get("name") or gpu.get("market_name") or "").lower()
    for fragment, gbps in _BANDWIDTH_BY_NAME:
        if fragment.lower() in name:
            return gbps
    raise LookupFailed(f"unknown memory bandwidth for {name or 'an unnamed card'!r}")


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0


# -- peers: the sim jobs running on this node -------------------------------------------------


class UnsafeFolder(Exception):
    """The peers folder, or the jobs root above it, is not this user's alone."""


def _own_folder(path: Path) -> None:
    """Make `path` (0700), or take an existing one only when this user alone can change it:
    under Slurm the jobs root is in the node's shared temp folder by a name anyone can guess,
    and a folder another user made there could hold links that turn our writes onto our own
    files (or fake peers)."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
        raise UnsafeFolder(f"{path} is not this user's folder; remove it or use another")
    if info.st_mode & 0o022:
        raise UnsafeFolder(f"{path} is a folder others can change; remove it or chmod go-w")


class Peers:
    """One file per running `sim` job (named by pid, holding its start time) in one folder."""

    def __init__(self, folder: Path, pid: int | None = None) -> None:
        self.folder = folder
        self.pid = os.getpid() if pid is None else pid
        self._mine = folder / str(self.pid)

    @classmethod
    def for_job(cls, env: Mapping[str, str]) -> Peers:
        """The node's jobs root is the parent of the job's folder; run by hand, the user's."""
        job_dir = env.get("GPUPOOL_JOB_DIR")
        if job_dir:
            root = Path(job_dir).absolute().parent
        else:
            from gpupoolctl.agent.jobs.paths import jobs_root

            root = jobs_root("", None)
        return cls(root / PEERS_FOLDER)

    def check(self) -> None:
        """Create or vet the jobs root and the peers folder (UnsafeFolder if not ours)."""
        root = self.folder.parent
        root.parent.mkdir(parents=True, exist_ok=True)
        _own_folder(root)
        _own_folder(self.folder)

    def join(self) -> None:
        self.check()
        self.prune()
        from gpupoolctl.hw.proc import proc_start

        tmp = self.folder / f".{self.pid}.tmp"
        with open(tmp, "w", encoding="ascii") as handle:
            handle.write(proc_start(self.pid) or "")
        os.replace(tmp, self._mine)  # peers count whole files only

    def leave(self) -> None:
        with contextlib.suppress(OSError):
            os.unlink(self._mine)

    def count(self) -> int:
        """Live peers, this job included (dead ones count until the next prune)."""
        try:
            names = os.listdir(self.folder)
        except OSError:
            return 1
        return max(1, sum(1 for name in names if name.isdigit()))

    def prune(self) -> int:
        """Remove the files of ended jobs (killed ones could not remove their own)."""
        from gpupoolctl.hw.proc import alive

        removed = 0
        try:
            names = os.listdir(self.folder)
        except OSError:
            return 0
        for name in names:
            if not name.isdigit() or int(name) == self.pid:
                continue
            path = self.folder / name
            try:
                started = path.read_text(encoding="ascii").strip() or None
            except (OSError, UnicodeDecodeError):
                continue
            if not alive(int(name), started):
                with contextlib.suppress(OSError):
                    os.unlink(path)
                    removed += 1
        return removed


# -- the run ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    progress: float
    elapsed: float
    mean_n: float
    completed: bool


def contend(
    work: float,
    rate: float,
    sigma: float,
    kappa: float,
    tick: float,
    peers: Peers,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    *,
    progress: float = 0.0,
    save: Callable[[float], None] | None = None,
    save_every: float = DEFAULT_CHECKPOINT_S,
    save_now: Callable[[], bool] | None = None,
    seen: list[float] | None = None,
) -> Outcome:
    """Advance through `work` at the speed the live peer count allows, tick by tick,
    from `progress` (work seconds done by an earlier try). With `save`, it is called with
    the progress every `save_every` seconds, when `save_now()` says so (a signal asked for
    it), and at the end. `seen[0]` follows the progress tick by tick (for a signal's save)."""
    limit = HARD_STOP_FACTOR * max(work - progress, 0.0) / rate
    start = last = clock()
    next_prune = start + PRUNE_EVERY_S
    next_save = start + save_every
    weighted_n = 0.0
    n = peers.count()
    while progress < work and last - start < limit:
        speed = rate / slowdown(n, sigma, kappa)
        # End within a tick (or at the hard stop), not after it; but never sleep for
        # nothing, or the clock could stand still while the last sliver of work stays undone.
        left = min((work - progress) / speed, limit - (last - start))
        sleep(max(MIN_SLEEP_S, min(tick, left)))
        now = clock()
        dt, last = now - last, now
        progress += dt * speed  # the speed of the n counted when the interval began
        weighted_n += n * dt
        if seen is not None:
            seen[0] = min(progress, work)
        if now >= next_prune:
            peers.prune()
            next_prune = now + PRUNE_EVERY_S
        if save is not None and (now >= next_save or (save_now is not None and save_now())):
            save(min(progress, work))
            next_save = now + save_every
        n = peers.count()
    if save is not None:
        save(min(progress, work))
    elapsed = last - start
    mean_n = weighted_n / elapsed if elapsed > 0 else float(n)
    return Outcome(progress, elapsed, mean_n, progress >= work)


# -- checkpoints: the work done, kept where every try of the job looks -----------------------


class Checkpoint(CheckpointFile):
    """`sim.json`: {"workload": "sim", "work", "progress"}; the next try resumes from its
    progress when it asked for the same work."""

    name = CHECKPOINT_FILE

    def load(self, work: float) -> tuple[float, str | None]:
        """(work seconds done, None) or (0.0, why it starts from the beginning)."""
        saved, note = self.read()
        if saved is None:
            return 0.0, note
        progress = saved.get("progress") if isinstance(saved, dict) else None
        if not _positive(progress) and progress != 0:
            return 0.0, f"{self.path} holds no progress; starting over"
        if saved.get("work") != work:
            return 0.0, f"{self.path} is for --work {saved.get('work')}, not {work}; starting over"
        return min(float(progress), work), None

    def save(self, work: float, progress: float) -> None:
        self.write({"workload": "sim", "work": work, "progress": progress})


def run(
    work: float,
    sigma: float | None,
    kappa: float | None,
    tick: float,
    env: Mapping[str, str],
    out: TextIO,
    err: TextIO,
    checkpoint_every: float = DEFAULT_CHECKPOINT_S,
) -> int:
    state, why = load_state(env)
    card = describe_card(state, env)
    if card.note:
        err.write(f"sim: {why or card.note}; using rate 1.0\n")
    default_sigma, default_kappa = coefficients(card.fabric)
    sigma = default_sigma if sigma is None else sigma
    kappa = default_kappa if kappa is None else kappa
    peers = Peers.for_job(env)
    try:
        peers.check()
    except UnsafeFolder as exc:
        err.write(f"sim: {exc}\n")
        return EXIT_UNSUPPORTED
    checkpoint = Checkpoint.for_job(env)
    resumed = 0.0
    if checkpoint is not None:
        resumed, note = checkpoint.load(work)
        if note:
            err.write(f"sim: {note}\n")
    # The progress to save when a signal ends the run: the last the loop reached.
    reached = [resumed]
    asked: list[int] = []  # a warning signal (USR1/USR2: --signal) asks for a save now

    def save(progress: float) -> None:
        if checkpoint is not None:
            checkpoint.save(work, progress)

    def save_now() -> bool:
        if asked:
            asked.clear()
            return True
        return False

    handled = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)
    warnings = (signal.SIGUSR1, signal.SIGUSR2)
    previous: dict[int, Any] = {}
    try:
        # Installed inside the try: a signal arriving between two of these still ends here.
        for signum in warnings:
            previous[signum] = signal.signal(signum, lambda signum, _frame: asked.append(signum))
        for signum in handled:
            previous[signum] = signal.signal(signum, raise_stopped)
        try:
            peers.join()
            outcome = contend(
                work,
                card.rate,
                sigma,
                kappa,
                tick,
                peers,
                progress=resumed,
                save=save if checkpoint is not None else None,
                save_every=checkpoint_every,
                save_now=save_now,
                seen=reached,
            )
        finally:
            peers.leave()
    except Stopped as stopped:
        if checkpoint is not None:  # the last progress the loop saw is kept (not lost)
            with contextlib.suppress(OSError):
                checkpoint.save(work, reached[0])
        # Leave as the signal would have left us, so the agent records it as such; a second
        # signal meanwhile must not interrupt this with a traceback, so all are blocked first.
        signal.pthread_sigmask(signal.SIG_BLOCK, handled)
        signal.signal(stopped.signum, signal.SIG_DFL)
        os.kill(os.getpid(), stopped.signum)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {stopped.signum})
        raise
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    report = {
        "workload": "sim",
        "work": work,
        "rate": round(card.rate, 6),
        "sigma": sigma,
        "kappa": kappa,
        "fabric": card.fabric,
        "devices": list(card.devices),
        "mean_n": round(outcome.mean_n, 4),
        "elapsed": round(outcome.elapsed, 6),
        "uncontended": round(work / card.rate, 6),
        "completed": outcome.completed,
        "resumed_from": round(resumed, 6),  # work seconds an earlier try had done
        "checkpoint": str(checkpoint.path) if checkpoint is not None else None,
    }
    out.write(json.dumps(report, sort_keys=True) + "\n")
    if not outcome.completed:
        err.write(
            f"sim: hard stop after {outcome.elapsed:.1f} s ({HARD_STOP_FACTOR:g}x the "
            f"uncontended {work / card.rate:.1f} s) with {100 * outcome.progress / work:.0f}% "
            "of the work done\n"
        )
        return EXIT_UNFINISHED
    return EXIT_OK
