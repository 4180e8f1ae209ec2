"""Hostile stress files through the real command line, in a child whose memory and CPU time
are capped (setrlimit): one line naming the file, exit 1, never a traceback, and the caps
never reached. Saved results for `stress report` / `stress compare`, scenario files for
`stress ramp --scenario`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from gpupoolctl.textfile import MAX_BYTES
from tests.hostile import alias_bomb, capped


def _huge(path: Path) -> None:
    with open(path, "wb") as handle:  # sparse: larger than any file is read, costs no disk
        handle.truncate(MAX_BYTES + 1)


# name -> (content or a writer, what the one line says). The binary files have their
# first byte that is not UTF-8 (0x80) on line 2, after the \n of bytes(range(256)).
RESULTS = {
    "deep": (b"[" * 1_000_000, ":1: stress result nested deeper than 100 levels"),
    "digits": (b'{"format": ' + b"9" * 100_000 + b"}", ": expected a number of at most"),
    "binary": (
        b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 64,
        ":2: stress result is not UTF-8",
    ),
    "huge": (_huge, f": stress result is {MAX_BYTES + 1} bytes"),
}
SCENARIOS = {
    "deep": (b"levels: " + b"[" * 1_000_000, ":1: not valid YAML: nested deeper than 100"),
    "alias-bomb": (alias_bomb(), "not valid YAML: aliases expand to more than"),
    "binary": (
        b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 64,
        ":2: scenario file is not UTF-8",
    ),
    "huge": (_huge, f": scenario file is {MAX_BYTES + 1} bytes"),
}


def _write(path: Path, content: bytes | object) -> None:
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        content(path)  # type: ignore[operator]


def _one_line(run: subprocess.CompletedProcess[str], path: Path, words: str) -> None:
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr and "MemoryError" not in run.stderr
    [line] = run.stderr.splitlines()
    assert line.startswith(f"gpupoolctl: error: {path}") and words in line, line
    assert run.stdout == ""


@pytest.mark.parametrize("case", sorted(RESULTS))
def test_a_hostile_result_file_is_one_line_within_the_caps(tmp_path: Path, case: str) -> None:
    content, words = RESULTS[case]
    path = tmp_path / f"{case}.json"
    _write(path, content)
    # As the run for `report`, as the baseline for `compare` (the run is read first: the
    # same file serves as both, so the baseline's reading is what fails).
    _one_line(capped(tmp_path, "stress", "report", str(path)), path, words)
    _one_line(capped(tmp_path, "stress", "compare", str(path), "-b", str(path)), path, words)


@pytest.mark.parametrize("case", sorted(SCENARIOS))
def test_a_hostile_scenario_file_is_one_line_within_the_caps(tmp_path: Path, case: str) -> None:
    content, words = SCENARIOS[case]
    path = tmp_path / f"{case}.yaml"
    _write(path, content)
    run = capped(tmp_path, "stress", "ramp", "--backend", "noop", "--scenario", str(path))
    _one_line(run, path, words)
