"""`export slurm` against real Slurm daemons: the bundled sim pool's export is accepted.

slurmctld reads every exported node line; one slurmd runs as sg-dgx02 (the node with whole
H100s and two MIG profiles) and validates its own gres.conf lines against what slurmctld
was told. A GRES count mismatch would drain it, so IDLE means the export agrees with itself.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.export.slurm import SlurmConfig, slurm_config
from gpupoolctl.ledger import Ledger
from tests.slurm import SlurmCluster, parse_gres

LIVE_NODE = "sg-dgx02"


def _sim_pool_slices(folder: Path) -> list[dict[str, Any]]:
    """Run `gpupoolctl pool` on the bundled sim pool in a private HOME; the ledger's slices."""
    home = folder / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUPOOL_", "XDG_"))}
    env.update({"HOME": str(home), "GPUPOOL_SIM_DIR": str(folder / "sim")})
    done = subprocess.run(
        [sys.executable, "-m", "gpupoolctl.cli.main", "-q", "pool"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )
    assert done.returncode == 0, done.stderr
    ledger = Ledger(home / ".local" / "state" / "gpupoolctl" / "ledger.jsonl")
    return list(ledger.read().state.slices.values())


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> SlurmConfig:
    folder = tmp_path_factory.mktemp("slurm-export")
    slices = _sim_pool_slices(folder)
    return slurm_config(slices, placeholder_dir=str(folder / "dev"))


@pytest.fixture(scope="module")
def cluster(slurm_cluster: Any, exported: SlurmConfig) -> SlurmCluster:
    live_files = [f for group in exported.node(LIVE_NODE).groups for f in group.files]
    return slurm_cluster(
        node_lines=exported.slurm_conf(),
        gres_conf=exported.gres_conf(),
        live_node=LIVE_NODE,
        device_files=live_files,
        require_idle=False,  # the test says what state it found, not the fixture
    )


def test_export_has_mig_and_whole_cards_on_the_live_node(exported: SlurmConfig) -> None:
    kinds = {group.kind.kind for group in exported.node(LIVE_NODE).groups}
    assert kinds == {"gpu", "mig"}


def test_live_node_accepts_its_gres_and_is_idle(cluster: SlurmCluster) -> None:
    node = cluster.node(LIVE_NODE)
    assert node.get("State") == "IDLE", (node.get("State"), node.get("Reason"), cluster.log_tails())
    slurmd_log = cluster.daemons["slurmd"].log_tail(400)
    assert "Removing file-less GPU" not in slurmd_log


def test_every_node_reports_the_exported_gres(cluster: SlurmCluster, exported: SlurmConfig) -> None:
    assert sorted(cluster.nodes) == sorted(node.name for node in exported.nodes)
    for node in exported.nodes:
        shown = cluster.node(node.name)
        assert shown, f"scontrol does not know {node.name}"
        assert parse_gres(shown["Gres"]) == node.counts(), node.name


def test_other_nodes_are_configured_but_down(cluster: SlurmCluster) -> None:
    for name in cluster.nodes:
        if name != LIVE_NODE:
            assert "DOWN" in cluster.node(name)["State"], name


@pytest.mark.parametrize("kind", ["gpu", "mig"])
def test_a_job_asking_for_an_exported_type_completes(
    cluster: SlurmCluster, exported: SlurmConfig, kind: str
) -> None:
    gres_type = next(g.type for g in exported.node(LIVE_NODE).groups if g.kind.kind == kind)
    job = cluster.sbatch(
        f"--gres=gpu:{gres_type}:1",
        "--wrap",
        "echo gpus=$SLURM_JOB_GPUS cuda=$CUDA_VISIBLE_DEVICES",
    )
    record = cluster.wait_job(job)
    assert record["JobState"] == "COMPLETED", (record, cluster.log_tails())
    assert record["NodeList"] == LIVE_NODE
    assert record.get("TresPerNode") == f"gres:gpu:{gres_type}:1"
    output = cluster.job_output(job).split()
    group = next(g for g in exported.node(LIVE_NODE).groups if g.type == gres_type)
    if stat.S_ISCHR(os.stat(group.files[0]).st_mode):
        # Slurm names the GPU by its device file's number: one of this type's files.
        indices = {path.rsplit("gpu", 1)[1] for path in group.files}
        assert output[0].removeprefix("gpus=") in indices, (output, indices)
        assert output[1] == output[0].replace("gpus=", "cuda="), output
    else:  # no mknod here: Slurm still allocates, but sets no device variables
        assert output[0] == "gpus=", output


def test_a_type_the_node_lacks_is_refused(cluster: SlurmCluster, exported: SlurmConfig) -> None:
    # A100 MIG slices exist in the pool, not on the live node: Slurm must not place it there.
    other = next(t for t in exported.types if t not in exported.node(LIVE_NODE).counts())
    done = cluster.run(
        "sbatch", "--parsable", f"--nodelist={LIVE_NODE}", f"--gres=gpu:{other}:1", "--wrap", "true"
    )
    assert done.returncode != 0
    assert "Requested node configuration is not available" in done.stderr


def test_count_only_gres_is_dropped_by_slurmd(
    slurm_cluster: Any, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Why the export warns without File= paths: Slurm's gres/gpu plugin drops file-less
    GPUs, so the node registers with none and is drained for the mismatch."""
    slices = _sim_pool_slices(tmp_path_factory.mktemp("slurm-count-only"))
    config = slurm_config([s for s in slices if s["host"] == LIVE_NODE])
    assert config.warnings
    cluster = slurm_cluster(
        node_lines=config.slurm_conf(), gres_conf=config.gres_conf(), require_idle=False
    )
    try:
        node = cluster.node(LIVE_NODE)
        assert "DRAIN" in node["State"], node
        assert "gres/gpu count reported lower than configured" in node.get("Reason", ""), node
    finally:
        cluster.stop()
