"""End to end on one simulated MI300X node: the agent as a subprocess, JSON in and out."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def ask(request: dict) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "gpupoolctl.agent.main"],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)  # stdout carries exactly one JSON document


def test_facts_of_a_simulated_mi300x_node(tmp_path: Path) -> None:
    request = {
        "v": 1,
        "verb": "facts",
        "host": "m1",
        "sim": {"template": "mi300x-8", "state_dir": str(tmp_path)},
    }
    answer = ask(request)
    assert answer["ok"] is True, answer["error"]
    facts = answer["data"]
    assert facts["sim"] is True and facts["host"] == "m1"
    assert facts["drivers"] == {"amd": "amdsmi"}
    assert facts["warnings"] == []
    gpus = facts["gpus"]
    assert len(gpus) == 8 and {g["vendor"] for g in gpus} == {"amd"}
    assert {g["model"] for g in gpus} == {"AMD Instinct MI300X"}
    assert {(g["partition"]["compute"], g["partition"]["memory"]) for g in gpus} == {
        ("SPX", "NPS1")
    }
    matrix = facts["topology"]["matrix"]
    assert facts["topology"]["gpus"] == [g["uuid"] for g in gpus]
    assert all(matrix[i][j] == ("X" if i == j else "XGMI") for i in range(8) for j in range(8))
    # The state file now exists and a second agent run sees the same node.
    assert (tmp_path / "m1.json").exists()
    assert [g["uuid"] for g in ask(request)["data"]["gpus"]] == [g["uuid"] for g in gpus]
