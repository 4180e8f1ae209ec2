"""Agent sessions over real SSH: one connection and one agent per host for many requests, and
what happens when the agent, the connection or sshd goes away, a request hangs, or a node
answers without end. A launch that is retried never starts a second job."""

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

from gpupoolctl.remote import FAILED, TIMED_OUT, UNREACHABLE, Timeouts
from gpupoolctl.remote.results import HostResult
from gpupoolctl.remote.session import SessionPool
from gpupoolctl.remote.target import Target
from gpupoolctl.sim.state import SimState
from gpupoolctl.sim.statefile import locked
from tests.sshd import SshdFleet, SshdHost, TargetFactory

pytestmark = pytest.mark.ssh

PY = sys.executable
BOUND = Timeouts(connect=5, auth=10, command=20)


@pytest.fixture
def pool(sshd_fleet: SshdFleet) -> Iterator[SessionPool]:
    with SessionPool(timeouts=BOUND, known_hosts=sshd_fleet.known_hosts) as sessions:
        yield sessions


def sim_vars(state_dir: Path) -> dict[str, Any]:
    return {"sim": {"template": "dgx-h100", "state_dir": str(state_dir)}}


def launch(job_id: str, argv: list[str]) -> dict[str, Any]:
    args = {"job_id": job_id, "argv": argv, "env": {}, "devices": {"vendor": None, "uuids": []}}
    return {"verb": "launch", "args": args}


def counting_job(marks: Path) -> list[str]:
    """Appends one line to `marks` each time it starts, then stays up."""
    return [PY, "-c", f"open({str(marks)!r}, 'a').write('x\\n'); import time; time.sleep(60)"]


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def wait_for(test: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not test():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def parent(pid: int) -> int:
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def drop_connection(host: SshdHost, agent_pid: int) -> None:
    """Kill the sshd processes that carry this session (the agent's parent, and its monitor
    above it unless that is the listener): the connection is gone, as on a network cut."""
    listener = host.process.pid if host.process is not None else -1
    chain = [parent(agent_pid)]
    above = parent(chain[0])
    if above not in (listener, 1):
        chain.append(above)
    for pid in chain:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: not any(alive(p) for p in chain))


def kill_job(pool: SessionPool, target: Target, job_id: str) -> None:
    pool.call(target, {"verb": "signal", "args": {"job_id": job_id, "signal": "KILL"}})


def test_many_requests_share_one_connection_and_one_agent(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, pool: SessionPool, tmp_path: Path
) -> None:
    host = sshd_fleet.hosts[0]
    target = ssh_target(host, **sim_vars(tmp_path))
    mark = host.mark()
    results = [pool.call(target, {"verb": "ping"}) for _ in range(5)]
    facts = pool.call(target, {"verb": "facts"})
    assert all(r.ok for r in results) and facts.ok, [r.error for r in [*results, facts]]
    assert [r.stats["sessions"] for r in results] == [1, 0, 0, 0, 0]
    assert host.wait_for_log("Starting session: ", mark)
    assert host.connections_since(mark) == 1 and host.sessions_since(mark) == 1
    assert pool.session(target).opened == 1


def test_agent_killed_mid_launch_the_retry_starts_the_job_once(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, pool: SessionPool, tmp_path: Path
) -> None:
    host = sshd_fleet.hosts[1]
    target = ssh_target(host, **sim_vars(tmp_path))
    assert pool.call(target, {"verb": "ping"}).ok  # the session is up; a ping needs no sim
    session = pool.session(target)
    first_agent = session.agent_pid
    assert first_agent is not None
    marks = tmp_path / "marks"
    request = launch("mid-1", counting_job(marks))
    answered: list[HostResult] = []
    with locked(SimState.path_for(target.name, str(tmp_path))):  # the agent blocks on it
        worker = threading.Thread(target=lambda: answered.append(pool.call(target, request)))
        worker.start()
        blocked = f" {first_agent} "
        assert wait_for(
            lambda: any(
                "->" in line and blocked in line
                for line in Path("/proc/locks").read_text().splitlines()
            )
        ), "the agent never waited for the sim state lock"
        os.kill(first_agent, signal.SIGKILL)  # mid-request: it never answers
        assert wait_for(lambda: session.agent_pid not in (None, first_agent))
    worker.join(timeout=30)
    (result,) = answered
    try:
        assert result.ok, result.error
        assert session.opened == 2
        again = pool.call(target, request)  # its answer lost once more: the same job
        assert again.ok and again.data["existing"] is True
        assert again.data["pid"] == result.data["pid"]
        assert wait_for(marks.exists)
        time.sleep(0.2)  # a second start, were there one, would have written by now
        assert marks.read_text() == "x\n"
    finally:
        kill_job(pool, target, "mid-1")


