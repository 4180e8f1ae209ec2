"""Classifying a transport's raw outcome and SSH errors into host results."""

from __future__ import annotations

import errno
import socket

import pytest

from gpupoolctl.remote.results import (
    FAILED,
    OK,
    TIMED_OUT,
    UNREACHABLE,
    ExecResult,
    classify_exec,
    find_envelope,
)


def _classify(status: int, out: bytes = b"", err: bytes = b"", python: str = "python3"):
    return classify_exec("h1", python, ExecResult(status, out, err, {"sessions": 1}), 0.5)


def test_ok_envelope() -> None:
    result = _classify(0, b'{"v":1,"ok":true,"data":{"a":1},"error":null}\n')
    assert (result.outcome, result.data, result.error, result.elapsed) == (OK, {"a": 1}, None, 0.5)
    assert result.stats == {"sessions": 1}


def test_agent_failure_keeps_type_and_message() -> None:
    out = b'{"v":1,"ok":false,"data":null,"error":{"type":"SimError","message":"no\\nsuch"}}'
    result = _classify(0, out)
    assert result.outcome == FAILED
    assert result.error_type == "SimError"
    assert result.error == "SimError: no | such"  # always one line


def test_login_noise_before_the_envelope_is_skipped() -> None:
    out = b'Welcome to node\n{"not": "it"}\n{"v":1,"ok":true,"data":1,"error":null}\n'
    assert _classify(0, out).data == 1
    assert find_envelope(b"motd only") is None


def test_no_json_quotes_the_end_of_stderr() -> None:
    err = b"Traceback (most recent call last):\n  File x\n    boom()\nNameError: boom\n"
    result = _classify(1, b"", err)
    assert result.outcome == FAILED
    assert result.error_type == "NoAnswer"
    assert result.error.startswith("agent gave no JSON answer (exit 1): ")
    assert result.error.endswith("NameError: boom")


def test_bootstrap_error_line_is_preferred() -> None:
    err = b"gpupoolctl-bootstrap: payload hash mismatch\nsomething else\n"
    assert _classify(3, b"", err).error.endswith("gpupoolctl-bootstrap: payload hash mismatch")


def test_exit_127_is_missing_python_with_advice() -> None:
    result = _classify(127, b"", b"bash: line 1: exec: python3: not found\n")
    assert result.outcome == FAILED
    assert result.error_type == "NoPython"
    assert result.error.startswith("no python3 on the node")
    assert "set the `python` host var" in result.error


def test_exit_126_is_unusable_interpreter() -> None:
    result = _classify(126, b"", b"sh: 1: /opt/py: Permission denied\n", python="/opt/py")
    assert result.error_type == "NoPython"
    assert "'/opt/py'" in result.error and "Permission denied" in result.error


def test_long_stderr_is_cut() -> None:
    result = _classify(1, b"", b"x" * 5000)
    assert len(result.error) < 400


class TestSshErrors:
    """ssh.py maps paramiko/socket exceptions to outcomes (no network needed)."""

    @pytest.fixture
    def classify(self):
        fabric = pytest.importorskip("fabric")
        paramiko = pytest.importorskip("paramiko")
        from gpupoolctl.remote.ssh import _classify_open_error
        from gpupoolctl.remote.timeouts import Timeouts

        hop = fabric.Connection(
            "10.9.9.9", user="ops", port=2222, config=fabric.Config(ssh_config=paramiko.SSHConfig())
        )

        def run(exc: BaseException):
            return _classify_open_error(exc, hop, True, Timeouts(connect=3, auth=4))

        return run

    def test_refused(self, classify) -> None:
        from paramiko.ssh_exception import NoValidConnectionsError

        refused = OSError(errno.ECONNREFUSED, "Connection refused")
        failure = classify(NoValidConnectionsError({("10.9.9.9", 2222): refused}))
        assert failure.outcome == UNREACHABLE
        assert failure.message == "cannot connect to ops@10.9.9.9:2222: Connection refused"

    def test_dns(self, classify) -> None:
        failure = classify(socket.gaierror(-2, "Name or service not known"))
        assert failure.outcome == UNREACHABLE
        assert "cannot resolve 10.9.9.9" in failure.message

    def test_tcp_timeout_is_unreachable(self, classify) -> None:
        failure = classify(TimeoutError("timed out"))
        assert failure.outcome == UNREACHABLE
        assert "no answer within 3s" in failure.message

    def test_no_route(self, classify) -> None:
        failure = classify(OSError(errno.EHOSTUNREACH, "No route to host"))
        assert failure.outcome == UNREACHABLE

    def test_auth(self, classify) -> None:
        import paramiko

        failure = classify(paramiko.AuthenticationException("Authentication failed."))
        assert failure.outcome == FAILED
        assert failure.error_type == "AuthFailed"
        assert failure.message.startswith("authentication failed for ops@10.9.9.9:2222")

    def test_auth_timeout(self, classify) -> None:
        import paramiko

        failure = classify(paramiko.AuthenticationException("Authentication timeout."))
        assert failure.outcome == TIMED_OUT

    def test_banner_timeout(self, classify) -> None:
        import paramiko

        failure = classify(paramiko.SSHException("Error reading SSH protocol banner: timed out"))
        assert failure.outcome == TIMED_OUT

    def test_other_ssh_errors_fail(self, classify) -> None:
        import paramiko

        failure = classify(paramiko.SSHException("Incompatible ssh peer (no acceptable kex)"))
        assert failure.outcome == FAILED
        assert "Incompatible ssh peer" in failure.message
