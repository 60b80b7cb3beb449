"""Compaction of a local lake's tables (binlake.lake.compaction): silver after many marked batches
comes back to few files in key order with every row as it was, read by Spark and by delta-rs, and each
step commits whole or not at all (a kill in the middle of one); bronze's small files are merged, every
change kept once."""

from __future__ import annotations

import json
import os
from decimal import Decimal
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from binlake.lake import arrow_commit, compaction, marked_merge, silver
from binlake.lake.table_log import Snapshot
from binlake.lake.key_index import KeyIndex

from .test_marked_merge import NAMES, ROWS, SCHEMA, _batch, _changes, _delta_rs_rows, _spark_rows

FILE_SIZE = 1024 * 1024  # the snapshot's file is large against it; a batch's file is small


def _marked_silver(location: str, batches: int, monkeypatch: pytest.MonkeyPatch) -> dict[int, tuple[str, int]]:
    monkeypatch.setattr(marked_merge, "MARK_FROM_BYTES", 1)
    snapshot = _changes([(i, f"name {i}", 0, 1, "r") for i in range(ROWS)]).select(NAMES)
    assert silver.insert_snapshot_arrow(SCHEMA, snapshot, location)
    expected = {i: (f"name {i}", 0) for i in range(ROWS)}
    index = KeyIndex("id")
    for number in range(1, batches + 1):
        assert marked_merge.apply_marked(location, SCHEMA, _changes(_batch(number, expected)), index)
    return expected


def _key_ranges(location: str) -> list[tuple[int, int]]:
    """Each live file's least and greatest key, by reading it (live rows only)."""
    index = KeyIndex("id")
    index.sync(Snapshot.read(location))
    return sorted((int(f.keys[f.live][0]), int(f.keys[f.live][-1])) for f in index.files.values() if f.live.any())


def _pool(location: str) -> list[str]:
    return [p for p, a in Snapshot.read(location).files.items() if (a.get("tags") or {}).get("binlake.pool")]


def _compacted(location: str) -> list[compaction.Step]:
    """Steps until none is due."""
    steps = []
    index = KeyIndex("id")
    while (step := compaction.compact_silver(location, "id", FILE_SIZE, index)) is not None:
        steps.append(step)
        assert len(steps) < 40, "compaction does not converge"
    return steps


