"""Retention (binlake.lake.retention) on real Delta tables: what a silver's MERGEs leave behind goes
once it left the table more than the retention ago, and nothing a version within the retention
names goes (time travel, a reader's scan, deletion vectors Spark wrote), even when a pass is killed.
Spark reads the tables where its reading is the check; the rest is delta-rs alone."""

from __future__ import annotations

import datetime as dt
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
import uuid
from decimal import Decimal
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from binlake import config
from binlake.lake import arrow_commit, retention, silver, split_state
from binlake.lake.table_log import replay
from binlake.lake.target import Target
from binlake.schema import Column, TableSchema

# a column name with a space: column mapping by name, as binlake's tables have it
SCHEMA = TableSchema("shop", "items", (Column("id", "int", "int(11)", False, in_key=True),
                                       Column("a name", "varchar", "varchar(40)"),
                                       Column("n", "int", "int(11)")), ("id",))
NAMES = silver.struct(SCHEMA).fieldNames()
ARROW = pa.schema([("id", pa.int32()), ("a name", pa.string()), ("n", pa.int32()), ("_seq", pa.decimal128(38, 0)),
                   ("_ts", pa.timestamp("us", "UTC")), ("_op", pa.string())])
ROWS = 4000


def _changes(rows: list[tuple[int, str, int, int, str]]) -> pa.Table:
    """Bronze-typed changes (id, name, n, seq, op), as a micro-batch hands them to silver."""
    at = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    return pa.Table.from_pylist([{"id": i, "a name": name, "n": n, "_seq": Decimal(seq), "_ts": at, "_op": op}
                                 for i, name, n, seq, op in rows], ARROW)


def _silver(location: str) -> None:
    """A silver table of ROWS rows, as binlake's snapshot lands one (delta-rs, binlake's properties)."""
    snapshot = _changes([(i, f"name {i}", 0, 1, "r") for i in range(ROWS)]).select(NAMES)
    assert silver.insert_snapshot_arrow(SCHEMA, snapshot, location)


def _merge(location: str, batch: int, keys: int = 300, among: int = ROWS) -> None:
    """One micro-batch of updates to `keys` random keys below `among` (and a delete or two), MERGEd by
    delta-rs."""
    picked = random.Random(batch).sample(range(among), keys)
    rows = [(i, f"name {i} v{batch}", batch, 10 + batch, "d" if i % 97 == 0 else "u") for i in picked]
    table = arrow_commit.writable(location, NAMES)
    silver.apply_arrow(table, SCHEMA, _changes(rows), inserts_only=False)


def _rows(location: str, version: int | None = None) -> list[dict[str, Any]]:
    """The table's rows at `version` (the newest: None), read by delta-rs's SQL engine (it reads
    deletion vectors), in key order."""
    from deltalake import DeltaTable, QueryBuilder

    table = DeltaTable(location) if version is None else DeltaTable(location, version=version)
    found = QueryBuilder().register("t", table).execute("SELECT * FROM t ORDER BY id").read_all()
    return pa.table(found).to_pylist()


def _spark_rows(spark: Any, location: str) -> list[dict[str, Any]]:
    return [r.asDict() for r in spark.read.format("delta").load(location).orderBy("id").collect()]


def _disk(location: str) -> dict[str, int]:
    """Every file under the table's folder but its log, by path, with its size."""
    found = {}
    for folder, dirs, files in os.walk(location):
        dirs[:] = [d for d in dirs if d != "_delta_log"]
        for name in files:
            found[os.path.join(folder, name)] = os.path.getsize(os.path.join(folder, name))
    return found


def _live_bytes(location: str) -> int:
    from deltalake import DeltaTable

    return sum(pa.table(DeltaTable(location).get_add_actions(flatten=True)).column("size_bytes").to_pylist())


def _age(location: str, seconds: float = 7200) -> None:
    """Date every file of the table (its log aside) `seconds` back, as if written long ago: then only
    their removal's time keeps them."""
    for path in _disk(location):
        os.utime(path, (time.time() - seconds, time.time() - seconds))


def _newest_removal(location: str) -> float:
    return max(replay(location).removed.values())


