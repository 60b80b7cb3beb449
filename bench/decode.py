"""Decoding alone: binlake's binlog source over the stream section's burst, in this process, against
the server's `mysqlbinlog -v` over the same bytes (the stream section's baseline).

What is timed is what the stream's binlog source does for a micro-batch in a Spark worker: the
replication connection and its row events (`read_changes`), the emit rule, each row's encoding and
the Arrow batches handed to Spark (`binlog_batches._rows`, `_batches`). No JVM, no Delta: the
figure says how far decoding itself is from the server's own decoder.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from harness import Source, rate


def reader(source: Source, database: str, table: str) -> Callable[[tuple[str, int], tuple[str, int], bool], int]:
    """The binlog source's work for `database.table` between two binlog positions, ready to time:
    `work(start, stop)` reads the changes as a micro-batch does, through the emit rule and each row's
    encoding to the Arrow batches, and counts the rows; `work(start, stop, False)` only reads and
    counts the row changes (`read_changes`)."""
    from binlake.capture.handover import Handover
    from binlake.offsets import BinlogPosition
    from binlake.source.binlog_reader import read_changes
    from binlake.source.catalog import load_schema
    from binlake.source.rowtext import RowValues
    from binlake.capture.binlog_batches import _batches, _rows

    with source.connect() as conn:
        schema = load_schema(conn, database, table)
    schemas = {schema.name: schema}
    handover = Handover(schemas, {})
    handover.bind(None)
    params = {"host": "127.0.0.1", "port": source.port, "user": "root", "password": "", "tls": {"mode": "preferred"}}

    def work(start: tuple[str, int], stop: tuple[str, int], encode: bool = True) -> int:
        changes = read_changes(params, 6199, BinlogPosition(*start), BinlogPosition(*stop),
                               lambda d, t: f"{d}.{t}" in schemas, whole_events=encode)
        if not encode:
            return sum(1 for _ in changes)
        values = RowValues()
        return sum(batch.num_rows for batch in _batches(_rows(changes, schemas, handover, None, None,
                                                              lambda c: False, values), values))

    return work


def run(source: Source, database: str, table: str, start: tuple[str, int], stop: tuple[str, int],
        baseline_rows_per_s: float) -> dict[str, Any]:
    work = reader(source, database, table)
    wall, cpu = time.monotonic(), time.process_time()
    rows = work(start, stop)
    wall, cpu = time.monotonic() - wall, time.process_time() - cpu
    return {
        "decode_rows": rows,
        "decode_s": round(wall, 2),
        "decode_rows_per_s": rate(rows, wall),
        "decode_cpu_s_per_1m_rows": round(cpu * 1e6 / rows, 1) if rows else None,
        "decode_ratio": round(rate(rows, wall) / baseline_rows_per_s, 4) if baseline_rows_per_s else None,
    }
