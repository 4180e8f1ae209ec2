"""Built-in stress workloads: job payloads that exist on every node without installing anything.

They ship inside the agent's payload. A launch request whose argv[0] is exactly
`gpupoolctl-workload` runs `python -m gpupoolctl.agent.workloads <workload> ...` with the node's
own python and the payload first on PYTHONPATH (see gpupoolctl.agent.jobs.launch).

    sleep   [--seconds S]            does nothing for S seconds: the scheduler's cost alone
    sim     [--work S] [--sigma S] [--kappa K] [--tick S]
                                     run time follows a contention model over the jobs of
                                     its node (gpupoolctl.agent.workloads.sim)
    matmul  [--seconds S] [--size N] [--dtype float16|bfloat16|float32]
                                     a GPU burn with PyTorch or CuPy, whichever imports

Each prints one JSON line on stdout when it ends. Exit codes: 0 done, 1 the work did not
finish (a hard stop), 2 bad arguments, 3 this node cannot run the workload.

Stdlib only, and importable by the python 3.8 a node may have. The agent itself imports only
this module (for WORKLOAD_COMMAND); the workloads run in the job's own process.
"""

from __future__ import annotations

WORKLOAD_COMMAND = "gpupoolctl-workload"  # argv[0] of a launch request that asks for one
WORKLOADS = ("sleep", "sim", "matmul")


def workload_argv(argv: list[str], python: str) -> list[str]:
    """A built-in workload's argv as `python` runs it (`gpupoolctl-workload sim ...` ->
    `python -m gpupoolctl.agent.workloads sim ...`); any other argv unchanged."""
    if argv and argv[0] == WORKLOAD_COMMAND:
        return [python, "-m", __name__, *argv[1:]]
    return list(argv)


EXIT_OK = 0
EXIT_UNFINISHED = 1
EXIT_USAGE = 2
EXIT_UNSUPPORTED = 3
