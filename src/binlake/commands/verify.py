"""`binlake verify`: does every silver table equal its source, chunk by chunk?

The source side is read with plain SELECTs per planned chunk (through the same encoding and typed
conversion the pipeline uses); both sides are reduced to a row count and a content checksum per
chunk (sum of xxhash64 over every column). Silver rows whose key is no longer in the source are
placed in their chunk by the server's key order. Exit code 1 names the chunks that differ.

Silver's rows that are the source's now are compared: with history (SCD type 2) each key's current
version (`__END_AT` NULL), with soft deletes the rows not marked `_deleted`.
"""

from __future__ import annotations

import json
from typing import Any

from binlake.capture import side_state
from binlake.capture.chunking import plan_ranges
from binlake.capture.context import Context
from binlake.config import Config
from binlake.keys import KeyOrder
from binlake.lake import bronze, row_filter
from binlake.lake import split_state as state
from binlake.source.chunk_reader import Membership
from binlake.source.connection import connect
from binlake.splits import Split


def verify(cfg: Config) -> dict[str, Any]:
    from delta.tables import DeltaTable
    from pyspark.sql import functions as F

    ctx = Context(cfg)
    spark = ctx.session()
    all_splits = state.load(spark, ctx.target.split_state, cfg.get("snapshot.group-size"))
    beside = side_state.states(ctx.target.side_snapshots)
    report: dict[str, Any] = {"ok": True, "tables": []}
    for name, schema in ctx.schemas().items():
        # a table snapshotted beside the stream, or captured from its CREATE, has no chunks planned: cut now
        splits = all_splits.get(name) or (_cut(ctx, schema) if name in beside else [])
        entry: dict[str, Any] = {"source": name, "differing_chunks": []}
        report["tables"].append(entry)
        if not splits:
            entry["error"] = "not planned yet: run binlake run"
            report["ok"] = False
            continue
        if not DeltaTable.isDeltaTable(spark, ctx.target.silver(name).location):  # read only: no clearing
            entry["error"] = "not read yet (its silver table is created by its snapshot): run binlake run"
            report["ok"] = False
            continue
        job = {"connection": ctx.public_params(), "schema": schema.to_dict(), "splits": [s.to_dict() for s in splits],
               "server_ids": ctx.reader_ids(), "plain": True}
        raw = spark.read.format("binlake_snapshot").option("job", json.dumps(job)).option(
            "password", ctx.params["password"]).load()
        src = row_filter.matching(bronze.typed_flat(raw, schema), schema).cache()  # the source's rows that match
        sil = spark.read.format("delta").load(ctx.target.silver(name).location)
        if (live := ctx.shape.live()) is not None:
            sil = sil.where(live)
        names = schema.names
        digest = F.xxhash64(*[F.col(bronze.sql_name(c)) for c in names]).cast("decimal(38,0)")
        # silver rows find their chunk by the chunk key (one chunk per value, however many rows share it)
        key = [bronze.sql_name(k) for k in schema.split_key]
        src_sum = {r["_chunk"]: (r["n"], r["h"]) for r in
                   src.groupBy("_chunk").agg(F.count("*").alias("n"), F.sum(digest).alias("h")).collect()}
        placed = sil.join(src.select(*key, "_chunk").distinct(), list(schema.split_key), "left")
        sil_rows = placed.groupBy("_chunk").agg(F.count("*").alias("n"), F.sum(digest).alias("h")).collect()
        sil_sum = {r["_chunk"]: (r["n"], r["h"]) for r in sil_rows}
        differing = {c for c in set(src_sum) | set(sil_sum) if c is not None and src_sum.get(c) != sil_sum.get(c)}
        if None in sil_sum:  # silver rows whose key the source no longer has
            conn = connect(ctx.params)
            try:
                order = KeyOrder(schema, conn)
                members = [(s.index, Membership(order, s)) for s in splits]
                for r in placed.where(F.col("_chunk").isNull()).select(*key).limit(10000).collect():
                    row = r.asDict()
                    raw_key = {k: _from_spark(schema, k, row[k]) for k in schema.split_key}
                    differing |= {i for i, m in members if raw_key in m}
            finally:
                conn.close()
        src.unpersist()
        entry["source_rows"] = sum(n for n, _ in src_sum.values())
        entry["silver_rows"] = sum(n for n, _ in sil_sum.values())
        entry["differing_chunks"] = sorted(differing)
        if differing or entry["source_rows"] != entry["silver_rows"]:
            report["ok"] = False
    return report


def _cut(ctx: Context, schema: Any) -> list[Split]:
    """The table's chunks as the server cuts them now (binlake.capture.chunking), for a table that has none
    planned."""
    conn = connect(ctx.params)
    try:
        return [Split(schema.name, 0, i, start, end)
                for i, (start, end) in enumerate(plan_ranges(conn, schema, ctx.cfg.chunk_size))]
    finally:
        conn.close()


def _from_spark(schema: Any, column: str, value: Any) -> Any:
    col = schema.column(column)
    if col.data_type == "timestamp" and value is not None:
        return value.replace(tzinfo=None)
    return value


def render(report: dict[str, Any]) -> str:
    lines = []
    for t in report["tables"]:
        if "error" in t:
            lines.append(f"{t['source']}: {t['error']}")
            continue
        state = "ok" if not t["differing_chunks"] and t["source_rows"] == t["silver_rows"] else "DIFFERENT"
        line = f"{t['source']}: {state} (source {t['source_rows']} rows, silver {t['silver_rows']} rows)"
        if t["differing_chunks"]:
            line += f"; chunks that differ: {', '.join(str(c) for c in t['differing_chunks'])}"
        lines.append(line)
    lines.append("verify: all silver tables equal their source" if report["ok"] else "verify: differences found")
    return "\n".join(lines)
