"""Fixtures for the real-GPU checks: skip where there is no GPU, else survey the node once.

Needs nothing beyond what a GPU node has (python3, pytest, pynvml, PyTorch): no workstation
dependency is imported here or by the modules this imports. Results go to
$GPUPOOL_HARDWARE_OUT (a fresh temporary folder when unset; its path is printed at the end).
"""

from __future__ import annotations

import os
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# `tests` importable however pytest was started (python -m pytest adds the cwd, the pytest
# script does not), as tests/integration/conftest.py does.
_REPO = Path(__file__).resolve().parents[2]
if str(_REPO) not in sys.path:
    sys.path.insert(0, str(_REPO))

_written: list[str] = []


def _out_folder(vendor: str) -> Path:
    base = os.environ.get("GPUPOOL_HARDWARE_OUT")
    if base:
        folder = Path(base) / vendor
    else:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        folder = Path(tempfile.mkdtemp(prefix=f"gpupool-hardware-{socket.gethostname()}-{stamp}-"))
        folder = folder / vendor
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _survey(vendor: str, tmp: pytest.TempPathFactory) -> dict[str, Any]:
    from tests.hardware import nodeprobe, survey

    absent = nodeprobe.nvidia_absent() if vendor == "nvidia" else nodeprobe.amd_absent()
    if absent:
        pytest.skip(absent)
    out = _out_folder(vendor)
    node = nodeprobe.Node(vendor, tmp.mktemp(f"{vendor}-node"))
    run = survey.survey_nvidia if vendor == "nvidia" else survey.survey_amd
    data = run(node, out, log=lambda line: print(line, file=sys.stderr))
    _written.append((out / "summary.txt").read_text())
    return data


@pytest.fixture(scope="session")
def nvidia(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The NVIDIA survey of this node (skips with the reason when there is no NVIDIA GPU)."""
    yield _survey("nvidia", tmp_path_factory)


@pytest.fixture(scope="session")
def amd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """The AMD survey of this node (skips with the reason when there is no AMD GPU)."""
    yield _survey("amd", tmp_path_factory)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """Every reading and difference, whatever passed or failed (the issue note wants them)."""
    for text in _written:
        terminalreporter.write_sep("=", "hardware survey")
        terminalreporter.write(text)
