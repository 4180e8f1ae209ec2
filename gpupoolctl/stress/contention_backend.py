"""One simulated node in virtual time: the `sim` workload's contention model, with no
wall clock anywhere.

`ContentionBackend` runs every job through the very code the `sim` workload runs on a
node (gpupoolctl.agent.workloads.sim.contend: progress per tick at the speed the node's
live job count allows), but on a VirtualClock, with the node's peers counted in memory.
Under the ramp runner on the same clock, a ramp measures exactly what the contention model
and `launch_s` (a fixed cost of each submit, standing in for ledger and agent calls) put
there, whatever else the machine is doing: the harness's knee-finding can be checked
against the model's own peak, the same on every run.

    clock = VirtualClock()
    backend = ContentionBackend(clock, scenario.workload, launch_s=0.1)
    result = Ramp(scenario, backend, clock=clock).run()

The node has room for every job (no queue for slices): what bends the curve is contention.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from gpupoolctl.agent.workloads import sim
from gpupoolctl.errors import UsageError
from gpupoolctl.stress.backend import Finished, Ticket, Work
from gpupoolctl.stress.clock import VirtualClock, Waitable
from gpupoolctl.stress.workload import Workload

__all__ = ["ContentionBackend"]


class _Cancelled(Exception):
    pass


class _Peers:
    """sim.Peers in memory: the jobs running on the simulated node."""

    def __init__(self) -> None:
        self.running = 0

    def count(self) -> int:
        return max(1, self.running)

    def prune(self) -> int:
        return 0  # no job here dies without leaving


@dataclass
class _Job:
    done: Waitable
    cancel: Waitable
    finished: Finished | None = None
    thread: object = None
    phases: dict[str, float] = field(default_factory=dict)


class ContentionBackend:
    """The ramp's backend on a VirtualClock: each job runs the sim contention model."""

    name = "contention"
    transport = None

    def __init__(
        self,
        clock: VirtualClock,
        workload: Workload,
        *,
        launch_s: float = 0.0,
        rate: float = 1.0,
        fabric: str = "unknown",
        tick_s: float = sim.DEFAULT_TICK_S,
    ) -> None:
        if workload.kind == "sim":
            default_sigma, default_kappa = sim.coefficients(fabric)
            sigma = workload.args.get("sigma")
            kappa = workload.args.get("kappa")
            self.work_s = float(workload.args["work_s"])
            self.sigma = default_sigma if sigma is None else float(sigma)
            self.kappa = default_kappa if kappa is None else float(kappa)
        elif workload.kind == "sleep":  # no contention: every job takes its seconds
            self.work_s, self.sigma, self.kappa = float(workload.args["seconds"]), 0.0, 0.0
        else:
            raise UsageError(f"the contention backend runs sim or sleep, not {workload.kind}")
        if not (launch_s >= 0 and rate > 0 and tick_s > 0):
            raise UsageError("contention backend: launch_s >= 0, rate > 0 and tick_s > 0")
        self.clock = clock
        self.launch_s = float(launch_s)
        self.rate = float(rate)
        self.tick_s = float(tick_s)
        self.peers = _Peers()
        self._jobs: dict[str, _Job] = {}
        self._serial = itertools.count(1)
        self.most_running = 0

    # -- Backend ----------------------------------------------------------------------------

    def submit(self, work: Work) -> Ticket:
        if self.launch_s > 0:
            self.clock.sleep(self.launch_s)  # the submit path's own cost
        job_id = f"contention-{next(self._serial)}"
        job = _Job(done=self.clock.event(), cancel=self.clock.event())
        self._jobs[job_id] = job
        job.thread = self.clock.spawn(self._run, (job,), job_id)
        return Ticket(job_id=job_id, accepted=self.clock.now(), phases={"launch": self.launch_s})

    def wait(self, ticket: Ticket, timeout: float) -> Finished | None:
        job = self._jobs[ticket.job_id]
        job.done.wait(timeout)
        return job.finished

    def abandon(self, ticket: Ticket) -> None:
        self._jobs[ticket.job_id].cancel.set()

    def warnings(self) -> list[str]:
        return []

    def events_between(self, start: float, end: float) -> list[dict[str, object]]:
        return []  # a model: no nodes to lose

    def close(self) -> None:
        for job in self._jobs.values():
            job.cancel.set()
        for job in self._jobs.values():
            job.thread.join(1.0)  # type: ignore[attr-defined]

    # -- one job ----------------------------------------------------------------------------

    def _run(self, job: _Job) -> None:
        started = self.clock.now()

        def sleep(seconds: float) -> None:
            if job.cancel.wait(seconds):
                raise _Cancelled()

        self.peers.running += 1
        self.most_running = max(self.most_running, self.peers.running)
        try:
            outcome = sim.contend(
                self.work_s,
                self.rate,
                self.sigma,
                self.kappa,
                self.tick_s,
                self.peers,  # type: ignore[arg-type]
                clock=self.clock.now,
                sleep=sleep,
            )
        except _Cancelled:
            return
        finally:
            self.peers.running -= 1
        job.finished = Finished(
            ok=outcome.completed,
            started=started,
            ended=self.clock.now(),
            error=None if outcome.completed else "sim: hard stop",
            run_s=outcome.elapsed,
        )
        job.done.set()
