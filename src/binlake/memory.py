"""How a binlake process uses memory: how often Python's cycle collector runs, and which allocator
Arrow's buffers come from. `tune` sets both, first thing in the CLI, the Databricks entry points and
the snapshot's Spark readers.

**The cycle collector.** binlake's hot paths allocate many short-lived objects (a row's values, a
chunk's tuples, Arrow builders' lists) and free them by reference counting; almost none form cycles.
Python's default thresholds (700, 10, 10) run a young collection every 700 net allocations and a full
one every 100 of those, each walking every tracked object the process holds: a snapshot holding a
chunk of rows in hand pays for walking them again and again. Measured with `gc.callbacks` during a
5M-row snapshot on MariaDB: 86 full collections took 5.0 s of 70 s, 9.8% of its CPU; in the stream,
1-3%. `collect_less` raises the thresholds to (50000, 20, 20): a young collection every 50,000 net
allocations, a full one every 400 young ones. The collector still runs, so a cycle is still freed;
only later. Measured on a 1M-row table (`binlake snapshot`, MariaDB, the two settings interleaved
three times in one session on 2 cores): the snapshot's own time 10.7/10.8/9.2 s against 8.3/8.1/8.0 s
(-20%), the CPU of the whole process tree 24.5/23.1/20.4 s against 20.5/19.6/18.8 s (-13%), peak
memory the same (the CLI's Python about 450 MB either way).

**Arrow's allocator.** pyarrow's default allocator on Linux is mimalloc, which hands the pages of
memory idle for 10 ms back to the kernel and asks for them again at the next allocation, each page
zeroed by the kernel as it is touched (its arena is marked for transparent huge pages, so a touch
zeroes 2 MB). The stream allocates a batch's buffers, idles until the next batch a second later, and
allocates them again: in a steady stream on MariaDB (5M rows, 2,000 changes a second), `perf` found
13.6% of binlake's CPU in the kernel's page zeroing, under mimalloc's free lists and Arrow's kernels.
`arrow_from_system` makes the system's allocator (glibc's malloc) Arrow's default instead, which
keeps freed memory for reuse. Measured on silver's side alone (bench/profile_apply.py, 60 batches
with PROFILE_APPLY_PAUSE=0.7, as the stream idles; the two interleaved twice): compaction 39.7/41.4 CPU s
per 1M changes against 19.4/22.5, the apply 12.9/12.8 against 12.0/12.9, the process's system time
5.4/5.7 s against 2.0/2.7 s, peak memory the same (630-660 MB). In the steady bench itself (MariaDB,
5M rows, 3 minutes of the writer, one session): 65.3-66.7 CPU s per 1M changes in three runs with the
system's allocator, 80.0 with mimalloc beside them (71.7 earlier that day), peak memory the
same (2.1-2.3 GB). The stream section's 500,000-change burst: 12.0 s in binlake's process against
13.3, CPU 52.2 s per 1M changes against 57.0; the snapshot section's 1M rows: 11.9 s against 11.6 and
27.2 CPU s against 26.4 (within a run's noise), peak memory 884 MB against 910. An allocator named in
ARROW_DEFAULT_MEMORY_POOL is left as it is.
"""

from __future__ import annotations

import gc
import os
import sys

THRESHOLDS = (50_000, 20, 20)
# read by Arrow at its first allocation in a process, and inherited by the processes it starts
ALLOCATOR = "ARROW_DEFAULT_MEMORY_POOL"


def tune() -> None:
    """Both settings of the module, for this process and the ones it starts."""
    collect_less()
    arrow_from_system()


def collect_less() -> None:
    """Set this process's collector to `THRESHOLDS` (see the module); one set higher, or turned off
    (a first threshold of 0), stays as it is."""
    if 0 < gc.get_threshold()[0] < THRESHOLDS[0]:
        gc.set_threshold(*THRESHOLDS)


def arrow_from_system() -> None:
    """Arrow's buffers from the system's allocator (see the module), unless ARROW_DEFAULT_MEMORY_POOL
    names one. Before pyarrow is imported, every buffer of this process and of those it starts (Spark's
    JVM and its Python workers); after, the buffers pyarrow asks for (a Spark worker has it imported)."""
    if ALLOCATOR in os.environ:
        return
    os.environ[ALLOCATOR] = "system"
    if "pyarrow" in sys.modules:
        import pyarrow as pa

        pa.set_memory_pool(pa.system_memory_pool())
