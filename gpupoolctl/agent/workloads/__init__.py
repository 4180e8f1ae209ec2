"""Built-in stress workloads: job payloads that exist on every node without installing anything.

They ship inside the agent's payload. A launch request whose argv[0] is exactly
`gpupoolctl-workload` runs `<workload> ...` through gpupoolctl.agent.workloads.__main__ with
the node's own python and the payload first on PYTHONPATH (see gpupoolctl.agent.jobs.launch).

    sleep   [--seconds S]            does nothing for S seconds: the scheduler's cost alone
    sim     [--work S] [--sigma S] [--kappa K] [--tick S] [--checkpoint-every S]
                                     run time follows a contention model over the jobs of
                                     its node (gpupoolctl.agent.workloads.sim); saves its
                                     progress to $GPUPOOL_CHECKPOINT_DIR and resumes from it
    matmul  [--seconds S] [--size N] [--dtype float16|bfloat16|float32]
                                     a GPU burn with PyTorch or CuPy, whichever imports
    train   [--params N] [--batch B] [--steps S] [--flops-per-sample F] [--time-scale X]
            [--checkpoint-every K] [--rendezvous-timeout S]
                                     data-parallel training steps over all of the job's GPUs
                                     and nodes: compute + ring all-reduce, modelled on the
                                     sim (gpupoolctl.agent.workloads.train), torch.distributed
                                     on real nodes; writes $GPUPOOL_JOB_DIR/report.json

Each prints one JSON line on stdout when it ends. Exit codes: 0 done, 1 the work did not
finish (a hard stop), 2 bad arguments, 3 this node cannot run the workload, 4 the job's
nodes did not meet (train: a peer never came, or left).

Stdlib only, and importable by the python 3.8 a node may have. The agent itself imports only
this module (for WORKLOAD_COMMAND); the workloads run in the job's own process.
"""

from __future__ import annotations

WORKLOAD_COMMAND = "gpupoolctl-workload"  # argv[0] of a launch request that asks for one
WORKLOADS = ("sleep", "sim", "matmul", "train")


# What runs a workload. Not `python -m`: that puts the job's working folder first on sys.path,
# so a json.py there (the user's own, or one planted in a shared folder) would be imported
# instead of the stdlib's. `-c` puts "" there instead, which this drops first.
RUN_WORKLOAD = (
    "import sys\n"
    "if sys.path and sys.path[0] == '': del sys.path[0]\n"
    "from gpupoolctl.agent.workloads.__main__ import main\n"
    "sys.exit(main())"
)


def workload_argv(argv: list[str], python: str) -> list[str]:
    """A built-in workload's argv as `python` runs it (`gpupoolctl-workload sim ...` ->
    `python -c RUN_WORKLOAD sim ...`); any other argv unchanged."""
    if argv and argv[0] == WORKLOAD_COMMAND:
        return [python, "-c", RUN_WORKLOAD, *argv[1:]]
    return list(argv)


class Stopped(Exception):
    """A workload asked to stop by a signal (SIGTERM, SIGHUP, SIGINT): it saves and ends."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def raise_stopped(signum: int, _frame: object) -> None:
    """A signal handler: turn the signal into Stopped where the workload is."""
    raise Stopped(signum)


EXIT_OK = 0
EXIT_UNFINISHED = 1
EXIT_USAGE = 2
EXIT_UNSUPPORTED = 3
EXIT_RENDEZVOUS = 4
