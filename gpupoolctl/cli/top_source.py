"""What a frame of `top` (and `pool --html`) is made from, kept between frames."""

from __future__ import annotations

import dataclasses
import gc
import threading
import time
from typing import TYPE_CHECKING, Any

from gpupoolctl.cli.handles import open_jobs, open_ledger
from gpupoolctl.cli.settings import Settings

if TYPE_CHECKING:
    from gpupoolctl.board.follow import Follower
    from gpupoolctl.board.frame import Filter, Frame
    from gpupoolctl.ledger import View

REASONS_EVERY_S = 10.0  # why queued jobs wait is asked again at least this often
REASONS_AT_MOST_EVERY_S = 2.0  # ... and at most this often, however busy the ledger


def settle_heap() -> None:
    """After the ledger's state was (re)loaded: collect once, then keep what is alive out of
    the collector's full passes. A large pool's state is hundreds of thousands of objects
    that live as long as the view; scanning them in every full collection cost a redraw
    30-120 ms at random (bench/top). A reload (compaction) unfreezes first, so the old
    state is freed."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()


class FrameSource:
    """Everything a frame is made from, kept between frames: the ledger follower, why
    queued jobs wait (asked again when the ledger moved or every REASONS_EVERY_S), and the
    nodes' facts (asked in a thread every `facts_every` seconds, so keys stay quick)."""

    def __init__(self, settings: Settings, facts_every: float | None) -> None:
        from gpupoolctl.board.follow import Follower
        from gpupoolctl.board.frame import FrameBuilder

        self.settings = settings
        self.follower: Follower = Follower(open_ledger(settings))
        self.builder = FrameBuilder()  # keeps each node's row until the ledger touches it
        self._heap_of: Any = None
        self._drawn = 0
        self.facts_every = facts_every
        self.facts: dict[str, dict[str, Any]] = {}
        self.facts_at: float | None = None
        self.facts_failed: list[str] = []
        self._facts_lock = threading.Lock()
        self._facts_thread: threading.Thread | None = None
        self._reasons: dict[str, str] = {}
        self._reasons_at = float("-inf")
        self._reasons_seq = -1
        self._jobs: Any = None
        self.warnings: list[str] = []

    def frame(self, chosen: Filter, *, wait_for_facts: bool = False) -> Frame:
        self._maybe_ask_facts(wait=wait_for_facts)
        view = self.follower.poll()
        # Only a view that draws again settles the heap: one frame (--once, pool --html)
        # would pay a full collection for nothing.
        if self._drawn and view.state is not self._heap_of:
            settle_heap()
            self._heap_of = view.state
        self._drawn += 1
        with self._facts_lock:
            facts = dict(self.facts)
            age = None if self.facts_at is None else time.monotonic() - self.facts_at
        return self.builder.frame(
            view.state,
            view.now,
            touched=self.follower.take_touched(),
            waiting=self._waiting(view),
            events=list(self.follower.events),
            utilization=self.follower.utilization(view),
            facts=facts,
            facts_age_s=age if self.facts_every is not None else None,
            filter=chosen,
            warnings=[
                *view.warnings,
                *self.warnings,
                *(f"facts: {line}" for line in self.facts_failed),
            ],
        )

    def detail(self, job_id: str) -> dict[str, Any] | None:
        """The ledger's record of a job, for the detail pane."""
        state = self.follower.poll().state
        return state.jobs.get(job_id) or state.finished.get(job_id)

    # -- why queued jobs wait -------------------------------------------------------------

    def _waiting(self, view: View) -> dict[str, str]:
        if not view.state.queue:
            return {}
        now = time.monotonic()
        since = now - self._reasons_at
        moved = view.state.seq != self._reasons_seq
        # The dry pass costs a scheduling pass (0.3 s for 200 queued jobs on 1,000 nodes):
        # asked when the ledger moved, at most every REASONS_AT_MOST_EVERY_S, and every
        # REASONS_EVERY_S anyway (a batch window or a back-off ends without a record).
        if (moved and since >= REASONS_AT_MOST_EVERY_S) or since >= REASONS_EVERY_S:
            from gpupoolctl.jobs.dryrun import waiting_reasons

            try:
                self._reasons = waiting_reasons(self._jobs_core(), view)
            except Exception as exc:  # a view must not die of a policy or inventory problem
                self._reasons = {}
                self._note(f"why jobs wait is unknown: {exc}")
            self._reasons_at, self._reasons_seq = now, view.state.seq
        return self._reasons

    def _jobs_core(self) -> Any:
        if self._jobs is None:
            self._jobs = open_jobs(self.settings)
        return self._jobs

    def _note(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    # -- facts ------------------------------------------------------------------------------

    def _maybe_ask_facts(self, *, wait: bool) -> None:
        if self.facts_every is None:
            return
        if self._facts_thread is not None and self._facts_thread.is_alive():
            if wait:
                self._facts_thread.join()
            return
        due = self.facts_at is None or time.monotonic() - self.facts_at >= self.facts_every
        if not due:
            return
        self._facts_thread = threading.Thread(target=self._ask_facts, daemon=True)
        self._facts_thread.start()
        if wait:
            self._facts_thread.join()

    def _ask_facts(self) -> None:
        from gpupoolctl.cli import pool as hosts_pool

        quiet = dataclasses.replace(self.settings, verbosity=-1)  # no progress bar over the view
        try:
            targets = hosts_pool.select(quiet).targets()
            results = hosts_pool.fan_out(quiet, targets, {"v": 1, "verb": "facts", "args": {}})
        except Exception as exc:  # shown in the view; the next round tries again
            self._note(f"facts: {exc}")
            with self._facts_lock:
                self.facts_at = time.monotonic()
            return
        with self._facts_lock:
            for result in results:
                if result.ok and isinstance(result.data, dict):
                    self.facts[result.name] = result.data
            self.facts_failed = [f"{r.name}: {r.outcome}: {r.error}" for r in results if not r.ok]
            self.facts_at = time.monotonic()
