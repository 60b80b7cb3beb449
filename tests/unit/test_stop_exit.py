"""What reaches stderr once binlake is exiting (binlake.stop.done)."""

from __future__ import annotations

import io
import logging
import signal

from binlake import stop


def test_after_done_py4j_records_are_dropped_and_binlake_records_kept() -> None:
    root = logging.getLogger()
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    root.addHandler(handler)
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        stop.done()

        def emit(path: str, msg: str) -> None:
            root.handle(logging.LogRecord("root", logging.ERROR, path, 1, msg, None, None))

        emit("/x/site-packages/py4j/java_gateway.py", "Exception while sending command.")
        emit("/x/binlake/cli.py", "binlake's own")
    finally:
        root.removeHandler(handler)
        for s, h in saved.items():
            signal.signal(s, h)
    assert out.getvalue() == "binlake's own\n"
