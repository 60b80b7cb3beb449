"""The stream's checkpoint as the driver's loop keeps it (binlake.lake.checkpoint): Spark's offset and
commit logs, read back as Spark reads them; the loop and Spark's query meet on these files (the
integration test `test_stream_loop` has each replay the other's batch)."""

from __future__ import annotations

import json
from pathlib import Path

from binlake.lake import checkpoint
from binlake.offsets import BinlogPosition


CONF = {"spark.sql.shuffle.partitions": "2"}


def _end(pos: int) -> dict:
    return {"file": "mysql-bin.000001", "pos": pos, "created": 1, "started": 1}


def _conf() -> dict:
    return dict(CONF)


def test_a_planned_batch_is_pending_until_committed_then_the_next_starts_at_its_end(tmp_path: Path) -> None:
    cp = tmp_path / "checkpoint"
    assert checkpoint.pending(str(cp)) == (0, None, None)

    checkpoint.plan_batch(str(cp), 0, _end(100), _conf)
    assert json.loads((cp / "offsets" / "0").read_text().splitlines()[1])["conf"] == CONF  # a first batch's: the session's
    assert checkpoint.pending(str(cp)) == (0, None, _end(100))  # killed here: batch 0 is read again, to 100
    assert checkpoint.committed_offset(str(cp)) is None

    checkpoint.commit_batch(str(cp), 0)
    assert checkpoint.pending(str(cp)) == (1, _end(100), None)
    assert checkpoint.committed_offset(str(cp)) == BinlogPosition("mysql-bin.000001", 100)

    checkpoint.plan_batch(str(cp), 1, _end(250), _conf)
    assert checkpoint.pending(str(cp)) == (1, _end(100), _end(250))


def test_the_files_are_spark_s_and_keep_the_sql_settings_spark_wrote(tmp_path: Path) -> None:
    """As Spark's HDFSMetadataLog writes them: a version line, the batch's metadata (the settings
    carried from the batch before), the offset."""
    cp = tmp_path / "checkpoint"
    (cp / "offsets").mkdir(parents=True)
    conf = {"spark.sql.shuffle.partitions": "4"}  # Spark's, kept over the session's
    (cp / "offsets" / "0").write_text(f'v1\n{{"batchWatermarkMs":0,"batchTimestampMs":5,"conf":{json.dumps(conf)}}}\n'
                                      + json.dumps(_end(10)))
    (cp / "commits").mkdir()
    (cp / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    assert checkpoint.pending(str(cp)) == (1, _end(10), None)

    checkpoint.plan_batch(str(cp), 1, _end(20), _conf)
    version, meta, offset = (cp / "offsets" / "1").read_text().splitlines()
    assert version == "v1" and json.loads(offset) == _end(20)
    assert json.loads(meta)["conf"] == conf and json.loads(meta)["batchTimestampMs"] > 5
    checkpoint.commit_batch(str(cp), 1)
    assert (cp / "commits" / "1").read_text().splitlines() == ["v1", '{"nextBatchWatermarkMs":0}']
    assert json.loads((cp / "metadata").read_text())["id"]


def test_batches_older_than_spark_keeps_are_forgotten(tmp_path: Path) -> None:
    cp = tmp_path / "checkpoint"
    for n in range(105):
        checkpoint.plan_batch(str(cp), n, _end(10 * (n + 1)), _conf)
        checkpoint.commit_batch(str(cp), n)
    kept = sorted(int(f.name) for f in (cp / "offsets").iterdir() if f.name.isdigit())
    assert kept == list(range(5, 105))
    assert sorted(int(f.name) for f in (cp / "commits").iterdir() if f.name.isdigit()) == kept
    assert checkpoint.pending(str(cp)) == (105, _end(1050), None)
