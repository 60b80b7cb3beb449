"""How often Python's cycle collector runs in a binlake process.

binlake's hot paths allocate many short-lived objects (a row's values, a chunk's tuples, Arrow
builders' lists) and free them by reference counting; almost none form cycles. Python's default
thresholds (700, 10, 10) run a young collection every 700 net allocations and a full one every 100 of
those, each walking every tracked object the process holds: a snapshot holding a chunk of rows in
hand pays for walking them again and again. Measured with `gc.callbacks` during a 5M-row snapshot
on MariaDB: 86 full collections took 5.0 s of 70 s, 9.8% of its CPU; in the stream, 1-3%.

`collect_less` raises the thresholds to (50000, 20, 20): a young collection every 50,000 net
allocations, a full one every 400 young ones. The collector still runs, so a cycle is still freed;
only later. Measured on a 1M-row table (`binlake snapshot`, MariaDB, the two settings interleaved
three times in one session on 2 cores): the snapshot's own time 10.7/10.8/9.2 s against 8.3/8.1/8.0 s
(-20%), the CPU of the whole process tree 24.5/23.1/20.4 s against 20.5/19.6/18.8 s (-13%), peak
memory the same (the CLI's Python about 450 MB either way).
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 20)


def collect_less() -> None:
    """Set this process's collector to `THRESHOLDS` (see the module); one set higher, or turned off
    (a first threshold of 0), stays as it is."""
    if 0 < gc.get_threshold()[0] < THRESHOLDS[0]:
        gc.set_threshold(*THRESHOLDS)