def test_connection_dropped_between_requests_reconnects_and_finds_the_one_job(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, pool: SessionPool, tmp_path: Path
) -> None:
    host = sshd_fleet.hosts[2]
    target = ssh_target(host, **sim_vars(tmp_path))
    marks = tmp_path / "marks"
    request = launch("drop-1", counting_job(marks))
    first = pool.call(target, request)
    assert first.ok, first.error
    session = pool.session(target)
    old_agent = session.agent_pid
    assert old_agent is not None
    drop_connection(host, old_agent)
    mark = host.mark()
    retried = pool.call(target, request)  # a retry of a launch whose answer was lost
    try:
        assert retried.ok, retried.error
        assert retried.data["pid"] == first.data["pid"] and retried.data["existing"] is True
        assert session.opened == 2 and session.agent_pid != old_agent
        assert host.connections_since(mark) == 1
        assert wait_for(marks.exists)
        time.sleep(0.2)
        assert marks.read_text() == "x\n"
    finally:
        kill_job(pool, target, "drop-1")


def test_sshd_restarted_between_requests(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, pool: SessionPool, tmp_path: Path
) -> None:
    host, other = sshd_fleet.hosts[3], sshd_fleet.hosts[0]
    target = ssh_target(host, **sim_vars(tmp_path))
    fine = ssh_target(other, **sim_vars(tmp_path))
    assert pool.call(target, {"verb": "ping"}).ok
    agent = pool.session(target).agent_pid
    assert agent is not None
    sshd_fleet.stop_host(host.name)
    try:
        drop_connection(host, agent)
        started = time.monotonic()
        down, up = pool.run([(target, {"verb": "ping"}), (fine, {"verb": "ping"})])
        assert down.outcome == UNREACHABLE and down.error_type == "Connect", down.error
        assert up.ok
        assert time.monotonic() - started < 5
    finally:
        sshd_fleet.start_host(host.name)
    back = pool.call(target, {"verb": "ping"})  # same host key, checked against known_hosts
    assert back.ok, back.error
    assert pool.session(target).opened == 2


def test_a_hung_request_times_out_in_its_bound_and_the_session_comes_back(
    sshd_fleet: SshdFleet, ssh_target: TargetFactory, tmp_path: Path
) -> None:
    host, other = sshd_fleet.hosts[0], sshd_fleet.hosts[1]
    target = ssh_target(host, **sim_vars(tmp_path))
    fine = ssh_target(other, **sim_vars(tmp_path))
    up_mark = tmp_path / "up"
    stubborn = [
        PY,
        "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        f"open({str(up_mark)!r}, 'w').close(); time.sleep(60)",
    ]
    bound = Timeouts(connect=5, auth=5, command=2.0)
    with SessionPool(timeouts=bound, known_hosts=sshd_fleet.known_hosts) as pool:
        assert pool.call(target, launch("hang-1", stubborn)).ok
        assert pool.call(fine, {"verb": "ping"}).ok
        assert wait_for(up_mark.exists)  # it ignores SIGTERM from now on
        hung_agent = pool.session(target).agent_pid
        assert hung_agent is not None
        term = {"job_id": "hang-1", "signal": "TERM", "wait_s": 60}
        started = time.monotonic()
        hung, answered = pool.run(
            [(target, {"verb": "signal", "args": term}), (fine, {"verb": "ping"})]
        )
        assert hung.outcome == TIMED_OUT and hung.error == "command did not finish within 2s"
        assert 2.0 <= hung.elapsed < 4.0
        assert answered.ok and answered.elapsed < 2.0  # not held up by the hung host
        assert time.monotonic() - started < 4.5
        assert wait_for(lambda: not alive(hung_agent), 5)  # killed, not left to its 60 s
        polled = pool.call(target, {"verb": "poll", "args": {"job_ids": ["hang-1"]}})
        assert polled.ok and polled.data["jobs"]["hang-1"]["state"] == "running"
        assert pool.session(target).opened == 2
        kill_job(pool, target, "hang-1")


def test_an_answer_without_end_is_cut_off_in_bounded_memory(
    sshd_fleet: SshdFleet,
    ssh_target: TargetFactory,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A node whose `python` says it is ready, then floods one endless line: the session
    stops reading at the bound, says why, and closes; the other host is answered."""
    from gpupoolctl.remote import session as sessions

    monkeypatch.setattr(sessions, "MAX_ANSWER_LINE", 1 << 20)
    flood = tmp_path / "python-that-floods"
    flood.write_text(
        "#!/bin/sh\n"
        "read -r magic size rest\n"  # the bootstrap's header, then the agent zip
        'head -c "$size" >/dev/null\n'
        'printf \'{"serve":1,"v":1,"pid":%d}\\n\' $$\n'
        "exec head -c 67108864 /dev/zero\n"  # 64 MiB, no newline
    )
    flood.chmod(0o755)
    flooding = ssh_target(sshd_fleet.hosts[3], python=str(flood))
    fine = ssh_target(sshd_fleet.hosts[2], **sim_vars(tmp_path))
    with SessionPool(timeouts=BOUND, known_hosts=sshd_fleet.known_hosts) as pool:
        cut, answered = pool.run([(flooding, {"verb": "ping"}), (fine, {"verb": "ping"})])
        assert cut.outcome == FAILED and cut.error_type == "AnswerTooLarge"
        assert "more than 1 MiB" in (cut.error or "")
        assert cut.elapsed < 10
        assert answered.ok
        assert pool.session(flooding).agent_pid is None  # its session was closed
        again = pool.call(flooding, {"verb": "ping"})  # a fresh session, cut off again
        assert again.error_type == "AnswerTooLarge"
        assert pool.session(flooding).opened == 2
