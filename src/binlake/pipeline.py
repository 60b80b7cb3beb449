"""The three steps -- plan, snapshot, stream -- and `run`, which chains them and resumes.

Every step reads what the previous ones left in Delta (split state, bronze) and writes
idempotently, so any step can be re-run after a crash at any point.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from binlake import bronze, faults, silver
from binlake.spark import state as split_state
from binlake.config import Config
from binlake.errors import ConfigError, RuntimeFailure
from binlake.offsets import BinlogPosition
from binlake.schema import TableSchema
from binlake.source import captured_tables, connect, load_schema, master_position
from binlake.splits import Split
from binlake.target import Target

log = logging.getLogger(__name__)

# splits written to the split state per commit while planning (the resume grain of planning)
PLAN_BATCH = int(os.environ.get("BINLAKE_PLAN_BATCH", "500"))


@dataclass
class Context:
    cfg: Config
    target: Target = field(init=False)
    spark: Any = field(init=False, default=None)
    _schemas: dict[str, TableSchema] | None = field(init=False, default=None)
    is_mariadb: bool = field(init=False, default=True)

    def __post_init__(self) -> None:
        self.target = Target.of(self.cfg)

    def session(self) -> Any:
        if self.spark is None:
            from binlake.spark.session import get_spark
            from binlake.spark.sources import register

            self.spark = get_spark(self.cfg.parallelism)
            register(self.spark)
        return self.spark

    @property
    def params(self) -> dict[str, Any]:
        return self.cfg.connection()

    def public_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if k != "password"}

    def schemas(self) -> dict[str, TableSchema]:
        if self._schemas is None:
            conn = connect(self.params)
            try:
                with conn.cursor() as cur:
                    cur.execute("SELECT VERSION()")
                    self.is_mariadb = "mariadb" in str(cur.fetchone()[0]).lower()
                tables = captured_tables(conn, self.cfg.tables)
                if not tables:
                    raise ConfigError(
                        f"source.tables {self.cfg.tables} matches no table on the server; binlake needs at "
                        "least one: fix the regexes (they match 'db.table' in full)"
                    )
                chunk_keys = self.cfg.get("source.chunk-key")
                self._schemas = {f"{d}.{t}": load_schema(conn, d, t, chunk_keys) for d, t in tables}
            finally:
                conn.close()
        return self._schemas

    def reader_ids(self) -> list[int]:
        ids = self.cfg.server_ids
        n = self.cfg.parallelism
        if len(ids) < 2:
            raise ConfigError(
                f"source.server-id has {len(ids)} id; binlake needs one for the stream and one per parallel "
                f"chunk reader ({n + 1} for snapshot.parallelism {n}): set source.server-id to a range like "
                f"{ids.first}-{ids.first + n}"
            )
        return [ids.pick(1 + i) for i in range(min(n, len(ids) - 1))]


def plan(cfg: Config, ctx: Context | None = None) -> None:
    """Plan every captured table into the split state, resuming a half-planned table."""
    ctx = ctx or Context(cfg)
    spark = ctx.session()
    state = split_state
    state.ensure(spark, ctx.target.split_state)
    numbers = state.table_numbers(spark, ctx.target.split_state)
    last = state.last_splits(spark, ctx.target.split_state)
    conn = connect(ctx.params)
    try:
        for name, schema in ctx.schemas().items():
            bronze.ensure_table(spark, ctx.target.bronze(name).location, schema)
            silver.ensure_table(spark, ctx.target.silver(name).location, schema)
            tail = last.get(name)
            if tail is not None and tail.end is None:
                continue  # fully planned
            table_no = numbers.get(name, max(numbers.values(), default=0) + 1)
            numbers[name] = table_no
            index = 0 if tail is None else tail.index + 1
            began = time.monotonic()
            from binlake.chunking import plan_ranges

            batch: list[Split] = []
            for start, end in plan_ranges(conn, schema, cfg.chunk_size, None if tail is None else tail.end):
                batch.append(Split(name, table_no, index, start, end, cfg.get("snapshot.group-size")))
                index += 1
                if len(batch) >= PLAN_BATCH:
                    state.add_planned(spark, ctx.target.split_state, batch)
                    faults.point("mid_plan", name)
                    batch = []
            state.add_planned(spark, ctx.target.split_state, batch)
            log.info("planned %s: %d splits in %.1fs", name, index, time.monotonic() - began)
    finally:
        conn.close()


def group_ids(cfg: Config, ctx: Context | None = None) -> list[int]:
    """The ids of the groups that still have unfinished chunks (what the fan-out iterates over)."""
    ctx = ctx or Context(cfg)
    splits = split_state.load(ctx.session(), ctx.target.split_state, cfg.get("snapshot.group-size"))
    return sorted({s.group for ss in splits.values() for s in ss if s.status != "done"})


class Progress:
    """Chunks done/total, rows and rows/s per table on a terminal; silent otherwise."""

    def __init__(self, totals: dict[str, int], done: dict[str, int]) -> None:
        self.tty = sys.stderr.isatty()
        self.totals, self.done = totals, done
        self.rows: dict[str, int] = {t: 0 for t in totals}
        self.began = time.monotonic()

    def update(self, table: str, chunks: int, rows: int) -> None:
        self.done[table] = self.done.get(table, 0) + chunks
        self.rows[table] = self.rows.get(table, 0) + rows
        if self.tty:
            rate = self.rows[table] / max(time.monotonic() - self.began, 1e-6)
            sys.stderr.write(f"\r{table}: chunks {self.done[table]}/{self.totals[table]}, rows {self.rows[table]:,},"
                             f" {rate:,.0f} rows/s   ")
            sys.stderr.flush()

    def finish(self) -> None:
        total = sum(self.rows.values())
        secs = time.monotonic() - self.began
        line = f"snapshot: {sum(self.done.values())} chunks, {total:,} rows in {secs:.1f}s ({total / max(secs, 1e-6):,.0f} rows/s)"
        log.info(line)
        if self.tty:
            sys.stderr.write("\r" + line + " " * 20 + "\n")


def snapshot(cfg: Config, groups: list[int] | None = None, ctx: Context | None = None) -> None:
    """Read every unfinished chunk (of `groups`, or all) into bronze and silver, group by group."""
    ctx = ctx or Context(cfg)
    spark = ctx.session()
    state = split_state
    all_splits = state.load(spark, ctx.target.split_state, cfg.get("snapshot.group-size"))
    schemas = ctx.schemas()
    totals = {t: len(ss) for t, ss in all_splits.items()}
    progress = Progress(totals, {t: sum(1 for s in ss if s.status == "done") for t, ss in all_splits.items()})
    ids = ctx.reader_ids()
    for table, splits in all_splits.items():
        if table not in schemas:
            continue
        pending: dict[int, list[Split]] = {}
        for s in splits:
            if s.status != "done" and (groups is None or s.group in groups):
                pending.setdefault(s.group, []).append(s)
        for group in sorted(pending):
            rows = read_group(ctx, schemas[table], pending[group], ids)
            progress.update(table, len(pending[group]), rows)
    progress.finish()


def read_group(ctx: Context, schema: TableSchema, splits: list[Split], ids: list[int]) -> int:
    """Read a group's chunks in one Spark job into bronze, then finish them. Returns rows read."""
    spark = ctx.session()
    b = ctx.target.bronze(schema.name).location
    chunks = [s.index for s in splits]
    landed = {m["_chunk"] for m in bronze.chunk_marks(spark, b, chunks) if m["hw_file"]}
    todo = [s for s in splits if s.index not in landed]
    if todo:
        job = {"connection": ctx.public_params(), "schema": schema.to_dict(), "splits": [s.to_dict() for s in todo],
               "server_ids": ids, "is_mariadb": ctx.is_mariadb}
        df = (spark.read.format("binlake_snapshot").option("job", json.dumps(job))
              .option("password", ctx.params["password"]).load())
        bronze.replace_chunks(bronze.typed(df, schema), b, [s.index for s in todo])
        faults.point("after_bronze_write", schema.name)
    return finish_chunks(ctx, schema, splits)


