"""--pool-policy is a global option: hoisted from after the command, kept in Settings."""

from __future__ import annotations

from pathlib import Path

import typer

from gpupoolctl.cli.argv import hoist_global_options
from gpupoolctl.cli.main import app
from gpupoolctl.cli.settings import OutputFormat, Settings


def test_pool_policy_after_the_command_moves_to_the_front() -> None:
    root = typer.main.get_command(app)
    args = ["policy", "show", "--pool-policy", "p.yaml", "-o", "json"]
    assert hoist_global_options(args, root) == [
        "--pool-policy",
        "p.yaml",
        "-o",
        "json",
        "policy",
        "show",
    ]
    inline = ["policy", "check", "--pool-policy=p.yaml", "f.yaml"]
    assert hoist_global_options(inline, root) == [
        "--pool-policy=p.yaml",
        "policy",
        "check",
        "f.yaml",
    ]


def test_submit_policy_stays_the_placement_policy() -> None:
    root = typer.main.get_command(app)
    args = ["submit", "--policy", "spread", "--pool-policy", "p.yaml", "--", "true"]
    hoisted = hoist_global_options(args, root)
    assert hoisted[:2] == ["--pool-policy", "p.yaml"]
    assert hoisted[2:] == ["submit", "--policy", "spread", "--", "true"]


def test_settings_default_has_no_pool_policy() -> None:
    settings = Settings(
        inventory=None,
        limit=None,
        forks=1,
        output=OutputFormat.auto,
        ledger=None,
        verbosity=0,
        accept_new_host_keys=False,
        connect_timeout=1.0,
        command_timeout=None,
    )
    assert settings.pool_policy is None
    assert Settings(**{**vars(settings), "pool_policy": Path("p.yaml")}).pool_policy == Path(
        "p.yaml"
    )
