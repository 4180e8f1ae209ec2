"""The agent's job verbs on this machine: real processes, detached, with their own folder."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

PY = sys.executable


class Agent:
    """Runs the agent as the bootstrap does: a process of its own, one request on stdin."""

    def __init__(self, tmp_path: Path) -> None:
        self.state = tmp_path / "state"
        self.cwd = tmp_path / "cwd"
        self.cwd.mkdir()
        self.root = self.state / "gpupoolctl" / "jobs"

    def ask(self, verb: str, args: Any, sim: dict[str, Any] | None = None) -> dict[str, Any]:
        request = {"v": 1, "verb": verb, "host": "node1", "sim": sim, "args": args}
        env = {**os.environ, "XDG_STATE_HOME": str(self.state), "HOME": str(self.cwd)}
        done = subprocess.run(
            [PY, "-m", "gpupoolctl.agent.main"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=env,
            cwd=self.cwd,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    def ok(self, verb: str, args: Any, sim: dict[str, Any] | None = None) -> dict[str, Any]:
        answer = self.ask(verb, args, sim)
        assert answer["ok"], answer["error"]
        return answer["data"]

    def launch(self, job_id: str, *argv: str, **extra: Any) -> dict[str, Any]:
        args = {"job_id": job_id, "argv": list(argv), "env": {}, **extra}
        return self.ok("launch", args, extra.pop("sim", None))

    def wait(
        self, job_id: str, timeout: float = 10.0, sim: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            status = self.ok("poll", {"job_ids": [job_id]}, sim)["jobs"][job_id]
            if status["state"] not in ("running", "starting") or time.monotonic() > deadline:
                return status
            time.sleep(0.05)


@pytest.fixture
def agent(tmp_path: Path) -> Agent:
    return Agent(tmp_path)


def test_launch_runs_the_job_and_records_its_exit_code_and_output(agent: Agent) -> None:
    code = "import sys; print('to out'); print('to err', file=sys.stderr); sys.exit(3)"
    launched = agent.launch("j-1", PY, "-c", code)
    assert launched["pid"] > 0 and launched["job_dir"] == str(agent.root / "j-1")
    status = agent.wait("j-1")
    assert status["state"] == "exited" and status["exit_code"] == 3 and status["signal"] is None
    assert status["ended"] >= status["started"] > 0
    out = agent.ok("logs", {"job_id": "j-1"})
    assert out["text"] == "to out\n" and out["next_offset"] == 7 and out["state"] == "exited"
    err = agent.ok("logs", {"job_id": "j-1", "stream": "stderr"})
    assert err["text"] == "to err\n"
    folder = agent.root / "j-1"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    for name in ("meta.json", "pid.json", "exit.json", "stdout", "stderr"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o600, name
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["argv"] == [PY, "-c", code]


def test_in_a_folder_shared_with_its_group_a_jobs_files_are_the_groups(agent: Agent) -> None:
    # Several operators' agents on one (simulated) node: each must read the others' job
    # folders to poll them, whatever the umask of the one that launched the job.
    shared = agent.state / "gpupoolctl"
    shared.mkdir(parents=True)
    shared.chmod(0o2770)
    old = os.umask(0o022)
    try:
        agent.launch("j-1", PY, "-c", "print('out')")
        assert agent.wait("j-1")["state"] == "exited"
    finally:
        os.umask(old)
    assert stat.S_IMODE(agent.root.stat().st_mode) == 0o2770
    folder = agent.root / "j-1"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o2770
    for name in ("meta.json", "pid.json", "exit.json", "stdout", "stderr"):
        assert stat.S_IMODE((folder / name).stat().st_mode) == 0o660, name


def test_job_is_detached_from_the_agent_and_survives_it(agent: Agent) -> None:
    started = time.monotonic()
    launched = agent.launch("j-2", PY, "-c", "import time; time.sleep(20)")
    assert time.monotonic() - started < 5  # the agent did not wait for the job
    pid = launched["pid"]
    try:
        assert os.getsid(pid) == pid != os.getsid(0)  # a session (and process group) of its own
        assert os.getpgid(pid) == pid
        assert agent.ok("poll", {"job_ids": ["j-2"]})["jobs"]["j-2"]["state"] == "running"
        stopped = agent.ok("signal", {"job_id": "j-2", "signal": "TERM", "wait_s": 5})
        assert stopped["sent"] and stopped["state"] == "exited"
        assert stopped["exit_code"] == 128 + signal.SIGTERM and stopped["signal"] == "SIGTERM"
    finally:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_term_ignored_then_kill_reaches_the_whole_process_group(agent: Agent) -> None:
    code = (
        "import signal, subprocess, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"child = subprocess.Popen([{PY!r}, '-c', 'import time; time.sleep(30)'])\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(30)\n"
    )
    agent.launch("j-3", PY, "-c", code)
    deadline = time.monotonic() + 10
    while not (text := agent.ok("logs", {"job_id": "j-3"})["text"]):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    grandchild = int(text.split()[0])
    still = agent.ok("signal", {"job_id": "j-3", "signal": "TERM", "wait_s": 0.3})
    assert still["sent"] and still["state"] == "running"
    killed = agent.ok("signal", {"job_id": "j-3", "signal": "KILL", "wait_s": 5})
    assert killed["state"] == "exited" and killed["exit_code"] == 137
    deadline = time.monotonic() + 5
    while True:  # the job's own child went with it: the signal went to the group
        try:
            os.kill(grandchild, 0)
        except ProcessLookupError:
            break
        assert time.monotonic() < deadline, "the job's child survived SIGKILL to the group"
        time.sleep(0.05)
    again = agent.ok("signal", {"job_id": "j-3", "signal": "TERM"})
    assert not again["sent"] and again["state"] == "exited"


def test_nothing_is_interpreted_by_a_shell(agent: Agent, tmp_path: Path) -> None:
    evil = "$(touch PWNED)"
    code = "import os, sys; print(sys.argv[1]); print(os.environ['EVIL'])"
    agent.launch(
        "j-4",
        PY,
        "-c",
        code,
        f"`touch PWNED2`;{evil}",
        env={"EVIL": evil},
        workdir=str(agent.cwd),
    )
    assert agent.wait("j-4")["exit_code"] == 0
    text = agent.ok("logs", {"job_id": "j-4"})["text"]
    assert text == f"`touch PWNED2`;{evil}\n{evil}\n"
    refused = agent.ask("launch", {"job_id": evil, "argv": ["true"]})
    assert not refused["ok"] and refused["error"]["type"] == "BadRequest"
    for bad in ("../x", ".hidden", "a/b", "", "x" * 200):
        assert agent.ask("poll", {"job_ids": [bad]})["error"]["type"] == "BadRequest"
    assert not list(tmp_path.rglob("PWNED*"))
    assert not list(Path.cwd().glob("PWNED*"))


def test_visibility_per_vendor_overrides_the_request(agent: Agent, tmp_path: Path) -> None:
    code = "import os; print(os.environ.get('CUDA_VISIBLE_DEVICES'), os.environ['GPUPOOL_JOB_ID'])"
    sim = {"template": "a100-pcie-4", "state_dir": str(tmp_path / "sim")}  # MIG on GPU 3
    instances = agent.ok("facts", {}, sim)["gpus"][3]["mig"]["instances"][:2]
    uuids = [gi["compute_instances"][0]["uuid"] for gi in instances]
    launched = agent.launch(
        "j-5",
        PY,
        "-c",
        code,
        env={"CUDA_VISIBLE_DEVICES": "all"},
        devices={"vendor": "nvidia", "uuids": uuids},
        sim=sim,
    )
    assert launched["visible"] == {"CUDA_VISIBLE_DEVICES": ",".join(uuids)}
    agent.wait("j-5", sim=sim)
    assert agent.ok("logs", {"job_id": "j-5"}, sim)["text"] == f"{','.join(uuids)} j-5\n"
    # Not a simulated node: this machine does not have the simulated devices.
    absent = agent.ask(
        "launch",
        {"job_id": "j-6", "argv": ["true"], "devices": {"vendor": "nvidia", "uuids": uuids}},
    )
    assert absent["error"]["type"] == "NoSuchDevice", absent
    bad = agent.ask(
        "launch",
        {
            "job_id": "j-6",
            "argv": ["true"],
            "devices": {"vendor": "nvidia", "uuids": ["GPU-x/gi1"]},
        },
    )
    assert bad["error"]["type"] == "BadDevices"


def test_request_errors_are_envelopes(agent: Agent) -> None:
    cases = [
        ({"job_id": "j-7", "argv": []}, "BadRequest"),
        ({"job_id": "j-7", "argv": "python x.py"}, "BadRequest"),
        ({"job_id": "j-7", "argv": ["true"], "env": {"A B": "x"}}, "BadRequest"),
        ({"job_id": "j-7", "argv": ["true"], "workdir": "/no/such/folder"}, "BadWorkdir"),
        ({"job_id": "j-7", "argv": ["/no/such/program"]}, "LaunchFailed"),
    ]
    for args, kind in cases:
        answer = agent.ask("launch", args)
        assert not answer["ok"] and answer["error"]["type"] == kind, (args, answer)
    # The command that could not start left its reason where poll finds it.
    status = agent.ok("poll", {"job_ids": ["j-7"]})["jobs"]["j-7"]
    assert status["state"] == "exited" and status["exit_code"] == 127
    assert "/no/such/program" in status["error"]


def test_fencing_poll_claims_the_id_so_a_late_launch_cannot_start(agent: Agent) -> None:
    plain = agent.ok("poll", {"job_ids": ["j-8"]})["jobs"]["j-8"]
    assert plain["state"] == "absent" and not plain["fenced"]
    fenced = agent.ok("poll", {"job_ids": ["j-8"], "fence": True})["jobs"]["j-8"]
    assert fenced["state"] == "absent" and fenced["fenced"]
    late = agent.ask("launch", {"job_id": "j-8", "argv": [PY, "-c", "open('RAN','w')"]})
    assert late["error"]["type"] == "JobExists"
    assert not (agent.cwd / "RAN").exists()
    assert agent.ok("poll", {"job_ids": ["j-8"]})["jobs"]["j-8"]["fenced"]
    # A launched id is not fenced by a later fencing poll: it reports what it is.
    agent.launch("j-9", PY, "-c", "pass")
    agent.wait("j-9")
    after = agent.ok("poll", {"job_ids": ["j-9"], "fence": True})["jobs"]["j-9"]
    assert after["state"] == "exited" and not after["fenced"]


def test_lost_when_job_and_wrapper_die_without_an_exit_code(agent: Agent) -> None:
    agent.launch("j-10", PY, "-c", "import time; time.sleep(30)")
    pid_file = json.loads((agent.root / "j-10" / "pid.json").read_text())
    os.kill(pid_file["wrapper_pid"], signal.SIGKILL)
    os.killpg(pid_file["pgid"], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while (status := agent.wait("j-10"))["state"] != "lost":
        assert time.monotonic() < deadline, status
        time.sleep(0.05)
    assert status["exit_code"] is None and "gone" in status["error"]


def test_logs_in_chunks_from_an_offset_and_from_the_end(agent: Agent) -> None:
    agent.launch("j-11", PY, "-c", "print('héllo wörld ' * 3, end='')")
    agent.wait("j-11")
    whole = agent.ok("logs", {"job_id": "j-11"})
    assert whole["text"] == "héllo wörld " * 3 and whole["size"] == whole["next_offset"]
    pieces, offset = [], 0
    while True:  # 1..4-byte chunks never split a character, and still make progress
        chunk = agent.ok("logs", {"job_id": "j-11", "offset": offset, "max_bytes": 5})
        if not chunk["text"]:
            break
        pieces.append(chunk["text"])
        offset = chunk["next_offset"]
    assert "".join(pieces) == whole["text"]
    tail = agent.ok("logs", {"job_id": "j-11", "offset": -7})
    assert tail["text"] == "wörld " and tail["offset"] == whole["size"] - 7
    inside = agent.ok("logs", {"job_id": "j-11", "offset": -5})  # starts inside "ö"
    assert inside["text"] == "rld " and inside["offset"] == whole["size"] - 4
    missing = agent.ask("logs", {"job_id": "j-404"})
    assert missing["error"]["type"] == "NoSuchJob"


def test_logs_of_both_streams_in_one_answer(agent: Agent) -> None:
    code = "import sys; print('to out'); print('to err', file=sys.stderr)"
    agent.launch("j-12", PY, "-c", code)
    agent.wait("j-12")
    both = agent.ok("logs", {"job_id": "j-12", "streams": {"stdout": 0, "stderr": 3}})
    assert both["state"] == "exited"
    assert both["streams"]["stdout"]["text"] == "to out\n"
    assert both["streams"]["stderr"]["text"] == "err\n"  # from offset 3
    assert both["streams"]["stderr"]["next_offset"] == len("to err\n")
    for bad in ({}, {"stdin": 0}, ["stdout"], {"stdout": "x"}):
        refused = agent.ask("logs", {"job_id": "j-12", "streams": bad})
        assert refused["error"]["type"] == "BadRequest", bad


def test_nvidia_smi_list_gives_every_gpu_and_mig_device_uuid() -> None:
    from gpupoolctl.agent.jobs.devices import parse_list

    listed = (
        "GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77)\n"
        "  MIG 3g.20gb     Device  0: (UUID: MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f)\n"
        "  MIG 1g.5gb      Device  1: (UUID: MIG-a1b2c3d4-0000-5de3-91c7-45d71c87eb3f)\n"
        "GPU 1: NVIDIA A100-SXM4-40GB (UUID: GPU-0b4d1a52-7c4e-4a0e-9d1c-2f1e1f1e1f1e)\n"
    )
    assert parse_list(listed) == {
        "GPU-5d5ba0d6-d33d-2b2c-524d-9e3d8d2b8a77",
        "MIG-c6d4f1ef-42e4-5de3-91c7-45d71c87eb3f",
        "MIG-a1b2c3d4-0000-5de3-91c7-45d71c87eb3f",
        "GPU-0b4d1a52-7c4e-4a0e-9d1c-2f1e1f1e1f1e",
    }
    assert parse_list("No devices were found\n") == set()
