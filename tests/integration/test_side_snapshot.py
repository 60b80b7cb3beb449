"""Snapshots beside the running stream (binlake.capture.side_snapshot), started by signals: a table
whose silver went wrong is snapshotted again while 16 writers change it and 4 more another captured
table, paused and resumed, and `binlake run` is killed (SIGKILL to its process group) in the middle;
after the restart both silvers equal the source, and both bronzes hold every binlog change of their
table once, checked against the binlog replayed by mysql-replication alone. Bad signals are each
refused in one line, the stream going on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable

import pytest

from binlake.capture import side_state
from binlake.config import load
from binlake.lake import arrow_commit
from binlake.lake.target import Target
from binlake.offsets import BinlogPosition
from binlake.source import signal_table
from binlake.source.dialect import binlog_head

from .helpers import execute, params
from .workload import (BINLAKE, CLI_ENV, ROOT, Writers, assert_quiet, bronze_duplicates, create_table, run_cli,
                       silver_rows, source_rows, write_config)

# `make soak` runs it at 1,000,000 rows (BINLAKE_SIDE_ROWS)
ROWS = int(os.environ.get("BINLAKE_SIDE_ROWS", "3000"))
CHUNK = max(200, ROWS // 100)
OTHER_ROWS = min(ROWS, 20_000)  # the other captured table's


def _started(cfg_path: Path, log: Path) -> subprocess.Popen[bytes]:
    out = log.open("wb")
    return subprocess.Popen([*BINLAKE, "-v", "run", "-c", str(cfg_path)], cwd=ROOT, start_new_session=True,
                            env={**os.environ, **CLI_ENV}, stdout=out, stderr=out)


def _wait(what: str, check: Callable[[], Any], proc: subprocess.Popen[bytes], log: Path, timeout: float = 240) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"binlake run ended (rc {proc.returncode}): {log.read_text()[-3000:]}"
        found = check()
        if found:
            return found
        time.sleep(0.3)
    raise AssertionError(f"timed out waiting for {what}: {log.read_text()[-3000:]}")


def _state(target: Target, name: str) -> dict[str, Any] | None:
    where = target.side_snapshot(name)
    try:
        return json.loads(where.read_text()) if where.exists() else None  # type: ignore[no-any-return]
    except ValueError:
        return None  # being replaced


def _signal(cfg_path: Path, *args: str) -> None:
    sent = run_cli("signal", "-c", str(cfg_path), *args)
    assert sent.returncode == 0, sent.stderr[-2000:]


def _stopped(proc: subprocess.Popen[bytes]) -> None:
    os.killpg(proc.pid, signal.SIGTERM)
    assert proc.wait(timeout=120) == 0


def _spoil(spark: Any, location: str) -> None:
    """Silver gone wrong downstream: rows lost, rows changed, rows the source never had."""
    from delta.tables import DeltaTable

    table = DeltaTable.forPath(spark, location)
    table.delete("id % 50 = 0")
    table.update("id % 37 = 0", {"v": "'spoiled'"})
    extra = spark.read.format("delta").load(location).where("id <= 20").selectExpr(
        "id + 900000000 AS id", *[c for c in spark.read.format("delta").load(location).columns if c != "id"])
    extra.write.format("delta").mode("append").save(location)


def _bronze_changes(spark: Any, location: str, start: BinlogPosition) -> Counter[tuple[str, int]]:
    rows = spark.read.format("delta").load(location).where("_op IN ('c', 'u', 'd')").select("_file", "_pos").collect()
    return Counter((r["_file"], int(r["_pos"])) for r in rows if BinlogPosition(r["_file"], int(r["_pos"])) >= start)


def _replayed(dev_db: Any, database: str, table: str, start: BinlogPosition,
              stop: BinlogPosition) -> Counter[tuple[str, int]]:
    """Bronze's rows per event, as the binlog replayed by mysql-replication alone says (an event's start
    is its end position minus its whole size): a key-changing update is two."""
    from pymysqlreplication import BinLogStreamReader
    from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

    connection = {k: v for k, v in params(dev_db).items() if k != "connect_timeout"}
    stream = BinLogStreamReader(connection_settings=connection, server_id=5790, log_file=start.file,
                                log_pos=start.pos, resume_stream=True, blocking=False,
                                only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
                                only_schemas=[database], only_tables=[table], is_mariadb=False,
                                enable_logging=False)
    found: Counter[tuple[str, int]] = Counter()
    try:
        for event in stream:
            at = BinlogPosition(stream.log_file, int(event.packet.log_pos) - int(event.packet.event_size))
            if at >= stop:
                break
            for row in event.rows:
                moved = isinstance(event, UpdateRowsEvent) and row["before_values"]["id"] != row["after_values"]["id"]
                found[(at.file, at.pos)] += 2 if moved else 1
    finally:
        stream.close()
    return found


def _captured(dev_db: Any, database: str, tmp_path: Path, rows: int, chunk: int,
              signal_table: str | None = None, other_rows: int = 0) -> tuple[int, Path, Target, str]:
    """A table `t` of `rows` rows (and `u` of `other_rows`, if any), captured by a first `binlake run
    --until-caught-up`: the source's port, the configuration, the lake and `t`'s name."""
    port = dev_db.running_port()
    create_table(port, database, rows)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=chunk, group_size=2)
    if other_rows:
        create_table(port, database, other_rows, "u")
        cfg_path.write_text(cfg_path.read_text().replace("\\.t'", "\\.[tu]'"))
    if signal_table:
        cfg_path.write_text(cfg_path.read_text().replace("source:\n", f"source:\n  signal-table: {signal_table}\n", 1))
    first = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert first.returncode == 0, first.stderr[-3000:]
    return port, cfg_path, Target.of(load(cfg_path)), f"{database}.t"


@pytest.mark.one_server
def test_a_signalled_snapshot_repairs_silver_under_writers_pause_resume_and_a_kill(
        dev_db: Any, database: str, spark: Any, tmp_path: Path) -> None:
    port, cfg_path, target, name = _captured(dev_db, database, tmp_path, ROWS, CHUNK, other_rows=OTHER_ROWS)
    silver = target.silver(name).location
    _spoil(spark, silver)
    assert silver_rows(spark, silver) != source_rows(port, database)  # the snapshot has something to repair
    began = _head(dev_db)

    logs = [tmp_path / "run-0.log", tmp_path / "run-1.log"]
    with Writers(port, database, ROWS, threads=16, pause=0.1) as writers, \
            Writers(port, database, OTHER_ROWS, threads=4, pause=0.1, table="u") as others:
        proc = _started(cfg_path, logs[0])
        try:
            _wait("the stream", lambda: target.stream_progress.exists(), proc, logs[0])
            _signal(cfg_path, "execute-snapshot", name)
            _wait("3 chunks", lambda: (_state(target, name) or {}).get("chunks", 0) >= 3, proc, logs[0])
            _signal(cfg_path, "pause-snapshot")
            paused = _wait("the pause", lambda: (s := _state(target, name)) and s["status"] == "paused" and s,
                           proc, logs[0])
            time.sleep(1.5)  # the chunk being read when the pause came lands; no other
            held = _state(target, name)["chunks"]  # type: ignore[index]
            assert held <= paused["chunks"] + 1
            looked = time.monotonic()
            shown = json.loads(run_cli("status", "-c", str(cfg_path), "--json").stdout)
            paused_shown = next(t for t in shown["tables"] if t["source"] == name)["side_snapshot"]
            time.sleep(max(0.0, 4 - (time.monotonic() - looked)))
            assert _state(target, name)["chunks"] == held, "chunks landed while paused"  # type: ignore[index]
            _signal(cfg_path, "resume-snapshot", name)
            landed = _wait("2 more chunks", lambda: (s := _state(target, name)) and s["status"] == "running"
                           and s["chunks"] >= held + 2 and s, proc, logs[0])
        finally:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        assert landed["status"] == "running"
        proc = _started(cfg_path, logs[1])
        try:
            done = _wait("the snapshot's end", lambda: (s := _state(target, name)) and s["status"] == "done" and s,
                         proc, logs[1], timeout=400 + ROWS / 1000)
            time.sleep(2)
        finally:
            writers.stop()
            others.stop()
            _stopped(proc)
    caught_up = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert caught_up.returncode == 0, caught_up.stderr[-3000:]
    assert_quiet(caught_up.stderr)
    assert writers.ops > 500 and others.ops > 100 and not writers.errors + others.errors, \
        (writers.ops, others.ops, (writers.errors + others.errors)[:3])
    assert done["chunks"] > landed["chunks"] and done["rows"] >= ROWS // 2, done

    stop = _head(dev_db)
    for table in ("t", "u"):
        where = f"{database}.{table}"
        assert silver_rows(spark, target.silver(where).location) == source_rows(port, database, table), table
        assert bronze_duplicates(spark, target.bronze(where).location) == 0, table
        assert _bronze_changes(spark, target.bronze(where).location, began) == \
            _replayed(dev_db, database, table, began, stop), table
    report = json.loads(run_cli("status", "-c", str(cfg_path), "--json").stdout)
    side = next(t for t in report["tables"] if t["source"] == name)["side_snapshot"]
    assert side["status"] == "done" and side["chunks"] == done["chunks"] and side["chunks_left"] == 0
    # while paused, status showed about how many were left, from the server's row estimate
    assert paused_shown["status"] == "paused" and paused_shown["chunks_left"] >= 1, paused_shown
    guessed = paused_shown["chunks"] + paused_shown["chunks_left"]
    assert abs(guessed - done["chunks"]) <= done["chunks"] // 2, (paused_shown, done)


def test_bad_signals_are_each_refused_in_one_line_and_the_stream_goes_on(
        dev_db: Any, database: str, tmp_path: Path) -> None:
    port = dev_db.running_port()
    create_table(port, database, 200)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=100, group_size=2)
    target, name = Target.of(load(cfg_path)), f"{database}.t"
    log = tmp_path / "run.log"
    proc = _started(cfg_path, log)
    bad = [
        (("execute-snapshot", f"{database}.nope"), f"names {database}.nope, which is not a captured table"),
        (("execute-snapshot", name, "--condition", "no_such_column > 1"), "which the server refuses"),
        (("pause-snapshot", name), "nothing to pause"),
        (("resume-snapshot",), "nothing to resume"),
        (("stop-snapshot", name), "nothing to stop"),
    ]
    try:
        _wait("the stream", lambda: target.stream_progress.exists(), proc, log)
        for args, said in bad:
            _signal(cfg_path, *args)
            _wait(f"the refusal of {args[0]}", lambda: any(said in r["message"] for r in _refusals(cfg_path)), proc,
                  log, timeout=60)
        (target.signals / "0-garbled.json").write_text("{not json")
        _wait("the refusal of a garbled signal", lambda: any("is not JSON" in r["message"]
                                                               for r in _refusals(cfg_path)), proc, log, timeout=60)
        # the stream went on: a change made now still lands
        execute(dev_db, database, "UPDATE t SET v = 'after the refusals' WHERE id = 7")
        _wait("a change after the refusals", lambda: "after the refusals" in _silver_value(target, name, 7), proc, log,
              timeout=60)
    finally:
        _stopped(proc)
    refused = _refusals(cfg_path)
    assert len(refused) == len(bad) + 1 and all("\n" not in r["message"] for r in refused), refused
    text = run_cli("status", "-c", str(cfg_path)).stdout
    assert "signal refused" in text and "is not JSON" in text, text
    assert "signal refused" in log.read_text()


def _refusals(cfg_path: Path) -> list[dict[str, Any]]:
    return side_state.refusals(Target.of(load(cfg_path)).side_snapshots)


def _head(dev_db: Any) -> BinlogPosition:
    with dev_db.connect() as conn:
        return binlog_head(conn)


def _silver_value(target: Target, name: str, key: int) -> str:
    rows = arrow_commit.query(target.silver(name).location, "silver", f"SELECT v FROM silver WHERE id = {key}")
    return str(rows.to_pylist()[0]["v"]) if rows.num_rows else ""


@pytest.mark.one_server
def test_a_row_of_the_signal_table_snapshots_a_table_beside_the_stream(dev_db: Any, database: str, spark: Any,
                                                                        tmp_path: Path) -> None:
    execute(dev_db, database, signal_table.DDL.format(table="binlake_signal"))
    port, cfg_path, target, name = _captured(dev_db, database, tmp_path, 600, 100, f"{database}.binlake_signal")
    _spoil(spark, target.silver(name).location)
    log = tmp_path / "run.log"
    with Writers(port, database, 600, threads=2, pause=0.02) as writers:
        proc = _started(cfg_path, log)
        try:
            _wait("the stream", lambda: target.stream_progress.exists(), proc, log)
            sent = run_cli("signal", "-c", str(cfg_path), "execute-snapshot", name)
            assert sent.returncode == 0 and f"inserted into {database}.binlake_signal" in sent.stdout, sent
            done = _wait("the snapshot's end", lambda: (s := _state(target, name)) and s["status"] == "done" and s,
                         proc, log)
        finally:
            writers.stop()
            _stopped(proc)
    caught_up = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
    assert caught_up.returncode == 0, caught_up.stderr[-3000:]
    assert done["reason"].startswith("signal ") and done["chunks"] >= 6, done
    assert not any(target.signals.iterdir()), "a signal file left behind"
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)


@pytest.mark.one_server
def test_a_snapshot_with_a_condition_takes_only_the_rows_it_matches(dev_db: Any, database: str, spark: Any,
                                                                    tmp_path: Path) -> None:
    port, cfg_path, target, name = _captured(dev_db, database, tmp_path, 600, 100)
    silver = target.silver(name).location
    _spoil(spark, silver)
    spoiled = silver_rows(spark, silver)
    _signal(cfg_path, "execute-snapshot", name, "--condition", "id <= 300 AND v LIKE 'row-%'")
    log = tmp_path / "run.log"
    proc = _started(cfg_path, log)
    try:
        done = _wait("the snapshot's end", lambda: (s := _state(target, name)) and s["status"] == "done" and s,
                     proc, log)
    finally:
        _stopped(proc)
    source = {r[0]: r for r in source_rows(port, database)}
    now = {r[0]: r for r in silver_rows(spark, silver)}
    assert done["rows"] == 300 and done["condition"].startswith("id <= 300"), done
    assert {k: r for k, r in now.items() if k <= 300} == {k: r for k, r in source.items() if k <= 300}
    # the rows it does not match stay as they were, rows the source lacks included: nothing is deleted
    assert {k: r for k, r in now.items() if k > 300} == {r[0]: r for r in spoiled if r[0] > 300}
    assert any(k > 900000000 for k in now) and any(r[2] == "spoiled" for k, r in now.items() if k > 300)


def test_a_snapshot_on_a_quiet_source_repairs_silver_read_at_the_same_binlog_head(
        dev_db: Any, database: str, spark: Any, tmp_path: Path) -> None:
    """No change since the first snapshot: every chunk's high watermark is the first snapshot's, so its
    rows carry the `_seq` silver's rows do; they still replace them, and the rows it never saw go."""
    port, cfg_path, target, name = _captured(dev_db, database, tmp_path, 400, 100)
    _spoil(spark, target.silver(name).location)
    _signal(cfg_path, "execute-snapshot", name)
    again = run_cli("run", "-c", str(cfg_path), "--until-caught-up")  # caught up once the snapshot is done
    assert again.returncode == 0, again.stderr[-3000:]
    assert _state(target, name)["status"] == "done"  # type: ignore[index]
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
