"""`python -m gpupoolctl.agent.workloads <workload> [options]`: parse, then run one workload.

Bad arguments and unknown workloads give one line on stderr and exit 2; `--help` lists the
workloads. See gpupoolctl.agent.workloads for what each one does.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from typing import NoReturn

from gpupoolctl.agent.workloads import EXIT_OK, EXIT_USAGE, WORKLOAD_COMMAND


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage block), as the harness reads stderr."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {message} (see --help)\n")
        raise SystemExit(EXIT_USAGE)


def _number(low: float, high: float, low_open: bool = True) -> Callable[[str], float]:
    shown = f"{'(' if low_open else '['}{low:g}, {high:g}]"

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        above_low = value > low if low_open else value >= low
        if not (math.isfinite(value) and above_low and value <= high):
            raise argparse.ArgumentTypeError(f"{text} is not in {shown}")
        return value

    return parse


def _integer(low: int, high: int) -> Callable[[str], int]:
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text} is not in [{low}, {high}]")
        return value

    return parse


def build_parser() -> argparse.ArgumentParser:
    from gpupoolctl.agent.workloads import matmul, sim, train

    parser = _Parser(
        prog=WORKLOAD_COMMAND,
        description="Built-in stress workloads; each prints one JSON line when it ends.",
    )
    workloads = parser.add_subparsers(dest="workload", metavar="WORKLOAD", title="workloads")

    sleep = workloads.add_parser("sleep", help="do nothing for a while (the scheduler's cost)")
    sleep.add_argument("--seconds", type=_number(0, sim.MAX_WORK_S, low_open=False), default=1.0)

    contention = workloads.add_parser(
        "sim", help="run time follows a contention model (USL) over the node's sim jobs"
    )
    contention.add_argument(
        "--work",
        type=_number(0, sim.MAX_WORK_S),
        default=1.0,
        help="seconds of work on an H100 SXM alone on its node (default 1)",
    )
    contention.add_argument(
        "--sigma", type=_number(0, 1, low_open=False), help="contention (default: by fabric)"
    )
    contention.add_argument(
        "--kappa", type=_number(0, 1, low_open=False), help="coherency (default: by fabric)"
    )
    contention.add_argument(
        "--tick", type=_number(0, 5), default=sim.DEFAULT_TICK_S, help="seconds between counts"
    )
    contention.add_argument(
        "--checkpoint-every",
        type=_number(0, sim.MAX_WORK_S),
        default=sim.DEFAULT_CHECKPOINT_S,
        help="seconds between saves of the progress to $GPUPOOL_CHECKPOINT_DIR "
        f"(default {sim.DEFAULT_CHECKPOINT_S:g})",
    )

    burn = workloads.add_parser("matmul", help="GPU burn: N x N matmuls with PyTorch or CuPy")
    burn.add_argument("--seconds", type=_number(0, matmul.MAX_SECONDS), default=10.0)
    burn.add_argument("--size", type=_integer(matmul.MIN_SIZE, matmul.MAX_SIZE), default=4096)
    burn.add_argument("--dtype", choices=matmul.DTYPES, default="float16")

    steps = workloads.add_parser(
        "train", help="data-parallel training steps: compute + ring all-reduce of the gradients"
    )
    steps.add_argument(
        "--params",
        type=_number(0, train.MAX_PARAMS),
        default=train.DEFAULT_PARAMS,
        help=f"model parameters (default {train.DEFAULT_PARAMS:g}); bf16 gradients, 2 bytes each",
    )
    steps.add_argument(
        "--batch",
        type=_integer(1, train.MAX_BATCH),
        default=train.DEFAULT_BATCH,
        help=f"samples per GPU per step (default {train.DEFAULT_BATCH})",
    )
    steps.add_argument("--steps", type=_integer(1, train.MAX_STEPS), default=train.DEFAULT_STEPS)
    steps.add_argument(
        "--flops-per-sample",
        type=_number(0, 1e21),
        help=f"training FLOPs per sample (default 6 * params * {train.DEFAULT_TOKENS} tokens)",
    )
    steps.add_argument(
        "--time-scale",
        type=_number(0, train.MAX_TIME_SCALE),
        default=1.0,
        help="sim: wall seconds per modelled second (default 1)",
    )
    steps.add_argument(
        "--checkpoint-every",
        type=_integer(1, train.MAX_STEPS),
        default=train.DEFAULT_CHECKPOINT_STEPS,
        help="steps between saves to $GPUPOOL_CHECKPOINT_DIR "
        f"(default {train.DEFAULT_CHECKPOINT_STEPS})",
    )
    steps.add_argument(
        "--rendezvous-timeout",
        type=_number(0, 3600),
        default=train.DEFAULT_RENDEZVOUS_S,
        help=f"seconds to wait for the job's other nodes (default {train.DEFAULT_RENDEZVOUS_S:g})",
    )
    return parser


def _sleep(seconds: float) -> int:
    start = time.monotonic()
    time.sleep(seconds)
    elapsed = time.monotonic() - start
    report = {"workload": "sleep", "seconds": seconds, "elapsed": round(elapsed, 6)}
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.workload == "sleep":
        return _sleep(args.seconds)
    if args.workload == "sim":
        from gpupoolctl.agent.workloads import sim

        return sim.run(
            args.work,
            args.sigma,
            args.kappa,
            args.tick,
            os.environ,
            sys.stdout,
            sys.stderr,
            checkpoint_every=args.checkpoint_every,
        )
    if args.workload == "matmul":
        from gpupoolctl.agent.workloads import matmul

        return matmul.run(args.seconds, args.size, args.dtype, sys.stdout, sys.stderr)
    if args.workload == "train":
        from gpupoolctl.agent.workloads import train

        options = train.Options(
            params=args.params,
            batch=args.batch,
            steps=args.steps,
            flops_per_sample=args.flops_per_sample,
            time_scale=args.time_scale,
            checkpoint_every=args.checkpoint_every,
            rendezvous_timeout=args.rendezvous_timeout,
        )
        return train.run(options, os.environ, sys.stdout, sys.stderr)
    parser.error("name a workload: sleep, sim, matmul or train")


if __name__ == "__main__":
    raise SystemExit(main())
