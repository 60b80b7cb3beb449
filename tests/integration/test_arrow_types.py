"""Arrow's typing of the snapshot's texts (`binlake.lake.arrow_types`) against Spark's casts
(`binlake.lake.bronze.typed_flat`), which it stands in for on a local lake: every column of
`test_types` and a few thousand random FLOAT, DOUBLE, DECIMAL, BIGINT UNSIGNED, DATE, DATETIME and
TIMESTAMP values, read from the server by the snapshot's own reader, must come out identical, type
and value, bit for bit for the floating-point ones; and so must the same values as the binlog source
hands them to a micro-batch (`_vals`, which a small batch types by Arrow)."""

from __future__ import annotations

import datetime as dt
import decimal
import json
import math
import random
import struct
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from binlake.capture.context import Context, current_position
from binlake.capture.plan import plan
from binlake.capture.snapshot import chunk_job
from binlake.capture.stream_query import binlog_job
from binlake.config import load
from binlake.lake import arrow_types, bronze, split_state
from binlake.schema import Column, TableSchema
from binlake.capture.binlog_batches import BinlogRange, BinlogReader

from .capture import connect, write_config
from .test_types import COLUMNS, ROWS

RANDOM_ROWS = 3000
RANDOM_COLUMNS = ("f FLOAT, db DOUBLE, dc DECIMAL(38,10), d0 DECIMAL(18,0), biu BIGINT UNSIGNED, dte DATE, "
                  "dtm DATETIME(6), ts TIMESTAMP(6) NULL DEFAULT NULL")


def _finite(bits: int, fmt: str, size: int) -> float:
    value: float = struct.unpack(fmt, bits.to_bytes(size, "little"))[0]
    return value if math.isfinite(value) else 0.0


def _random_row(rnd: random.Random) -> tuple[Any, ...]:
    digits = "".join(rnd.choice("0123456789") for _ in range(38))
    epoch = dt.datetime(1970, 1, 1)
    return (
        _finite(rnd.getrandbits(32), "<f", 4), _finite(rnd.getrandbits(64), "<d", 8),
        decimal.Decimal(f"{rnd.choice('-+')}{digits[:28]}.{digits[28:]}"),
        decimal.Decimal(rnd.choice(["-", ""]) + digits[:rnd.randint(1, 18)]),
        rnd.getrandbits(64),
        dt.date(1000, 1, 1) + dt.timedelta(days=rnd.randrange(3_287_181)),
        dt.datetime(1000, 1, 1) + dt.timedelta(microseconds=rnd.randrange(284_012_524_800_000_000)),
        epoch + dt.timedelta(seconds=1, microseconds=rnd.randrange(2_147_483_646_000_000)),
    )


def _plain(kind: Any) -> Any:
    """A type without Arrow's large variants, which Spark may hand over for strings and bytes."""
    return {pa.large_string(): pa.string(), pa.large_binary(): pa.binary()}.get(kind, kind)


def _texts(column: Any) -> list[str]:
    """Values as text that tells every bit apart (repr keeps -0.0 and each float's digits)."""
    return [repr(v) for v in column.to_pylist()]


def _tables(port: int, database: str, tmp_path: Path) -> Path:
    """`ty` (every type of test_types) and `rnd` (random values), and a configuration capturing them."""
    ddl = ", ".join(f"`{n}` {t}" for n, t, _ in COLUMNS)
    rnd = random.Random(38)
    with connect(port, database, time_zone="+05:30", sql_mode="") as w, w.cursor() as cur:
        cur.execute(f"CREATE TABLE ty (id INT PRIMARY KEY, {ddl}) CHARACTER SET utf8mb4")
        for i, row in enumerate(ROWS, 1):
            cur.execute(f"INSERT INTO ty VALUES ({i}, {', '.join(row)})")
        cur.execute("SET SESSION time_zone = '+00:00'")
        cur.execute(f"CREATE TABLE rnd (id INT PRIMARY KEY, {RANDOM_COLUMNS})")
        cur.executemany("INSERT INTO rnd VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s)",
                        [(i, *_random_row(rnd)) for i in range(RANDOM_ROWS)])
        cur.execute("INSERT INTO rnd (id) VALUES (-1)")  # every column NULL
    return write_config(tmp_path / "binlake.yml", port, [f"{database}\\.(ty|rnd)"], tmp_path / "lake", "6100-6104",
                        chunk_size=1000)


