"""Agent sessions over the local transport, with simulated nodes: one agent process per node
for many requests, restarted when it dies, bounded per request, closed on exit."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gpupoolctl.jobs.nodes import Call, Nodes
from gpupoolctl.remote import FAILED, OK, TIMED_OUT, Timeouts
from gpupoolctl.remote.session import SessionPool
from gpupoolctl.remote.stream import LineTooLong, Stream, StreamEnded
from gpupoolctl.remote.target import Target, target_from_vars

PY = sys.executable


def sim_target(name: str, state_dir: Path, **extra: Any) -> Target:
    sim = {"template": "dgx-h100", "state_dir": str(state_dir)}
    return target_from_vars(name, {"ansible_connection": "local", "sim": sim, **extra})


@pytest.fixture
def pool() -> Iterator[SessionPool]:
    with SessionPool(timeouts=Timeouts(connect=2, auth=2, command=20)) as sessions:
        yield sessions


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with contextlib.suppress(OSError):  # a zombie is not alive
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    return True


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    return not alive(pid)


def launch_args(job_id: str, argv: list[str]) -> dict[str, Any]:
    return {"job_id": job_id, "argv": argv, "env": {}, "devices": {"vendor": None, "uuids": []}}


def test_one_agent_process_answers_many_requests(pool: SessionPool, tmp_path: Path) -> None:
    target = sim_target("n1", tmp_path)
    first = pool.call(target, {"verb": "ping"})
    session = pool.session(target)
    pid = session.agent_pid
    assert first.ok and first.stats["sessions"] == 1
    for _ in range(5):
        again = pool.call(target, {"verb": "ping"})
        assert again.ok and again.stats["sessions"] == 0
    facts = pool.call(target, {"verb": "facts"})
    assert facts.ok, facts.error
    assert facts.data["host"] == "n1" and facts.data["site"] is None  # as the one-shot path
    assert session.opened == 1 and session.agent_pid == pid and pid is not None and alive(pid)


def test_nodes_runner_launch_and_one_poll_per_host(pool: SessionPool, tmp_path: Path) -> None:
    targets = [sim_target(f"n{i}", tmp_path) for i in (1, 2)]
    nodes = Nodes(targets, run=pool.run)
    argv = [PY, "-c", "pass"]
    launched = nodes.call(
        [
            Call("n1", "launch", launch_args("a", argv)),
            Call("n1", "launch", launch_args("b", argv)),
            Call("n2", "launch", launch_args("c", argv)),
            Call("n9", "ping", {}),
        ]
    )
    assert [r.outcome for r in launched] == [OK, OK, OK, FAILED]
    assert "n9 is not in the inventory" in (launched[3].error or "")
    deadline = time.monotonic() + 10
    while True:
        polled = nodes.poll({"n1": ["a", "b"], "n2": ["c"]})
        states = {j: s["state"] for answer in polled.values() for j, s in answer.items()}
        if set(states.values()) == {"exited"} or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert states == {"a": "exited", "b": "exited", "c": "exited"}
    # Every request of this test went through one agent per host.
    assert [pool.session(t).opened for t in targets] == [1, 1]


def test_a_killed_agent_is_replaced_by_the_next_request(pool: SessionPool, tmp_path: Path) -> None:
    target = sim_target("n1", tmp_path)
    assert pool.call(target, {"verb": "ping"}).ok
    session = pool.session(target)
    old = session.agent_pid
    assert old is not None
    os.kill(old, signal.SIGKILL)
    assert wait_gone(old)
    again = pool.call(target, {"verb": "ping"})  # retry-safe: sent again to a fresh agent
    assert again.ok, again.error
    assert session.opened == 2 and session.agent_pid not in (None, old)


def test_a_request_not_safe_to_repeat_fails_when_its_agent_dies(
    pool: SessionPool, tmp_path: Path
) -> None:
    target = sim_target("n1", tmp_path)
    assert pool.call(target, {"verb": "ping"}).ok
    pid = pool.session(target).agent_pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    assert wait_gone(pid)
    gone = pool.call(target, {"verb": "signal", "args": {"job_id": "x", "signal": "TERM"}})
    assert gone.outcome == FAILED and gone.error_type == "AgentGone"
    assert "exit status -9" in (gone.error or "")
    assert pool.call(target, {"verb": "ping"}).ok


def test_a_hung_request_times_out_and_the_next_one_works(tmp_path: Path) -> None:
    target = sim_target("n1", tmp_path)
    other = sim_target("n2", tmp_path)
    mark = tmp_path / "UP"
    stubborn = [PY, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                f"open({str(mark)!r}, 'w').close(); time.sleep(60)"]  # fmt: skip
    with SessionPool(timeouts=Timeouts(connect=1, auth=1, command=1.5)) as pool:
        up = pool.call(target, {"verb": "launch", "args": {**launch_args("s", stubborn)}})
        assert up.ok, up.error
        deadline = time.monotonic() + 10
        while not mark.exists() and time.monotonic() < deadline:  # it ignores TERM now
            time.sleep(0.02)
        hung_pid = pool.session(target).agent_pid
        assert hung_pid is not None
        started = time.monotonic()
        term = {"job_id": "s", "signal": "TERM", "wait_s": 30}
        hung, fine = pool.run(
            [(target, {"verb": "signal", "args": term}), (other, {"verb": "ping"})]
        )
        assert hung.outcome == TIMED_OUT and hung.error == "command did not finish within 1.5s"
        assert 1.5 <= hung.elapsed < 3.0
        assert fine.ok and fine.elapsed < 3.0  # the hung host did not hold it up
        assert time.monotonic() - started < 3.5
        assert wait_gone(hung_pid)  # the timed-out agent was killed, not left behind
        again = pool.call(target, {"verb": "poll", "args": {"job_ids": ["s"]}})
        assert again.ok and again.data["jobs"]["s"]["state"] == "running"
        assert pool.session(target).opened == 2
        pool.call(target, {"verb": "signal", "args": {"job_id": "s", "signal": "KILL"}})


def test_a_retried_launch_finds_the_one_job(pool: SessionPool, tmp_path: Path) -> None:
    """The answer of a launch is lost (its agent killed after it started the job): the same
    request again, to a new agent, answers the job that runs; a second job never starts."""
    target = sim_target("n1", tmp_path)
    runs = tmp_path / "RUNS"
    argv = [PY, "-c", f"open({str(runs)!r}, 'a').write('x'); import time; time.sleep(30)"]
    request = {"verb": "launch", "args": launch_args("once", argv)}
    first = pool.call(target, request)
    assert first.ok, first.error
    os.kill(pool.session(target).agent_pid or 0, signal.SIGKILL)
    again = pool.call(target, request)
    try:
        assert again.ok, again.error
        assert again.data["pid"] == first.data["pid"] and again.data["existing"] is True
        assert pool.session(target).opened == 2
        deadline = time.monotonic() + 10
        while not runs.exists() and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)
        assert runs.read_text() == "x"
    finally:
        pool.call(target, {"verb": "signal", "args": {"job_id": "once", "signal": "KILL"}})


def test_close_ends_every_agent_and_a_closed_pool_refuses(tmp_path: Path) -> None:
    targets = [sim_target(f"n{i}", tmp_path) for i in (1, 2, 3)]
    pool = SessionPool()
    assert all(r.ok for r in pool.run([(t, {"verb": "ping"}) for t in targets]))
    pids = [pool.session(t).agent_pid for t in targets]
    assert all(pid is not None for pid in pids)
    pool.close()
    assert all(wait_gone(pid or 0) for pid in pids)
    with pytest.raises(RuntimeError):
        pool.session(targets[0])


def test_a_missing_interpreter_fails_like_a_one_shot_request(
    pool: SessionPool, tmp_path: Path
) -> None:
    target = sim_target("n1", tmp_path, python=str(tmp_path / "no-python"))
    result = pool.call(target, {"verb": "ping"})
    assert result.outcome == FAILED and result.error_type == "NoPython"


def test_bad_host_vars_fail_without_a_process(pool: SessionPool) -> None:
    bad = target_from_vars("bad", {"ansible_port": "not a port"})
    assert bad.invalid
    result = pool.call(bad, {"verb": "ping"})
    assert result.outcome == FAILED and result.error_type == "BadHostVars"


# -- the line reader -------------------------------------------------------------------------


class Chunks(Stream):
    def __init__(self, *chunks: bytes) -> None:
        super().__init__()
        self.chunks = list(chunks)
        self.lock = threading.Lock()

    def read_some(self, deadline: float) -> bytes:
        if time.monotonic() > deadline:
            raise TimeoutError
        return self.chunks.pop(0) if self.chunks else b""

    def write(self, data: bytes, deadline: float) -> None:
        raise StreamEnded

    def exit_status(self, wait: float) -> int | None:
        return None

    def close(self, *, graceful: bool) -> None:
        pass


def test_lines_are_cut_across_chunks_and_kept_apart() -> None:
    stream = Chunks(b'{"a"', b":1}\n{", b'"b":2}\n\n')
    far = time.monotonic() + 5
    assert stream.read_line(100, far) == b'{"a":1}\n'
    assert stream.read_line(100, far) == b'{"b":2}\n'
    assert stream.read_line(100, far) == b"\n"
    with pytest.raises(StreamEnded):
        stream.read_line(100, far)


def test_a_line_past_the_bound_stops_the_reading() -> None:
    stream = Chunks(*([b"x" * 64] * 1000))
    with pytest.raises(LineTooLong):
        stream.read_line(1000, time.monotonic() + 5)
    assert len(stream.chunks) >= 1000 - 17  # it stopped soon after the bound


def test_stderr_keeps_only_its_end() -> None:
    stream = Chunks()
    stream.keep_stderr(b"a" * 10000)
    stream.keep_stderr(b"the reason\n")
    assert stream.stderr_tail.endswith(b"the reason\n") and len(stream.stderr_tail) == 8192
