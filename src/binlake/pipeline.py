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
# snapshot rows applied to silver per MERGE (landed chunks are gathered up to this many rows)
SILVER_BATCH_ROWS = int(os.environ.get("BINLAKE_SILVER_BATCH_ROWS", "1000000"))


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
                self._schemas = {f"{d}.{t}": self._captured(load_schema(conn, d, t, chunk_keys)) for d, t in tables}
            finally:
                conn.close()
        return self._schemas

    def _captured(self, schema: TableSchema) -> TableSchema:
        """The schema bronze and silver were made with, kept from the table's first capture: the
        server's may have changed since, and the binlog's schema guard compares against this one."""
        path = self.target.captured_schema(schema.name)
        if path.exists():
            return TableSchema.from_dict(json.loads(path.read_text()))
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(schema.to_dict(), ensure_ascii=False))
        tmp.replace(path)
        return schema

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
    return sorted({s.group for ss in splits.values() for s in ss if not s.landed})


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


def snapshot(cfg: Config, groups: list[int] | None = None, ctx: Context | None = None, apply_silver: bool = True) -> None:
    """Read every unfinished chunk (of `groups`, or all) into bronze, group by group, then apply the
    landed chunks to silver (locally; on Databricks the pipeline's AUTO CDC does that)."""
    ctx = ctx or Context(cfg)
    spark = ctx.session()
    all_splits = split_state.load(spark, ctx.target.split_state, cfg.get("snapshot.group-size"))
    schemas = ctx.schemas()
    totals = {t: len(ss) for t, ss in all_splits.items()}
    progress = Progress(totals, {t: sum(1 for s in ss if s.landed) for t, ss in all_splits.items()})
    ids = ctx.reader_ids()
    for table, splits in all_splits.items():
        if table not in schemas:
            continue
        chosen = [s for s in splits if groups is None or s.group in groups]
        landed = [s for s in chosen if s.status == "landed"]
        pending = [s for s in chosen if not s.landed]
        recovered = landed_in_bronze(ctx, schemas[table], pending)
        landed += recovered
        recovered_ids = {s.index for s in recovered}
        by_group: dict[int, list[Split]] = {}
        for s in pending:
            if s.index not in recovered_ids:
                by_group.setdefault(s.group, []).append(s)
        for group in sorted(by_group):
            read = read_group(ctx, schemas[table], by_group[group], ids)
            landed += read
            progress.update(table, len(read), sum(s.rows or 0 for s in read))
            if apply_silver and sum(s.rows or 0 for s in landed) >= SILVER_BATCH_ROWS:
                apply_to_silver(ctx, schemas[table], landed)
                landed = []
        if apply_silver:
            apply_to_silver(ctx, schemas[table], landed)
    progress.finish()


def landed_in_bronze(ctx: Context, schema: TableSchema, splits: list[Split]) -> list[Split]:
    """Chunks whose rows reached bronze but whose status did not (a crash between the two): record
    them as landed instead of reading them again."""
    if not splits:
        return []
    marks = {m["_chunk"]: m for m in bronze.chunk_marks(ctx.session(), ctx.target.bronze(schema.name).location,
                                                        [s.index for s in splits]) if m["hw_file"]}
    found = [s.landed_at(BinlogPosition(marks[s.index]["hw_file"], int(marks[s.index]["hw_pos"])),
                         int(marks[s.index]["rows"])) for s in splits if s.index in marks]
    split_state.record(ctx.session(), ctx.target.split_state, found)
    return found


def read_group(ctx: Context, schema: TableSchema, splits: list[Split], ids: list[int]) -> list[Split]:
    """Read a group's chunks in one Spark job into bronze; record them landed with their HW."""
    spark = ctx.session()
    b = ctx.target.bronze(schema.name).location
    job = {"connection": ctx.public_params(), "schema": schema.to_dict(), "splits": [s.to_dict() for s in splits],
           "server_ids": ids, "is_mariadb": ctx.is_mariadb}
    df = (spark.read.format("binlake_snapshot").option("job", json.dumps(job))
          .option("password", ctx.params["password"]).load())
    bronze.replace_chunks(bronze.typed_flat(df, schema), b, [s.index for s in splits])
    faults.point("after_bronze_write", schema.name)
    landed = landed_in_bronze(ctx, schema, splits)
    missing = sorted({s.index for s in splits} - {s.index for s in landed})
    if missing:
        raise RuntimeFailure(f"chunks {missing} of {schema.name} have no watermark row in bronze after their read")
    return landed


def apply_to_silver(ctx: Context, schema: TableSchema, landed: list[Split]) -> None:
    """Apply landed chunks' rows to silver in one MERGE, then record them done (both idempotent)."""
    from pyspark.sql import functions as F

    if not landed:
        return
    spark = ctx.session()
    b = ctx.target.bronze(schema.name).location
    chunks = [s.index for s in landed]
    rows = spark.read.format("delta").load(b).where(F.col("_chunk").isin(chunks) & (F.col("_op") == "r"))
    silver.apply(spark, schema, rows, ctx.target.silver(schema.name).location, b)
    faults.point("after_silver_chunks", schema.name)
    split_state.record(spark, ctx.target.split_state, [s.applied() for s in landed])


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
