"""The ledger lock's bounded wait, against real processes holding a real flock."""

from __future__ import annotations

import math
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gpupoolctl.errors import ExitCode, UsageError
from gpupoolctl.ledger.errors import LedgerBusy, LedgerError
from gpupoolctl.ledger.lock import (
    DEFAULT_TIMEOUT,
    TIMEOUT_ENV,
    FileLock,
    holders,
    timeout_from_env,
)
from tests.lockholder import HOLDER_NAME, holding


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    return tmp_path / "ledger.jsonl.lock"


def _fail_to_take(lock: FileLock, *, shared: bool = False) -> tuple[LedgerBusy, float]:
    start = time.monotonic()
    with pytest.raises(LedgerBusy) as caught, lock.shared() if shared else lock.exclusive():
        pass
    return caught.value, time.monotonic() - start


def test_busy_after_the_timeout_names_file_holder_and_variable(lock_path: Path) -> None:
    with holding(lock_path) as holder:
        busy, elapsed = _fail_to_take(FileLock(lock_path, timeout=0.3))
    assert 0.3 <= elapsed < 3
    assert busy.holders == ((holder.pid, HOLDER_NAME),)
    assert 0.3 <= busy.waited < 3
    message = str(busy)
    assert "\n" not in message
    assert str(lock_path) in message
    assert f"pid {holder.pid} ({HOLDER_NAME})" in message
    assert TIMEOUT_ENV in message and "now 0.3" in message
    assert isinstance(busy, LedgerError) and busy.exit_code == ExitCode.ERROR


def test_timeout_zero_tries_once(lock_path: Path) -> None:
    with holding(lock_path):
        busy, elapsed = _fail_to_take(FileLock(lock_path, timeout=0))
    assert elapsed < 0.5 and busy.waited < 0.1


def test_a_holder_that_lets_go_in_time_lets_the_waiter_in(lock_path: Path) -> None:
    lock = FileLock(lock_path, timeout=5)
    with holding(lock_path, seconds=0.2) as holder:
        start = time.monotonic()
        with lock.exclusive():
            elapsed = time.monotonic() - start
            assert holder.stdout is not None and holder.stdout.readline() == "released\n"
    assert 0.05 <= elapsed < 3


def test_stopped_holder_times_out_and_killed_holder_frees_the_waiter(lock_path: Path) -> None:
    lock = FileLock(lock_path, timeout=0.3)
    with holding(lock_path) as holder:
        os.kill(holder.pid, signal.SIGSTOP)  # Ctrl-Z in the middle of a commit
        busy, _ = _fail_to_take(lock)
        assert busy.holders[0][0] == holder.pid
        lock.timeout = 10
        killer = threading.Timer(0.3, os.kill, (holder.pid, signal.SIGKILL))
        killer.start()
        start = time.monotonic()
        try:
            with lock.exclusive():
                elapsed = time.monotonic() - start
        finally:
            killer.cancel()
    assert 0.2 <= elapsed < 5


def test_readers_share_and_writers_wait_for_readers(lock_path: Path) -> None:
    lock = FileLock(lock_path, timeout=0)
    with holding(lock_path, mode="sh") as reader:
        with lock.shared():
            pass
        busy, _ = _fail_to_take(lock)
        assert [pid for pid, _ in busy.holders] == [reader.pid]
    with holding(lock_path, mode="ex"):
        _fail_to_take(lock, shared=True)


def test_a_forked_child_is_a_holder_of_its_own(lock_path: Path) -> None:
    lock = FileLock(lock_path, timeout=0)
    with lock.exclusive():
        pid = os.fork()
        if pid == 0:  # the child: sharing the parent's descriptor would let it in
            code = 1
            try:
                with lock.exclusive():
                    code = 0
            except LedgerBusy:
                code = 7
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 7


