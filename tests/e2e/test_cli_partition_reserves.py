"""`partition apply` reserves every card in the ledger before it touches it, as an elastic
re-cut does (one executor for both): work placed meanwhile never lands on a card being
changed, and a run that is interrupted or killed leaves its cards reserved until a later
command reads their nodes again.

A hooks file holds the apply inside its node's partition run (pre-apply-config waits for a
file), so the tests act while the cards are being changed, without timing guesses.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

LAYOUTS = str(Path(__file__).resolve().parents[2] / "playbooks" / "layouts.yaml")
HOST = "sg-dgx01"  # 8 whole H100s in the bundled pool
PY = sys.executable
LONG = ["--", PY, "-c", "import time; time.sleep(60)"]


def pausing_hooks(folder: Path) -> Path:
    """A hooks file whose pre-apply-config step says it started, then waits (at most 60 s)
    until `go` appears in `folder`."""
    wait = (
        'touch "$0/started"; i=0; '
        'while [ ! -e "$0/go" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done'
    )
    path = folder / "hooks.yaml"
    path.write_text(json.dumps({"pre-apply-config": [["sh", "-c", wait, str(folder)]]}))
    return path


def paused_apply(cli) -> subprocess.Popen[str]:
    """`partition apply -c inference` on HOST, started in the background and returned once
    its node is inside the partition run (held there until `go` appears in cli.tmp)."""
    apply = cli.spawn(
        "-q", "-l", HOST, "partition", "apply", "-f", LAYOUTS, "-c", "inference", "--yes",
        "--hooks", str(pausing_hooks(cli.tmp)),
    )  # fmt: skip
    for _ in range(600):  # bounded: 30 s
        if (cli.tmp / "started").exists():
            return apply
        if apply.poll() is not None:
            raise AssertionError(apply.communicate())
        time.sleep(0.05)
    apply.kill()
    raise AssertionError("the apply never reached its node's pre-apply-config hook")


def reservations(cli) -> list[dict[str, Any]]:
    run = cli("-q", "ledger", "show", "-o", "json")
    assert run.code == 0, run.stderr
    records = [r for r in run.json() if r["op"] == "reshape"]
    open_ = {r["data"]["id"]: r["data"] for r in records if r["data"]["state"] == "reserved"}
    for record in records:
        if record["data"]["state"] != "reserved":
            open_.pop(record["data"]["id"], None)
    return list(open_.values())


def mig_profiles(cli) -> list[list[str]]:
    doc = cli("-l", HOST, "inventory", "-o", "json", "-q").json()
    gpus = doc["hosts"][0]["facts"]["gpus"]
    return [sorted(i["profile"] for i in (g.get("mig") or {}).get("instances", [])) for g in gpus]


def test_work_placed_while_cards_are_partitioned_never_lands_on_them(jobs_cli) -> None:
    cli = jobs_cli
    assert cli("-q", "pool", "--summary").code == 0  # a ledger is kept
    apply = paused_apply(cli)
    try:
        reserved = reservations(cli)
        assert sorted(r["gpu"] for r in reserved) == [f"{HOST}/gpu{i}" for i in range(8)]
        assert {r["source"] for r in reserved} == {"apply"}
        # Every card of the host is being cut: nothing there may be handed out meanwhile.
        alloc = cli("-q", "alloc", "--profile", "gpu", "--host", HOST)
        assert alloc.code == 5, alloc.stdout + alloc.stderr
        waits = cli("submit", "--profile", "gpu", "--host", HOST, "--name", "w", *LONG)
        assert waits.code == 0 and "queued" in waits.stderr, waits.stderr
        elsewhere = cli("-q", "alloc", "--profile", "gpu", "--host", "sg-dgx02")
        assert elsewhere.code == 0, elsewhere.stderr  # other hosts' cards are not held up
    finally:
        (cli.tmp / "go").touch()
        out, err = apply.communicate(timeout=120)
    assert apply.returncode == 0, out + err
    assert all(p == ["1g.10gb"] * 7 for p in mig_profiles(cli))
    assert reservations(cli) == []
    verify = cli("-q", "ledger", "verify", "-o", "json")
    assert verify.code == 0, verify.stdout  # no hold on a slice that is gone
    pool = cli("-q", "-l", HOST, "pool", "--no-refresh", "-o", "json").json()
    (node,) = pool["nodes"]
    assert {s["kind"] for s in node["slices"]} == {"mig"}
    assert not [s for s in node["slices"] if s["state"] != "free"]


def test_a_held_card_is_refused_and_the_rest_apply(jobs_cli) -> None:
    cli = jobs_cli
    assert cli("-q", "pool", "--summary").code == 0
    held = cli("-q", "alloc", "--profile", "gpu", "--host", HOST, "--owner", "alice")
    assert held.code == 0, held.stderr
    alloc_id = held.stdout.strip()
    run = cli("-l", HOST, "partition", "apply", "-f", LAYOUTS, "-c", "inference", "--yes")
    assert run.code == 3, run.stdout + run.stderr
    assert f"its slices are held by {alloc_id} (alice)" in run.stderr
    assert run.stderr.count("using the bundled simulated pool") == 1  # read once
    profiles = mig_profiles(cli)
    assert sorted(map(len, profiles)) == [0] + [7] * 7  # the held card alone stays whole
    assert cli("-q", "ledger", "verify").code == 0


def test_an_interrupted_apply_keeps_its_cards_reserved_until_the_node_is_read(cli) -> None:
    assert cli("-q", "pool", "--summary").code == 0
    apply = paused_apply(cli)
    try:
        apply.send_signal(signal.SIGINT)  # Ctrl-C
        out, err = apply.communicate(timeout=30)  # at once: the node is not waited for
    finally:
        if apply.poll() is None:
            apply.kill()
    assert apply.returncode == 130, out + err
    assert f"interrupted: {HOST} may still be changing its GPUs" in err
    assert len(reservations(cli)) == 8
    verify = cli("-q", "ledger", "verify")
    assert verify.code == 4 and "ended without closing it" in verify.stdout, verify.stdout
    # The node goes on with the change: while it does, the cards stay reserved.
    still = cli("-q", "schedule")
    assert f"{HOST}: a partition run still holds the node" in still.stderr, still.stderr
    assert len(reservations(cli)) == 8
    assert cli("-q", "alloc", "--profile", "gpu", "--host", HOST).code == 5
    (cli.tmp / "go").touch()
    for _ in range(60):  # bounded: until the node's run has ended and a pass closed them
        assert cli("-q", "schedule").code == 0
        if not reservations(cli):
            break
        time.sleep(0.1)
    assert reservations(cli) == []
    assert cli("-q", "ledger", "verify").code == 0
    # The ledger says what the node is now: cut, so no whole card to hand out.
    assert cli("-q", "alloc", "--profile", "gpu", "--host", HOST).code == 5
    one = cli("-q", "alloc", "--profile", "1g.10gb", "--host", HOST)
    assert one.code == 0, one.stderr


def test_a_killed_apply_is_recovered_by_the_next_apply(cli) -> None:
    assert cli("-q", "pool", "--summary").code == 0
    killed = cli(
        "-q", "-l", HOST, "partition", "apply", "-f", LAYOUTS, "-c", "inference", "--yes",
        extra_env={"GPUPOOL_TEST_CRASH_AFTER": "reshape-applied"},
    )  # fmt: skip
    assert killed.code == -signal.SIGKILL
    assert len(reservations(cli)) == 8  # the node changed; the ledger does not know yet
    again = cli("-q", "-l", HOST, "partition", "apply", "-f", LAYOUTS, "-c", "inference", "--yes")
    assert again.code == 0, again.stderr  # it read the node first: nothing left to change
    assert reservations(cli) == []
    assert cli("-q", "ledger", "verify").code == 0
    assert all(p == ["1g.10gb"] * 7 for p in mig_profiles(cli))
