"""`gpupoolctl export` end to end on the bundled simulated pool (local transport)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpupoolctl.export.k8s import MIG_CONFIG_LABEL, valid_label_key, valid_label_value
from gpupoolctl.inventory import load_inventory
from gpupoolctl.partition import parse_spec
from gpupoolctl.stress.histogram import distribution
from gpupoolctl.stress.model import KneePoint, Knees, LevelResult, RunResult
from gpupoolctl.stress.result import save

REPO = Path(__file__).resolve().parents[2]
SIM = REPO / "inventories" / "sim.yaml"
HOSTS = ["sg-dgx01", "sg-dgx02", "sg-a100-01", "dxb-a100-01", "dxb-mi300x-01", "dxb-l40s-01"]
MIG_HOSTS = HOSTS[:4]


# The vars the export adds (gpupoolctl.export.ansible); other gpupool_ vars are the
# inventory's own (gpupool_site_links, gpupool_rendezvous_addr) and come back as they are.
EXPORTED = {f"gpupool_{name}" for name in ("gpus", "vendor", "model", "islands", "mig", "slices")}


@pytest.fixture
def gp(cli):
    """The real CLI in a subprocess (tests/e2e/conftest.py), stdin never a terminal."""
    return cli


def one_down(gp) -> Path:
    """An inventory with one simulated host and one that refuses connections."""
    path = gp.tmp / "inv.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "h1": {"transport": "local", "sim": "dgx-h100-mig"},
                        "gone": {"ansible_host": "127.0.0.1", "ansible_port": 1},
                    }
                }
            }
        )
    )
    return path


# -- k8s -----------------------------------------------------------------------------------


def test_k8s_manifest_labels_and_commands_agree(gp) -> None:
    manifest = gp("-q", "export", "k8s", "--namespace", "gpu-ops")
    assert manifest.code == 0, manifest.stderr
    documents = [d for d in yaml.safe_load_all(manifest.stdout) if d]
    assert [(d["kind"], d["metadata"]["namespace"]) for d in documents] == [
        ("ConfigMap", "gpu-ops")
    ]
    config = yaml.safe_load(documents[0]["data"]["config.yaml"])
    assert config["version"] == "v1"
    parse_spec(documents[0]["data"]["config.yaml"], source="config.yaml")  # our parser agrees

    tools = gp("-q", "export", "k8s", "--namespace", "gpu-ops", "-o", "json")
    assert tools.code == 0, tools.stderr
    data = tools.json()
    assert data["configmap"] == documents[0]
    nodes = {n["host"]: n for n in data["nodes"]}
    assert list(nodes) == HOSTS
    for host in MIG_HOSTS:
        assert nodes[host]["labels"][MIG_CONFIG_LABEL] in config["mig-configs"]
    for node in nodes.values():
        assert all(valid_label_key(k) and valid_label_value(v) for k, v in node["labels"].items())
        assert node["labels"]["gpupoolctl.io/pool"] == "sim"
    assert MIG_CONFIG_LABEL not in nodes["dxb-l40s-01"]["labels"]
    assert {h["outcome"] for h in data["hosts"]} == {"ok"}

    commands = gp("-q", "export", "k8s", "--namespace", "gpu-ops", "--format", "commands")
    assert commands.code == 0, commands.stderr
    label_lines = [
        line for line in commands.stdout.splitlines() if line.startswith("kubectl label")
    ]
    assert [line.split()[3] for line in label_lines] == HOSTS
    assert f"{MIG_CONFIG_LABEL}={nodes['sg-dgx02']['mig_config']}" in label_lines[1]
    assert manifest.stdout in commands.stdout  # the same ConfigMap, applied first
    syntax = subprocess.run(["sh", "-n"], input=commands.stdout, text=True, capture_output=True)
    assert syntax.returncode == 0, syntax.stderr


def test_k8s_usage_errors_before_any_host_is_read(gp) -> None:
    csv = gp("export", "k8s", "-o", "csv")
    assert csv.code == 2 and "-o csv does not apply" in csv.stderr
    bad = gp("export", "k8s", "--namespace", "GPU_Operator")
    assert bad.code == 2 and "--namespace" in bad.stderr
    assert not gp.sim_dir.exists()  # no node was touched
    assert "Traceback" not in csv.stderr + bad.stderr


def test_k8s_exit_3_still_exports_the_hosts_read(gp) -> None:
    run = gp("-i", str(one_down(gp)), "export", "k8s", "-o", "json")
    assert run.code == 3, run.stderr
    data = run.json()
    assert [n["host"] for n in data["nodes"]] == ["h1"]
    assert {h["name"]: h["outcome"] for h in data["hosts"]}["gone"] != "ok"
    assert "gone:" in run.stderr and "left out of the export" in run.stderr


def down_lines(stderr: str, host: str = "gone") -> list[str]:
    return [line for line in stderr.splitlines() if f"warning: {host}:" in line]


@pytest.mark.parametrize("form", ["manifest", "commands"])
def test_k8s_prints_nothing_to_apply_when_a_host_is_down(gp, form: str) -> None:
    """`export k8s | kubectl apply -f -` loses the exit status: a ConfigMap without the
    unread hosts' configs would be applied while their labels still name them."""
    run = gp("-q", "-i", str(one_down(gp)), "export", "k8s", "--format", form)
    assert run.code == 3, run.stderr
    assert run.stdout == ""
    (line,) = down_lines(run.stderr)
    assert "export k8s printed nothing" in line
    assert "h1" not in run.stderr  # the host read is not blamed
    as_yaml = gp("-q", "-i", str(one_down(gp)), "export", "k8s", "-o", "yaml")
    assert as_yaml.code == 3
    data = yaml.safe_load(as_yaml.stdout)  # tools still get the hosts read and each outcome
    assert [n["host"] for n in data["nodes"]] == ["h1"]
    assert {h["name"]: h["outcome"] == "ok" for h in data["hosts"]} == {"h1": True, "gone": False}