def test_timeout_comes_from_the_environment(
    lock_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = FileLock(lock_path)
    monkeypatch.setenv(TIMEOUT_ENV, "0.2")
    with holding(lock_path):
        busy, elapsed = _fail_to_take(lock)
        assert 0.2 <= elapsed < 3 and "now 0.2" in str(busy)
        monkeypatch.setenv(TIMEOUT_ENV, "soon")
        with pytest.raises(UsageError, match=TIMEOUT_ENV), lock.exclusive():
            pass


def test_holders_of_a_free_or_missing_file_are_unknown_not_an_error(tmp_path: Path) -> None:
    free = tmp_path / "free.lock"
    free.touch()
    assert holders(free)[0] == ()
    assert holders(free)[1]
    assert holders(tmp_path / "missing.lock")[0] == ()


def test_unknown_holder_is_said_in_the_message() -> None:
    busy = LedgerBusy(
        "/x/l.lock", waited=1.0, timeout=1.0, env=TIMEOUT_ENV, holders=(), unknown_why="why"
    )
    assert "holder not known (why)" in str(busy)


# -- GPUPOOL_LEDGER_LOCK_TIMEOUT ---------------------------------------------------------


def test_unset_or_blank_is_the_default() -> None:
    assert timeout_from_env({}) == DEFAULT_TIMEOUT == 60
    assert timeout_from_env({TIMEOUT_ENV: "  "}) == DEFAULT_TIMEOUT


@given(st.floats(min_value=0, allow_infinity=True, allow_nan=False), st.sampled_from(["", " "]))
def test_any_non_negative_number_is_taken_as_is(value: float, pad: str) -> None:
    assert timeout_from_env({TIMEOUT_ENV: f"{pad}{value!r}{pad}"}) == value


@given(st.floats(max_value=-1e-300, allow_infinity=True, allow_nan=False))
def test_negative_numbers_are_usage_errors(value: float) -> None:
    with pytest.raises(UsageError, match=f"^{TIMEOUT_ENV}=.*expected seconds"):
        timeout_from_env({TIMEOUT_ENV: repr(value)})


@given(st.text(max_size=20))
def test_any_text_gives_a_usable_timeout_or_a_usage_error(text: str) -> None:
    try:
        value = timeout_from_env({TIMEOUT_ENV: text})
    except UsageError as exc:
        assert str(exc).startswith(f"{TIMEOUT_ENV}=") and "\n" not in str(exc)
        assert exc.exit_code == ExitCode.USAGE
    else:
        assert value >= 0 and not math.isnan(value)


def test_nan_and_words_are_usage_errors() -> None:
    for bad in ("nan", "-0.5", "60s", "1,5"):
        with pytest.raises(UsageError):
            timeout_from_env({TIMEOUT_ENV: bad})


@pytest.mark.parametrize("timeout", [5.0, math.inf], ids=["bounded", "no-limit"])
def test_a_long_wait_is_told_once_with_the_holder(
    lock_path: Path, monkeypatch: pytest.MonkeyPatch, timeout: float
) -> None:
    from gpupoolctl.ledger import lock as lock_module

    monkeypatch.setattr(lock_module, "NOTICE_AFTER_S", 0.2)
    told: list[str] = []
    lock = FileLock(lock_path, timeout=timeout, on_wait=told.append)
    with holding(lock_path, seconds=0.8) as holder, lock.exclusive():
        assert holder.stdout is not None and holder.stdout.readline() == "released\n"
    assert len(told) == 1
    assert f"held by pid {holder.pid} ({HOLDER_NAME})" in told[0]
    assert ("without limit" if math.isinf(timeout) else "up to 5 s") in told[0]


def test_short_waits_and_short_timeouts_are_not_told(
    lock_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from gpupoolctl.ledger import lock as lock_module

    monkeypatch.setattr(lock_module, "NOTICE_AFTER_S", 0.5)
    told: list[str] = []
    with holding(lock_path, seconds=0.1), FileLock(lock_path, 5, told.append).exclusive():
        pass  # taken after ~0.1 s: nothing to tell
    gives_up_first = FileLock(lock_path, 0.4, told.append)  # before the 0.5 s notice
    with holding(lock_path), pytest.raises(LedgerBusy), gives_up_first.exclusive():
        pass
    assert told == []


def _descriptors_on(folder: Path) -> int:
    """This process's open descriptors on files in `folder`."""
    count = 0
    for name in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{name}")
        except OSError:  # the listing's own descriptor, closed by now
            continue
        count += target.startswith(str(folder))
    return count


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
def test_a_handle_dropped_without_close_gives_its_descriptors_back(tmp_path) -> None:
    """A library caller (or a test) that drops a handle without close() must not leak its
    lock, watermark and journal descriptors: a long-running process would run out, and
    paramiko's select() refuses any above 1023 (a whole CI run once failed that way)."""
    import gc

    from gpupoolctl.ledger import Ledger

    path = tmp_path / "ledger.jsonl"

    def use_and_drop(handles: int) -> int:
        for _ in range(handles):
            handle = Ledger(path, durable=False)
            with handle.transaction():
                pass
            handle.read()
            del handle
        gc.collect()
        return _descriptors_on(tmp_path)

    after_a_few = use_and_drop(3)
    assert use_and_drop(30) == after_a_few <= 3
