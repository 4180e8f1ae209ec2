"""Empty and invalid values are usage errors (exit 2) found before anything is created.

An empty value (an unset shell variable) is refused for every option, path or text, and for
the command after `--`, by one rule (gpupoolctl.cli.nonempty); a job name is 1 to 64
printable characters; a stress ramp's request names are checked before the first level.
"""

from __future__ import annotations

import pytest

MAX_NAME = 64  # what the error says a job name may be, at most


def errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("gpupoolctl: error:")]


def no_jobs(cli) -> bool:
    listed = cli("-q", "jobs", "--all", "--no-refresh", "-o", "json")
    assert listed.code == 0, listed.stderr
    return listed.json() == []


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("pool", "--html", ""), "--html"),
        (("stress", "report", ""), "RESULT_FILE"),
        (("partition", "plan", "-f", "", "-c", "inference"), "--file"),
        (("top", "--filter", "", "--once"), "--filter"),
        (("-l", "", "inventory"), "--limit"),
        (("drain", "", "--reason", "fan"), "TARGETS"),
    ],
    ids=["pool-html", "stress-report", "partition-plan-file", "top-filter", "limit", "drain"],
)
def test_an_empty_value_is_a_usage_error_before_the_command_runs(cli, args, named) -> None:
    run = cli(*args)
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    assert errors(run.stderr) == [f"gpupoolctl: error: {named} must not be empty"]
    assert run.stdout == ""  # nothing was read, drawn or written
    assert sorted(p.name for p in cli.cwd.iterdir()) == ["home"]  # no page, no state


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--name", ""), "--name"),
        (("--name=",), "--name"),
        (("--workdir", ""), "--workdir"),
        (("--workdir", " "), "--workdir"),
    ],
    ids=["name", "name-inline", "workdir", "workdir-blank"],
)
def test_submit_refuses_an_empty_option_and_creates_no_job(cli, args, named) -> None:
    run = cli("submit", *args, "--", "true")
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    assert errors(run.stderr) == [f"gpupoolctl: error: {named} must not be empty"]
    assert run.stdout == "" and no_jobs(cli)


@pytest.mark.parametrize("program", ["", "  "])
def test_submit_refuses_an_empty_command_and_creates_no_job(cli, program) -> None:
    run = cli("submit", "--", program, "x")
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    assert errors(run.stderr) == ["gpupoolctl: error: COMMAND must not be empty"]
    assert run.stdout == "" and no_jobs(cli)


def test_the_commands_own_arguments_may_be_empty(jobs_cli) -> None:
    """Only the program must be named: `printf '%s' ''` is a command line like any other."""
    run = jobs_cli("-q", "submit", "--wait", "--", "printf", "<%s>", "")
    assert run.code == 0, run.stderr
    assert run.stdout == "<>"


@pytest.mark.parametrize(
    ("name", "says"),
    [
        ("two\nlines", "--name 'two\\nlines' has a control character"),
        ("tab\there", "--name 'tab\\there' has a control character"),
        ("x" * 5000, "--name of 5000 characters"),
        ("x" * (MAX_NAME + 1), f"--name of {MAX_NAME + 1} characters"),
    ],
    ids=["newline", "tab", "5000-chars", "one-too-long"],
)
def test_a_job_name_that_would_break_the_jobs_table_is_refused(cli, name, says) -> None:
    run = cli("submit", "--name", name, "--", "true")
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    found = errors(run.stderr)
    assert len(found) == 1 and says in found[0], run.stderr
    assert f"1 to {MAX_NAME} printable characters" in found[0]
    assert run.stdout == "" and no_jobs(cli)


def test_a_job_name_of_the_longest_length_is_one_cell_of_the_jobs_table(jobs_cli) -> None:
    name = "n" * (MAX_NAME - 4) + " é-1"
    run = jobs_cli("-q", "submit", "--name", name, "--wait", "--", "true")
    assert run.code == 0, run.stderr
    listed = jobs_cli("-q", "jobs", "--all", "--no-refresh", "-o", "json").json()
    assert [job["name"] for job in listed] == [name]
    table = jobs_cli("jobs", "--all", "--no-refresh", "-o", "table")
    assert table.code == 0, table.stderr
    assert [line for line in table.stdout.splitlines() if name in line]


def test_stress_ramp_refuses_an_unknown_profile_before_the_first_level(cli) -> None:
    result = cli.tmp / "ramp.json"
    run = cli(
        *("stress", "ramp", "--profile", "nosuch", "--levels", "1,2", "--hold", "0.2s"),
        *("--warmup", "0s", "--drain", "0s", "--save", str(result)),
    )
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    found = errors(run.stderr)
    assert len(found) == 1 and "unknown profile 'nosuch'" in found[0], run.stderr
    assert "level 1" not in run.stderr and run.stdout == ""
    assert not result.exists()
    assert no_jobs(cli)  # not one job was submitted


def test_help_lists_every_exit_code_130_included(cli) -> None:
    run = cli("--help")
    assert run.code == 0, run.stderr
    text = " ".join(run.stdout.split())
    for code in ("0 ok", "1 error", "2 usage", "3 some hosts", "4 a check", "5 nothing fits"):
        assert code in text
    assert "130 interrupted (Ctrl-C)" in text


def test_ledger_records_nothing_for_a_refused_submit(cli) -> None:
    """The refusals above come before the ledger is opened: it is not even created."""
    ledger = cli.tmp / "pool.jsonl"
    for args in (("--name", "a\nb"), ("--workdir", "")):
        run = cli("--ledger", str(ledger), "submit", *args, "--", "true")
        assert run.code == 2, run.stderr
    assert not ledger.exists()


@pytest.mark.parametrize("value", ["", "   "])
@pytest.mark.parametrize("variable", ["GPUPOOL_INVENTORY", "GPUPOOL_LEDGER", "GPUPOOL_POLICY"])
def test_a_variable_set_to_nothing_or_spaces_is_the_same_usage_error(cli, variable, value):
    run = cli("pool", "--summary", extra_env={variable: value})
    assert run.code == 2, (run.code, run.stdout, run.stderr)
    assert errors(run.stderr) == [
        f"gpupoolctl: error: {variable} is set but empty: unset it, or give it a value"
    ]
    assert run.stdout == ""
