"""The stream on a local lake is driven by binlake in the driver (binlake.capture.stream_loop), keeping
Spark's checkpoint in Spark's format: each resumes the other, including a batch one planned and was
killed landing, which the other replays with the same offsets. A batch too large to hold in the
driver is left to Spark's query in the same run."""

from __future__ import annotations

import json
import pickle
import time
from pathlib import Path

import pyarrow.compute as pc
import pymysql
import pytest

from binlake.capture.binlog_batches import BinlogRange, BinlogReader
from binlake.capture.context import Context, current_position
from binlake.capture.stream_query import binlog_job
from binlake.config import load
from binlake.lake.checkpoint import committed_offset
from binlake.lake.target import Target
from binlake.offsets import BinlogPosition
from binlake.source.dialect import binlog_head

from .workload import Writers, bronze_duplicates, create_table, run_cli, silver_rows, source_rows, write_config

LOOP = "in the driver"  # the loop's first line (-v)
TO_SPARK = "Spark's query reads it"


def _offsets(checkpoint: Path) -> list[tuple[int, dict]]:
    return sorted((int(f.name), json.loads(f.read_text().splitlines()[-1]))
                  for f in (checkpoint / "offsets").iterdir() if f.name.isdigit())


def _killed(cfg: Path, point: str, counter: Path, **env: str) -> str:
    crashed = run_cli("-v", "run", "-c", str(cfg), env={"BINLAKE_CRASH_AT": point, "BINLAKE_CRASH_COUNTER": str(counter),
                                                        **env})
    assert crashed.returncode == -9, f"not killed at {point}: rc={crashed.returncode} {crashed.stderr[-2000:]}"
    return crashed.stderr


