"""The virtual clock the ramp can run on: threads take turns, time moves only when every one
of them waits, and nothing depends on how fast this machine is."""

from __future__ import annotations

import threading

import pytest

from gpupoolctl.stress.clock import ClockStopped, Deadlock, VirtualClock, WallClock


def test_sleeping_threads_wake_in_time_order_at_exactly_their_times() -> None:
    clock = VirtualClock(start=100.0)
    woke: list[tuple[str, float]] = []

    def sleeper(name: str, seconds: float) -> None:
        clock.sleep(seconds)
        woke.append((name, clock.now()))

    with clock.running():
        threads = [clock.spawn(sleeper, (n, s)) for n, s in (("c", 3.0), ("a", 1.0), ("b", 2.0))]
        for thread in threads:
            thread.join()
        assert clock.now() == 103.0
    assert woke == [("a", 101.0), ("b", 102.0), ("c", 103.0)]


def test_an_event_wakes_its_waiter_before_the_time_out_and_a_time_out_says_false() -> None:
    clock = VirtualClock(start=0.0)
    seen: list[tuple[bool, float]] = []
    event = clock.event()
    never = clock.event()

    def waiter() -> None:
        seen.append((event.wait(10.0), clock.now()))
        seen.append((never.wait(2.5), clock.now()))

    with clock.running():
        thread = clock.spawn(waiter)
        clock.sleep(4.0)
        event.set()
        thread.join(60.0)
        assert not thread.is_alive()
    assert seen == [(True, 4.0), (False, 6.5)]


def test_a_join_with_a_time_out_returns_at_that_time_with_the_thread_still_alive() -> None:
    clock = VirtualClock(start=0.0)
    with clock.running():
        thread = clock.spawn(clock.sleep, (30.0,))
        thread.join(5.0)
        assert thread.is_alive() and clock.now() == 5.0
        thread.join()
        assert not thread.is_alive() and clock.now() == 30.0


def test_computing_takes_no_virtual_time() -> None:
    clock = VirtualClock(start=0.0)
    with clock.running():
        sum(range(200_000))  # however long this takes on this machine
        assert clock.now() == 0.0


def test_threads_that_all_wait_forever_are_a_deadlock_not_a_hang() -> None:
    clock = VirtualClock()
    never = clock.event()
    with pytest.raises(Deadlock, match="no time-out"), clock.running():
        clock.spawn(never.wait)
        never.wait()


def test_threads_left_waiting_when_the_ramp_ends_unwind_instead_of_hanging() -> None:
    clock = VirtualClock()
    unwound = threading.Event()  # a real one: set by the left-over thread after the end

    def stuck() -> None:
        try:
            clock.sleep(1e9)
        except ClockStopped:
            unwound.set()
            raise

    with clock.running():
        clock.spawn(stuck)
        clock.sleep(1.0)
    assert unwound.wait(10.0)
    with pytest.raises(RuntimeError, match="runs once"), clock.running():
        pass


def test_a_thread_outside_the_simulation_cannot_wait_on_it() -> None:
    clock = VirtualClock()
    with pytest.raises(RuntimeError, match="not one of the virtual clock's"):
        clock.sleep(1.0)


def test_the_wall_clock_is_time_and_threading() -> None:
    clock = WallClock()
    event = clock.event()
    assert isinstance(event, threading.Event)
    thread = clock.spawn(event.set)
    thread.join(10.0)
    assert event.is_set() and not thread.is_alive()
