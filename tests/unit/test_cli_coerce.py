"""gpupoolctl.cli.coerce gives every option the value (or the error) typer's own coercion does."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from typer._coercion import build_runtime_param
from typer.core import _TyperParameter

from gpupoolctl.cli.coerce import FastCoercion
from gpupoolctl.cli.main import COMMANDS, app

SAMPLES = (
    "0", "1", "8", "08", "32", "4096", "4097", "-1", "+8", " 8", "8 ", "1_0", "8.0", "0.05",
    "0.1", "10", "10.5", "1e3", "86400", "86401", "inf", "nan", "", " ", "x", "é", "\udcff",
    "json", "JSON", "Json", "table", "auto", "csv", "yaml", "xml", "true", "false", "yes",
    "-", "a\x00b", "99999999999999999999",
)  # fmt: skip


def _params() -> list[tuple[Any, _TyperParameter]]:
    root = typer.main.get_command(app)
    commands = [root, *(c for entry in COMMANDS for c in root.build(entry).values())]
    found = []
    while commands:
        command = commands.pop()
        ctx = typer.Context(command, info_name=command.name)
        found += [(ctx, p) for p in command.get_params(ctx) if isinstance(p, _TyperParameter)]
        commands += list(getattr(command, "commands", {}).values()) if command is not root else []
    return found


PARAMS = _params()


def _outcome(coerce: Any, value: Any, param: _TyperParameter, ctx: Any) -> tuple[str, Any]:
    try:
        return "value", coerce(value, param=param, ctx=ctx)
    except Exception as exc:  # the exact error matters as much as the value
        return type(exc).__name__, str(exc)


def _same(value: Any, param: _TyperParameter, ctx: Any) -> None:
    descriptor = param.type_descriptor
    typer_own = build_runtime_param(descriptor)
    fast = FastCoercion(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation)
    expected = _outcome(typer_own.coerce, value, param, ctx)
    got = _outcome(fast.coerce, value, param, ctx)
    assert got == expected, (param.name, descriptor.annotation, value)
    assert type(got[1]) is type(expected[1])


def _values(param: _TyperParameter, tmp: Path) -> list[Any]:
    words = [*SAMPLES, str(tmp), str(tmp / "absent.yaml"), str(tmp / "file.txt")]
    if param.multiple or param.nargs == -1:
        return [(), tuple(words[:5]), tuple(words), ("ok", "\udcff"), [str(tmp)], None]
    return [*words, param.default, None, 7, 7.5, True, Path("p"), b"bytes"]


def test_every_parameter_of_every_command_is_covered():
    assert len(PARAMS) > 400
    assert {p.name for _, p in PARAMS} >= {"forks", "output", "inventory", "connect_timeout"}


@pytest.mark.parametrize(
    ("ctx", "param"), PARAMS, ids=[f"{c.info_name}-{p.name}" for c, p in PARAMS]
)
def test_same_value_or_error_as_typer(ctx, param, tmp_path):
    (tmp_path / "file.txt").write_text("x")
    for value in _values(param, tmp_path):
        _same(value, param, ctx)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(PARAMS), st.text(max_size=12) | st.from_regex(r"[0-9 +._e-]{1,10}"))
def test_same_for_any_text(pair, text):
    ctx, param = pair
    value = (text,) if param.multiple or param.nargs == -1 else text
    _same(value, param, ctx)


def test_a_plain_command_line_does_not_import_pydantic():
    # What could fail: a parameter left to typer's coercion builds a pydantic TypeAdapter.
    code = (
        "import sys\n"
        "from gpupoolctl.cli.main import run\n"
        "sys.argv = ['gpupoolctl', '-o', 'json', '--forks', '8', '--connect-timeout', '2.5',\n"
        "            '-l', 'x', 'jobs', '--help']\n"
        "try:\n    run()\nexcept SystemExit:\n    pass\n"
        "sys.stderr.write(str('pydantic' in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stderr.strip().endswith("False"), proc.stderr
    assert proc.stdout.startswith("Usage: gpupoolctl jobs")


def test_a_value_to_refuse_gets_typers_own_error():
    code = (
        "import sys\n"
        "from gpupoolctl.cli.main import run\n"
        "sys.argv = ['gpupoolctl', '--forks', '0', 'jobs', '--help']\n"
        "try:\n    run()\nexcept SystemExit as exc:\n    print(exc.code)\n"
        "sys.stderr.write(str('pydantic' in sys.modules))\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.stdout.strip() == "2"
    assert "Invalid value for '--forks'" in proc.stderr
    assert proc.stderr.strip().endswith("True")
