"""`stress ramp --policy`: the placement policy every job of the ramp is submitted with."""

from __future__ import annotations

import json
from pathlib import Path


def test_the_policy_flag_replaces_the_scenario_s_and_is_saved(cli) -> None:
    scenario = Path(cli.cwd) / "s.yaml"
    scenario.write_text("levels: [1]\nwarmup: 0s\nhold: 200ms\npolicy: spread\n")
    run = cli(
        "stress", "ramp", "--backend", "noop", "-s", str(scenario), "--policy", "topology",
        "--save", "run.json", "-q",
    )  # fmt: skip
    assert run.code == 0, run.stderr
    saved = json.loads((Path(cli.cwd) / "run.json").read_text())
    assert saved["scenario"]["policy"] == "topology"
    kept = cli("stress", "ramp", "--backend", "noop", "-s", str(scenario), "--save", "b.json")
    assert kept.code == 0, kept.stderr
    assert json.loads((Path(cli.cwd) / "b.json").read_text())["scenario"]["policy"] == "spread"


def test_an_unknown_policy_is_a_usage_error_on_one_line(cli) -> None:
    run = cli("stress", "ramp", "--backend", "noop", "--levels", "1", "--policy", "fastest")
    assert run.code == 2
    assert run.stderr.strip().splitlines() == [
        "gpupoolctl: error: unknown policy 'fastest'; valid: best-fit, spread, topology"
    ]
