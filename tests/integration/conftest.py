"""Fixtures for integration tests against real OpenSSH sshd servers on loopback."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# tests/sshd.py is a plain module shared with benchmarks; make `tests` importable however
# pytest was started (python -m pytest adds the cwd, the pytest script does not).
_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

from gpupoolctl.remote import Target, target_from_vars  # noqa: E402
from tests.sshd import (  # noqa: E402
    SshdFleet,
    SshdHost,
    TargetFactory,
    sshd_missing_reason,
    start_fleet,
)

FLEET_SIZE = 4
# Generous for a loaded CI machine, small enough that a hang fails fast.


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.fixture(scope="session")
def sshd_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshdFleet]:
    """Four sshd hosts on 127.0.0.2-5, shared by the whole session (start-up is ~50 ms,
    but one fleet keeps the logs of every test in one place)."""
    reason = sshd_missing_reason()
    if reason:
        if _in_ci():  # CI must run these: a missing sshd is a broken CI image, not a skip
            pytest.fail(f"CI=true but the real-sshd tests cannot run: {reason}")
        pytest.skip(f"real-sshd tests need OpenSSH's sshd: {reason}")
    fleet = start_fleet(FLEET_SIZE, tmp_path_factory.mktemp("sshd"))
    try:
        yield fleet
    finally:
        fleet.stop()


@pytest.fixture
def ssh_target(sshd_fleet: SshdFleet) -> TargetFactory:
    """ssh_target(host, name=None, **vars) -> a Target reaching `host` directly."""

    def make(host: SshdHost, name: str | None = None, **extra: Any) -> Target:
        return target_from_vars(name or host.name, sshd_fleet.host_vars(host, **extra))

    return make


# -- a real Slurm cluster (tests/slurm.py) ------------------------------------------------

from tests.slurm import SlurmCluster, slurm_missing_reason, start_cluster  # noqa: E402

SlurmFactory = Callable[..., SlurmCluster]


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmFactory]:
    """slurm_cluster(**start_cluster options) -> a running cluster (munged, slurmctld, one
    slurmd on 127.0.0.1), each in its own temp folder. The same options give the same
    cluster back, so `slurm_cluster()` is one shared default cluster (node1, gpu:test:2).
    Everything started is stopped at the end of the session. Skips when not root or Slurm is
    not installed, and fails instead under CI=true."""
    reason = slurm_missing_reason()
    if reason:
        if _in_ci():  # CI installs slurm-wlm and runs as root: this is a broken CI image
            pytest.fail(f"CI=true but the real-Slurm tests cannot run: {reason}")
        pytest.skip(f"real-Slurm tests need root and slurm-wlm + munge: {reason}")
    started: dict[str, SlurmCluster] = {}

    def start(**options: Any) -> SlurmCluster:
        key = repr(sorted((name, repr(value)) for name, value in options.items()))
        if key not in started:
            started[key] = start_cluster(tmp_path_factory.mktemp("slurm"), **options)
        return started[key]

    try:
        yield start
    finally:
        for cluster in started.values():
            cluster.stop()
