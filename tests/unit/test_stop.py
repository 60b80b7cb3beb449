"""The stop rule (binlake.stop) with real signals sent to this process, and the JVM output filter."""

from __future__ import annotations

import io
import os
import signal
from pathlib import Path

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


def test_the_jvm_filter_sends_a_disconnected_workers_traceback_to_the_spark_log(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    written: list[bytes] = []
    monkeypatch.setattr(jvm.os, "write", lambda fd, data: written.append(data) or len(data))
    monkeypatch.setenv("BINLAKE_SPARK_LOG", str(tmp_path / "spark.log"))
    disconnected = (b"Traceback (most recent call last):\n"
                    b'  File "pyspark/sql/streaming/python_streaming_source_runner.py", line 265, in main\n'
                    b"EOFError\n"
                    b"\n"
                    b"During handling of the above exception, another exception occurred:\n"
                    b"\n"
                    b"Traceback (most recent call last):\n"
                    b'  File "socket.py", line 724, in write\n'
                    b"    return self._sock.send(b)\n"
                    b"BrokenPipeError: [Errno 32] Broken pipe\n")
    failed = (b"Traceback (most recent call last):\n"
              b'  File "pyspark/worker.py", line 3, in main\n'
              b"ValueError: a failure of the worker's own\n")
    jvm._forward(io.BytesIO(disconnected + b"\n" + b"a line after it\n" + failed + disconnected))
    assert b"".join(written) == b"a line after it\n" + failed
    assert (tmp_path / "spark.log").read_bytes() == disconnected + b"\n" + disconnected
