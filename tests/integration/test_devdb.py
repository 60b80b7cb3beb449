"""The private server: an idempotent start, and a binlog whose row events carry column names."""

from __future__ import annotations

import uuid
from decimal import Decimal

import pytest
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import WriteRowsEvent

from binlake import cli
from binlake.commands.devdb import DevDb
from binlake.source.dialect import binlog_head


def test_start_is_idempotent(dev_db: DevDb, capsys: pytest.CaptureFixture[str]) -> None:
    port, pid = dev_db.running_port(), dev_db.pid()
    assert port is not None and pid is not None
    assert dev_db.start() == port
    # a second handle on the same data directory finds the running server instead of starting one
    assert DevDb(datadir=dev_db.datadir, server=dev_db.server).start() == port
    assert cli.main(["dev-db", "start", "--server", dev_db.server, "--datadir", str(dev_db.datadir)]) == 0
    assert f"dev-db running on 127.0.0.1:{port} " in capsys.readouterr().out
    assert dev_db.pid() == pid
    with dev_db.connect() as conn, conn.cursor() as cur:
        cur.execute("SELECT @@port, @@log_bin, @@binlog_format, @@binlog_row_image, "
                    "@@binlog_row_metadata")
        assert cur.fetchone() == (port, 1, "ROW", "FULL", "FULL")


def test_binlog_row_event_carries_column_names(dev_db: DevDb, database: str) -> None:
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT UNSIGNED PRIMARY KEY, "
                    "label VARCHAR(40) CHARACTER SET utf8mb4, price DECIMAL(12,2))")
        head = binlog_head(conn)
        cur.execute("INSERT INTO items VALUES (1, 'Zoë ☕', 12.34)")

    port = dev_db.running_port()
    stream = BinLogStreamReader(
        connection_settings={"host": "127.0.0.1", "port": port, "user": "root", "password": ""},
        # a server id no other reader of the shared server uses
        server_id=100_000 + uuid.uuid4().int % 1_000_000,
        only_events=[WriteRowsEvent],
        only_schemas=[database],
        blocking=False,
        resume_stream=True,
        log_file=head.file,
        log_pos=head.pos,
    )
    try:
        events = list(stream)
    finally:
        stream.close()

    assert len(events) == 1
    event = events[0]
    assert (event.schema, event.table) == (database, "items")
    # without binlog_row_metadata=FULL the names would be placeholders and only the types known
    assert [c.name for c in event.columns] == ["id", "label", "price"]
    # text as the stored bytes: binlake's reader settings apply to the library in this process
    assert [row["values"] for row in event.rows] == [{"id": 1, "label": "Zoë ☕".encode(), "price": Decimal("12.34")}]
