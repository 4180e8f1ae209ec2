"""The bottleneck verdict through the real CLI: `stress report` (table and -o json), its
--html page, and `stress compare --report` with both runs' sentences, on result files
written here from synthetic per-level splits."""

from __future__ import annotations

import re
from pathlib import Path

from gpupoolctl.stress.model import Distribution, KneePoint, Knees, LevelResult, RunResult
from gpupoolctl.stress.result import save

WORKLOAD = {"kind": "train", "args": {"model": "tiny"}}


def _dist(mean: float) -> Distribution:
    return Distribution(20, mean, mean, mean * 1.2, mean * 1.3, mean * 1.5, mean * 2)


def _level(
    n: int, phases: dict[str, float], throughput: float, links: dict[str, float]
) -> LevelResult:
    turnaround = sum(v for k, v in phases.items() if k not in ("compute", "comm"))
    return LevelResult(
        level=float(n),
        model="closed",
        warmup_s=1.0,
        hold_s=10.0,
        window_s=10.0,
        submitted=20,
        completed=20,
        failed=0,
        dropped=0,
        throughput=throughput,
        failure_rate=0.0,
        queue_wait=_dist(phases["queue"]),
        turnaround=_dist(turnaround),
        phases=phases,
        harness_s=0.001,
        work_throughput=throughput * 64,
        comm_links=links,
        bound_by={max(links, key=links.__getitem__): 20} if links else {},
    )


def _run(levels: list[LevelResult], kneedle: float, name: str) -> RunResult:
    return RunResult(
        scenario={
            "name": name,
            "model": "closed",
            "levels": [lv.level for lv in levels],
            "workload": WORKLOAD,
        },
        levels=levels,
        knees=Knees(
            kneedle=KneePoint("kneedle", "diminishing returns", kneedle),
            usl=KneePoint("usl", "capacity peak", None, note="no fit"),
            latency=KneePoint("latency", "latency knee", None, note="none"),
        ),
        backend="pool",
        transport="local",
        tool_version="0.9.0",
        created="2025-06-01T02:00:00Z",
        host="admin-1",
        commit=None,
    )


def _scattered() -> RunResult:
    """Best-fit placement: from level 8 the all-reduce crosses nodes."""
    rows = [
        (1, 0.8, 0.1, {"nvlink": 0.1}, 1.0),
        (4, 0.8, 0.3, {"nvlink": 0.1, "nic": 0.2}, 3.5),
        (8, 1.0, 1.9, {"nvlink": 0.1, "nic": 1.8}, 3.0),
        (16, 1.0, 2.0, {"nvlink": 0.1, "nic": 1.9}, 3.1),
    ]
    levels = [
        _level(
            n,
            {
                "ledger": 0.01,
                "launch": 0.2,
                "queue": 0.05,
                "run": c + m + 0.1,
                "compute": c,
                "comm": m,
            },
            t,
            links,
        )
        for n, c, m, links, t in rows
    ]
    return _run(levels, 8.0, "best-fit")


def _packed() -> RunResult:
    """Topology placement: communication stays in the island, the slices run out."""
    rows = [(1, 0.05, 1.0), (4, 0.05, 4.0), (8, 0.06, 7.9), (16, 3.5, 8.0)]
    levels = [
        _level(
            n,
            {"ledger": 0.01, "launch": 0.2, "queue": q, "run": 1.0, "compute": 0.8, "comm": 0.1},
            t,
            {"nvlink": 0.1},
        )
        for n, q, t in rows
    ]
    return _run(levels, 16.0, "topology")