@pytest.mark.one_server
def test_the_loop_and_spark_s_query_replay_each_other_s_batches(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Killed in the loop with a batch in bronze and not in silver, the next run (Spark's query alone)
    replays it with the loop's offsets; killed there alike, the loop replays Spark's batch. Under
    writers throughout: silver equals the source, bronze holds each change once, and each batch
    starts where the one before it ended."""
    port = dev_db.running_port()
    create_table(port, database, 500)
    cfg = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=200, group_size=2)
    checkpoint = Path(Target.of(load(cfg)).checkpoint)
    with Writers(port, database, 500, threads=2, pause=0.005):
        err = _killed(cfg, "mid_stream", tmp_path / "c1")
        assert LOOP in err
        planned = _offsets(checkpoint)
        assert planned and not (checkpoint / "commits" / str(planned[-1][0])).exists()

        # Spark's query alone (every commit through Spark): it replays the loop's batch, then plans its own
        err = _killed(cfg, "mid_stream:2", tmp_path / "c2", BINLAKE_ARROW_ROWS="0")
        assert LOOP not in err
        replayed = _offsets(checkpoint)
        assert replayed[:len(planned)] == planned and len(replayed) == len(planned) + 1
        assert not (checkpoint / "commits" / str(replayed[-1][0])).exists()

        # the loop replays Spark's batch to the end Spark planned, killed once it has landed
        err = _killed(cfg, "after_batch", tmp_path / "c3")
        assert LOOP in err and TO_SPARK not in err
        assert _offsets(checkpoint) == replayed
    done = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert done.returncode == 0, done.stderr[-2000:]

    target = Target.of(load(cfg))
    name = f"{database}.t"
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0
    ends = [BinlogPosition.from_dict(end) for _, end in _offsets(checkpoint)]
    assert ends == sorted(ends) and len(set(ends)) == len(ends)
    committed = sorted(int(f.name) for f in (checkpoint / "commits").iterdir() if f.name.isdigit())
    assert committed == [n for n, _ in _offsets(checkpoint)]


@pytest.mark.one_server
def test_a_batch_too_large_for_the_driver_is_left_to_spark_in_the_same_run(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A burst larger than the loop holds is read by Spark's query, and the loop takes over again after it."""
    port = dev_db.running_port()
    create_table(port, database, 300)
    cfg = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=200, group_size=2)
    assert run_cli("run", "-c", str(cfg), "--until-caught-up").returncode == 0
    with Writers(port, database, 300, threads=2) as busy:
        while busy.ops < 400:
            time.sleep(0.01)
    # a burst of about 100 KB of binlog, then the stream: its batch is Spark's, then the loop looks on
    streamed = run_cli("-v", "stream", "-c", str(cfg), "--until-caught-up", env={"BINLAKE_STREAM_HELD_BYTES": "50000"})
    assert streamed.returncode == 0, streamed.stderr[-2000:]
    assert TO_SPARK in streamed.stderr and streamed.stderr.count(LOOP) == 2

    target = Target.of(load(cfg))
    name = f"{database}.t"
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    assert bronze_duplicates(spark, target.bronze(name).location) == 0


def test_a_quiet_source_s_first_batch_is_committed_empty_as_spark_s_batch_0(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """No change after the snapshot: the run still commits batch 0, empty, as Spark's query does, so the
    checkpoint holds where the stream stands (what the source-identity check and a restart go on from)."""
    port = dev_db.running_port()
    create_table(port, database, 300)
    with dev_db.connect(database) as conn:
        head = binlog_head(conn)
    cfg = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=200, group_size=2)
    checkpoint = Path(Target.of(load(cfg)).checkpoint)
    done = run_cli("-v", "run", "-c", str(cfg), "--until-caught-up")
    assert done.returncode == 0 and LOOP in done.stderr, done.stderr[-2000:]
    assert [n for n, _ in _offsets(checkpoint)] == [0] and (checkpoint / "commits" / "0").exists()
    assert committed_offset(str(checkpoint)) == head

    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET v = 'after' WHERE id <= 10")
        moved = binlog_head(conn)
    again = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert again.returncode == 0, again.stderr[-2000:]
    assert [n for n, _ in _offsets(checkpoint)] == [0, 1] and committed_offset(str(checkpoint)) == moved

    # a batch planned empty and not committed: Spark's query, stopped once it had reached its target,
    # planned one more, to the same position under another reading of the server's start time
    lines = (checkpoint / "offsets" / "1").read_text().splitlines()
    end = json.loads(lines[-1])
    twin = {**end, "started": end["started"] + 1}
    (checkpoint / "offsets" / "2").write_text("\n".join([*lines[:-1], json.dumps(twin)]))
    with dev_db.connect(database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET v = 'later' WHERE id <= 10")
        later = binlog_head(conn)
    past = run_cli("run", "-c", str(cfg), "--until-caught-up", timeout=300)
    assert past.returncode == 0, past.stderr[-2000:]
    assert [n for n, _ in _offsets(checkpoint)] == [0, 1, 2, 3] and (checkpoint / "commits" / "2").exists()
    assert committed_offset(str(checkpoint)) == later
    assert silver_rows(spark, Target.of(load(cfg)).silver(f"{database}.t").location) == source_rows(port, database)


def test_a_reader_asked_for_the_head_of_a_quiet_source_offers_its_start_again(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The loop in the driver and Spark's query each hold a binlog source, and each reads the server's
    start time as `now - Uptime`, a second apart at times. Asked for the head of a quiet source from an
    offset another reader made, a reader answers with that offset itself, not a twin of it with its own
    start time: Spark compares offsets as JSON, and would plan an empty batch to the twin (the stream
    once stuck behind one, waiting for the batch to find something)."""
    port = dev_db.running_port()
    create_table(port, database, 10)
    ctx = Context(load(write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", 100, 1)))
    start = current_position(ctx)
    options = {"job": json.dumps(binlog_job(ctx, ctx.schemas(), {}, start)), "password": ctx.params["password"]}
    create_table(port, database, 1, table="moved")  # the head moves: the offset to it is a reader's own
    head = BinlogReader(options).latestOffset(start.to_dict())
    assert "started" in head and BinlogPosition.from_dict(head) > start, head
    for wobble in (1, -1):
        twin = {**head, "started": head["started"] + wobble}  # the other reader's look at the start time
        assert BinlogReader(options).latestOffset(twin) == twin
    ctx.release()


def test_the_loop_reads_a_batch_on_the_connection_its_head_was_asked_on(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The loop plans a batch and reads it at once: the read takes the connection the head was asked on
    (`binlog_batches.Kept`), two connections a batch, not three (on MySQL each is a TLS handshake).
    One that died meanwhile is replaced, and the batch reads the same; a reader handed to another
    process (Spark's) carries none."""
    port = dev_db.running_port()
    create_table(port, database, 10)
    ctx = Context(load(write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", 100, 1)))
    start = current_position(ctx).to_dict()
    options = {"job": json.dumps(binlog_job(ctx, ctx.schemas(), {}, current_position(ctx))),
               "password": ctx.params["password"]}
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                         autocommit=True) as conn, conn.cursor() as cur:
        cur.execute("UPDATE t SET k = k + 1")

        def connections() -> int:
            cur.execute("SHOW GLOBAL STATUS LIKE 'Connections'")
            return int(cur.fetchone()[1])

        def batch(reader: BinlogReader, kill: bool = False) -> tuple[int, int]:
            """The batch's data rows and the connections its head and its read opened."""
            before = connections()
            end = reader.latestOffset(start)
            if kill:
                cur.execute(f"KILL {reader.kept.conn.thread_id()}")
            batches = list(reader.read(BinlogRange(start, end)))
            rows = sum(pc.sum(pc.equal(b.column("_op"), "u")).as_py() or 0 for b in batches)
            return rows, connections() - before

        sparks, loops = BinlogReader(options), BinlogReader(options)
        loops.keeps = True
        for first in (sparks, loops):  # a reader's first batch also opens what it then keeps (its watch)
            assert batch(first)[0] == 10
        rows, opened = batch(sparks)  # Spark's: the head asked in the driver, the batch read elsewhere
        assert (rows, opened - 1) == batch(loops) == (10, opened - 1)
        assert batch(loops, kill=True) == (10, opened)
        loops.latestOffset(start)
        assert loops.kept is not None and pickle.loads(pickle.dumps(loops)).kept is None
    ctx.release()
