"""Built-in workloads: the agent's launch rewrite, the sim contention model, matmul's refusal."""

from __future__ import annotations

import copy
import io
import json
import math
import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import gpupoolctl
from gpupoolctl.agent.jobs import launch as launch_module
from gpupoolctl.agent.jobs.paths import proc_start
from gpupoolctl.agent.workloads import RUN_WORKLOAD, matmul, sim, workload_argv
from gpupoolctl.remote.payload import agent_payload
from gpupoolctl.sim.state import build_initial
from tests.unit.test_agent_jobs import Agent

PY = sys.executable
ROOT = str(Path(gpupoolctl.__file__).resolve().parent.parent)
WORKLOAD = [PY, "-m", "gpupoolctl.agent.workloads"]


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    return Agent(tmp_path)


def sim_spec(tmp_path: Path, template: str) -> dict[str, Any]:
    return {"template": template, "state_dir": str(tmp_path / "sim")}


def wait(agent: Agent, job_id: str, spec: dict[str, Any] | None, timeout: float = 20.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        status = agent.ok("poll", {"job_ids": [job_id]}, spec)["jobs"][job_id]
        if status["state"] not in ("running", "starting") or time.monotonic() > deadline:
            return status
        time.sleep(0.05)


def job_stdout(agent: Agent, job_id: str, spec: dict[str, Any] | None) -> str:
    return agent.ok("logs", {"job_id": job_id}, spec)["text"]


def workload_env(tmp_path: Path, job: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GPUPOOL_")}
    for name in ("CUDA_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"):
        env.pop(name, None)
    env["PYTHONPATH"] = ROOT
    env["GPUPOOL_JOB_DIR"] = str(tmp_path / "jobs" / job)
    env.update(extra)
    return env


def run_workload(args: list[str], env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = env if env is not None else {**os.environ, "PYTHONPATH": ROOT}
    return subprocess.run(
        [*WORKLOAD, *args], capture_output=True, text=True, env=env, timeout=60, cwd=ROOT
    )


# -- the agent's launch rewrite ----------------------------------------------------------------


def test_builtin_workload_argv_runs_the_payloads_package_with_the_nodes_python() -> None:
    env = {"PYTHONPATH": "/elsewhere"}
    argv = launch_module._builtin_workload(["gpupoolctl-workload", "sim", "--work", "1"], env)
    assert argv == [sys.executable, "-c", RUN_WORKLOAD, "sim", "--work", "1"]
    assert env["PYTHONPATH"].split(os.pathsep) == [ROOT, "/elsewhere"]
    untouched: dict[str, str] = {}
    assert launch_module._builtin_workload(["gpupoolctl-workloads"], untouched) == [
        "gpupoolctl-workloads"
    ]
    assert untouched == {}  # only the exact name is a built-in workload


def test_launched_workload_runs_on_its_mig_slice_and_meta_keeps_the_request(
    agent: Agent, tmp_path: Path
) -> None:
    spec = sim_spec(tmp_path, "dgx-h100-mig")
    gpus = agent.ok("facts", {}, spec)["gpus"]
    small = gpus[6]["mig"]["instances"][0]["compute_instances"][0]["uuid"]  # a 1g.10gb
    requested = ["gpupoolctl-workload", "sim", "--work", "0.02"]
    launched = agent.ok(
        "launch",
        {"job_id": "w-1", "argv": requested, "devices": {"vendor": "nvidia", "uuids": [small]}},
        spec,
    )
    status = wait(agent, "w-1", spec)
    assert status["state"] == "exited" and status["exit_code"] == 0, status
    report = json.loads(job_stdout(agent, "w-1", spec))
    assert report["workload"] == "sim" and report["completed"] is True
    assert report["rate"] == pytest.approx(3352.32 / 3350 / 8, rel=1e-3)  # one of 8 slices
    assert report["fabric"] == "nvlink" and report["devices"] == [small]
    assert (report["sigma"], report["kappa"]) == sim.FABRIC_COEFFICIENTS["nvlink"]
    meta = json.loads((Path(launched["job_dir"]) / "meta.json").read_text())
    assert meta["argv"] == requested


def test_launched_workload_finds_its_amd_logical_gpu(agent: Agent, tmp_path: Path) -> None:
    spec = sim_spec(tmp_path, "mi300x-8")
    gpus = agent.ok("facts", {}, spec)["gpus"]
    agent.ok(
        "launch",
        {
            "job_id": "w-2",
            "argv": ["gpupoolctl-workload", "sim", "--work", "0.02", "--sigma", "0.1"],
            "devices": {"vendor": "amd", "uuids": [gpus[5]["uuid"]]},
        },
        spec,
    )
    assert wait(agent, "w-2", spec)["exit_code"] == 0
    report = json.loads(job_stdout(agent, "w-2", spec))
    assert report["rate"] == pytest.approx(5300 / 3350)
    assert report["devices"] == ["amd5.0"] and report["fabric"] == "xgmi"
    assert report["sigma"] == 0.1 and report["kappa"] == sim.FABRIC_COEFFICIENTS["xgmi"][1]


def test_sim_state_is_in_the_job_env_on_simulated_nodes_only(
    agent: Agent, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUPOOL_SIM_STATE", "/stale/from/the/login")
    show = [PY, "-c", "import os; print(os.environ.get('GPUPOOL_SIM_STATE'))"]
    spec = sim_spec(tmp_path, "l40s-4")
    agent.ok("launch", {"job_id": "e-1", "argv": show}, spec)
    agent.ok("launch", {"job_id": "e-2", "argv": show})
    wait(agent, "e-1", spec)
    wait(agent, "e-2", None)
    on_sim = job_stdout(agent, "e-1", spec).strip()
    assert on_sim == str(tmp_path / "sim" / "node1.json") and Path(on_sim).is_file()
    assert job_stdout(agent, "e-2", None).strip() == "None"


def test_payload_ships_the_workloads() -> None:
    names = zipfile.ZipFile(io.BytesIO(agent_payload().data)).namelist()
    for module in ("__init__", "__main__", "sim", "matmul"):
        assert f"gpupoolctl/agent/workloads/{module}.py" in names


# -- rate and fabric from a sim state (pure) ---------------------------------------------------


def state(template: str) -> dict[str, Any]:
    return build_initial("node1", template)


def gpu_env(state_: dict[str, Any], index: int) -> dict[str, str]:
    return {"CUDA_VISIBLE_DEVICES": state_["nvidia"]["gpus"][index]["uuid"]}


def test_h100_runs_faster_than_a100_and_fabric_sets_the_defaults() -> None:
    h100, a100 = state("dgx-h100"), state("a100-pcie-4")
    fast = sim.describe_card(h100, gpu_env(h100, 0))
    slow = sim.describe_card(a100, gpu_env(a100, 1))
    assert fast.note is None and slow.note is None
    assert fast.rate == pytest.approx(1.0, abs=0.01)
    assert slow.rate == pytest.approx(1555 / 3350, rel=0.01) and slow.rate < fast.rate
    assert (fast.fabric, slow.fabric) == ("nvlink", "pcie")
    assert sim.coefficients("nvlink") == (0.02, 0.002)
    assert sim.coefficients("pcie") == (0.05, 0.01)
    both = sim.describe_card(h100, {"CUDA_VISIBLE_DEVICES": "0,1"})  # CUDA ordinals
    assert both.rate == pytest.approx(2 * fast.rate)


def test_mig_rate_follows_the_instances_memory_slices() -> None:
    data = state("dgx-h100-mig")
    whole = sim.describe_card(data, gpu_env(data, 0)).rate
    gis = [gpu["mig"]["gpu_instances"] for gpu in data["nvidia"]["gpus"][6:8]]
    small, half = (g[0]["compute_instances"][0]["uuid"] for g in gis)
    assert sim.describe_card(data, {"CUDA_VISIBLE_DEVICES": small}).rate == pytest.approx(whole / 8)
    other = gis[1][1]["compute_instances"][0]["uuid"]
    card = sim.describe_card(data, {"CUDA_VISIBLE_DEVICES": f"{half},{other}"})
    assert card.rate == pytest.approx(whole / 2) and card.devices == (half,)  # CUDA: first MIG


def test_amd_partitions_split_the_card_in_handle_order() -> None:
    data = state("mi300x-8")
    whole = sim.describe_card(data, {"ROCR_VISIBLE_DEVICES": "3", "HIP_VISIBLE_DEVICES": "0"})
    assert whole.rate == pytest.approx(5300 / 3350) and whole.fabric == "xgmi"
    data["amd"]["gpus"][0]["compute_partition"] = "CPX"  # card 0 now shows 8 logical GPUs
    data["amd"]["gpus"][0]["memory_partition"] = "NPS4"
    part = sim.describe_card(data, {"ROCR_VISIBLE_DEVICES": "1"})
    assert part.devices == ("amd0.1",) and part.rate == pytest.approx(whole.rate / 8)
    next_card = sim.describe_card(data, {"ROCR_VISIBLE_DEVICES": "8,9", "HIP_VISIBLE_DEVICES": "1"})
    assert next_card.devices == ("amd2.0",) and next_card.rate == pytest.approx(whole.rate)


def test_bandwidth_falls_back_to_the_model_name() -> None:
    data = state("a100-pcie-4")
    gpu = data["nvidia"]["gpus"][0]
    del gpu["memory_bus_width"]
    assert sim.describe_card(data, gpu_env(data, 0)).rate == pytest.approx(1555 / 3350)


@pytest.mark.parametrize(
    "env",
    [
        {},
        {"CUDA_VISIBLE_DEVICES": "GPU-not-on-this-node"},
        {"CUDA_VISIBLE_DEVICES": "MIG-not-on-this-node"},
        {"ROCR_VISIBLE_DEVICES": "0"},  # an NVIDIA node has no AMD GPUs
    ],
)
def test_failed_lookups_fall_back_to_rate_one_with_a_reason(env: dict[str, str]) -> None:
    card = sim.describe_card(state("l40s-4"), env)
    assert card.rate == 1.0 and card.note and card.fabric == "pcie"
    assert sim.describe_card(None, env).fabric == "unknown"


def test_a_card_without_a_bandwidth_says_so() -> None:
    data = state("l40s-4")
    gpu = data["nvidia"]["gpus"][0]
    del gpu["memory_bus_width"]
    gpu["name"] = "Some Future GPU"
    card = sim.describe_card(data, gpu_env(data, 0))
    assert card.rate == 1.0 and "bandwidth" in str(card.note)


def test_usl_peak_of_the_defaults() -> None:
    assert sim.usl_peak(0.02, 0.002) == pytest.approx(math.sqrt(0.98 / 0.002))
    assert sim.usl_peak(0.1, 0.0) is None
    assert sim.slowdown(1, 0.3, 0.3) == 1.0 and sim.slowdown(4, 0.0, 0.5) == 7.0


# -- the contention loop (a fake clock: no waiting) ---------------------------------------------


class Crowd:
    """Peers that always count n."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.pruned = 0

    def count(self) -> int:
        return self.n

    def prune(self) -> int:
        self.pruned += 1
        return 0


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


@settings(max_examples=60, deadline=None)
@given(
    work=st.floats(0.01, 5),
    rate=st.floats(0.2, 3),
    n=st.integers(1, 64),
    sigma=st.floats(0, 1),
    kappa=st.floats(0, 0.05),
    tick=st.floats(0.02, 1),
)
def test_contend_takes_work_times_slowdown_over_rate(
    work: float, rate: float, n: int, sigma: float, kappa: float, tick: float
) -> None:
    clock = FakeClock()
    expected = work * sim.slowdown(n, sigma, kappa) / rate
    limit = sim.HARD_STOP_FACTOR * work / rate
    # Finishing within one shortest sleep of the hard stop may go either way: the last sleep
    # is never shorter than MIN_SLEEP_S, so it may carry the work past the stop or not.
    assume(abs(expected - limit) > sim.MIN_SLEEP_S + 1e-6 * limit)
    outcome = sim.contend(work, rate, sigma, kappa, tick, Crowd(n), clock, clock.sleep)  # type: ignore[arg-type]
    if expected < limit:
        assert outcome.completed
        # The last sleep may overshoot by the shortest sleep the loop takes.
        assert expected - 1e-9 <= outcome.elapsed <= expected + sim.MIN_SLEEP_S + 1e-9
    else:
        assert not outcome.completed and outcome.progress < work
        assert limit <= outcome.elapsed <= limit + sim.MIN_SLEEP_S + 1e-9
    assert outcome.mean_n == pytest.approx(n)


def test_contend_prunes_about_once_a_second() -> None:
    clock, crowd = FakeClock(), Crowd(1)
    sim.contend(5.0, 1.0, 0.0, 0.0, 0.05, crowd, clock, clock.sleep)  # type: ignore[arg-type]
    assert 4 <= crowd.pruned <= 5


# -- peers -------------------------------------------------------------------------------------


def dead_pid() -> int:
    process = subprocess.Popen([PY, "-c", "pass"])
    process.wait()
    return process.pid


def test_peers_count_live_ones_and_prune_dead_and_reused_pids(tmp_path: Path) -> None:
    peers = sim.Peers(tmp_path / "peers")
    peers.join()
    assert peers.count() == 1
    sleeper = subprocess.Popen([PY, "-c", "import time; time.sleep(30)"])
    try:
        (peers.folder / str(sleeper.pid)).write_text(proc_start(sleeper.pid) or "")
        (peers.folder / str(dead_pid())).write_text("")
        (peers.folder / str(os.getppid())).write_text("1")  # a live pid, started at another time
        (peers.folder / "notes.txt").write_text("not a peer")
        assert peers.count() == 4  # until a prune, files are all it knows
        assert peers.prune() == 2
        assert peers.count() == 2
        sleeper.kill()
        sleeper.wait()
        assert peers.prune() == 1 and peers.count() == 1
    finally:
        sleeper.kill()
    peers.leave()
    assert sorted(os.listdir(peers.folder)) == ["notes.txt"]


def _planted_peers_folder(tmp_path: Path) -> tuple[Path, Path]:
    """Under Slurm the jobs root is <node temp>/gpupoolctl-slurm-<uid>, a name anyone on the
    node can guess: another user makes it first, writable by all, with links in it."""
    root = tmp_path / "gpupoolctl-slurm-1000"
    folder = root / sim.PEERS_FOLDER
    folder.mkdir(parents=True)
    root.chmod(0o777)
    folder.chmod(0o777)
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    return folder, victim


def test_peers_never_write_into_a_folder_others_can_change(tmp_path: Path) -> None:
    folder, victim = _planted_peers_folder(tmp_path)
    (folder / ".4242.tmp").symlink_to(victim)
    with pytest.raises(sim.UnsafeFolder, match="others can change"):
        sim.Peers(folder, pid=4242).join()
    assert victim.read_text() == "precious\n"
    assert sorted(os.listdir(folder)) == [".4242.tmp"]


@pytest.mark.skipif(os.geteuid() != 0, reason="making another user's folder needs root")
def test_peers_refuse_a_root_another_user_made(tmp_path: Path) -> None:
    folder, _ = _planted_peers_folder(tmp_path)
    folder.chmod(0o700)
    folder.parent.chmod(0o755)
    os.chown(folder.parent, 65534, 65534)  # nobody's, though it looks private
    with pytest.raises(sim.UnsafeFolder, match="not this user's"):
        sim.Peers(folder, pid=4242).join()


def test_sim_workload_stops_with_the_reason_in_a_planted_root(tmp_path: Path) -> None:
    folder, _ = _planted_peers_folder(tmp_path)
    env = workload_env(tmp_path, "j1", GPUPOOL_JOB_DIR=str(folder.parent / "17"))
    done = run_workload(["sim", "--work", "0.05"], env)
    assert done.returncode == 3, done.stderr
    assert done.stderr.startswith("sim: ") and "others can change" in done.stderr
    assert done.stdout == "" and os.listdir(folder) == []


def test_peers_of_dead_pids_are_ignored_by_a_running_workload(tmp_path: Path) -> None:
    folder = tmp_path / "jobs" / sim.PEERS_FOLDER
    folder.mkdir(parents=True)
    stale = [dead_pid() for _ in range(3)]
    for pid in stale:
        (folder / str(pid)).write_text("")
    done = run_workload(["sim", "--work", "0.1", "--kappa", "0.5"], workload_env(tmp_path, "j1"))
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["mean_n"] == 1.0 and report["completed"]
    assert os.listdir(folder) == []  # the stale files went, and so did its own


def test_four_at_once_on_one_node_each_take_longer_than_one_alone(tmp_path: Path) -> None:
    args = ["sim", "--work", "0.3", "--sigma", "0", "--kappa", "0.5", "--tick", "0.02"]
    alone = run_workload(args, workload_env(tmp_path, "lone"))
    assert alone.returncode == 0, alone.stderr
    lone = json.loads(alone.stdout)
    assert lone["mean_n"] == 1.0 and lone["elapsed"] >= 0.3
    crowd = [
        subprocess.Popen(
            [*WORKLOAD, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=workload_env(tmp_path, f"c{i}"),
        )
        for i in range(4)
    ]
    reports = []
    for process in crowd:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err
        reports.append(json.loads(out))
    for report in reports:
        assert report["mean_n"] > 1.5
        assert report["elapsed"] > 1.5 * lone["elapsed"]
    assert os.listdir(tmp_path / "jobs" / sim.PEERS_FOLDER) == []


def test_sigterm_removes_its_peer_file_and_ends_by_the_signal(tmp_path: Path) -> None:
    folder = tmp_path / "jobs" / sim.PEERS_FOLDER
    process = subprocess.Popen(
        [*WORKLOAD, "sim", "--work", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=workload_env(tmp_path, "t1"),
    )
    try:
        deadline = time.monotonic() + 20
        while not (folder / str(process.pid)).exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        assert (folder / str(process.pid)).exists()
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=20)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGTERM
    assert os.listdir(folder) == []


def test_without_a_sim_state_the_rate_is_one_and_stderr_says_why_once(tmp_path: Path) -> None:
    done = run_workload(["sim", "--work", "0.05"], workload_env(tmp_path, "r1"))
    assert done.returncode == 0
    assert json.loads(done.stdout)["rate"] == 1.0
    assert done.stderr.count("\n") == 1 and "GPUPOOL_SIM_STATE" in done.stderr


# -- matmul ------------------------------------------------------------------------------------


def hiding(tmp_path: Path, torch_source: str) -> dict[str, str]:
    """An env whose python finds these stand-ins for torch and cupy before any real ones."""
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    (fakes / "torch.py").write_text(torch_source)
    (fakes / "cupy.py").write_text("raise ImportError('hidden by the test')\n")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(fakes), ROOT])}


def test_matmul_without_torch_or_cupy_fails_clearly_with_exit_3(tmp_path: Path) -> None:
    env = hiding(tmp_path, "raise ImportError('hidden by the test')\n")
    done = run_workload(["matmul", "--seconds", "1"], env)
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.count("\n") == 1
    assert "neither PyTorch nor CuPy can be imported by" in done.stderr
    assert sys.executable in done.stderr and "sim/sleep" in done.stderr


def test_matmul_with_torch_but_no_gpu_fails_clearly_with_exit_3(tmp_path: Path) -> None:
    fake = "class cuda:\n    @staticmethod\n    def is_available():\n        return False\n"
    done = run_workload(["matmul"], hiding(tmp_path, fake))
    assert done.returncode == 3 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "PyTorch sees no GPU" in done.stderr


def test_matmul_timed_loop_counts_products_and_grows_batches() -> None:
    clock = FakeClock()
    calls: list[int] = []

    def step(k: int) -> None:
        calls.append(k)
        clock.sleep(0.001 * k)  # each product takes 1 ms

    products, elapsed = matmul.timed_loop(step, lambda: None, 1.0, clock)
    assert calls[0] == 1  # the warm-up
    assert products == sum(calls[1:]) and elapsed >= 1.0
    assert elapsed == pytest.approx(products * 0.001)
    assert max(calls) >= 32 and max(calls) * 0.001 <= 2 * 0.05 + 1e-9
    assert matmul.flops_per_product(1000) == 2e9


# -- arguments ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args",
    [
        [],
        ["bogus"],
        ["sim", "--work", "0"],
        ["sim", "--work", "3601"],
        ["sim", "--sigma", "nan"],
        ["sim", "--kappa", "-0.1"],
        ["sim", "--tick", "abc"],
        ["sim", "--frobnicate"],
        ["matmul", "--dtype", "int8"],
        ["matmul", "--size", "12.5"],
        ["matmul", "--size", "0"],
        ["sleep", "--seconds", "inf"],
    ],
)
def test_bad_arguments_exit_2_with_one_line(args: list[str]) -> None:
    done = run_workload(args)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr


def test_help_lists_the_workloads() -> None:
    done = run_workload(["--help"])
    assert done.returncode == 0
    for name in ("sleep", "sim", "matmul"):
        assert f"    {name}" in done.stdout


def test_sleep_reports_its_time() -> None:
    done = run_workload(["sleep", "--seconds", "0.05"])
    assert done.returncode == 0
    report = json.loads(done.stdout)
    assert report["workload"] == "sleep" and report["elapsed"] >= 0.05


def test_state_dicts_are_not_changed_by_a_lookup() -> None:
    data = state("dgx-h100-mig")
    before = copy.deepcopy(data)
    sim.describe_card(data, {"CUDA_VISIBLE_DEVICES": "MIG-x,GPU-y"})
    assert data == before


def test_an_agent_running_from_a_temp_folder_refuses_builtin_workloads_before_claiming(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bootstrap's last resort unpacks into a folder it removes at exit (it then sets
    # GPUPOOL_AGENT_EPHEMERAL): a built-in workload would lose its own code while starting.
    monkeypatch.setenv(launch_module.EPHEMERAL_AGENT, "1")
    request = {
        "job_id": "j-1",
        "argv": ["gpupoolctl-workload", "sim", "--work", "0.1"],
        "env": {},
        "workdir": None,
        "devices": {"vendor": None, "uuids": []},
    }
    with pytest.raises(launch_module.AgentError, match="cache folder") as caught:
        launch_module.launch(request, tmp_path / "jobs", "n1", None)
    assert caught.value.type_name == "LaunchFailed"
    assert not (tmp_path / "jobs" / "j-1").exists()  # the job id was not claimed
    # Ordinary commands still launch from such an agent.
    request = {**request, "job_id": "j-2", "argv": ["true"]}
    assert launch_module.launch(request, tmp_path / "jobs", "n1", None)["pid"] > 0


def test_a_module_in_the_jobs_folder_cannot_shadow_the_workloads_imports(tmp_path: Path) -> None:
    # `python -m` would import this json.py instead of the stdlib's (the job runs here).
    (tmp_path / "json.py").write_text("raise SystemExit('planted json.py was imported')\n")
    argv = workload_argv(["gpupoolctl-workload", "sleep", "--seconds", "0"], sys.executable)
    env = {**os.environ, "PYTHONPATH": ROOT}
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["workload"] == "sleep"
