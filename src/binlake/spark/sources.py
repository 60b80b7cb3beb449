"""PySpark Python data sources: `binlake_snapshot` (batch, one partition per reader slot, each
reading its share of a group's chunks, here) and `binlake_binlog` (streaming, offsets are binlog
positions: `binlake.spark.binlog_source`), with the Arrow batches both hand to Spark. They only
translate Spark's calls into calls on chunk_reader, binlog_reader and handover; the password travels
in the `password` option, which Spark redacts from plans and logs.
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from binlake.lake.bronze import flat_changes
from binlake.memory import tune
from binlake.schema import TableSchema
from binlake.source.chunk_reader import read_chunk, select_chunk
from binlake.source.connection import Connections
from binlake.source.dialect import Dialect
from binlake.source.reconnect import retrying
from binlake.capture.arrow_batches import (
    BATCH_BYTES,
    BATCH_ROWS,
    WIDE_TYPES,
    arrow_batch,
    connection_params,
    constants,
    meta_fields,
)
from binlake.spark.binlog_source import BinlogSource
from binlake.splits import Split


@dataclass
class ChunkSlot(InputPartition):
    slot: int
    server_id: int
    splits: list[dict[str, Any]]


class SnapshotReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        self.options = options

    def partitions(self) -> list[ChunkSlot]:
        job = json.loads(self.options["job"])
        splits = job["splits"]
        ids = job["server_ids"]
        slots = max(1, min(len(splits), len(ids)))
        return [ChunkSlot(i, ids[i], splits[i::slots]) for i in range(slots)]

    def read(self, partition: ChunkSlot) -> Iterator[Any]:  # type: ignore[override]
        tune()  # in a Spark worker, as in the CLI (binlake.memory)
        held = Connections(connection_params(self.options))
        try:
            yield from self.read_held(partition, held)
        finally:
            held.close()

    def read_held(self, partition: ChunkSlot, held: Connections) -> Iterator[Any]:
        """The slot's chunks, read one after another on the connections `held` across them."""
        import pyarrow as pa

        job = json.loads(self.options["job"])
        params = connection_params(self.options)
        dialect = Dialect.from_dict(job["dialect"]) if job.get("dialect") else None
        patience = float(job.get("reconnect_timeout", 0))
        schema = TableSchema.from_dict(job["schema"])
        names = schema.names
        fields = meta_fields() + [(f"_c{i}", pa.string()) for i in range(len(names))]
        wide = [i for i, c in enumerate(schema.columns) if c.data_type in WIDE_TYPES]
        for raw in partition.splits:
            split = Split.from_dict(raw)
            if job.get("plain"):
                columns, seq, file, pos, lw = select_chunk(params, schema, split, held), None, None, None, None
            else:
                # a chunk read is idempotent: one cut off by a lost connection is read again whole
                result = retrying(params, patience, f"reading chunk {split.id}",
                                  lambda: read_chunk(params, schema, split, partition.server_id, dialect=dialect,
                                                     held=held, condition=job.get("condition")))
                columns, seq, lw = result.columns, decimal.Decimal(result.hw.seq(0)), str(result.lw)
                file, pos = result.hw.file, result.hw.pos
            for begin, end in _parts(columns, wide):
                meta = constants([schema.name, "r", seq, None, file, pos, None, split.index, None], fields,
                                 end - begin)
                yield arrow_batch(fields, meta + [c[begin:end] for c in columns])
            if not job.get("plain"):
                yield arrow_batch(fields, [[schema.name], ["w"], [seq], [None], [file], [pos], [None], [split.index],
                                                   [lw]]
                                   + [[None]] * len(names))


def _parts(columns: list[list[Any]], wide: list[int]) -> Iterator[tuple[int, int]]:
    """Consecutive row ranges `[begin, end)` of at most BATCH_ROWS rows and about BATCH_BYTES of wide values."""
    count = len(columns[0]) if columns else 0
    for at in range(0, count, BATCH_ROWS):
        end = min(at + BATCH_ROWS, count)
        if sum(len(v) for i in wide for v in columns[i][at:end] if v) < BATCH_BYTES:
            yield at, end
            continue
        begin, size = at, 0  # megabyte values: cut this slice finer, row by row
        for row in range(at, end):
            size += sum(len(columns[i][row] or "") for i in wide)
            if size >= BATCH_BYTES:
                yield begin, row + 1
                begin, size = row + 1, 0
        if begin < end:
            yield begin, end


def read_here(options: dict[str, str], held: Connections, most_bytes: int) -> Any:
    """What a `binlake_snapshot` job with these options reads, read in this process, slot after slot,
    on the connections `held` (across the tables the caller reads): a pyarrow Table of
    `flat_changes` rows, or None as soon as they hold more than `most_bytes`. For a small table the
    read is milliseconds, and a Spark job's Python workers cost a second."""
    import pyarrow as pa

    reader = SnapshotReader(options)
    batches, size = [], 0
    for slot in reader.partitions():
        for batch in reader.read_held(slot, held):
            batches.append(batch)
            size += batch.nbytes
            if size > most_bytes:
                return None
    return pa.Table.from_batches(batches)


class SnapshotSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "binlake_snapshot"

    def schema(self) -> str:
        return flat_changes(TableSchema.from_dict(json.loads(self.options["job"])["schema"]))

    def reader(self, schema: Any) -> SnapshotReader:
        return SnapshotReader(dict(self.options))


def register(spark: Any) -> None:
    spark.dataSource.register(SnapshotSource)
    spark.dataSource.register(BinlogSource)