def test_silver_comes_back_to_few_files_in_key_order(spark: Any, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    location = str(tmp_path / "silver")
    batches = 4 * compaction.SMALL_FILES + 4
    expected = _marked_silver(location, batches, monkeypatch)
    before = len(Snapshot.read(location).files)
    assert len(_pool(location)) == batches == before - 1  # each marked batch's file is the pool's

    # while the pool is a small share of the table, its files are merged among themselves: no tier full
    monkeypatch.setattr(compaction, "POOL_SHARE", 0.5)
    steps = _compacted(location)
    assert steps, "compaction never ran"
    pool = _pool(location)
    assert len(pool) < 2 * compaction.SMALL_FILES and len(Snapshot.read(location).files) == len(pool) + 1
    assert _delta_rs_rows(location) == expected

    # once it is more, its rows go back into their key ranges: the files' ranges no longer overlap
    monkeypatch.setattr(compaction, "POOL_SHARE", 0.0)
    steps += _compacted(location)
    after = Snapshot.read(location)
    assert not _pool(location) and len(after.files) < 8
    ranges = _key_ranges(location)
    assert all(a[1] < b[0] for a, b in zip(ranges, ranges[1:])), ranges
    assert _delta_rs_rows(location) == expected
    assert _spark_rows(spark, location) == expected
    ops = [json.loads(line).get("commitInfo", {}).get("operation") for f in
           sorted((Path(location) / "_delta_log").glob("*.json")) for line in f.read_text().splitlines()]
    assert ops.count("OPTIMIZE") == len(steps)


def test_the_snapshot_s_small_files_are_written_again_as_few(spark: Any, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Silver as a snapshot leaves it, a file per chunk group in key ranges, under marked batches whose
    pool is too small a share to be due: the runs of small files are written again as one each, with
    the pool's rows in their ranges, until no two small files are left side by side."""
    monkeypatch.setattr(marked_merge, "MARK_FROM_BYTES", 1)
    location = str(tmp_path / "silver")
    chunks = 6
    for c in range(chunks):  # one file each, in key order, as the snapshot's chunk groups land
        part = range(c * ROWS // chunks, (c + 1) * ROWS // chunks)
        assert silver.insert_snapshot_arrow(SCHEMA, _changes([(i, f"name {i}", 0, 1, "r") for i in part]).select(NAMES),
                                            location)
    loaded = Snapshot.read(location)
    assert len(loaded.files) == chunks
    largest = max(int(a["size"]) for a in loaded.files.values())
    file_size = int(4.5 * largest / compaction.SMALL_SHARE)  # a range holds four of them, each under half of one
    monkeypatch.setattr(compaction, "POOL_SHARE", 0.9)  # the pool's share alone makes no step due
    # no batch marked the table yet (delta-rs's MERGE keeps a small one so): its files are left alone
    assert compaction.compact_silver(location, "id", file_size, KeyIndex("id")) is None
    expected = {i: (f"name {i}", 0) for i in range(ROWS)}
    index = KeyIndex("id")
    for number in range(1, 4):
        assert marked_merge.apply_marked(location, SCHEMA, _changes(_batch(number, expected)), index)

    steps = []
    while (step := compaction.compact_silver(location, "id", file_size, index)) is not None:
        steps.append(step)
        assert len(steps) < 10, "compaction does not converge"
    after = Snapshot.read(location)
    assert len(steps) == 2 and len([p for p in after.files if p not in _pool(location)]) == 2
    ranges = _key_ranges(location)
    assert not _pool(location) and ranges[0][0] == 0 and ranges[0][1] < ranges[1][0]
    assert _delta_rs_rows(location) == expected
    assert _spark_rows(spark, location) == expected
    # files of half a range or more are done: no step merges them again
    assert compaction.compact_silver(location, "id", file_size, KeyIndex("id")) is None


KILLED_STEP = """
import sys
from binlake.lake import compaction
from binlake.lake.key_index import KeyIndex
import binlake.lake.delta_commit as dv
real = dv._put
def slow(*args, **kwargs):
    print("writing", flush=True)
    import time; time.sleep(30)
    return real(*args, **kwargs)
dv._put = slow  # the step's files are written; its commit waits to be killed
compaction.compact_silver(sys.argv[1], "id", int(sys.argv[2]), KeyIndex("id"))
"""


def test_a_step_killed_before_its_commit_leaves_the_table_as_it_was(spark: Any, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    location = str(tmp_path / "silver")
    expected = _marked_silver(location, compaction.SMALL_FILES + 1, monkeypatch)
    version = Snapshot.read(location).version
    step = subprocess.Popen([sys.executable, "-c", KILLED_STEP, location, str(FILE_SIZE)], stdout=subprocess.PIPE,
                            text=True, env={**os.environ})
    assert step.stdout is not None and step.stdout.readline().strip() == "writing"  # its new files are written
    os.kill(step.pid, signal.SIGKILL)
    step.wait()
    assert Snapshot.read(location).version == version
    assert _delta_rs_rows(location) == expected
    assert compaction.compact_silver(location, "id", FILE_SIZE, KeyIndex("id")) is not None  # the next one runs
    assert _spark_rows(spark, location) == expected


def test_bronze_small_files_merge_in_seq_order(spark: Any, tmp_path: Path) -> None:
    """A column-mapped table, as binlake's bronze is (delta-rs's own compaction refuses those)."""
    from deltalake import DeltaTable, QueryBuilder
    from pyspark.sql import types as T

    location = str(tmp_path / "bronze")
    struct = T.StructType([T.StructField("_seq", T.DecimalType(38, 0)), T.StructField("a value", T.StringType())])
    assert arrow_commit.create(location, struct, {"delta.columnMapping.mode": "name"})
    batches = compaction.SMALL_FILES + 2
    for batch in range(batches):
        seqs = range(batch * 10, batch * 10 + 10)
        arrow_commit.append(DeltaTable(location), pa.table({
            "_seq": pa.array([Decimal(s) for s in seqs], pa.decimal128(38, 0)),
            "a value": pa.array([f"v{s}" for s in seqs])}))
    assert compaction.compact_bronze(str(location), FILE_SIZE) is not None
    assert len(Snapshot.read(location).files) == 1
    read = pa.table(QueryBuilder().register("b", DeltaTable(location)).execute('SELECT * FROM b').read_all())
    assert [int(s) for s in read.column("_seq").to_pylist()] == list(range(batches * 10))  # in _seq order
    by_spark = spark.read.format("delta").load(location).orderBy("_seq").collect()
    assert [(int(r["_seq"]), r["a value"]) for r in by_spark] == [(s, f"v{s}") for s in range(batches * 10)]
    infos = [json.loads(line)["commitInfo"] for f in sorted((Path(location) / "_delta_log").glob("*.json"))
             for line in f.read_text().splitlines() if "commitInfo" in line]
    assert infos[-1]["operation"] == "OPTIMIZE"
    assert compaction.compact_bronze(location, FILE_SIZE) is None  # nothing left to do


def test_a_tier_is_merged_only_while_merging_makes_fewer_files() -> None:
    mib = 1024 * 1024
    small = {f"s{i}": 100 * 1024 for i in range(compaction.SMALL_FILES)}
    assert compaction._crowded_tier(small, 128 * mib) == sorted(small)
    # files of half the target size or more are done: eight of them merged come out as eight again
    done = {f"d{i}": 70 * mib for i in range(compaction.SMALL_FILES)}
    assert compaction._crowded_tier(done, 128 * mib) == []
    assert compaction._crowded_tier({**done, **small}, 128 * mib) == sorted(small)


def test_merged_files_are_sized_by_their_stored_bytes(tmp_path: Path) -> None:
    """Rows that Parquet stores in a few bytes and Arrow holds in hundreds make one file, not dozens."""
    from deltalake import DeltaTable
    from pyspark.sql import types as T

    location = str(tmp_path / "bronze")
    struct = T.StructType([T.StructField("_seq", T.DecimalType(38, 0)), T.StructField("a value", T.StringType())])
    assert arrow_commit.create(location, struct, {"delta.columnMapping.mode": "name"})
    rows = 20_000
    for batch in range(compaction.SMALL_FILES):
        seqs = range(batch * rows, (batch + 1) * rows)
        arrow_commit.append(DeltaTable(location), pa.table({
            "_seq": pa.array([Decimal(s) for s in seqs], pa.decimal128(38, 0)), "a value": pa.array(["x" * 200] * rows)}))
    assert compaction.compact_bronze(location, FILE_SIZE) is not None
    after = Snapshot.read(location)
    assert len(after.files) == 1 and after.num_records(next(iter(after.files))) == rows * compaction.SMALL_FILES
