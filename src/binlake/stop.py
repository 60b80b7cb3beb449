"""A requested stop: SIGTERM (how systemd, Kubernetes and Databricks stop a job) or Ctrl-C.

The first signal asks. A stream finishes the micro-batch in flight and stops between two batches
(`between_batches`); anywhere else -- the plan, the snapshot, the checks before the stream -- binlake
stops at once, which loses nothing: each chunk and each batch is committed whole or read again by
the next run. A second signal stops at once everywhere (the batch in flight is read again by the next
run). Either way binlake ends with one line saying where it stopped, and exit code 0 (`Stopped`).

The JVM does not see the signal (`binlake.spark.jvm`), so the stream can finish its batch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any

from binlake.errors import Stopped

log = logging.getLogger(__name__)

NOT_STREAMING = "stopped; the next run goes on where this one was"
_asked = threading.Event()
# where a stream would stop now ("stopped at <position>"), innermost last
_streams: list[Callable[[], str]] = []


def asked() -> bool:
    return _asked.is_set()


def stopped() -> Stopped:
    """Where binlake stops now."""
    return Stopped(_streams[-1]() if _streams else NOT_STREAMING)


def install() -> None:
    """Handle SIGTERM and SIGINT as this module says, for the rest of the process."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, _on_signal)


def done() -> None:
    """binlake is exiting: a further signal has nothing left to stop (the exit waits a bounded time
    for Spark's JVM to end; `binlake.spark.jvm`), and what py4j logs from here on is a call the exit
    cut (a micro-batch a second signal abandoned, its JVM going away), not binlake's to print."""
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, signal.SIG_IGN)
    for handler in logging.getLogger().handlers:
        handler.addFilter(_not_py4j)


def _not_py4j(record: logging.LogRecord) -> bool:
    return f"{os.sep}py4j{os.sep}" not in record.pathname


@contextlib.contextmanager
def between_batches(where: Callable[[], str]) -> Iterator[None]:
    """While the stream runs: a first signal only asks, and the stream stops after its batch.
    Outside, as when no `install()` was made, a SIGTERM stops the stream the same way."""
    _asked.clear()
    _streams.append(where)
    old = signal.signal(signal.SIGTERM, _on_signal) if threading.current_thread() is threading.main_thread() else None
    try:
        yield
    finally:
        _streams.pop()
        if old is not None:
            signal.signal(signal.SIGTERM, old)


def _on_signal(signum: int, frame: Any) -> None:
    first = not _asked.is_set()
    _asked.set()
    if first and _streams:
        log.warning("%s: stopping after the micro-batch in flight (a second signal stops at once)",
                    signal.Signals(signum).name)
        return
    raise stopped()
