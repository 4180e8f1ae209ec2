"""Damaged files through the real command line, in a child whose memory and CPU time are
capped (setrlimit): one line naming the file, exit 1 (2 for a bad --limit), never a
traceback, and the caps never reached. The reported cases first: a binary inventory, deep
nesting, an alias bomb."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile import alias_bomb, capped

CASES = {
    "binary": (b"\x00\x01binary", "is it a text file?"),
    "deep": (b"[" * 100_000, "nested deeper than 100 levels"),
    "alias-bomb": (alias_bomb(), "aliases expand to more than"),
    "not-utf8": (b"all:\n  hosts:\n    h\xff:\n", "not"),
}


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize(
    "command",
    [
        ("-i", "{file}", "inventory", "hosts"),
        ("partition", "plan", "-f", "{file}", "-c", "x"),
        ("partition", "apply", "--yes", "-f", "{file}", "-c", "x", "--hooks", "{file}"),
    ],
    ids=["inventory", "partition-plan", "partition-hooks"],
)
def test_damaged_file_is_one_line_naming_it(tmp_path: Path, case: str, command) -> None:
    data, words = CASES[case]
    damaged = tmp_path / "damaged.yaml"
    damaged.write_bytes(data)
    args = [a.replace("{file}", str(damaged)) for a in command]
    if "--hooks" in args:  # a good spec, so the hooks file is what is read and refused
        args[args.index("-f") + 1] = str(Path(__file__).parents[2] / "playbooks/layouts.yaml")
        args[args.index("-c") + 1] = "inference"
    run = capped(tmp_path, "-q", *args)
    assert run.returncode == 1, run.stderr
    assert "Traceback" not in run.stderr and "MemoryError" not in run.stderr
    lines = run.stderr.splitlines()
    assert len(lines) == 1 and str(damaged) in lines[0], run.stderr
    assert words in lines[0] or case == "not-utf8", lines[0]
    assert run.stdout == ""


def test_a_limit_file_of_brackets_is_a_usage_error_at_once(tmp_path: Path) -> None:
    (tmp_path / "limit.txt").write_bytes(b"[" * 100_000)
    run = capped(tmp_path, "-q", "-l", "@limit.txt", "inventory", "hosts")
    assert run.returncode == 2 and "limit.txt:1: host pattern of 100000" in run.stderr
    assert len(run.stderr.splitlines()) == 1
