"""Run a function over items in at most N threads that never keep the process alive.

concurrent.futures joins its worker threads when the interpreter exits, so a Ctrl-C during a
fan-out would still wait for every host's remote command (a partition change may take
minutes) before the process could end. These workers are daemon threads: on Ctrl-C the
caller stops waiting at once, and what runs on the nodes goes on (as it does over SSH when
the workstation goes away).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from typing import TypeVar

Item = TypeVar("Item")
Result = TypeVar("Result")


def run_each(
    items: Sequence[Item],
    work: Callable[[Item], Result],
    *,
    max_workers: int,
    on_done: Callable[[Result], None] | None = None,
    name: str = "gpupool-worker",
) -> list[Result]:
    """`work(item)` for every item, at most `max_workers` at once; results in item order.
    `work` must not raise (it reports its failures as results); if it does, the first
    exception is raised here after every item has ended."""
    pending: queue.SimpleQueue[int | None] = queue.SimpleQueue()
    done: queue.SimpleQueue[tuple[int, Result | None, BaseException | None]] = queue.SimpleQueue()
    for index in range(len(items)):
        pending.put(index)

    def worker() -> None:
        while (index := pending.get()) is not None:
            try:
                done.put((index, work(items[index]), None))
            except BaseException as exc:  # handed to the caller, never lost in a thread
                done.put((index, None, exc))

    workers = max(1, min(max_workers, len(items)))
    for number in range(workers):
        pending.put(None)  # one stop mark per worker, after every item
        threading.Thread(target=worker, name=f"{name}-{number}", daemon=True).start()
    results: list[Result | None] = [None] * len(items)
    failure: BaseException | None = None
    for _ in range(len(items)):
        index, result, exc = done.get()
        if exc is not None:
            failure = failure or exc
            continue
        results[index] = result
        if on_done is not None:
            on_done(result)  # type: ignore[arg-type]
    if failure is not None:
        raise failure
    return results  # type: ignore[return-value]
