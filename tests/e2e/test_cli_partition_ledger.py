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


MI300X = "dxb-mi300x-01"  # eight MI300X cards in one xGMI hive, SPX/NPS1
ONE_CARD_CPX = """\
version: v1
mig-configs:
  cpx1:
    - hosts: [mi300x]
      devices: [1]
      compute-partition: CPX
      memory-partition: NPS4
"""


def _amd_modes(cli) -> list[tuple[str, str]]:
    doc = cli("-l", MI300X, "inventory", "-o", "json").json()
    gpus = doc["hosts"][0]["facts"]["gpus"]
    return [(g["partition"]["compute"], g["partition"]["memory"]) for g in gpus]


def test_a_memory_partition_change_leaves_a_held_card_of_its_hive_alone(cli):
    assert cli("-l", MI300X, "pool").code == 0
    held = cli("-l", MI300X, "alloc", "--vendor", "amd", "--owner", "alice")
    assert held.code == 0, held.stderr
    alloc_id = held.stdout.strip()
    assert f"{MI300X}/gpu0 held by alice" in held.stderr
    spec = cli.tmp / "cpx1.yaml"
    spec.write_text(ONE_CARD_CPX)
    plan = cli("-l", MI300X, "partition", "plan", "-f", str(spec), "-c", "cpx1", "-o", "json")
    gpus = plan.json()["hosts"][0]["gpus"]
    assert [(g["index"], g["also_changes"]) for g in gpus] == [(1, [0, 2, 3, 4, 5, 6, 7])]
    assert "also changes GPU(s) 0, 2-7 (same card or xGMI hive)" in gpus[0]["notes"]
    # Card 1 is free, but NPS4 reloads the driver of the whole hive and moves card 0 to CPX.
    run = cli("-l", MI300X, "partition", "apply", "-f", str(spec), "-c", "cpx1", "--yes")
    assert run.code == 3, run.stdout + run.stderr
    assert f"{MI300X} GPU 1: left as it is, its change would also change GPUs whose slices" in (
        run.stderr
    )
    assert f"GPU 0 by {alloc_id}" in run.stderr
    assert _amd_modes(cli) == [("SPX", "NPS1")] * 8
    forced = cli(
        "-l", MI300X, "partition", "apply", "-f", str(spec), "-c", "cpx1", "--yes", "--force"
    )
    assert forced.code == 0, forced.stdout + forced.stderr
    assert set(_amd_modes(cli)) == {("CPX", "NPS4")}
