"""`binlake status` looks at the source with short timeouts: a server that accepts the connection and
then says nothing (hung, or a half-open path to it) costs seconds, not the configured minute.
(`tests/integration/test_status.py` runs status against a stopped server.)"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest

from binlake import config
from binlake.commands.status import LOOK_CONNECT_TIMEOUT, LOOK_READ_TIMEOUT, look, looking


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never sends a byte (MySQL's server speaks first)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    thread.join()
    for s in [*accepted, server]:
        s.close()


def test_the_look_caps_the_configured_timeouts() -> None:
    cfg = config.load(None, ["source.connect-timeout=60", "source.read-timeout=120"], env={})
    capped = looking(cfg).connection()
    assert (capped["connect_timeout"], capped["read_timeout"]) == (LOOK_CONNECT_TIMEOUT, LOOK_READ_TIMEOUT)
    shorter = looking(config.load(None, ["source.connect-timeout=1", "source.read-timeout=2"], env={})).connection()
    assert (shorter["connect_timeout"], shorter["read_timeout"]) == (1, 2)


def test_a_silent_source_is_reported_within_seconds(silent_port: int) -> None:
    secret = "St4tus-Look-Pw!"
    cfg = config.load(None, [f"source.port={silent_port}", "source.connect-timeout=60", "source.read-timeout=60",
                             f"source.password={secret}", "source.tls.mode=disabled"], env={})
    began = time.monotonic()
    seen = look(looking(cfg), None)
    took = time.monotonic() - began
    assert took < LOOK_READ_TIMEOUT + 5, f"the look took {took:.1f} s"
    assert seen.identity is None and seen.head is None and seen.tables == []
    assert seen.error is not None and seen.error.startswith(f"cannot connect to root@127.0.0.1:{silent_port}")
    assert "\n" not in seen.error and secret not in seen.error
