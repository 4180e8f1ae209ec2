"""The ramp's exit code from what it found: 130 for Ctrl-C, else the first of 1, 4, 3, 0."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from gpupoolctl.cli.stress_cmd import ramp_exit_code
from gpupoolctl.errors import ExitCode, GpupoolError
from gpupoolctl.stress.verdict import Verdict


def outcome(thresholds_ok: bool = True) -> SimpleNamespace:
    return SimpleNamespace(thresholds_ok=thresholds_ok)


@pytest.mark.parametrize(
    ("interrupted", "error", "failures", "thresholds_ok", "hosts_failed", "expected"),
    [
        (False, None, [], True, False, ExitCode.OK),
        (False, None, [], True, True, ExitCode.HOSTS_FAILED),
        (False, None, [], False, True, ExitCode.CHECK_FAILED),
        (False, None, ["level 2: no job succeeded"], True, True, ExitCode.CHECK_FAILED),
        (False, None, [], False, False, ExitCode.CHECK_FAILED),
        (True, None, [], False, True, ExitCode.INTERRUPTED),
        (True, "no level measured anything", [], True, True, ExitCode.INTERRUPTED),
    ],
)
def test_exit_code_precedence(interrupted, error, failures, thresholds_ok, hosts_failed, expected):
    verdict = Verdict(error=error, failures=failures)
    runner = SimpleNamespace(interrupted=interrupted)
    backend = SimpleNamespace(hosts_failed=hosts_failed)
    assert ramp_exit_code(outcome(thresholds_ok), verdict, runner, backend) == expected


def test_a_harness_error_is_exit_1_whatever_else_happened():
    verdict = Verdict(error="no level measured anything", failures=["x"])
    with pytest.raises(GpupoolError, match="no level measured anything") as caught:
        ramp_exit_code(
            outcome(False),
            verdict,
            SimpleNamespace(interrupted=False),
            SimpleNamespace(hosts_failed=True),
        )
    assert caught.value.exit_code == ExitCode.ERROR


def test_a_backend_that_cannot_tell_host_failures_counts_as_none():
    runner = SimpleNamespace(interrupted=False)
    assert ramp_exit_code(outcome(), Verdict(), runner, object()) == ExitCode.OK


def test_the_interrupted_exit_code_is_the_shared_one():
    import gpupoolctl.cli.stress_cmd as stress_cmd

    assert not hasattr(stress_cmd, "INTERRUPTED")  # no local constant beside ExitCode's
    assert ExitCode.INTERRUPTED == 130