def test_a_silver_s_merges_leave_files_until_the_retention_passes(tmp_path: Path) -> None:
    location = str(tmp_path / "silver")
    from deltalake import DeltaTable

    _silver(location)
    for batch in range(1, 26):
        _merge(location, batch)
        if batch == 12:
            DeltaTable(location).create_checkpoint()  # the log is read from a checkpoint on
    expected = _rows(location)
    assert any(n.endswith(".checkpoint.parquet") for n in os.listdir(os.path.join(location, "_delta_log")))
    live, before = _live_bytes(location), _disk(location)
    assert sum(before.values()) > 10 * live, "each copy-on-write MERGE left a whole table behind"

    # every removal is newer than the retention: nothing goes, however old the files are
    _age(location)
    done = retention.clean(location, 3600)
    assert (done.removed_files, done.finished, done.error) == (0, True, None)
    assert _disk(location) == before
    assert retention.waiting_bytes(location) == sum(before.values()) - live

    # once the last removal is older than the retention, only the live files are left
    seconds = 2.0
    time.sleep(max(0.0, _newest_removal(location) + seconds + 0.1 - time.time()))
    done = retention.clean(location, seconds)
    after = _disk(location)
    assert done.removed_files == len(before) - len(after) > 0 and done.finished
    assert done.removed_bytes == sum(before.values()) - sum(after.values())
    assert sum(after.values()) <= 2 * live, (sum(after.values()), live)
    assert sum(after.values()) == live and retention.waiting_bytes(location) == 0
    assert _rows(location) == expected


def test_time_travel_within_the_retention_reads_whole(tmp_path: Path) -> None:
    location = str(tmp_path / "silver")
    _silver(location)
    seen = {}
    for batch in range(1, 7):
        _merge(location, batch)
    old = replay(location).version
    seen[old] = _rows(location, old)
    time.sleep(0.05)
    mark = time.time()  # the cut-off: versions newest at some time after it must read whole
    time.sleep(0.05)
    for batch in range(7, 10):
        _merge(location, batch)
        version = replay(location).version
        seen[version] = _rows(location, version)
    removed_since = {p for p, at in replay(location).removed.items() if at >= mark}
    now = time.time()
    done = retention.clean(location, now - mark, now=now)
    assert done.removed_files > 0, "the versions before the cut-off lost their files"
    for version, rows in seen.items():  # `old` was the newest at the cut-off: it is inside the retention
        assert _rows(location, version) == rows, version
    assert all(os.path.exists(p) for p in removed_since)
    with pytest.raises(Exception, match="(?i)not found|no such file"):
        _rows(location, 1)  # outside the retention: Delta's VACUUM semantics


def test_a_reader_s_files_stay_while_it_scans(tmp_path: Path) -> None:
    from deltalake import DeltaTable

    location = str(tmp_path / "silver")
    _silver(location)
    _merge(location, 1)
    listed, rows = DeltaTable(location).file_uris(), len(_rows(location))  # a reader plans its scan of version N ...
    listed_at = time.time()
    for batch in range(2, 5):  # ... the table moves on, every file of N is rewritten ...
        _merge(location, batch)
    assert not set(listed) & set(DeltaTable(location).file_uris())
    _age(location)  # (written long before, removed just now)
    since = time.time() - listed_at
    done = retention.clean(location, since + 1.0)  # ... a retention longer than the time since
    assert done.error is None
    assert sum(pq.read_table(p).num_rows for p in listed) == rows  # ... the reader's files are all there

    time.sleep(0.2)
    retention.clean(location, 0.1)  # a scan longer than the retention is the one case lost
    assert not any(os.path.exists(p) for p in listed)


def _spark_silver(spark: Any, location: str) -> None:
    """binlake's silver written by Spark: four files, a DELETE and a MERGE that write deletion vectors
    (one file holding several data files' vectors), then a delta-rs MERGE over them."""
    from delta.tables import DeltaTable

    _silver(location)
    rows = spark.read.format("delta").load(location).repartitionByRange(4, "id")
    rows.write.format("delta").mode("overwrite").save(location)  # four files, by key
    table = DeltaTable.forPath(spark, location)
    table.delete("id % 50 = 0")
    updates = spark.range(1, ROWS, 37).selectExpr("cast(id as int) AS id", "'spark' AS `a name`")
    table.alias("t").merge(updates.alias("s"), "t.id = s.id").whenMatchedUpdate(
        set={"`a name`": "s.`a name`", "n": "100"}).execute()
    assert int(table.history(1).first()["operationMetrics"]["numTargetDeletionVectorsAdded"]) > 0
    # Spark's checkpoint: its live adds and their vectors, and its tombstones, are read from it on
    spark._jvm.org.apache.spark.sql.delta.DeltaLog.forTable(spark._jsparkSession, location).checkpoint()
    assert any(n.endswith(".checkpoint.parquet") for n in os.listdir(os.path.join(location, "_delta_log")))
    _merge(location, 3, keys=5, among=100)  # copy-on-write of the one file (of four) these keys are in