def test_k8s_node_name_from_the_inventory(gp) -> None:
    path = gp.tmp / "named.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"h1": {"transport": "local", "sim": "l40s-4", "k8s_node_name": "w-1"}}
                }
            }
        )
    )
    run = gp("-q", "-i", str(path), "export", "k8s", "--format", "commands", "--pool", "lab")
    assert run.code == 0, run.stderr
    assert "kubectl label node w-1 --overwrite gpupoolctl.io/pool=lab" in run.stdout


# -- mig-parted ----------------------------------------------------------------------------


def test_mig_parted_round_trips_through_gpupoolctls_own_spec(gp) -> None:
    exported = gp("-q", "export", "mig-parted")
    assert exported.code == 0, exported.stderr
    assert exported.stdout == gp("-q", "partition", "export").stdout  # one exporter, not two
    spec = parse_spec(exported.stdout, source="current.yaml")
    assert spec.labels == ["current"]
    path = gp.tmp / "current.yaml"
    path.write_text(exported.stdout)

    plan = gp("-q", "partition", "plan", "-f", str(path), "-c", "current", "-o", "json")
    assert plan.code == 0, plan.stderr
    hosts = plan.json()["hosts"]
    assert [h["name"] for h in hosts] == HOSTS
    assert all(h["changed"] is False and h["errors"] == [] for h in hosts), hosts
    assert all(not g["ops"] for h in hosts for g in h["gpus"])
    held = gp("-q", "partition", "assert", "-f", str(path), "-c", "current")
    assert held.code == 0, held.stdout + held.stderr


def test_mig_parted_keeps_partition_exports_options(gp) -> None:
    run = gp("-q", "export", "mig-parted", "--config-label", "today", "-o", "json", "-l", "h100")
    assert run.code == 0, run.stderr
    config = run.json()
    assert list(config["mig-configs"]) == ["today"]
    assert {h for e in config["mig-configs"]["today"] for h in e["hosts"]} == {
        "sg-dgx01",
        "sg-dgx02",
    }


@pytest.mark.parametrize("command", [["export", "mig-parted"], ["partition", "export"]])
@pytest.mark.parametrize("output", [[], ["-o", "json"]])
def test_mig_parted_prints_nothing_when_a_host_is_down(
    gp, output: list[str], command: list[str]
) -> None:
    """A config kept to restore from must not silently lack a host's layout (both commands
    are one exporter)."""
    run = gp("-q", "-i", str(one_down(gp)), *output, *command)
    assert run.code == 3
    assert run.stdout == ""
    (line,) = down_lines(run.stderr)
    assert "export mig-parted printed nothing" in line