def _compare(name: str, ours: pa.Table, sparks: pa.Table) -> int:
    """Assert the two typings identical, type and value; the values compared."""
    assert ours.column_names == sparks.column_names
    for field in sparks.schema:
        got, want = ours.column(field.name), sparks.column(field.name)
        assert _plain(got.type) == _plain(want.type), f"{name}.{field.name}: {got.type} != {want.type}"
        differ = [(a, b) for a, b in zip(_texts(got), _texts(want)) if a != b]
        assert not differ, f"{name}.{field.name}: {len(differ)} values differ, first {differ[:3]}"
    return ours.num_rows * ours.num_columns


def test_arrow_typing_equals_spark_s_casts(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cfg = load(_tables(dev_db.running_port(), database, tmp_path))
    ctx = Context(cfg)
    plan(cfg, ctx)
    splits = split_state.load(ctx.session(), ctx.target.split_state, int(cfg.get("snapshot.group-size")))
    compared = 0
    for name in (f"{database}.ty", f"{database}.rnd"):
        schema = ctx.schemas()[name]
        with ctx.readers(2) as ids:
            flat = ctx.snapshot_here(chunk_job(ctx, schema, splits[name], ids))
        typer = arrow_types.typer(schema)
        assert typer is not None, f"{name}: Arrow types none of it"
        compared += _compare(name, typer(flat), bronze.typed_flat(spark.createDataFrame(flat), schema).toArrow())
    ctx.release()
    assert compared > RANDOM_ROWS * 9


def test_arrow_typing_of_binlog_changes_equals_spark_s(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A micro-batch read in the driver is typed by Arrow (binlake.capture.batch_in_hand): the
    binlog source's change rows of every row of both tables, deleted (a delete's image holds every
    value), through Spark as a micro-batch hands them over, then typed both ways."""
    port = dev_db.running_port()
    ctx = Context(load(_tables(port, database, tmp_path)))
    start = current_position(ctx)
    with connect(port, database) as w, w.cursor() as cur:
        cur.execute("DELETE FROM ty")
        cur.execute("DELETE FROM rnd")
    job = binlog_job(ctx, ctx.schemas(), {}, start)
    reader = BinlogReader({"job": json.dumps(job), "password": ctx.params["password"]})
    end = reader.latestOffset(start.to_dict())
    read = pa.Table.from_batches(list(reader.read(BinlogRange(start.to_dict(), end))))
    compared = 0
    for name, schema in ctx.schemas().items():
        handed = spark.createDataFrame(read.filter(pc.equal(read.column("_table"), name)), schema=bronze.CHANGES)
        rows = handed.toArrow()
        flat = arrow_types.flat_of_changes(rows, len(schema.columns))
        typer = arrow_types.typer(schema)
        assert flat is not None and typer is not None, name
        compared += _compare(name, typer(flat), bronze.typed(handed, schema).toArrow())
    ctx.release()
    assert compared > RANDOM_ROWS * 9


def test_spatial_and_vector_columns_are_spark_s_to_type() -> None:
    def schema(data_type: str) -> TableSchema:
        return TableSchema("d", "t", (Column("id", "int", "int", in_key=True), Column("v", data_type, data_type)),
                           ("id",))

    assert arrow_types.typer(schema("point")) is None
    assert arrow_types.typer(schema("vector")) is None
    typer = arrow_types.typer(schema("datetime"))
    assert typer is not None
    # a row's `_ts` (seconds; a snapshot row has none) becomes Spark's timestamp_seconds
    flat = pa.table({"_table": ["d.t"], "_op": ["c"], "_seq": pa.array([decimal.Decimal(7)], pa.decimal128(38, 0)),
                     "_ts": pa.array([1_700_000_000], pa.int64()), "_file": ["b.000001"], "_pos": [4], "_gtid": [None],
                     "_chunk": pa.array([None], pa.int32()), "_lw": [None], "_c0": ["1"],
                     "_c1": ["2024-02-29 23:59:59.999000"]})
    row = typer(flat).to_pylist()[0]
    assert row["_ts"] == dt.datetime(2023, 11, 14, 22, 13, 20, tzinfo=dt.timezone.utc)
    assert row["v"] == dt.datetime(2024, 2, 29, 23, 59, 59, 999000) and row["id"] == 1
