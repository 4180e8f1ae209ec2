"""`stress report` / `stress compare` / `stress ramp --baseline` on files that are not results:
one line `FILE[:LINE]: what was expected`, exit 1, never a traceback (the real CLI)."""

from __future__ import annotations

from pathlib import Path

import pytest

BAD = {
    "deep.json": (b"[" * 100_000, "deep.json:1: stress result nested deeper than 100 levels"),
    "binary.json": (b"\x00\x01\x02\xff\xfe", "binary.json:1: stress result is not UTF-8 text"),
    "nan.json": (b'{\n "format": NaN\n}', "nan.json:2: expected a finite number, not NaN"),
    "big.json": (b'{"x": 1e400}', "big.json:1: expected a finite number, not 1e400"),
    "cut.json": (b'{\n "format": "gpupoolctl-stress/1",\n "lev', "cut.json:3: not JSON:"),
    "list.json": (b"[1, 2]", "list.json: the file: expected an object, got a list"),
}


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("how", ["report", "compare", "compare-baseline", "ramp-baseline"])
def test_a_bad_result_file_is_one_line_and_exit_1(cli, name: str, how: str) -> None:
    data, expected = BAD[name]
    (Path(cli.cwd) / name).write_bytes(data)
    if how != "report":
        good = cli(
            "-q",
            "stress",
            "ramp",
            "--backend",
            "noop",
            "--levels",
            "1",
            "--hold",
            "200ms",
            "--warmup",
            "0s",
            "--save",
            "good.json",
        )
        assert good.code == 0, good.stderr
    argv = {
        "report": ("stress", "report", name),
        "compare": ("stress", "compare", name, "-b", "good.json"),
        "compare-baseline": ("stress", "compare", "good.json", "-b", name),
        "ramp-baseline": (
            "stress",
            "ramp",
            "--backend",
            "noop",
            "--levels",
            "1",
            "--baseline",
            name,
        ),
    }[how]
    run = cli(*argv)
    assert run.code == 1, run.stderr
    assert "Traceback" not in run.stderr
    [line] = run.stderr.splitlines()  # one line, nothing else on stderr
    assert line.startswith(f"gpupoolctl: error: {expected}"), line