# -- prometheus ----------------------------------------------------------------------------


def saved_run(path: Path) -> Path:
    def level(n: float, throughput: float) -> LevelResult:
        return LevelResult(
            level=n,
            model="closed",
            warmup_s=1.0,
            hold_s=5.0,
            window_s=5.0,
            submitted=10,
            completed=10,
            failed=0,
            dropped=0,
            throughput=throughput,
            failure_rate=0.0,
            queue_wait=distribution([0.1, 0.2]),
            turnaround=distribution([1.0]),
            phases={},
            harness_s=0.0,
        )

    save(
        RunResult(
            scenario={"name": "nightly"},
            levels=[level(1, 1.0), level(2, 1.8), level(4, 2.0)],
            knees=Knees(
                kneedle=KneePoint("kneedle", "diminishing returns", 2.0, 1.8),
                usl=KneePoint("usl", "capacity peak", None, note="fewer than 5 levels"),
                latency=KneePoint("latency", "queue wait rises", None, note="flat"),
            ),
            backend="pool",
            transport="local",
            tool_version="0.1.0",
            created="2025-06-01T12:00:00Z",
            host="ws",
            commit=None,
        ),
        path,
    )
    return path


def test_prometheus_textfile_has_pool_and_stress_metrics(gp) -> None:
    parser = pytest.importorskip("prometheus_client.parser")
    assert gp("-q", "pool").code == 0  # the ledger learns the slices
    alloc = gp("-q", "alloc", "--profile", "1g.10gb", "--owner", "alice")
    assert alloc.code == 0, alloc.stderr
    folder = gp.tmp / "textfile"
    folder.mkdir()
    result = saved_run(gp.tmp / "nightly.json")
    run = gp("export", "prometheus", "--textfile", str(folder), "--stress", str(result))
    assert run.code == 0, run.stderr
    assert run.stdout == ""
    assert [p.name for p in folder.iterdir()] == ["gpupoolctl.prom"]
    text = (folder / "gpupoolctl.prom").read_text()
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}

    slices = families["gpupoolctl_slices"].samples
    assert {s.labels["host"] for s in slices} == set(HOSTS)
    held = [s for s in slices if s.labels["state"] == "held"]
    assert [(s.labels["profile"], s.value) for s in held] == [("1g.10gb", 1.0)]
    (allocations,) = families["gpupoolctl_allocations_held"].samples
    assert allocations.value == 1
    throughput = {
        s.labels["level"]: s.value
        for s in families["gpupoolctl_stress_throughput_jobs_per_second"].samples
    }
    assert throughput == {"1": 1.0, "2": 1.8, "4": 2.0}
    (knee,) = families["gpupoolctl_stress_knee_level"].samples
    assert (knee.labels, knee.value) == ({"scenario": "nightly", "method": "kneedle"}, 2.0)
    if shutil.which("promtool"):
        check = subprocess.run(
            ["promtool", "check", "metrics"], input=text, text=True, capture_output=True
        )
        assert check.returncode == 0, check.stdout + check.stderr

    stdout = gp("-q", "export", "prometheus")
    assert stdout.code == 0
    assert stdout.stdout.split("# HELP gpupoolctl_ledger_read")[0] in text


def test_prometheus_bad_input_is_one_line(gp) -> None:
    as_json = gp("export", "prometheus", "-o", "json")
    assert as_json.code == 2 and "-o json does not apply" in as_json.stderr
    missing = gp("export", "prometheus", "--textfile", str(gp.tmp / "nope"))
    assert missing.code == 2 and "not a folder" in missing.stderr
    broken = gp.tmp / "broken.json"
    broken.write_text("{")
    bad = gp("export", "prometheus", "--stress", str(broken))
    assert bad.code == 1 and str(broken) in bad.stderr
    assert "Traceback" not in as_json.stderr + missing.stderr + bad.stderr


# -- ansible -------------------------------------------------------------------------------


def without_gpupool(document: dict[str, Any]) -> dict[str, Any]:
    hostvars = {
        host: {k: v for k, v in values.items() if k not in EXPORTED}
        for host, values in document["_meta"]["hostvars"].items()
    }
    return {**document, "_meta": {**document["_meta"], "hostvars": hostvars}}


