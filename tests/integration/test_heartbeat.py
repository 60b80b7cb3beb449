"""Heartbeats: with the captured table idle while another table churns and the binlog rotates, the
stored position keeps moving to the server's head, so purging the old files does not strand it.
`status` and Spark's own progress reports show the position and the stream's metrics."""

from __future__ import annotations

import json
import time
from pathlib import Path

from pyspark.sql.streaming import StreamingQueryListener

from binlake.config import load
from binlake.offsets import BinlogPosition
from binlake.capture.context import Context
from binlake.capture.run import run
from binlake.source.dialect import binlog_head
from binlake.capture.stream_query import PROGRESS_METRICS
from binlake.lake import arrow_commit
from binlake.lake.checkpoint import committed_offset
from binlake.capture.stream import resume_position
from binlake.commands.status import status
from binlake.lake.target import Target

from .helpers import seq
from .test_purged import purge_up_to_now
from .workload import create_table, silver_rows, source_rows, write_config


class Progress(StreamingQueryListener):
    """Spark's own progress reports of the stream: the binlog position and binlake's metrics."""

    def __init__(self) -> None:
        self.reports: list[tuple[dict[str, object], dict[str, object]]] = []

    def onQueryStarted(self, event: object) -> None:
        pass

    def onQueryProgress(self, event: object) -> None:
        p = event.progress  # type: ignore[attr-defined]
        metrics = p.observedMetrics.get(PROGRESS_METRICS)
        if metrics is not None and p.sources:
            self.reports.append((json.loads(p.sources[0].endOffset), metrics.asDict()))

    def onQueryIdle(self, event: object) -> None:
        pass

    def onQueryTerminated(self, event: object) -> None:
        pass



def settled_head(conn) -> BinlogPosition:  # type: ignore[no-untyped-def]
    """The binlog head once MariaDB's last binlog checkpoint event names the head file itself: after
    FLUSH BINARY LOGS it writes one more (43 bytes) when the older files' transactions are durable,
    some moments later, even after later transactions. A run that starts before it stops its catch-up
    short of it, and a status then says a few seconds behind. MySQL writes no such event."""
    deadline = time.monotonic() + 30
    with conn.cursor() as cur:
        while time.monotonic() < deadline:
            head = binlog_head(conn)
            cur.execute(f"SHOW BINLOG EVENTS IN '{head.file}'")
            checkpoints = [str(row[5]) for row in cur.fetchall() if row[2] == "Binlog_checkpoint"]
            if not checkpoints or head.file in checkpoints[-1]:
                return head
            time.sleep(0.2)
    return binlog_head(conn)


def test_idle_table_position_advances_past_purged_files(dev_db, database, spark, tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The idle run is the driver's loop on this local lake (binlake.capture.stream_loop); the last run
    is Spark's query (every commit through Spark), whose progress reports carry the position."""
    port = dev_db.running_port()
    create_table(port, database, 50)
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE churn (id INT PRIMARY KEY, v INT)")
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=100, group_size=4)
    cfg = load(cfg_path)  # captures only t
    run(cfg, until_caught_up=True)
    before = resume_position(Context(cfg))
    assert before is not None

    with dev_db.connect(database) as conn, conn.cursor() as cur:
        for i in range(3):
            cur.execute(f"INSERT INTO churn SELECT seq + {i * 1000}, seq FROM {seq(1, 200)}")
            cur.execute("FLUSH BINARY LOGS")
        cur.execute("UPDATE churn SET v = v + 1")
        head_file = settled_head(conn).file
    listener = Progress()
    spark.streams.addListener(listener)
    try:
        began = time.time()
        run(cfg, until_caught_up=True)  # no change of t in this run
        target = Target.of(cfg)
        moved = committed_offset(target.checkpoint)
        assert moved is not None and moved > before and moved.file == head_file, (before, moved, head_file)
        report = status(cfg)["tables"][0]
        assert report["phase"] == "binlog" and report["binlog"]["position"] == str(moved)
        assert report["binlog"]["lag_seconds"] == 0.0, (report["binlog"], head_file)
        with dev_db.connect(database) as conn, conn.cursor() as cur:
            cur.execute("UPDATE churn SET v = v + 1 WHERE id < 10")
        time.sleep(2)
        # t is idle and the stream stopped: t lags by the time since the stream last reached the head
        lag = status(cfg)["tables"][0]["binlog"]["lag_seconds"]
        assert lag is not None and 2 <= lag <= time.time() - began, lag

        with dev_db.connect(database) as conn:
            purge_up_to_now(conn, rotate=False)  # every file before the one the position is in
        assert before.file != moved.file  # without the heartbeats the position would now be gone
        with dev_db.connect(database) as conn, conn.cursor() as cur:
            cur.execute("UPDATE t SET v = 'after purge' WHERE id <= 10")
        monkeypatch.setattr(arrow_commit, "ARROW_ROWS", 0)
        run(cfg, until_caught_up=True)  # resumes from a file the server still has: no error
        time.sleep(1)  # listener events arrive asynchronously
    finally:
        spark.streams.removeListener(listener)
    assert silver_rows(spark, target.silver(f"{database}.t").location) == source_rows(port, database)
    # Spark's progress carries the position and the metrics: the last run read the ten updates,
    # written seconds ago, from the position the idle run moved to
    assert listener.reports
    last_offset, last = listener.reports[-1]
    assert last["changes"] == 10 and BinlogPosition.from_dict(last_offset) > moved
    assert 0 <= time.time() - last["last_event_ts"] < 600
