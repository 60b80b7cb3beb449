"""The group landing behind the one being read (`Behind`), for a large table's snapshot."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Self


class Behind:
    """The group landing behind the one being read: a large table's group read in this process
    (`snapshot.read_ahead`) lands (`snapshot.land_read`: bronze, its record, silver, its record) on
    a thread of its own while the next group is read. Reading is mostly Python, holding the GIL;
    landing is mostly delta-rs, outside it; so the two overlap: on 2 cores a 2M-row table's snapshot
    took 21 s in this process instead of 25 (the medians of eight runs each, interleaved), and the
    bench's 5M rows 58 s instead of 82. A second thread reading the group's other slot was slower
    than one: reading holds the GIL.

    One commit lands at a time (a group, or several: `Landing.hold`), in the order read, and the
    next waits for it (`wait`), so nothing about the order of the writes changes: a crash loses at
    most the groups in hand, read and not landed, which the next run reads again. Memory holds two
    commits' groups instead of one."""

    def __init__(self) -> None:
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="landing")
        self.landing: Future[int | None] | None = None

    def land(self, call: Callable[[], int | None]) -> None:
        """Land a group (`call`, which gives silver's `held` after it); `wait` first."""
        assert self.landing is None, "a group is still landing"
        self.landing = self.pool.submit(call)

    def wait(self, held: int | None) -> int | None:
        """Once the group landing has landed: `held` after it (see `snapshot.apply_to_silver`), or
        its failure."""
        if self.landing is None:
            return held
        landing, self.landing = self.landing, None
        return landing.result()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.pool.shutdown(wait=True)  # a failed read still lets the group behind it land
