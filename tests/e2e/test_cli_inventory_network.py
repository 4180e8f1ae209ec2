"""`inventory --network` end to end through the real CLI on the bundled simulated pool, and a
bad gpupool_site_links as one line naming the file."""

from __future__ import annotations

import csv
import io


def test_network_json_on_the_bundled_pool(cli):
    run = cli("-o", "json", "inventory", "--network")
    assert run.code == 0, run.stderr
    doc = run.json()
    assert doc["summary"]["ok"] == 6
    hosts = {h["name"]: h for h in doc["hosts"]}
    assert {h["site"] for h in hosts.values()} == {"singapore", "dubai"}
    assert hosts["sg-dgx01"]["site"] == "singapore" and hosts["dxb-l40s-01"]["site"] == "dubai"
    dgx = hosts["sg-dgx01"]["nics"]
    compute = [n for n in dgx if n["kind"] == "infiniband"]
    assert len(compute) == 8 and all(n["speed_gbps"] == 400.0 for n in compute)
    assert all(n["state"] == "up" for n in dgx)
    a100 = hosts["dxb-a100-01"]["nics"]
    assert [n["speed_gbps"] for n in a100 if n["kind"] == "roce"] == [100.0, 100.0]
    mi300x = hosts["dxb-mi300x-01"]["nics"]
    assert sum(1 for n in mi300x if n["kind"] == "roce" and n["speed_gbps"] == 400.0) == 8
    assert doc["site_links"] == [{"sites": ["dubai", "singapore"], "gbps": 10.0, "rtt_ms": 75.0}]


def test_network_table_and_csv(cli):
    run = cli("inventory", "--network", "-l", "sg-a100-01,dxb-mi300x-01")
    assert run.code == 0, run.stderr
    out = run.stdout
    assert "sg-a100-01 (site singapore)" in out and "dxb-mi300x-01 (site dubai)" in out
    assert "NIC" in out and "KIND" in out and "SPEED" in out and "STATE" in out
    assert "mlx5_0" in out and "100 Gb/s" in out and "400 Gb/s" in out
    assert "dubai <-> singapore" in out and "75" in out
    assert "MODEL" not in out  # the network view, not the GPU table
    rows = list(csv.DictReader(io.StringIO(cli("-o", "csv", "inventory", "--network").stdout)))
    assert {r["host"] for r in rows} >= {"sg-dgx01", "dxb-l40s-01"}
    assert {r["site"] for r in rows} == {"singapore", "dubai"}
    assert {r["kind"] for r in rows} == {"ethernet", "infiniband", "roce"}


def test_the_facts_of_every_command_carry_the_site(cli):
    doc = cli("-o", "json", "inventory", "-l", "dxb-l40s-01").json()
    facts = doc["hosts"][0]["facts"]
    assert facts["site"] == "dubai"
    assert len(facts["network"]["nics"]) == 4


def test_bad_site_links_one_line_naming_the_file(cli):
    path = cli.tmp / "fleet.yaml"
    path.write_text(
        "all:\n"
        "  vars:\n"
        "    transport: local\n"
        "    gpupool_site_links:\n"
        "      - {sites: [sg, dxb], gbps: 10}\n"
        "  hosts:\n"
        "    n1: {sim: l40s-4, site: sg}\n"
    )
    for args in (("inventory", "--network"), ("inventory", "hosts")):
        run = cli("-i", str(path), *args)
        assert run.code == 1, (run.code, run.stderr)
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1, lines
        assert str(path) in lines[0] and "gpupool_site_links[0]: missing rtt_ms" in lines[0]
        assert "Traceback" not in run.stderr


def test_sim_nics_replace_a_simulated_nodes_nics_until_taken_out(cli):
    def fleet(extra: str) -> str:
        path = cli.tmp / "fleet.yaml"
        path.write_text(
            f"all:\n  vars:\n    transport: local\n  hosts:\n    n1:\n      sim: l40s-4\n{extra}"
        )
        return str(path)

    faster = fleet(
        "      sim_nics:\n"
        "        - {name: ib0, kind: infiniband, speed_gbps: 400}\n"
        "        - {name: ib1, kind: infiniband, speed_gbps: 400, state: down}\n"
    )
    run = cli("-i", faster, "-o", "json", "inventory", "--network")
    assert run.code == 0, run.stderr
    nics = run.json()["hosts"][0]["nics"]
    assert [(n["name"], n["speed_gbps"], n["state"]) for n in nics] == [
        ("ib0", 400.0, "up"),
        ("ib1", 400.0, "down"),
    ]
    plain = cli("-i", fleet(""), "-o", "json", "inventory", "--network").json()
    assert {n["name"] for n in plain["hosts"][0]["nics"]} == {"mlx5_0", "mlx5_1", "mlx5_2", "eno1"}

    bad = fleet("      sim_nics: [{name: ib0, kind: infiniband, speed_gbps: 400Gb}]\n")
    run = cli("-i", bad, "inventory", "--network")
    assert run.code == 1, (run.code, run.stderr)
    lines = run.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in run.stderr
    assert f"{bad}:5: host 'n1': sim_nics[0]: speed_gbps must be a number" in lines[0]
