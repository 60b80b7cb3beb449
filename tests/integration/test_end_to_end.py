"""binlake run against a live server: concurrent writers, exact handover, verify, replay."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from chispa import assert_df_equality

from binlake.source.binlog_reader import read_changes, split_key_change
from binlake.cli import main
from binlake.config import load
from binlake.capture.handover import Handover
from binlake.offsets import BinlogPosition
from binlake.capture.run import run
from binlake.capture.stream import stream
from binlake.source.connection import connect
from binlake.source.catalog import load_schema
from binlake.source.dialect import binlog_head
from binlake.lake import split_state as state
from binlake.lake.target import Target
from binlake.commands.verify import verify

from .helpers import params
from .workload import Writers, bronze_duplicates, create_table, run_cli, silver_rows, source_rows, write_config


@pytest.mark.slow
def test_concurrent_writers_handover_and_verify(dev_db, database, spark, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    rows = 100_000
    create_table(port, database, rows)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=4096, group_size=16)
    with Writers(port, database, rows, threads=2, pause=0.01) as writers:
        first = run_cli("run", "-c", str(cfg_path), "--until-caught-up")
        assert first.returncode == 0, first.stderr[-3000:]
    assert writers.ops > 100, "the writers must have raced the snapshot"
    cfg = load(cfg_path)
    run(cfg, until_caught_up=True)  # the changes the writers made after the first run's last batch
    target = Target.of(cfg)
    name = f"{database}.t"
    splits = state.load(spark, target.split_state, 16)[name]
    assert len(splits) >= 8 and all(s.status == "done" for s in splits)
    assert silver_rows(spark, target.silver(name).location) == source_rows(port, database)
    report = verify(cfg)
    assert report["ok"], report

    # Handover: exactly the binlog changes at or after their chunk's HW are in bronze, once each.
    p = params(dev_db)
    conn = connect(p)
    schema = load_schema(conn, database, "t")
    head = binlog_head(conn)
    handover = Handover({name: schema}, {name: splits})
    handover.bind(conn)
    start = handover.start_position()
    assert start is not None
    expected, skipped = set(), 0
    for change in read_changes(p, 5690, start, head, lambda d, t: d == database and t == "t"):
        for part in split_key_change(change, schema.key, lambda a, b: a == b):
            if handover.should_emit(part):
                expected.add((part.op, int(part.seq)))
            else:
                skipped += 1
    conn.close()
    bronze = spark.read.format("delta").load(target.bronze(name).location).where("_op IN ('c','u','d')")
    got = [(r["_op"], int(r["_seq"])) for r in bronze.select("_op", "_seq").collect()]
    assert len(got) == len(set(got)), "a binlog change reached bronze twice"
    assert set(got) == expected
    assert skipped > 0, "some changes must have fallen inside a chunk's snapshot"
    # none before its chunk's HW: one predicate over every split, one Spark job
    early = []
    for s in splits:
        bounds = [f"id >= {int(s.start[0])}" if s.start is not None else "", f"id < {int(s.end[0])}" if s.end is not None else ""]
        before_hw = f"(_file < '{s.hw.file}' OR (_file = '{s.hw.file}' AND _pos < {s.hw.pos}))"
        early.append("(" + " AND ".join([b for b in bounds if b] + [before_hw]) + ")")
    found = bronze.where(" OR ".join(early)).select("id", "_file", "_pos").limit(5).collect()
    assert not found, f"bronze holds changes before their chunk's HW: {found}"
    assert bronze_duplicates(spark, target.bronze(name).location) == 0

    # status --json reports the table
    capsys.readouterr()
    assert main(["status", "-c", str(cfg_path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    entry = report["tables"][0]
    assert entry["source"] == name and entry["chunks"]["planned"] == entry["chunks"]["done"] == len(splits)
    assert entry["phase"] == "binlog" and entry["rows"] == len(source_rows(port, database))
    assert Path(entry["silver"]["location"]).is_dir() and Path(entry["bronze"]["location"]).is_dir()
    assert BinlogPosition(*entry["binlog"]["position"].rsplit(":", 1)[0:1], int(entry["binlog"]["position"].rsplit(":", 1)[1])) == head


def test_verify_names_the_chunk_that_differs_and_replay_changes_nothing(dev_db, database, spark, tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    create_table(port, database, 3000)
    cfg_path = write_config(tmp_path / "binlake.yml", port, database, tmp_path / "lake", chunk_size=500, group_size=8)
    cfg = load(cfg_path)
    run(cfg, until_caught_up=True)
    with connect(params(dev_db)) as conn, conn.cursor() as cur:
        cur.execute(f"UPDATE `{database}`.t SET v = 'late' WHERE id BETWEEN 10 AND 20")
        cur.execute(f"DELETE FROM `{database}`.t WHERE id = 2990")
    run(cfg, until_caught_up=True)
    silver = Target.of(cfg).silver(f"{database}.t").location
    before = spark.read.format("delta").load(silver)
    kept = spark.createDataFrame(before.collect(), before.schema)

    # replay the whole stream from min(HW): a fresh checkpoint re-reads every change
    shutil.rmtree(Target.of(cfg).checkpoint)
    stream(cfg, until_caught_up=True)
    assert_df_equality(kept, spark.read.format("delta").load(silver), ignore_row_order=True)

    # tamper with silver: verify must fail and name chunk 0 (ids < 500) and the last chunk
    from delta.tables import DeltaTable

    DeltaTable.forPath(spark, silver).update("id = 5", {"v": "'tampered'"})
    DeltaTable.forPath(spark, silver).delete("id = 2999")
    capsys.readouterr()
    assert main(["verify", "-c", str(cfg_path)]) == 1
    out = capsys.readouterr().out
    assert "chunks that differ: 0, 5" in out, out
