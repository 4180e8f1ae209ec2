"""`-o csv` of `stress ramp`, `stress report` and `stress compare`: one row per level with
every column filled from the run's own numbers (not the table's text rows, whose keys
differ from the CSV columns and left nearly every cell '-')."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path

from gpupoolctl.stress.result import from_dict, to_csv_rows

# What a no-op ramp measures at every level: counts, rates and latencies of ended jobs.
ALWAYS_MEASURED = (
    "level",
    "model",
    "window_s",
    "submitted",
    "completed",
    "failed",
    "dropped",
    "throughput",
    "failure_rate",
    "queue_wait_p50",
    "queue_wait_p95",
    "turnaround_p50",
    "turnaround_max",
    "phase_queue",
    "phase_run",
    "harness_s",
    "thresholds_ok",
)


def _rows(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def _same(cell: str, value: object) -> bool:
    if value is None:
        return cell == "-"
    if isinstance(value, bool):
        return cell == ("yes" if value else "no")
    if isinstance(value, int | float):
        return math.isclose(float(cell), float(value), rel_tol=1e-5, abs_tol=1e-9)
    return cell == str(value)


def test_ramp_and_report_csv_carry_every_level_s_numbers(cli) -> None:
    run = cli(
        "stress", "ramp", "--backend", "noop", "--levels", "1,2,4", "--warmup", "0s",
        "--hold", "200ms", "--save", "run.json", "-q", "-o", "csv",
    )  # fmt: skip
    assert run.code == 0, run.stderr
    saved = json.loads((Path(cli.cwd) / "run.json").read_text())
    expected = to_csv_rows(from_dict(saved, "run.json"))
    rows = _rows(run.stdout)
    assert [row["level"] for row in rows] == ["1", "2", "4"]
    assert list(rows[0]) == list(expected[0])  # the columns are the CSV keys, in order
    for row, want in zip(rows, expected, strict=True):
        assert all(row[key] != "-" for key in ALWAYS_MEASURED), row
        assert all(_same(row[key], want[key]) for key in want), (row, want)
    # `report` of the saved run prints the very same CSV.
    report = cli("stress", "report", "run.json", "-o", "csv")
    assert report.code == 0, report.stderr
    assert report.stdout == run.stdout


def test_compare_csv_has_raw_numbers_not_the_table_s_text(cli) -> None:
    assert cli(
        "stress", "ramp", "--backend", "noop", "--levels", "1,2", "--warmup", "0s",
        "--hold", "200ms", "--save", "base.json", "-q",
    ).code == 0  # fmt: skip
    base = json.loads((Path(cli.cwd) / "base.json").read_text())
    for level in base["levels"]:
        level["throughput"] *= 0.5
    (Path(cli.cwd) / "slow.json").write_text(json.dumps(base))
    compared = cli("stress", "compare", "slow.json", "-b", "base.json", "-o", "csv")
    assert compared.code == 4, compared.stderr
    rows = _rows(compared.stdout)
    throughput = [row for row in rows if row["metric"] == "throughput"]
    assert [row["level"] for row in throughput] == ["1", "2"]
    for row in throughput:
        assert float(row["change"]) == -0.5  # a fraction, as in -o json; not '-50.0%'
        assert float(row["current"]) < float(row["baseline"])
        assert row["verdict"] != "ok"
