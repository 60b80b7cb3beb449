"""The stop rule (binlake.stop) with real signals sent to this process, and the JVM output filter."""

from __future__ import annotations

import io
import os
import signal

import pytest

from binlake import stop
from binlake.errors import Stopped
from binlake.spark import jvm


def test_outside_a_stream_a_signal_stops_at_once() -> None:
    old = signal.getsignal(signal.SIGTERM)
    try:
        stop.install()
        with pytest.raises(Stopped, match=f"^{stop.NOT_STREAMING}$"):
            os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, old)
        signal.signal(signal.SIGINT, signal.default_int_handler)


def test_in_a_stream_the_first_signal_asks_and_the_second_stops_at_once() -> None:
    old = signal.getsignal(signal.SIGTERM)
    with stop.between_batches(lambda: "stopped at mysql-bin.000003:4"):
        assert not stop.asked()
        os.kill(os.getpid(), signal.SIGTERM)  # asks: the stream finishes its batch
        assert stop.asked()
        with pytest.raises(Stopped, match="^stopped at mysql-bin.000003:4$") as second:
            os.kill(os.getpid(), signal.SIGTERM)
        assert second.value.exit_code == 0
        assert str(stop.stopped()) == "stopped at mysql-bin.000003:4"
    assert signal.getsignal(signal.SIGTERM) is old  # the handler the stream replaced is back
    with stop.between_batches(lambda: "stopped at x.1:4"):
        assert not stop.asked()  # a new stream starts unasked


def test_the_jvm_filter_drops_start_up_lines_only(monkeypatch: pytest.MonkeyPatch) -> None:
    written: list[bytes] = []
    monkeypatch.setattr(jvm.os, "write", lambda fd, data: written.append(data) or len(data))
    jvm._forward(io.BytesIO(b"WARNING: Using incubator modules: jdk.incubator.vector\n"
                            b'Setting default log level to "WARN".\n'
                            b"To adjust logging level use sc.setLogLevel(newLevel).\n"
                            b"java.lang.OutOfMemoryError: Java heap space\n"))
    assert written == [b"java.lang.OutOfMemoryError: Java heap space\n"]
