"""Partitioning respects the ledger: held slices are not cut away, and after a change the
ledger's slices follow the hardware."""

from __future__ import annotations

from pathlib import Path

LAYOUTS = Path(__file__).resolve().parents[2] / "playbooks" / "layouts.yaml"
HOST = "sg-dgx02"  # GPU 6: 7x1g.10gb, GPU 7: 2x3g.40gb, the others whole


def _gpu_layouts(cli) -> dict[int, list[str]]:
    doc = cli("-l", HOST, "inventory", "-o", "json").json()
    return {
        g["index"]: sorted(i["profile"] for i in g["mig"]["instances"])
        for g in doc["hosts"][0]["facts"]["gpus"]
    }


def test_held_gpu_is_left_alone_and_the_ledger_follows_the_change(cli):
    assert cli("-l", HOST, "pool").code == 0
    held = cli("-l", HOST, "alloc", "--profile", "3g.40gb", "--owner", "alice")
    assert held.code == 0, held.stderr
    alloc_id = held.stdout.strip()
    run = cli("-l", HOST, "partition", "apply", "-f", str(LAYOUTS), "-c", "training", "--yes")
    assert run.code == 3, run.stdout + run.stderr
    assert f"{HOST} GPU 7: left as it is, its slices are held by {alloc_id}" in run.stderr
    layouts = _gpu_layouts(cli)
    assert layouts[7] == ["3g.40gb", "3g.40gb"]  # the held GPU kept its slices
    assert layouts[6] == []  # the free MIG GPU went back to a whole card
    pool = cli("-l", HOST, "pool", "--no-refresh", "-o", "json").json()
    ids = {s["slice"] for node in pool["nodes"] for s in node["slices"]}
    assert f"{HOST}/gpu6" in ids and not any(i.startswith(f"{HOST}/gpu6/mig-") for i in ids)
    assert cli("ledger", "verify").code == 0

    forced = cli(
        "-l", HOST, "partition", "apply", "-f", str(LAYOUTS), "-c", "training", "--yes", "--force"
    )
    assert forced.code == 0, forced.stderr
    assert _gpu_layouts(cli)[7] == []
    verify = cli("ledger", "verify", "-o", "json")
    assert verify.code == 4  # the hold now points at a slice that is gone, and says so
    assert alloc_id in verify.stdout
