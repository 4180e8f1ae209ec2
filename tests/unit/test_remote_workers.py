"""remote.workers.run_each: every item once, results in order, at most N at a time, and a
failure raised only after every item has ended."""

from __future__ import annotations

import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpupoolctl.remote.workers import run_each


@settings(max_examples=60, deadline=None)
@given(items=st.lists(st.integers(), max_size=40), workers=st.integers(1, 8))
def test_results_are_in_item_order_and_never_more_than_n_run_at_once(
    items: list[int], workers: int
) -> None:
    running, most = 0, 0
    lock = threading.Lock()
    done: list[int] = []

    def work(item: int) -> int:
        nonlocal running, most
        with lock:
            running += 1
            most = max(most, running)
        time.sleep(0.0005)
        with lock:
            running -= 1
        return item * 2

    assert run_each(items, work, max_workers=workers, on_done=done.append) == [i * 2 for i in items]
    assert most <= workers
    assert sorted(done) == sorted(i * 2 for i in items)


def test_a_failure_is_raised_after_every_other_item_ended() -> None:
    ended: list[int] = []

    def work(item: int) -> int:
        if item == 0:
            raise ValueError("boom")
        time.sleep(0.01)
        ended.append(item)
        return item

    with pytest.raises(ValueError, match="boom"):
        run_each([0, 1, 2, 3], work, max_workers=2)
    assert sorted(ended) == [1, 2, 3]


def test_workers_never_keep_the_process_alive() -> None:
    release = threading.Event()
    started = threading.Event()

    def work(item: int) -> int:
        started.set()
        release.wait(5)
        return item

    caller = threading.Thread(target=run_each, args=([1], work), kwargs={"max_workers": 1})
    caller.daemon = True
    caller.start()
    assert started.wait(5)
    workers = [t for t in threading.enumerate() if t.name.startswith("gpupool-worker")]
    assert workers and all(t.daemon for t in workers)
    release.set()
    caller.join(5)
