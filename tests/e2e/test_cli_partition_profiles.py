"""`partition profiles --model` on the command line: short names, and one line (not an
empty table) for a card that cannot be cut."""

from __future__ import annotations


def test_short_model_names_any_case(cli) -> None:
    for model in ("H100", "a100"):
        run = cli("-q", "partition", "profiles", "--model", model, "-o", "json")
        assert run.code == 0, run.stderr
        doc = run.json()
        assert doc["profiles"] and doc["models"]
        assert all(model.lower() in key.lower() for key in doc["models"])
    table = cli("-q", "partition", "profiles", "-m", "h100")
    assert table.code == 0 and "H100-SXM5-80GB  1g.10gb" in table.stdout


def test_a_model_without_mig_says_so_in_one_line(cli) -> None:
    run = cli("-q", "partition", "profiles", "--model", "L40S")
    assert run.code == 0, run.stderr
    assert run.stdout == (
        "L40S has no MIG profiles and no AMD partition modes: used as whole cards\n"
    )
    as_json = cli("-q", "partition", "profiles", "--model", "l40s", "-o", "json")
    assert as_json.json() == {"source": "catalog", "models": ["L40S"], "profiles": []}
    nodes = cli("-q", "-l", "dxb-l40s-01", "partition", "profiles")
    assert nodes.code == 0, nodes.stderr
    assert nodes.stdout == "no MIG-capable GPU on the selected hosts\n"
