"""The ramp's clock: the wall clock in production, virtual time where the numbers must not
depend on how busy the machine is.

The runner reads the time, waits and starts its threads only through a clock:

    clock.now()                      # seconds, on time.time()'s scale
    event = clock.event()            # set() / is_set() / wait(timeout) -> bool
    clock.sleep(seconds)
    thread = clock.spawn(fn, args, name)   # started; join(timeout), is_alive()
    with clock.running(): ...        # the thread that drives the ramp

`WallClock` is plain `time` and `threading`. `VirtualClock` runs the same threads one at a
time and moves time forward only when every one of them waits: a discrete-event simulation
that needs no change to the code it runs. Time a thread spends computing is not counted,
so a ramp on a virtual clock measures only what its backend says the work took (see
gpupoolctl.stress.contention_backend): the same numbers on an idle laptop and on a CI machine
running four other test suites. Whatever runs on a virtual clock must wait through it
(a plain time.sleep or threading wait would stop the whole simulation), and a loop that
never waits never lets time move.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

__all__ = ["Clock", "ClockStopped", "Deadlock", "VirtualClock", "WallClock"]


class Waitable(Protocol):
    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    def wait(self, timeout: float | None = None) -> bool: ...


class Joinable(Protocol):
    def join(self, timeout: float | None = None) -> None: ...

    def is_alive(self) -> bool: ...


class Clock(Protocol):
    def now(self) -> float: ...

    def event(self) -> Waitable: ...

    def sleep(self, seconds: float) -> None: ...

    def spawn(
        self, target: Callable[..., None], args: tuple[Any, ...] = (), name: str | None = None
    ) -> Joinable: ...

    def running(self) -> AbstractContextManager[None]: ...


class WallClock:
    """time.time(), threading.Event and daemon threads."""

    def now(self) -> float:
        return time.time()

    def event(self) -> threading.Event:
        return threading.Event()

    def sleep(self, seconds: float) -> None:
        time.sleep(max(0.0, seconds))

    def spawn(
        self, target: Callable[..., None], args: tuple[Any, ...] = (), name: str | None = None
    ) -> threading.Thread:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        return thread

    @contextmanager
    def running(self) -> Iterator[None]:
        yield


class ClockStopped(BaseException):  # raised to unwind, like SystemExit
    """Raised inside a thread of a VirtualClock that is no longer running (its driving
    thread left `running()`), so that left-over threads end instead of waiting forever."""


class Deadlock(RuntimeError):
    """Every thread of a VirtualClock waits without a time-out: time can never move."""


class _Part:
    """One thread taking part in the simulation."""

    __slots__ = ("done", "go", "name", "token", "waiting")

    def __init__(self, clock: VirtualClock, name: str) -> None:
        self.name = name
        self.go = threading.Event()  # the baton: set when this thread may run
        self.token: int | None = None  # the wait this thread is blocked in, if any
        self.waiting: _VirtualEvent | None = None
        self.done = _VirtualEvent(clock)


class _VirtualEvent:
    def __init__(self, clock: VirtualClock) -> None:
        self._clock = clock
        self._flag = False
        self._waiters: list[_Part] = []

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._clock._lock:
            self._set_locked()

    def _set_locked(self) -> None:
        self._flag = True
        waiters, self._waiters = self._waiters, []
        for part in waiters:
            if part.token is not None:  # still blocked: wake it before its time-out
                part.token = None
                self._clock._ready.append(part)

    def clear(self) -> None:
        self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        return self._clock._wait(self, timeout)


class _VirtualThread:
    def __init__(self, part: _Part, thread: threading.Thread) -> None:
        self._part = part
        self._thread = thread
        self.name = part.name

    def join(self, timeout: float | None = None) -> None:
        self._part.done.wait(timeout)

    def is_alive(self) -> bool:
        return not self._part.done.is_set()


class VirtualClock:
    """Virtual time for a set of threads that run one at a time.

    A thread runs until it waits (sleep, an event's wait, a join); then the next ready
    thread runs, in the order they became ready; when none is ready, time jumps to the
    earliest time-out. So the order of events, and every time read, is the same on every
    run and every machine."""

    def __init__(self, start: float = 1_700_000_000.0) -> None:
        self._now = float(start)
        self._lock = threading.Lock()
        self._ready: deque[_Part] = deque()
        self._timers: list[tuple[float, int, _Part]] = []
        self._tokens = itertools.count()
        self._local = threading.local()
        self._live: set[_Part] = set()
        self._started = False
        self._stopped = False
        self._driver: _Part | None = None  # the thread inside running()
        self._deadlock: Deadlock | None = None

    # -- what the simulated code calls ------------------------------------------------------

    def now(self) -> float:
        return self._now

    def event(self) -> _VirtualEvent:
        return _VirtualEvent(self)

    def sleep(self, seconds: float) -> None:
        self._wait(None, max(0.0, seconds))

    def spawn(
        self, target: Callable[..., None], args: tuple[Any, ...] = (), name: str | None = None
    ) -> _VirtualThread:
        """A thread that becomes ready now and first runs when the caller waits."""
        part = _Part(self, name or f"virtual-{len(self._live)}")

        def body() -> None:
            self._local.part = part
            part.go.wait()
            part.go.clear()
            try:
                if not self._stopped:
                    target(*args)
            except ClockStopped:
                pass
            finally:
                self._exit(part)

        thread = threading.Thread(target=body, name=part.name, daemon=True)
        with self._lock:
            if self._stopped:
                raise ClockStopped()
            self._live.add(part)
            self._ready.append(part)
        thread.start()
        return _VirtualThread(part, thread)

    @contextmanager
    def running(self) -> Iterator[None]:
        """The calling thread drives the simulation until the block ends; then the clock
        stops, and threads still waiting on it end with ClockStopped. Once per clock."""
        with self._lock:
            if self._started:
                raise RuntimeError("a VirtualClock runs once; make a new one")
            self._started = True
            part = _Part(self, threading.current_thread().name)
            self._driver = part
            self._live.add(part)
        self._local.part = part
        try:
            yield
        finally:
            with self._lock:
                self._live.discard(part)
                part.done._set_locked()
                self._stop_locked()

    # -- the scheduler ----------------------------------------------------------------------

    def _unwind(self, me: _Part) -> None:
        # The thread driving the ramp learns why the simulation stopped; the others end.
        if me is self._driver and self._deadlock is not None:
            raise self._deadlock
        raise ClockStopped()

    def _me(self) -> _Part:
        part: _Part | None = getattr(self._local, "part", None)
        if part is None:
            raise RuntimeError(
                "this thread is not one of the virtual clock's (start it with clock.spawn, "
                "or wait inside clock.running())"
            )
        return part

    def _wait(self, event: _VirtualEvent | None, timeout: float | None) -> bool:
        me = self._me()
        if self._stopped:
            self._unwind(me)
        if event is not None and event.is_set():
            return True
        if timeout is not None and timeout <= 0:
            return event.is_set() if event is not None else True
        with self._lock:
            token = next(self._tokens)
            me.token = token
            if event is not None:
                event._waiters.append(me)
            if timeout is not None:
                heapq.heappush(self._timers, (self._now + timeout, token, me))
            try:
                following = self._pick()
            except Deadlock as exc:
                me.token = None
                self._deadlock = exc
                self._stop_locked()
                following = me
        if following is not me:
            following.go.set()
            me.go.wait()
            me.go.clear()
        if self._stopped:
            self._unwind(me)
        if event is not None:
            with self._lock:
                if me in event._waiters:
                    event._waiters.remove(me)
            return event.is_set()
        return True

    def _pick(self) -> _Part:
        """The thread to run next (lock held): the first ready one, else the one whose
        time-out is earliest, with the clock moved to it."""
        if self._ready:
            return self._ready.popleft()
        while self._timers:
            when, token, part = heapq.heappop(self._timers)
            if part.token != token:  # woken by its event already
                continue
            part.token = None
            self._now = max(self._now, when)
            return part
        names = ", ".join(sorted(p.name for p in self._live))
        raise Deadlock(f"every thread of the virtual clock waits with no time-out ({names})")

    def _exit(self, part: _Part) -> None:
        with self._lock:
            self._live.discard(part)
            part.done._set_locked()
            if self._stopped:
                return
            try:
                following = self._pick()
            except Deadlock as exc:
                self._deadlock = exc
                self._stop_locked()
                return
        following.go.set()

    def _stop_locked(self) -> None:
        """Stop the simulation (lock held): every thread still in it wakes and unwinds."""
        self._stopped = True
        self._ready.clear()
        self._timers.clear()
        for part in self._live:
            part.token = None
            part.go.set()
