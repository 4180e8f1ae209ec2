"""`stress ramp` option names: --load-model (closed|open; --model is a GPU model elsewhere)
and --html FILE (as `stress report --html`). The old spellings, --model and --report, work
for one release with one deprecation line on stderr."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

NOOP = ("stress", "ramp", "--backend", "noop", "--levels", "1,2", "--warmup", "0s")
MODEL_WARNING = (
    "gpupoolctl: warning: stress ramp --model is deprecated: use --load-model closed|open; "
    "--model is a GPU model (submit --model H100)"
)
REPORT_WARNING = (
    "gpupoolctl: warning: stress ramp --report is deprecated: use --html FILE, "
    "as stress report does"
)


def warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if "deprecated" in line]


@pytest.mark.parametrize("option", ["--load-model", "--model"])
@pytest.mark.parametrize("model", ["closed", "open"])
def test_the_load_model_in_both_spellings(cli, option: str, model: str) -> None:
    run = cli(*NOOP, "--hold", "300ms", option, model, "-o", "json")
    assert run.code == 0, run.stderr
    result = run.json()
    assert result["scenario"]["model"] == model
    assert {lv["model"] for lv in result["levels"]} == {model}
    assert warnings(run.stderr) == ([] if option == "--load-model" else [MODEL_WARNING])


def test_the_old_spelling_warns_even_with_q_and_the_new_one_wins(cli) -> None:
    run = cli("-q", *NOOP, "--hold", "300ms", "--model", "closed", "--load-model", "open")
    assert run.code == 0, run.stderr
    assert warnings(run.stderr) == [MODEL_WARNING]
    run = cli(*NOOP, "--hold", "300ms", "--model", "open", "-o", "json")
    assert run.json()["scenario"]["model"] == "open"


def test_a_bad_load_model_is_a_usage_error_naming_it(cli) -> None:
    run = cli(*NOOP, "--hold", "300ms", "--load-model", "half-open")
    assert run.code == 2, run.stderr
    assert "unknown load model 'half-open': use closed or open" in run.stderr


@pytest.mark.parametrize("option", ["--html", "--report"])
def test_the_html_report_in_both_spellings(cli, option: str) -> None:
    run = cli(*NOOP, "--hold", "300ms", option, "ramp.html", "--save", "ramp.json")
    assert run.code == 0, run.stderr
    page = (Path(cli.cwd) / "ramp.html").read_text()
    assert page.lstrip().lower().startswith("<!doctype html") and "</html>" in page
    assert "report written to ramp.html" in run.stderr
    assert warnings(run.stderr) == ([] if option == "--html" else [REPORT_WARNING])
    # The same option name as `stress report` for the same file.
    again = cli("stress", "report", "ramp.json", "--html", "again.html")
    assert again.code == 0, again.stderr
    assert (Path(cli.cwd) / "again.html").exists()
    assert json.loads((Path(cli.cwd) / "ramp.json").read_text())["levels"]


def test_help_shows_the_new_spellings_only(cli) -> None:
    run = cli("stress", "ramp", "--help", extra_env={"COLUMNS": "200"})
    assert run.code == 0
    assert "--load-model" in run.stdout and "--html" in run.stdout
    # The old spellings are hidden: no option line of their own (only a mention in a help).
    assert not re.search(r"^\W*(--model|--report)\b", run.stdout, re.MULTILINE), run.stdout