def finish_chunks(ctx: Context, schema: TableSchema, splits: list[Split]) -> int:
    """Apply landed chunks to silver, then mark them done with their HW (both idempotent)."""
    from pyspark.sql import functions as F

    spark = ctx.session()
    b = ctx.target.bronze(schema.name).location
    chunks = [s.index for s in splits]
    marks = {m["_chunk"]: m for m in bronze.chunk_marks(spark, b, chunks)}
    missing = [c for c in chunks if c not in marks or not marks[c]["hw_file"]]
    if missing:
        raise RuntimeFailure(f"chunks {missing} of {schema.name} have no watermark row in bronze after their read")
    rows = spark.read.format("delta").load(b).where(F.col("_chunk").isin(chunks) & (F.col("_op") == "r"))
    silver.apply(spark, schema, rows, ctx.target.silver(schema.name).location, b)
    faults.point("after_silver_chunks", schema.name)
    done = [s.finished(BinlogPosition(marks[s.index]["hw_file"], int(marks[s.index]["hw_pos"])),
                       int(marks[s.index]["rows"])) for s in splits]
    split_state.mark_done(spark, ctx.target.split_state, done)
    return sum(s.rows or 0 for s in done)


def stream(cfg: Config, until_caught_up: bool = False, ctx: Context | None = None) -> None:
    from binlake.spark.streaming import run_stream

    ctx = ctx or Context(cfg)
    run_stream(ctx, until_caught_up)


def run(cfg: Config, until_caught_up: bool = False) -> None:
    ctx = Context(cfg)
    plan(cfg, ctx)
    snapshot(cfg, None, ctx)
    stream(cfg, until_caught_up, ctx)


def current_position(cfg: Config) -> BinlogPosition:
    conn = connect(cfg.connection())
    try:
        return master_position(conn)
    finally:
        conn.close()
