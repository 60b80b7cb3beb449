"""Named crash points, for the kill-and-restart tests.

`BINLAKE_CRASH_AT=<point>[:<n>]` makes the n-th (default first) arrival at `<point>` kill the whole
process group with SIGKILL -- the same as `kill -9` of the run, at an exact spot. Unset, every
point is a no-op. The count is kept in a file so arrivals in Spark's Python workers add up.
"""

from __future__ import annotations

import fcntl
import os
import signal
from pathlib import Path


def point(name: str, detail: str = "") -> None:
    spec = os.environ.get("BINLAKE_CRASH_AT")
    if not spec:
        return
    target, _, nth = spec.partition(":")
    if target != name:
        return
    counter = Path(os.environ.get("BINLAKE_CRASH_COUNTER", "/tmp/binlake-crash-counter"))
    with open(counter, "a+") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        seen = len(f.read().splitlines()) + 1
        f.write(f"{name} {detail}\n")
        f.flush()
    if seen == int(nth or 1):
        # Spark's Python workers live in a process group of their own; the run's group (recorded by
        # the CLI before Spark starts) holds the driver and the JVM.
        run_group = int(os.environ.get("BINLAKE_RUN_PGID", os.getpgid(0)))
        os.killpg(run_group, signal.SIGKILL)
        os.killpg(os.getpgid(0), signal.SIGKILL)
