"""The group landing behind the read (`binlake.capture.behind.Behind`): one group lands at a time, in
order, a landing's failure surfaces at the next wait, and leaving waits for the group in hand."""

from __future__ import annotations

import threading
import time

import pytest

from binlake.capture.behind import Behind


def test_groups_land_one_at_a_time_in_order_and_pass_held_on() -> None:
    landed: list[int] = []
    running = threading.Event()

    def land(group: int, held: int | None) -> int | None:
        assert not running.is_set(), "two groups landing at once"
        running.set()
        time.sleep(0.01)
        landed.append(group)
        running.clear()
        return (held or 0) + 10

    held: int | None = 0
    with Behind() as behind:
        for group in range(5):
            held = behind.wait(held)
            behind.land(lambda g=group, h=held: land(g, h))
        held = behind.wait(held)
    assert landed == [0, 1, 2, 3, 4]
    assert held == 50


def test_a_failed_landing_surfaces_at_the_next_wait() -> None:
    def fail() -> int | None:
        raise RuntimeError("bronze refused the append")

    with Behind() as behind:
        behind.land(fail)
        with pytest.raises(RuntimeError, match="bronze refused"):
            behind.wait(7)
        assert behind.wait(7) == 7  # nothing landing any more


def test_landing_twice_without_a_wait_is_refused() -> None:
    with Behind() as behind:
        behind.land(lambda: 1)
        with pytest.raises(AssertionError):
            behind.land(lambda: 2)
        behind.wait(None)


def test_leaving_waits_for_the_group_in_hand_even_when_the_read_failed() -> None:
    landed = threading.Event()

    def slow() -> int | None:
        time.sleep(0.2)
        landed.set()
        return None

    with pytest.raises(ValueError):
        with Behind() as behind:
            behind.land(slow)
            raise ValueError("the next group's read failed")
    assert landed.is_set()
