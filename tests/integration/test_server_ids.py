"""Server ids: the source lets one connection per replica server id read the binlog and drops the
other. A replica registered with one of binlake's ids stops binlake before it reads anything; a
reader whose id another reader takes over mid-read fails with a line naming source.server-id."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pymysqlreplication import BinLogStreamReader

from binlake.source.binlog_reader import read_changes
from binlake.config import load
from binlake.errors import RuntimeFailure
from binlake.source.dialect import binlog_head, registered_replicas
from binlake.source.validation import check

from .capture import write_config
from .helpers import execute, params, seq
from .workload import run_cli


class Replica:
    """A replica that registers on the source with `server_id` and waits for binlog events."""

    def __init__(self, dev_db: Any, server_id: int, start: Any, report_host: str | None = "replica-7") -> None:
        self.dev_db = dev_db
        settings = {k: v for k, v in params(dev_db).items() if k != "connect_timeout"}
        self.reader = BinLogStreamReader(connection_settings=settings, server_id=server_id, log_file=start.file,
                                         log_pos=start.pos, resume_stream=True, blocking=True,
                                         report_slave=report_host)
        self.error: Exception | None = None
        self.thread = threading.Thread(target=self._read, daemon=True)

    def _read(self) -> None:
        try:
            while self.reader.fetchone() is not None:
                pass
        except Exception as exc:  # dropped by the source, or closed by the test
            self.error = exc

    @staticmethod
    def _closed() -> None:
        raise ConnectionError("the replica was closed")

    def _connection(self) -> Any:
        return getattr(self.reader, "_stream_connection", None)

    def __enter__(self) -> Replica:
        self.thread.start()
        while self._connection() is None and self.thread.is_alive():  # it connects on the first fetch
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        # a socket blocked in a read cannot be closed from this thread: the server ends the session
        connection = self._connection()
        self.reader._BinLogStreamReader__connect_to_stream = self._closed  # the library reconnects when killed
        if self.thread.is_alive() and connection is not None:
            with self.dev_db.connect() as conn, conn.cursor() as cur:
                cur.execute(f"KILL {connection.thread_id()}")
        self.thread.join(timeout=30)
        assert not self.thread.is_alive(), "the replica did not stop"


@pytest.fixture
def head(dev_db: Any) -> Iterator[Any]:
    with dev_db.connect() as conn:
        yield binlog_head(conn)


def test_a_registered_replica_with_one_of_our_ids_stops_binlake_before_it_reads(dev_db, database, head,
                                                                               tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY)")
    cfg_path = write_config(tmp_path / "binlake.yml", dev_db.running_port(), [f"{database}\\.t"], tmp_path / "lake",
                            "6150-6154")
    with Replica(dev_db, 6152, head):
        deadline = time.monotonic() + 30
        while not any(sid == 6152 for sid, _ in _replicas(dev_db)):
            assert time.monotonic() < deadline, "the replica never registered"
            time.sleep(0.2)
        problems = check(load(cfg_path))
        done = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    expected = ("source.server-id 6150-6154 includes server id 6152, which a replica registered on the source "
                "(host replica-7) uses; binlake needs ids no other replica uses: set source.server-id to a free "
                "range such as ")
    assert any(p.startswith(expected) for p in problems), problems
    assert done.returncode == 2, done.stderr[-2000:]
    line = done.stderr.strip().splitlines()[-1]
    assert expected in line, line
    suggested = line.rsplit(" ", 1)[-1].split("-")
    assert int(suggested[0]) > max(sid for sid, _ in _replicas(dev_db) or [(6154, "")])
    assert not (tmp_path / "lake").exists(), "nothing may be written before the check"


def _replicas(dev_db: Any) -> list[tuple[int, str]]:
    with dev_db.connect() as conn:
        return registered_replicas(conn) or []


def test_a_reader_whose_id_is_taken_over_mid_read_fails_naming_the_setting(dev_db, database, head) -> None:  # type: ignore[no-untyped-def]
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(200))",
            *[f"INSERT INTO t SELECT seq, REPEAT('x', 200) FROM {seq(i * 20_000 + 1, (i + 1) * 20_000)}"
              for i in range(5)])
    with dev_db.connect() as conn:
        stop = binlog_head(conn)
    read = 0
    with pytest.raises(RuntimeFailure) as failed:
        # reconnecting would not help: the other reader holds the id
        for _change in read_changes(params(dev_db), 6160, head, stop, lambda d, t: d == database,
                                    reconnect_timeout=30):
            read += 1
            if read == 1:  # the source is still sending: the rest of the 100k rows wait in the socket
                with Replica(dev_db, 6160, stop, report_host=None) as other:
                    time.sleep(2)
                assert other.error is None or "same server" not in str(other.error)
    assert 0 < read < 100_000
    message = str(failed.value)
    assert "server id 6160" in message and "source.server-id" in message, message
