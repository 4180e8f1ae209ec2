"""The agent's serve mode (one process, a stream of request lines) and its idempotent launch."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.agent.main import serve
from gpupoolctl.remote.bootstrap import encode_serve_header, interpreter_argv
from gpupoolctl.remote.payload import agent_payload

PY = sys.executable


def frame(request_id: int, verb: str = "ping", **fields: Any) -> bytes:
    request = {"v": 1, "verb": verb, "host": "node1", "sim": None, **fields}
    return json.dumps({"id": request_id, "request": request}).encode() + b"\n"


def run_serve(data: bytes, **bounds: int) -> list[dict[str, Any]]:
    out = io.BytesIO()
    assert serve(io.BytesIO(data), out, **bounds) == 0
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_ready_line_then_one_answer_per_request_in_order_then_eof_ends() -> None:
    lines = run_serve(frame(1) + b"\n" + frame(2) + frame(7, "no-such-verb"))
    ready, *answers = lines
    assert ready["serve"] == 1 and ready["pid"] == os.getpid()
    assert [a["id"] for a in answers] == [1, 2, 7]
    assert answers[0]["answer"] == {"v": 1, "ok": True, "data": {"pong": True}, "error": None}
    assert answers[2]["answer"]["error"]["type"] == "BadRequest"


@pytest.mark.parametrize(
    ("line", "request_id", "says"),
    [
        (b"not json\n", None, "not JSON"),
        (b"[1, 2]\n", None, "must be a JSON object"),
        (b'{"request": {}}\n', None, "no integer 'id'"),
        (b'{"id": true, "request": {}}\n', None, "no integer 'id'"),
        (b'{"id": 4}\n', 4, "no 'request'"),
    ],
)
def test_a_bad_line_gets_an_error_and_the_next_request_its_answer(
    line: bytes, request_id: int | None, says: str
) -> None:
    _, bad, good = run_serve(line + frame(5))
    assert bad["id"] == request_id and bad["answer"]["error"]["type"] == "BadRequest"
    assert says in bad["answer"]["error"]["message"]
    assert good == {"id": 5, "answer": {"v": 1, "ok": True, "data": {"pong": True}, "error": None}}


def test_an_oversize_request_is_skipped_in_bounded_reads_and_the_next_one_answered() -> None:
    huge = b'{"id": 1, "request": "' + b"x" * 300_000 + b'"}\n'

    class Counting(io.BytesIO):
        most = 0

        def readline(self, size: int | None = -1) -> bytes:
            assert size is not None and 0 < size <= 1 << 16  # never an unbounded read
            line = super().readline(size)
            Counting.most = max(Counting.most, len(line))
            return line

    out = io.BytesIO()
    assert serve(Counting(huge + frame(2)), out, max_request=1000) == 0
    _, skipped, answered = (json.loads(x) for x in out.getvalue().splitlines())
    assert skipped["id"] is None
    assert skipped["answer"]["error"]["type"] == "RequestTooLarge"
    assert answered["id"] == 2 and answered["answer"]["ok"]
    assert Counting.most <= 1 << 16


def test_an_oversize_answer_becomes_an_error_with_its_id() -> None:
    _, answer = run_serve(frame(3), max_answer=40)
    assert answer["id"] == 3
    assert answer["answer"]["error"]["type"] == "AnswerTooLarge"


def test_a_partial_last_line_at_eof_is_not_run() -> None:
    lines = run_serve(frame(1) + frame(2).rstrip(b"\n"))
    assert [line.get("id") for line in lines[1:]] == [1]


def test_a_gone_workstation_ends_the_loop() -> None:
    class Closed(io.BytesIO):
        def write(self, data: Any) -> int:
            raise BrokenPipeError

    assert serve(io.BytesIO(frame(1)), Closed()) == 0


def test_the_bootstrap_serves_until_eof_and_noise_on_fd_1_stays_out_of_frames(
    tmp_path: Path,
) -> None:
    """Through the real bootstrap: the serve header, the ready line, requests, EOF -> exit 0.
    A job's launch in between does not disturb the stream."""
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env["XDG_STATE_HOME"] = str(tmp_path / "state")
    process = subprocess.Popen(
        interpreter_argv(PY),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    assert process.stdin and process.stdout
    process.stdin.write(encode_serve_header(agent_payload()))
    process.stdin.flush()
    assert json.loads(process.stdout.readline())["serve"] == 1
    argv = [PY, "-c", "print('job output')"]
    process.stdin.write(frame(1, "launch", args={"job_id": "j1", "argv": argv}) + frame(2))
    process.stdin.close()
    answers = [json.loads(line) for line in process.stdout.read().splitlines()]
    assert process.wait(timeout=30) == 0
    assert [a["id"] for a in answers] == [1, 2]
    assert answers[0]["answer"]["ok"], answers[0]


# -- idempotent launch ------------------------------------------------------------------------


class Agent:
    """One-shot agent processes, as the bootstrap runs them."""

    def __init__(self, tmp_path: Path) -> None:
        self.env = {**os.environ, "XDG_STATE_HOME": str(tmp_path / "state")}
        self.env["HOME"] = str(tmp_path)
        self.root = tmp_path / "state" / "gpupoolctl" / "jobs"

    def ask(self, verb: str, args: Any) -> dict[str, Any]:
        request = {"v": 1, "verb": verb, "host": "node1", "sim": None, "args": args}
        done = subprocess.run(
            [PY, "-m", "gpupoolctl.agent.main"],
            input=json.dumps(request),
            capture_output=True,
            text=True,
            env=self.env,
            timeout=30,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)


def counting_job(tmp_path: Path) -> list[str]:
    """A job that appends a line to RUNS each time it starts, then stays up a little."""
    runs = tmp_path / "RUNS"
    code = f"open({str(runs)!r}, 'a').write('ran\\n'); import time; time.sleep(30)"
    return [PY, "-c", code]


def test_the_same_launch_again_answers_the_one_job(tmp_path: Path) -> None:
    agent = Agent(tmp_path)
    args = {"job_id": "j-1", "argv": counting_job(tmp_path), "env": {"A": "1"}, "grace_s": 5}
    first = agent.ask("launch", args)
    again = agent.ask("launch", dict(args))
    try:
        assert first["ok"] and again["ok"], (first, again)
        assert again["data"]["pid"] == first["data"]["pid"]
        assert again["data"]["started"] == first["data"]["started"]
        assert again["data"]["existing"] is True and "existing" not in first["data"]
        deadline = time.monotonic() + 10
        while not (tmp_path / "RUNS").exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # a second start, were there one, would have written by now
        assert (tmp_path / "RUNS").read_text() == "ran\n"
    finally:
        agent.ask("signal", {"job_id": "j-1", "signal": "KILL", "wait_s": 5})


@pytest.mark.parametrize(
    "change",
    [
        {"argv": ["/bin/true"]},
        {"env": {"A": "2"}},
        {"grace_s": 6},
        {"time_limit_s": 100},
    ],
)
def test_a_different_launch_under_a_taken_id_is_still_refused(
    tmp_path: Path, change: dict[str, Any]
) -> None:
    agent = Agent(tmp_path)
    args = {"job_id": "j-2", "argv": ["/bin/true"], "env": {"A": "1"}, "grace_s": 5}
    assert agent.ask("launch", args)["ok"]
    other = agent.ask("launch", {**args, "argv": ["/bin/true"], **change})
    if change == {"argv": ["/bin/true"]}:  # the very same request: the job's answer
        assert other["ok"] and other["data"]["existing"]
        return
    assert other["error"]["type"] == "JobExists"


def test_a_fenced_id_stays_refused_even_for_its_own_request(tmp_path: Path) -> None:
    agent = Agent(tmp_path)
    assert agent.ask("poll", {"job_ids": ["j-3"], "fence": True})["ok"]
    late = agent.ask("launch", {"job_id": "j-3", "argv": ["/bin/true"]})
    assert late["error"]["type"] == "JobExists"


def test_a_launch_that_never_started_is_refused_after_a_bounded_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A claimed folder whose meta matches but whose job never started (its agent died
    between the claim and the start): refused, not launched again."""
    from gpupoolctl.agent.jobs import launch, paths

    monkeypatch.setattr(launch, "RELAUNCH_WAIT_S", 0.3)
    root = tmp_path / "jobs"
    args = {"job_id": "j-4", "argv": ["/bin/true"]}
    request = launch.parse(args)
    paths.ensure_root(root)
    (root / "j-4").mkdir(mode=0o700)
    paths.write_json(root / "j-4" / "meta.json", {**request, "visible": {}, "created": 1.0})
    started = time.monotonic()
    with pytest.raises(launch.AgentError) as raised:
        launch.launch(args, root, "node1", None)
    assert raised.value.type_name == "JobExists" and "never started" in str(raised.value)
    assert 0.3 <= time.monotonic() - started < 3
    assert not (root / "j-4" / "pid.json").exists()