def _dv_files(location: str) -> set[str]:
    return {p for p in _disk(location) if os.path.basename(p).startswith("deletion_vector_")}


def test_deletion_vectors_live_adds_name_are_kept(spark: Any, tmp_path: Path) -> None:
    location = str(tmp_path / "silver")
    _spark_silver(spark, location)
    expected, by_spark = _rows(location), _spark_rows(spark, location)
    vectors = _dv_files(location)
    assert len(vectors) == 2, "the DELETE's and the MERGE's"

    time.sleep(max(0.0, _newest_removal(location) + 1.1 - time.time()))
    done = retention.clean(location, 1.0)
    assert done.removed_files > 0 and done.error is None
    assert _rows(location) == expected
    assert _spark_rows(spark, location) == by_spark
    kept = _dv_files(location)
    assert kept and kept < vectors, "the vectors live adds name stay, the replaced ones go"
    assert kept == {p for p in replay(location).live if os.path.basename(p).startswith("deletion_vector_")}
    assert not [p for p in _disk(location) if p.endswith(".crc") and not os.path.exists(
        os.path.join(os.path.dirname(p), os.path.basename(p)[1:-4]))], "no checksum outlives its file"


def _many_dead(location: str, count: int) -> None:
    """A table whose second commit added `count` small files and whose third removed them all, and
    a few files no commit names (writes cut short)."""
    from deltalake import DeltaTable, write_deltalake
    from deltalake.transaction import AddAction

    write_deltalake(location, pa.table({"id": pa.array([0], pa.int64()), "v": ["first"]}))
    adds = []
    for i in range(count):
        name = f"part-{i:05d}-{uuid.uuid4()}.parquet"
        pq.write_table(pa.table({"id": pa.array([i + 1], pa.int64()), "v": ["x"]}), os.path.join(location, name))
        size = os.path.getsize(os.path.join(location, name))
        stats = {"numRecords": 1, "minValues": {"id": i + 1, "v": "x"}, "maxValues": {"id": i + 1, "v": "x"},
                 "nullCount": {"id": 0, "v": 0}}
        adds.append(AddAction(name, size, {}, int(time.time() * 1000), True, json.dumps(stats)))
    table = DeltaTable(location)
    table.create_write_transaction(adds, mode="append", schema=table.schema())
    write_deltalake(location, pa.table({"id": pa.array(range(5), pa.int64()), "v": ["kept"] * 5}), mode="overwrite")
    for i in range(5):
        orphan = os.path.join(location, f"part-cut-short-{i}.parquet")
        shutil.copy(os.path.join(location, adds[i].path), orphan)
        os.utime(orphan, (time.time() - 60, time.time() - 60))


def _pass(location: str, env: dict[str, str]) -> subprocess.Popen[str]:
    code = ("import sys; from binlake.lake import retention; print('ready', flush=True); "
            f"print(retention.clean({location!r}, 1.0))")
    inherited = {k: v for k, v in os.environ.items() if k != "BINLAKE_RUN_PGID"}  # the crash kills its own group
    return subprocess.Popen([sys.executable, "-c", code], env={**inherited, **env}, stdout=subprocess.PIPE,
                            text=True, start_new_session=True)


