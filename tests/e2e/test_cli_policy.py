"""`gpupoolctl policy check|show` and --pool-policy through the real command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = str(ROOT / "playbooks" / "pool.yaml")


def one_error_line(stderr: str) -> str:
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert "Traceback" not in stderr
    return lines[0]


def test_the_bundled_example_passes_check(cli) -> None:
    run = cli("policy", "check", EXAMPLE)
    assert run.code == 0, run.stderr
    assert run.stdout.startswith(f"{EXAMPLE}: valid\n")
    assert "elastic: on" in run.stdout
    for words in ("h100", "1g.10gb, 2g.20gb, 3g.40gb, 7g.80gb", "spx/nps1", "l40s"):
        assert words in run.stdout, run.stdout


def test_check_json_is_the_policy_as_data_with_lines(cli) -> None:
    run = cli("policy", "check", EXAMPLE, "-o", "json")
    assert run.code == 0, run.stderr
    data = run.json()
    assert data["valid"] is True and data["file"] == EXAMPLE
    assert data["elastic"]["enabled"] is True
    assert data["elastic"]["min_idle_s"] == 300.0
    rules = data["elastic"]["rules"]
    assert [r["hosts"] for r in rules] == ["h100", "a100", "mi300x", "l40s"]
    assert [r["enabled"] for r in rules] == [True, True, True, False]
    # Each rule's line is the line of its first key in the file.
    lines = Path(EXAMPLE).read_text().splitlines()
    for rule in rules:
        assert lines[rule["line"] - 1].strip() == f"- hosts: {rule['hosts']}"


def test_check_yaml_gives_the_same_data_as_json(cli) -> None:
    as_json = cli("policy", "check", EXAMPLE, "-o", "json").json()
    as_yaml = yaml.safe_load(cli("-o", "yaml", "policy", "check", EXAMPLE).stdout)
    assert as_yaml == as_json


def test_check_of_a_bad_file_exits_1_with_one_line_naming_file_and_line(cli) -> None:
    bad = cli.tmp / "pool.yaml"
    bad.write_text("version: 1\nelastic:\n  rules:\n    - hosts: h100\n      keep-whole: -2\n")
    run = cli("policy", "check", str(bad))
    assert run.code == 1
    assert run.stdout == ""
    line = one_error_line(run.stderr)
    assert f"{bad}:5: elastic rule 1: keep-whole: -2 is out of range; expected 0 to 64" in line


SHARES = str(ROOT / "playbooks" / "shares.yaml")


def test_the_shares_example_passes_check_and_shows_teams_windows_admins(cli) -> None:
    run = cli("policy", "check", SHARES)
    assert run.code == 0, run.stderr
    assert run.stdout.startswith(f"{SHARES}: valid\n")
    for words in (
        "admins: ops, group:gpuadmin (and root)",
        "  inference (default: users in no team): alice, bob, group:inference",
        "    site singapore: nominal 600 GiB GPU memory, 7 1g.10gb; may borrow 400 GiB",
        "windows (the first active one wins):",
        "  singapore-day: mon-fri 08:00-20:00 Asia/Singapore",
        "  dubai-night: daily 18:00-08:00 Asia/Dubai",
        "    elastic replaced: on, 3 rules",
    ):
        assert words in run.stdout, run.stdout


def test_show_json_includes_teams_windows_and_admins(cli) -> None:
    run = cli("--pool-policy", SHARES, "policy", "show", "-o", "json")
    assert run.code == 0, run.stderr
    data = run.json()
    assert data["admins"] == {"users": ["ops"], "groups": ["gpuadmin"]}
    teams = data["teams"]["teams"]
    assert [t["name"] for t in teams] == ["inference", "training"]
    assert teams[0]["default"] is True and teams[0]["quota"][0]["site"] == "singapore"
    assert teams[0]["quota"][0]["nominal"] == {"gpu-memory": 600 * 1024, "1g.10gb": 7}
    windows = data["windows"]
    assert [w["timezone"] for w in windows[:3]] == ["Asia/Singapore"] * 2 + ["Asia/Dubai"]
    assert windows[0]["days"] == ["mon", "tue", "wed", "thu", "fri"]
    assert windows[1]["hours"] == "20:00-08:00" and windows[1]["elastic"]["enabled"] is True
    assert windows[0]["teams"]["inference"][0]["nominal"]["gpu-memory"] == 1100 * 1024
    # Each team's line is its name's line in the file.
    lines = Path(SHARES).read_text().splitlines()
    assert [lines[t["line"] - 1].strip() for t in teams] == ["inference:", "training:"]
    as_yaml = yaml.safe_load(cli("--pool-policy", SHARES, "-o", "yaml", "policy", "show").stdout)
    assert as_yaml == data


def test_the_plain_example_has_no_teams(cli) -> None:
    data = cli("policy", "check", EXAMPLE, "-o", "json").json()
    assert data["teams"]["teams"] == [] and data["windows"] == []
    assert data["admins"] == {"users": [], "groups": []}
    assert "teams" not in cli("policy", "check", EXAMPLE).stdout


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ("teams:\n  ml: {}\nwindows:\n  - name: night\n    timezone: UTC\n    teams:\n"
         "      mll: {quota: {nominal: {}}}\n", 8,
         "window night: teams: no team 'mll' in teams: (did you mean 'ml'?); known teams: ml"),
        ("windows:\n  - {name: w, timezone: Mars/Olympus}\n", 3,
         "window w: timezone: unknown time zone 'Mars/Olympus'"),
        ("teams:\n  ml:\n    quota:\n      nominal: {gpu-memory: 2PiB}\n", 5,
         "team ml: quota: nominal: gpu-memory: '2PiB' is too large; expected at most 1 PiB"),
        ("admins: {ops: yes}\n", 2, "admins: expected a list of user names"),
    ],
    ids=["window-team", "timezone", "memory", "admins"],
)  # fmt: skip
def test_a_bad_teams_file_exits_1_with_one_line_naming_file_and_line(
    cli, body: str, line: int, words: str
) -> None:
    bad = cli.tmp / "shares.yaml"
    bad.write_text("version: 1\n" + body)
    run = cli("policy", "check", str(bad), "-o", "json")
    assert run.code == 1 and run.stdout == ""
    assert f"{bad}:{line}: {words}" in one_error_line(run.stderr), run.stderr


def test_check_of_a_missing_file_exits_1_naming_it(cli) -> None:
    run = cli("policy", "check", "nowhere.yaml")
    assert run.code == 1
    assert "nowhere.yaml: cannot read pool policy file" in one_error_line(run.stderr)


def test_check_without_any_file_is_a_usage_error(cli) -> None:
    run = cli("policy", "check")
    assert run.code == 2
    assert "no pool policy file to check" in one_error_line(run.stderr)


@pytest.mark.parametrize(
    "args",
    [
        ("policy", "check", ""),
        ("--pool-policy", "", "policy", "show"),
        ("policy", "check", "--no-such-option"),
        ("policy", "check", "a.yaml", "b.yaml"),
    ],
    ids=["empty-file", "empty-option", "unknown-option", "two-files"],
)
def test_usage_errors_exit_2(cli, args) -> None:
    run = cli(*args)
    assert run.code == 2, (run.stdout, run.stderr)
    assert "Traceback" not in run.stderr


def test_an_empty_variable_is_a_usage_error(cli) -> None:
    run = cli("policy", "show", extra_env={"GPUPOOL_POLICY": ""})
    assert run.code == 2
    assert "GPUPOOL_POLICY is set but empty" in run.stderr


def test_show_without_a_file_is_a_static_pool(cli) -> None:
    run = cli("policy", "show")
    assert run.code == 0, run.stderr
    assert run.stdout.startswith("no policy file: static pool\n")
    data = cli("policy", "show", "-o", "json").json()
    assert data["file"] is None and data["elastic"]["enabled"] is False


def test_pool_policy_after_the_command_is_hoisted_and_names_the_file(cli) -> None:
    run = cli("policy", "show", "--pool-policy", EXAMPLE, "-o", "json")
    assert run.code == 0, run.stderr
    assert run.json()["file"] == EXAMPLE
    check = cli("policy", "check", "--pool-policy", EXAMPLE)
    assert check.code == 0 and check.stdout.startswith(f"{EXAMPLE}: valid")


def test_the_variable_and_the_default_file_are_found(cli) -> None:
    by_env = cli("policy", "show", "-o", "json", extra_env={"GPUPOOL_POLICY": EXAMPLE})
    assert by_env.json()["file"] == EXAMPLE
    default = cli.tmp / "home" / ".config" / "gpupoolctl" / "pool.yaml"
    default.parent.mkdir(parents=True)
    default.write_text("version: 1\nelastic:\n  enabled: false\n")
    found = cli("policy", "show", "-o", "json").json()
    assert found["file"] == str(default) and found["elastic"]["enabled"] is False
    assert cli("policy", "check").code == 0  # check reads the resolved file too
    xdg = cli.tmp / "xdg"
    run = cli("policy", "show", "-o", "json", extra_env={"XDG_CONFIG_HOME": str(xdg)})
    assert run.json()["file"] is None  # XDG_CONFIG_HOME moved the default away


def test_option_wins_over_the_variable(cli) -> None:
    other = cli.tmp / "other.yaml"
    other.write_text("version: 1\n")
    run = cli("--pool-policy", str(other), "policy", "show", "-o", "json",
              extra_env={"GPUPOOL_POLICY": EXAMPLE})  # fmt: skip
    assert run.json()["file"] == str(other)


def test_show_of_a_missing_policy_file_exits_1_naming_it(cli) -> None:
    run = cli("--pool-policy", "gone.yaml", "policy", "show")
    assert run.code == 1
    assert one_error_line(run.stderr).endswith(
        "gone.yaml: no such pool policy file (given by --pool-policy / GPUPOOL_POLICY)"
    )


def test_csv_lists_the_rules(cli) -> None:
    run = cli("policy", "check", EXAMPLE, "-o", "csv")
    assert run.code == 0, run.stderr
    header, *rows = run.stdout.splitlines()
    assert header == "rule,line,hosts,vendor,model,elastic,into,keep_whole"
    assert len(rows) == 4 and rows[0].startswith("1,")
    assert json.loads(cli("policy", "check", EXAMPLE, "-o", "json").stdout)["elastic"]["rules"]


def test_check_reads_stdin_with_a_dash(cli) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env["HOME"] = str(cli.tmp)
    proc = subprocess.run(
        [sys.executable, "-m", "gpupoolctl.cli.main", "policy", "check", "-"],
        input="version: 1\nelastic:\n  backoff: 1w\n",
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert proc.returncode == 1
    expected = "expected 30s, 5m, 1h, 1h30m, 2d or a number of seconds"
    line = one_error_line(proc.stderr)
    assert line.endswith(f"<stdin>:3: elastic.backoff: bad duration '1w'; {expected}")


def test_a_disabled_section_still_lists_its_rules(cli) -> None:
    path = cli.tmp / "pool.yaml"
    path.write_text("version: 1\nelastic:\n  enabled: false\n  rules:\n    - vendor: amd\n")
    run = cli("policy", "check", str(path))
    assert run.code == 0, run.stderr
    assert "elastic: off" in run.stdout and "not used while elastic is off" in run.stdout
    assert "amd" in run.stdout.splitlines()[-1]