def test_report_names_the_interconnect_in_table_json_and_html(cli) -> None:
    save(_scattered(), Path(cli.cwd) / "a.json")
    table = cli("stress", "report", "a.json", "--html", "a.html")
    assert table.code == 0, table.stderr
    out = table.stdout
    assert "Bottleneck: From level 8, 58% of each job's time is communication over the " in out
    assert "network between nodes (nic)" in out and "not the GPUs." in out
    assert "Time per job at level 8 (the diminishing-returns knee): comm 58% (nic 55%" in out
    assert "comm 58%" in out  # the table's "most time in" looks inside the run

    data = cli("stress", "report", "a.json", "-o", "json")
    assert data.code == 0, data.stderr
    verdict = data.json()["bottleneck"]
    assert verdict["phase"] == "comm" and verdict["link"] == "nic"
    assert (verdict["baseline_level"], verdict["knee_level"]) == (1, 8)
    assert verdict["knee_source"] == "kneedle"
    assert abs(verdict["growth"] - 19) < 1e-9
    assert abs(sum(verdict["shares_at_knee"].values()) - 1) < 1e-9
    assert verdict["sentence"].startswith("from level 8, 58%")

    page = (Path(cli.cwd) / "a.html").read_text()
    assert "<h2>Bottleneck</h2>" in page
    assert "the bottleneck is the interconnect, not the GPUs." in page
    svgs = re.findall(r"<svg\b.*?</svg>", page, flags=re.S)
    picture = next(svg for svg in svgs if "Where the time went" in svg)
    assert "comm, nic (the network between nodes)" in picture and "compute" in picture


def test_compare_report_shows_both_runs_sentences(cli) -> None:
    save(_scattered(), Path(cli.cwd) / "a.json")
    save(_packed(), Path(cli.cwd) / "b.json")
    run = cli("stress", "compare", "b.json", "--baseline", "a.json", "--report", "ab.html")
    assert run.code in (0, 4), run.stderr
    assert "report written to ab.html" in run.stderr
    page = (Path(cli.cwd) / "ab.html").read_text()
    assert "<b>This run</b>: Bottleneck: Queue wait (for a slice) grew" in page
    assert "out of slices (capacity), not the scheduler" in page
    assert "<b>Baseline</b>: Bottleneck: From level 8, 58%" in page
    assert "Compared with</dt><dd>best-fit" in page
    folder = cli("stress", "compare", "b.json", "-b", "a.json", "--html", ".")
    assert folder.code == 2 and "is a folder" in folder.stderr


def test_report_of_a_run_without_a_split_says_what_it_can(cli) -> None:
    """A sleep workload's file: queue and run only, no compute/comm, no links."""
    result = _packed()
    for lv in result.levels:
        lv.phases = {"queue": lv.phases["queue"], "run": 1.0}
        lv.comm_links, lv.bound_by, lv.work_throughput = {}, {}, None
    result.scenario["workload"] = {"kind": "sleep", "args": {"seconds": 1}}
    save(result, Path(cli.cwd) / "s.json")
    shown = cli("stress", "report", "s.json")
    assert shown.code == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("Bottleneck:"))
    assert "Queue wait (for a slice) grew from 50 ms to 3.5 s per job (70x)" in line
    assert "not measured: ledger, launch" in line
    assert "interconnect" not in line and "comm" not in line


BEFORE_REAP = Path(__file__).parents[1] / "fixtures" / "stress" / "before-reap.json"


def test_a_result_saved_before_reap_still_reports_and_compares(cli) -> None:
    """A file an earlier `stress ramp --save` wrote (the sim pool, no reap phase), read by
    `stress report` and compared both ways with the same run once reap is measured."""
    import json

    old = json.loads(BEFORE_REAP.read_text())
    (Path(cli.cwd) / "old.json").write_text(json.dumps(old))
    for level in old["levels"]:
        level["phases"]["reap"] = 0.06
    (Path(cli.cwd) / "new.json").write_text(json.dumps(old))

    shown = cli("stress", "report", "old.json")
    assert shown.code == 0, shown.stderr
    line = next(x for x in shown.stdout.splitlines() if x.startswith("Time per job"))
    assert "unattributed" in line and "reap" not in line
    rows = cli("stress", "report", "old.json", "-o", "csv")
    assert rows.code == 0, rows.stderr
    header, *cells = [r.split(",") for r in rows.stdout.splitlines()]
    at = header.index("phase_reap")
    assert [c[at] for c in cells] == ["-", "-", "-"]

    shown = cli("stress", "report", "new.json")
    line = next(x for x in shown.stdout.splitlines() if x.startswith("Time per job"))
    assert "reap" in line
    for current, baseline in (("new.json", "old.json"), ("old.json", "new.json")):
        run = cli("stress", "compare", current, "-b", baseline, "--report", "ab.html")
        assert run.code == 0, run.stderr  # the same run: nothing regressed
        page = (Path(cli.cwd) / "ab.html").read_text()
        shares = re.findall(r"Time per job at level 4 [^<]*", page)
        assert len(shares) == 2 and sum("reap" in x for x in shares) == 1, shares