def test_a_pass_killed_midway_leaves_the_table_whole(spark: Any, tmp_path: Path) -> None:
    location = str(tmp_path / "table")
    _many_dead(location, 1500)
    expected, by_spark = _rows(location), _spark_rows(spark, location)
    live = set(replay(location).live)
    time.sleep(max(0.0, _newest_removal(location) + 1.1 - time.time()))
    dead = set(_disk(location)) - live
    assert len(dead) >= 1500

    # SIGKILL at a random removal of the pass
    nth = random.randrange(1, len(dead) // 2)
    killed = _pass(location, {"BINLAKE_CRASH_AT": f"mid_retention:{nth}",
                              "BINLAKE_CRASH_COUNTER": str(tmp_path / "crash-counter")})
    assert killed.wait(timeout=120) == -signal.SIGKILL
    left = set(_disk(location))
    assert live <= left and len(dead) - len(left - live) == nth - 1, "it stopped mid-way, at its kill"
    assert _rows(location) == expected

    # SIGKILL from outside, at a random moment of a second pass
    again = _pass(location, {})
    assert again.stdout is not None and again.stdout.readline().strip() == "ready"
    time.sleep(random.uniform(0.0, 0.3))
    try:
        os.killpg(again.pid, signal.SIGKILL)
    except ProcessLookupError:  # it had finished
        pass
    again.wait(timeout=60)
    assert live <= set(_disk(location))
    assert _rows(location) == expected
    assert _spark_rows(spark, location) == by_spark

    done = retention.clean(location, 1.0)  # the next pass finishes the job
    assert done.finished and done.error is None
    assert set(_disk(location)) == live and retention.waiting_bytes(location) == 0
    assert _rows(location) == expected
    assert _spark_rows(spark, location) == by_spark


def test_a_pass_stops_at_its_budget_and_the_next_goes_on(tmp_path: Path) -> None:
    location = str(tmp_path / "table")
    _many_dead(location, 40)
    time.sleep(max(0.0, _newest_removal(location) + 1.1 - time.time()))
    ticks = iter(range(10_000))
    first = retention.clean(location, 1.0, budget=10, clock=lambda: float(next(ticks)))
    assert not first.finished and first.removed_files == 10  # a tick a file: ten within ten seconds
    second = retention.clean(location, 1.0)
    assert second.finished and first.removed_files + second.removed_files == 41 + 5
    assert retention.waiting_bytes(location) == 0


def test_the_stream_s_retention_takes_one_table_a_turn(tmp_path: Path) -> None:
    from deltalake import write_deltalake

    target = Target(str(tmp_path / "lake"))
    sources = ["shop.a", "shop.b", "shop.none"]  # shop.none has no tables yet
    split_state.ensure(None, target.split_state)  # type: ignore[arg-type]  # a local one needs no Spark
    for source in sources[:2]:
        for location in (target.bronze(source).location, target.silver(source).location):
            write_deltalake(location, pa.table({"id": [1, 2]}))
            write_deltalake(location, pa.table({"id": [3]}), mode="overwrite")
    now = [time.time() + 10]
    turns = retention.Retention(target, sources, 1.0, every=100, clock=lambda: now[0])
    order = [target.split_state] + [t.location for s in sources for t in (target.bronze(s), target.silver(s))]
    assert turns.tables() == order

    cleaned = [turns.run_one() for _ in range(6)]
    assert [c.location for c in cleaned[:5] if c] == order[:5] and cleaned[5] is None
    assert [c.removed_files for c in cleaned[:5] if c] == [0, 1, 1, 1, 1]
    assert retention.last_passes(target) == turns.passes
    assert retention.Retention(target, sources, 1.0, every=100, clock=lambda: now[0]).due() is None

    now[0] += 100  # an interval later, each table again, the first first
    assert turns.due() == order[0]

    configured = retention.Retention.of(config.load(None, ["lake.retention=90s", "lake.retention-interval=10m"],
                                                    env={}), target, sources)
    assert (configured.retention, configured.every) == (90, 600)
    off = retention.Retention.of(config.load(None, ["lake.retention=off"], env={}), target, sources)
    assert off.due() is None and off.run_one() is None


def test_a_lake_behind_a_uri_is_vacuumed_by_delta(spark: Any, tmp_path: Path) -> None:
    from delta.tables import DeltaTable

    folder = tmp_path / "silver"
    location = f"file:{folder}"
    _silver(str(folder))
    DeltaTable.forPath(spark, location).delete("id % 50 = 0")  # a deletion vector
    _merge(str(folder), 1, keys=5)  # a removal within the hour
    by_spark = _spark_rows(spark, location)
    some = next(p for p in _disk(str(folder)) if p.endswith(".parquet") and "/." not in p)
    planted = folder / "part-cut-short.parquet"
    shutil.copy(some, planted)
    os.utime(planted, (time.time() - 7200, time.time() - 7200))
    before = set(_disk(str(folder)))
    check = "spark.databricks.delta.retentionDurationCheck.enabled"
    spark.conf.set(check, "true")

    done = retention.clean(location, 90, session=lambda: spark)  # Delta's whole hours: one
    assert done.error is None and done.removed_files >= 1
    assert not planted.exists(), "a file no commit names, older than the retention, goes"
    assert before - set(_disk(str(folder))) <= {str(planted), str(folder / ".part-cut-short.parquet.crc")}
    assert _spark_rows(spark, location) == by_spark
    assert spark.conf.get(check) == "true"
    assert retention.waiting_bytes(location, session=lambda: spark) > 0  # the MERGEs' files, within the hour
