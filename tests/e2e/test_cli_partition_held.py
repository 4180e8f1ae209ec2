"""`partition reset` / `apply` when every GPU it would change is held in the ledger: it says
what it refused and who holds it, and exits 3, never "nothing to change"."""

from __future__ import annotations

HOST = "sg-dgx02"  # GPU 6: 7x1g.10gb, GPU 7: 2x3g.40gb, the others whole


def gpu7(cli) -> list[str]:
    doc = cli("-l", HOST, "inventory", "-o", "json", "-q").json()
    gpus = doc["hosts"][0]["facts"]["gpus"]
    return sorted(i["profile"] for i in gpus[7]["mig"]["instances"])


def test_reset_with_only_held_gpus_left_names_the_holder_and_exits_3(cli) -> None:
    assert cli("-l", HOST, "pool").code == 0
    held = cli("-l", HOST, "alloc", "--profile", "3g.40gb", "--owner", "alice")
    assert held.code == 0, held.stderr
    alloc_id = held.stdout.strip()
    first = cli("-l", HOST, "partition", "reset", "--yes")  # GPU 6 goes whole, 7 is held
    assert first.code == 3, first.stdout + first.stderr

    run = cli("-l", HOST, "partition", "reset", "--yes")
    assert run.code == 3, run.stdout + run.stderr
    assert "nothing to change" not in run.stderr
    said = f"{HOST} GPU 7: left as it is, its slices are held by {alloc_id} (alice)"
    assert said in run.stderr
    assert "nothing was changed: 1 GPU(s) left as they are" in run.stderr
    (row,) = [line for line in run.stdout.splitlines() if line.split()[:2] == [HOST, "7"]]
    assert "refused" in row and alloc_id in row

    as_json = cli("-l", HOST, "partition", "reset", "--yes", "-o", "json", "-q")
    assert as_json.code == 3
    (gpu,) = as_json.json()["hosts"][0]["gpus"]
    assert gpu["index"] == 7 and gpu["ok"] is False and gpu["applied"] == 0
    assert f"held by {alloc_id} (alice)" in gpu["error"]
    assert gpu7(cli) == ["3g.40gb", "3g.40gb"]