def test_ansible_inventory_with_facts_and_slices(gp) -> None:
    assert gp("-q", "pool").code == 0
    run = gp("-q", "export", "ansible")
    assert run.code == 0, run.stderr
    document = run.json()
    assert without_gpupool(document) == load_inventory(SIM).to_ansible_list()
    hostvars = document["_meta"]["hostvars"]
    dgx02 = hostvars["sg-dgx02"]
    assert dgx02["gpupool_gpus"] == 8 and dgx02["gpupool_vendor"] == "nvidia"
    assert dgx02["gpupool_mig"] is True and hostvars["sg-dgx01"]["gpupool_mig"] is False
    assert hostvars["dxb-mi300x-01"]["gpupool_vendor"] == "amd"
    assert {s["id"] for s in dgx02["gpupool_slices"]} >= {"sg-dgx02/gpu6/mig-1g.10gb@0"}
    assert all(s["state"] == "free" for s in dgx02["gpupool_slices"])

    quick = gp("-q", "export", "ansible", "--no-facts")
    assert quick.code == 0
    quick_vars = quick.json()["_meta"]["hostvars"]["sg-dgx02"]
    assert "gpupool_gpus" not in quick_vars
    assert quick_vars["gpupool_slices"] == dgx02["gpupool_slices"]

    one = gp("-q", "export", "ansible", "--no-facts", "--host", "sg-dgx02")
    assert one.code == 0 and one.json() == quick_vars
    unknown = gp("-q", "export", "ansible", "--no-facts", "--host", "nope")
    assert unknown.code == 2 and "no such host" in unknown.stderr
    assert gp("export", "ansible", "-o", "yaml").code == 2


def test_ansible_exit_3_keeps_the_whole_inventory(gp) -> None:
    run = gp("-q", "-i", str(one_down(gp)), "export", "ansible")
    assert run.code == 3
    hostvars = run.json()["_meta"]["hostvars"]
    assert hostvars["h1"]["gpupool_gpus"] == 8
    assert "gpupool_gpus" not in hostvars["gone"]
    assert hostvars["gone"]["ansible_port"] == 1


def test_ansible_host_reads_only_that_node(gp) -> None:
    inventory = str(one_down(gp))
    one = gp("-q", "-i", inventory, "export", "ansible", "--host", "h1")
    assert one.code == 0, one.stderr  # "gone" is down, but it was not asked for
    assert one.json()["gpupool_gpus"] == 8
    assert down_lines(one.stderr) == []
    other = gp("-q", "-i", inventory, "export", "ansible", "--host", "gone")
    assert other.code == 3
    assert other.json() == {"ansible_host": "127.0.0.1", "ansible_port": 1}  # its own vars
    assert len(down_lines(other.stderr)) == 1
    unknown = gp("-q", "-i", inventory, "export", "ansible", "--host", "nope")
    assert unknown.code == 2 and "no such host" in unknown.stderr
    assert down_lines(unknown.stderr) == []  # refused before any node is contacted


def test_export_slurm_with_an_empty_ledger_fails_and_leaves_the_target_file_alone(cli) -> None:
    target = Path(cli.cwd) / "gres.conf"
    target.write_text("NodeName=keep Name=gpu Type=a100 Count=1 File=/dev/nvidia0\n")
    run = cli("-q", "export", "slurm", "--only", "gres.conf", "--write", str(target))
    assert run.code == 1
    assert run.stdout == ""
    assert "run `gpupoolctl pool` first" in run.stderr and run.stderr.count("\n") == 1
    assert target.read_text().startswith("NodeName=keep")  # untouched


def test_export_slurm_write_replaces_the_file_with_what_stdout_would_show(cli) -> None:
    assert cli("-q", "pool").code == 0
    printed = cli("-q", "export", "slurm", "--only", "gres.conf")
    assert printed.code == 0 and "Name=gpu Type=h100" in printed.stdout
    target = Path(cli.cwd) / "gres.conf"
    target.write_text("old\n")
    written = cli("-q", "export", "slurm", "--only", "gres.conf", "--write", str(target))
    assert written.code == 0 and written.stdout == ""
    assert target.read_text() == printed.stdout
    assert oct(target.stat().st_mode & 0o777) == "0o644"
    both = cli("-q", "export", "slurm", "--write", str(target))
    assert both.code == 2 and "--only" in both.stderr
