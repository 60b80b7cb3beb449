"""Cutting a table's chunk-key space into half-open splits, incrementally.

Two strategies, as in Flink CDC's MySQL source:
- even: one integer key whose distribution factor (max - min + 1) / rows lies in [0.05, 1000] is
  cut arithmetically with step factor * chunk_size -- no query per chunk;
- uneven: otherwise the database is asked for each next boundary, the first key past `chunk_size`
  rows from the current start. Boundaries are compared by the database, in the column's collation,
  never by Python: under `utf8mb4_general_ci`, 'a' = 'A', and a Python comparison routes rows to
  the wrong chunk.

`plan_ranges` yields `(start, end)` pairs one at a time from a resume point, so a table of 10^8 rows
is planned without holding its splits in memory and a crash resumes from the last stored end.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pymysql

from binlake.keys import decode_bound, encode_key, lexicographic, lexicographic_params
from binlake.schema import Column, TableSchema, qualified, quote
from binlake.source.dialect import Dialect
from binlake.splits import Bound

EVEN_FACTOR_MIN = 0.05
EVEN_FACTOR_MAX = 1000.0
INTEGER_TYPES = {"tinyint", "smallint", "mediumint", "int", "integer", "bigint"}


def _even_step(conn: pymysql.connections.Connection, schema: TableSchema, chunk_size: int) -> tuple[int, int, int] | None:
    """(min, max, step) when the even strategy applies, else None."""
    key = schema.split_key
    if len(key) != 1 or schema.column(key[0]).data_type not in INTEGER_TYPES:
        return None
    k = quote(key[0])
    with conn.cursor() as cur:
        cur.execute(f"SELECT MIN({k}), MAX({k}) FROM {qualified(schema.database, schema.table)}")
        lo, hi = cur.fetchone()
        if lo is None:
            return None
        approx = Dialect.of(conn).estimated_rows(conn, schema.database, schema.table)
        if approx < 10 * chunk_size:  # statistics of small or fresh tables are unreliable; counting is cheap
            cur.execute(f"SELECT COUNT(*) FROM {qualified(schema.database, schema.table)}")
            approx = int(cur.fetchone()[0])
    if approx == 0:
        return None
    factor = (int(hi) - int(lo) + 1) / approx
    if not EVEN_FACTOR_MIN <= factor <= EVEN_FACTOR_MAX:
        return None
    return int(lo), int(hi), max(1, int(factor * chunk_size))


def plan_ranges(
    conn: pymysql.connections.Connection,
    schema: TableSchema,
    chunk_size: int,
    resume_after: Bound | None = None,
) -> Iterator[tuple[Bound | None, Bound | None]]:
    """Yield consecutive `(start, end)` ranges covering the key space from `resume_after` on.

    Without `resume_after` the first range starts at -infinity; the last range always ends at
    +infinity, so rows inserted past the current maximum while the snapshot runs are still covered.
    """
    cols = [schema.column(k) for k in schema.split_key]
    even = _even_step(conn, schema, chunk_size)
    if even is not None:
        lo, hi, step = even
        start: Bound | None = resume_after
        nxt = int(resume_after[0]) + step if resume_after is not None else lo + step
        while nxt <= hi:
            end = encode_key(cols, [nxt])
            yield start, end
            start = end
            nxt += step
        yield start, None
        return
    start = resume_after
    while True:
        end = _next_boundary(conn, schema, cols, start, chunk_size)
        yield start, end
        if end is None:
            return
        start = end


def boundary_query(schema: TableSchema, start: Bound | None, chunk_size: int) -> tuple[str, list[Any]]:
    """The uneven strategy's query for the end of the chunk starting at `start`: the key `chunk_size`
    rows on, read along the chunk key's index (the expanded `lexicographic` predicate is a range on
    it, so the server reads about `chunk_size` index entries, however few values the first column has)."""
    key = schema.split_key
    cols = [schema.column(k) for k in key]
    select = ", ".join(quote(k) for k in key)
    where, params = "TRUE", []
    if start is not None:
        where, params = lexicographic(key, ">="), lexicographic_params(decode_bound(cols, start))
    table = qualified(schema.database, schema.table)
    sql = f"SELECT {select} FROM {table} WHERE {where} ORDER BY {select} LIMIT 1 OFFSET %s"
    return sql, [*params, chunk_size]


def next_range(conn: pymysql.connections.Connection, schema: TableSchema, chunk_size: int,
               start: Bound | None) -> tuple[Bound | None, Bound | None]:
    """The range from `start` holding `chunk_size` rows now, cut where the server's index says (the uneven
    strategy, whatever the key's spread): a chunk of a snapshot beside the stream, read in this process,
    which an even step over a sparse key could make the whole table."""
    return start, _next_boundary(conn, schema, [schema.column(k) for k in schema.split_key], start, chunk_size)


def _next_boundary(
    conn: pymysql.connections.Connection, schema: TableSchema, cols: list[Column], start: Bound | None, chunk_size: int
) -> Bound | None:
    key = schema.split_key
    select = ", ".join(quote(k) for k in key)
    table = qualified(schema.database, schema.table)
    order = select
    with conn.cursor() as cur:
        cur.execute(*boundary_query(schema, start, chunk_size))
        row = cur.fetchone()
        if row is None:
            return None
        end = encode_key(cols, row)
        if start is not None and _same_key(conn, cols, end, start):
            # more than chunk_size rows share the start key (a non-unique chunk key): skip past it
            cur.execute(
                f"SELECT {select} FROM {table} WHERE {lexicographic(key, '>')} ORDER BY {order} LIMIT 1",
                lexicographic_params(decode_bound(cols, start)),
            )
            row = cur.fetchone()
            return None if row is None else encode_key(cols, row)
        return end


def _same_key(conn: pymysql.connections.Connection, cols: list[Column], a: Bound, b: Bound) -> bool:
    if not any(c.is_string for c in cols):
        return a == b
    # equal under the collation ('a' = 'A' in *_ci), which only the server knows
    sql = " AND ".join(
        f"CONVERT(%s USING {c.collation.split('_', 1)[0]}) COLLATE {c.collation} = %s" if c.is_string and c.collation
        else "%s = %s" for c in cols
    )
    params: list[Any] = []
    for c, x, y in zip(cols, decode_bound(cols, a), decode_bound(cols, b)):
        params += [x, y]
    with conn.cursor() as cur:
        cur.execute(f"SELECT {sql}", params)
        return bool(cur.fetchone()[0])


