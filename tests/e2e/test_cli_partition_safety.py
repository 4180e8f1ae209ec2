"""`gpupoolctl partition` where cron runs it: overlapping runs, pending MIG modes, one xGMI
hive, failed hooks and timed-out hosts. The real CLI on the bundled simulated pool."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from gpupoolctl.sim.state import SimState

REPO = Path(__file__).resolve().parents[2]
LAYOUTS = REPO / "playbooks" / "layouts.yaml"
H100 = "sg-dgx02"  # dgx-h100-mig: GPUs 0-5 whole, 6 = 7x1g.10gb, 7 = 2x3g.40gb
A100 = "sg-a100-01"  # a100-pcie-4: GPUs 0-2 whole, 3 = MIG
MI300X = "dxb-mi300x-01"  # mi300x-8: eight cards in one xGMI hive, SPX/NPS1


def apply(host: str, label: str, *extra: str, spec: Path = LAYOUTS) -> list[str]:
    """The arguments of `partition apply` from cron: --yes, one host."""
    return ["-l", host, "partition", "apply", "-f", str(spec), "-c", label, "--yes", *extra]


def gpus(cli, host: str) -> list[dict[str, Any]]:
    run = cli("-l", host, "-q", "inventory", "-o", "json")
    assert run.code == 0, run.stderr
    return run.json()["hosts"][0]["facts"]["gpus"]


def test_a_second_apply_while_one_runs_is_refused_and_changes_nothing(cli):
    # Run B starts while run A is between its facts and its last GPU: A's pre-apply-config
    # hook starts it and waits for it to end.
    record = cli.tmp / "second.json"
    second = [sys.executable, "-m", "gpupoolctl.cli.main", *apply(H100, "training", "-o", "json")]
    code = (
        "import json, subprocess, sys; "
        f"run = subprocess.run({second!r}, capture_output=True, text=True, "
        "stdin=subprocess.DEVNULL); "
        f"open({str(record)!r}, 'w').write(json.dumps([run.returncode, run.stdout, run.stderr]))"
    )
    hooks = cli.tmp / "hooks.yaml"
    hooks.write_text(yaml.safe_dump({"pre-apply-config": [[sys.executable, "-c", code]]}))
    first = cli(*apply(H100, "inference", "--hooks", str(hooks)))
    assert first.code == 0, first.stdout + first.stderr
    returncode, stdout, stderr = json.loads(record.read_text())
    assert returncode == 3, stdout + stderr
    refused = [g for h in json.loads(stdout)["hosts"] for g in h["gpus"]]
    assert refused and all(g["applied"] == 0 for g in refused)
    assert all("another `gpupoolctl partition` run holds this node" in g["error"] for g in refused)
    held = cli("-l", H100, "partition", "assert", "-f", str(LAYOUTS), "-c", "inference")
    assert held.code == 0, held.stdout + held.stderr


def test_a_pending_mig_enable_is_not_a_whole_card(cli):
    assert cli("-l", A100, "-q", "inventory").code == 0  # creates the node's state
    state = SimState.open(A100, "a100-pcie-4", cli.sim_dir)
    with state.mutate() as data:
        # An earlier apply enabled MIG on GPU 0; the card waits for a reset to carry it out.
        data["nvidia"]["gpus"][0]["mig"]["pending"] = 1
        data["nvidia"]["gpus"][0]["mig"]["reset_required"] = True
    args = ["-l", A100, "partition", "assert", "-f", str(LAYOUTS), "-c", "training"]
    before = cli(*args)
    assert before.code == 4, before.stdout + before.stderr
    assert "GPU 0 (NVIDIA A100-PCIE-40GB): MIG enable is pending a GPU reset" in before.stdout
    run = cli(*apply(A100, "training"))
    assert run.code == 0, run.stdout + run.stderr
    gpu0 = gpus(cli, A100)[0]["mig"]
    assert (gpu0["mode"], gpu0["pending"]) == ("disabled", "disabled")
    after = cli(*args)
    assert after.code == 0, after.stdout + after.stderr


SPLIT_HIVE = """\
version: v1
mig-configs:
  split:
    - hosts: [mi300x]
      devices: [0]
      compute-partition: CPX
      memory-partition: NPS4
    - hosts: [mi300x]
      devices: [1]
      compute-partition: SPX
      memory-partition: NPS1
"""


def test_two_memory_partitions_in_one_hive_are_refused_before_any_change(cli):
    spec = cli.tmp / "split.yaml"
    spec.write_text(SPLIT_HIVE)
    before = gpus(cli, MI300X)
    run = cli(*apply(MI300X, "split", spec=spec))
    assert run.code == 1, run.stdout + run.stderr
    assert "the cards of one xGMI hive share one memory partition, and none" in run.stderr
    assert f"NPS4 for GPU(s) 0 ({spec}:7)" in run.stderr
    assert f"NPS1 for GPU(s) 1 ({spec}:11)" in run.stderr
    assert gpus(cli, MI300X) == before


def test_a_failed_apply_exit_hook_fails_the_run(cli):
    hooks = cli.tmp / "hooks.yaml"
    hooks.write_text(yaml.safe_dump({"apply-exit": [["false"]]}))
    run = cli(*apply(H100, "inference", "--hooks", str(hooks)))
    assert run.code == 3, run.stdout + run.stderr
    assert "hook apply-exit false: exited with status 1" in run.stderr


def test_a_timed_out_apply_still_brings_the_ledger_up_to_date(cli):
    assert cli("-l", H100, "-q", "pool").code == 0  # a ledger with the host's slices
    hooks = cli.tmp / "hooks.yaml"
    # The GPUs change, then the host does not answer in time.
    hooks.write_text(
        yaml.safe_dump({"apply-exit": [[sys.executable, "-c", "import time; time.sleep(30)"]]})
    )
    run = cli("--command-timeout", "6", *apply(H100, "training", "--hooks", str(hooks)))
    assert run.code == 3 and "timed-out" in run.stderr, run.stdout + run.stderr
    assert all(g["mig"]["mode"] == "disabled" for g in gpus(cli, H100))
    pool = cli("-l", H100, "pool", "--no-refresh", "-o", "json").json()
    ids = sorted(s["slice"] for node in pool["nodes"] for s in node["slices"])
    assert ids == [f"{H100}/gpu{i}" for i in range(8)]
