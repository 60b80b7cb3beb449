"""Delta commits made in the driver from Arrow data, by delta-rs (a stream's bronze append by binlake's
own commit, `add_file`): a local table's snapshot, group by group, and a micro-batch's few changes of a
table land in milliseconds instead of a Spark job's second or two.

Measured on 2 cores with a 100-row table (median of 8): Spark creates an empty table in 0.69 s,
appends in 0.58 s and MERGEs in 2.39 s, whatever the rows; delta-rs appends in 5 ms and MERGEs in
17 ms. A thousand small tables are a thousand such commits per step, so this is most of their cost.

A micro-batch Spark's query read has its changes typed by Spark (`binlake.lake.bronze.typed`) and
handed over as Arrow (`DataFrame.toArrow`); one the driver read (a local lake's stream), and a
snapshot's chunks, are typed by Arrow in the driver (`binlake.lake.arrow_types`, the same values;
`binlake.capture.batch_in_hand`). Only the
commit is made here. Spark keeps every large stream write (more than `ARROW_ROWS` rows), any read of
more than `ARROW_BYTES` of values, schema changes, key-less tables (their recount reads bronze), a
replay's look at bronze, object stores, and any table whose protocol has a feature delta-rs does not
write (`WRITER_FEATURES`). Either writer commits to a table the other wrote: both keep Delta's log
protocol, and each table is written by one thread at a time.

A table's first commit is written here, as Spark writes it (see `first_commit`): delta-rs 1.6
gives a new table's columns their column-mapping ids but leaves `columnMapping` out of the protocol,
which Spark then refuses (`DELTA_FEATURES_PROTOCOL_METADATA_MISMATCH`).
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from pathlib import Path
from typing import Any

from binlake.lake import storage
from binlake.lake.delta_commit import commit, data_file
from binlake.lake.table_log import Snapshot

# the most rows of a small table, whose snapshot is read whole in the driver and committed here (0:
# every commit through Spark)
ARROW_ROWS = int(os.environ.get("BINLAKE_ARROW_ROWS", "50000"))
# and the most bytes of values a read in the driver holds: a small table of large BLOBs is written by
# Spark, in bounded batches, instead of being held whole in the driver, as Arrow and again as Spark's
# local rows; a larger table's snapshot is read here a group of chunks at a time within it
ARROW_BYTES = 64 * 1024 * 1024
# the most rows, and bytes of values, of a micro-batch's share of a table committed here: on 2 cores
# under load, a share of 500,000 changes to a 1M-row table (the bench's burst) landed in bronze and
# silver in 15-18 s, against 100 s by Spark's append and MERGE; its typed rows are held in the driver
# (the driver's Python peaked at 1.1 GB on that share, 0.2 GB when Spark landed it)
STREAM_ROWS = 1_000_000
STREAM_BYTES = 256 * 1024 * 1024
# the writer features of binlake's tables that delta-rs writes correctly (checked in tests)
WRITER_FEATURES = frozenset({"columnMapping", "deletionVectors", "timestampNtz", "invariants", "appendOnly"})
# the commit file of a table's first version
FIRST = "00000000000000000000.json"


def usable(location: str, names: list[str], rows: int, size: int = 0, stream: bool = False) -> bool:
    """Whether `rows` rows (`size` bytes of values, when known) of a table with the columns `names`
    may be committed here (a small table's snapshot, or with `stream` a micro-batch's share of a
    table): commits here are on, the table is local, and no column name is one delta-rs's expression
    parser misreads (a backtick ends its quoting)."""
    most_rows, most_bytes = (STREAM_ROWS, STREAM_BYTES) if stream else (ARROW_ROWS, ARROW_BYTES)
    return 0 < ARROW_ROWS and rows <= most_rows and size <= most_bytes and storage.is_local(location) \
        and not any("`" in n for n in names)


def local(location: str) -> bool:
    """Whether delta-rs may keep the table at `location`: a local path, while commits here are on."""
    return 0 < ARROW_ROWS and storage.is_local(location)


def ensure(location: str, struct: Any, properties: dict[str, str]) -> bool:
    """Create the empty local table at `location` here unless one is there (a creation cut short is
    cleared first; Spark's first Delta create costs a fresh JVM about two seconds). Whether this call
    created it."""
    storage.clear_uncommitted(location)
    return create(location, struct, properties)


# the reader features delta-rs's SQL engine reads (not type widening: docs/design.md#readers)
READER_FEATURES = frozenset({"columnMapping", "deletionVectors", "timestampNtz"})


def readable(location: str) -> bool:
    """Whether delta-rs's SQL engine reads the local table at `location` (it has a commit, and no
    reader feature outside READER_FEATURES)."""
    from deltalake import DeltaTable

    if not local(location) or not storage.has_commit(location):
        return False
    return set(DeltaTable(location).protocol().reader_features or []) <= READER_FEATURES


def query(location: str, name: str, sql: str) -> Any:
    """The rows of `sql` over the local table at `location`, known to it as `name`, by delta-rs's SQL
    engine: a pyarrow Table."""
    import pyarrow as pa
    from deltalake import DeltaTable, QueryBuilder

    # read as a stream: `pa.table` of delta-rs's (arro3's) table imports pandas to ask whether it was
    # given a DataFrame, which took `binlake status` seconds at its first read
    found = QueryBuilder().register(name, DeltaTable(location)).execute(sql)
    return pa.RecordBatchReader.from_stream(found).read_all()


def takes(location: str, names: list[str]) -> bool:
    """Whether the table at `location` is one written here: it has a commit, its protocol has no writer
    feature outside WRITER_FEATURES, and its columns are `names` (not a bronze from before a column
    binlake added since, which Spark's append adds). Read from binlake's own read of its log
    (binlake.lake.table_log, read on from the last look): no delta-rs table opened, which reads the log
    anew each time (a micro-batch that marks silver never needs one)."""
    if not storage.has_commit(location):
        return False
    snapshot = Snapshot.read(location)
    features = set(snapshot.protocol.get("writerFeatures") or [])
    same = [f["name"] for f in json.loads(snapshot.metadata["schemaString"])["fields"]] == names
    return same and features <= WRITER_FEATURES


def writable(location: str, names: list[str]) -> Any:
    """The delta-rs table at `location` when it is one written here (`takes`), else None (then Spark
    writes it)."""
    from deltalake import DeltaTable

    return DeltaTable(location) if takes(location, names) else None


def first_commit(struct: Any, properties: dict[str, str]) -> list[dict[str, Any]]:
    """The actions of a new table's version 0 with the columns `struct` (a Spark StructType), as
    Spark's `DeltaTable.create` writes them for the same columns and properties: column mapping by
    name (an id and a physical name for every field, nested ones too), and the table features its
    properties and types call for."""
    fields, top = _mapped(struct.jsonValue()["fields"], 0)
    now = int(time.time() * 1000)
    configuration = {"delta.enableChangeDataFeed": "false", **properties,
                     "delta.columnMapping.maxColumnId": str(top)}
    features = ["columnMapping"]
    if properties.get("delta.enableDeletionVectors") == "true":
        features.append("deletionVectors")
    if '"timestamp_ntz"' in json.dumps(fields):
        features.append("timestampNtz")
    return [
        {"commitInfo": {"timestamp": now, "operation": "CREATE TABLE", "isolationLevel": "Serializable",
                        "isBlindAppend": True, "operationMetrics": {}, "engineInfo": "binlake",
                        "operationParameters": {"partitionBy": "[]", "clusterBy": "[]", "description": None,
                                                "isManaged": "false", "properties": json.dumps(configuration)},
                        "txnId": str(uuid.uuid4())}},
        {"metaData": {"id": str(uuid.uuid4()), "format": {"provider": "parquet", "options": {}},
                      "schemaString": json.dumps({"type": "struct", "fields": fields}), "partitionColumns": [],
                      "configuration": configuration, "createdTime": now}},
        {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": features,
                      "writerFeatures": features + ["invariants", "appendOnly"]}},
    ]


def _mapped(fields: list[dict[str, Any]], last: int) -> tuple[list[dict[str, Any]], int]:
    """`fields` (Spark's JSON form) each with a column-mapping id after `last` and a physical name,
    the fields of nested structs too (inside arrays and maps as well); and the last id given."""
    out = []
    for field in fields:
        field = dict(field)
        field["type"], last = _mapped_type(field["type"], last)
        last += 1
        field["metadata"] = {**field.get("metadata", {}), "delta.columnMapping.id": last,
                             "delta.columnMapping.physicalName": f"col-{uuid.uuid4()}"}
        out.append(field)
    return out, last


def _mapped_type(kind: Any, last: int) -> tuple[Any, int]:
    if not isinstance(kind, dict):
        return kind, last
    if kind["type"] == "struct":
        fields, last = _mapped(kind["fields"], last)
        return {**kind, "fields": fields}, last
    if kind["type"] == "array":
        element, last = _mapped_type(kind["elementType"], last)
        return {**kind, "elementType": element}, last
    if kind["type"] == "map":
        key, last = _mapped_type(kind["keyType"], last)
        value, last = _mapped_type(kind["valueType"], last)
        return {**kind, "keyType": key, "valueType": value}, last
    return kind, last


def create(location: str, struct: Any, properties: dict[str, str]) -> bool:
    """Create the empty table at `location` unless one is there: its first commit is put only if no
    other is (a link, which fails on an existing name). Whether this call created it."""
    if storage.has_commit(location):
        return False
    log = Path(location) / "_delta_log"
    log.mkdir(parents=True, exist_ok=True)
    staged = log / f".{uuid.uuid4()}.tmp"
    staged.write_text("".join(json.dumps(action) + "\n" for action in first_commit(struct, properties)))
    try:
        os.link(staged, log / FIRST)
        return True
    except FileExistsError:
        return False
    finally:
        staged.unlink()


def append(table: Any, rows: Any) -> None:
    """Append the Arrow table `rows` (the columns of `table`, a `writable` one) in one commit."""
    from deltalake import write_deltalake

    write_deltalake(table, rows, mode="append")


def add_file(location: str, rows: Any) -> None:
    """Append the Arrow table `rows` (the table's columns, by name) to the local table at `location`:
    one data file in one commit, by binlake's own writer (binlake.lake.delta_commit), with no delta-rs
    table opened. For a stream's bronze, which takes one a micro-batch: delta-rs reads the table's log
    anew for each and writes with a runtime's threads (on a 5M-row table under 2,000 changes a second,
    the stream's CPU per million changes went from 69 s to 62 s so). A table with a nested column is
    delta-rs's to write (binlake's writer does not name nested columns under column mapping)."""
    snapshot = Snapshot.read(location)
    if not snapshot.flat:
        from deltalake import DeltaTable

        append(DeltaTable(location), rows)
        return
    want = _arrow_schema(snapshot.metadata["schemaString"])
    if rows.schema.names != want.names or rows.schema.types != want.types:
        rows = rows.select(want.names).cast(want)
    commit(snapshot, {}, [data_file(snapshot, rows)], operation="WRITE", parameters={"mode": "Append"})


@functools.lru_cache(maxsize=64)
def _arrow_schema(schema_string: str) -> Any:
    """The Arrow columns of a Delta schema (its metadata's `schemaString`), every one nullable."""
    import pyarrow as pa
    from deltalake import Schema

    columns = pa.schema(Schema.from_json(schema_string).to_arrow())
    return pa.schema([pa.field(f.name, f.type) for f in columns])


def quoted(name: str) -> str:
    """A column name in delta-rs's SQL expressions."""
    return '"' + name.replace('"', '""') + '"'


def merge(table: Any, source: Any, key: list[str]) -> tuple[Any, str, str, dict[str, str]]:
    """delta-rs's MERGE of the Arrow table `source` into `table`, matched on `key` null-safely: the
    builder, the target's and the source's aliases, and each source column as a value to set."""
    names = source.column_names
    q, (t, s) = quoted, _aliases(names)
    # each term parenthesised: DataFusion parses `a IS NOT DISTINCT FROM b AND c ...` wrongly
    on = " AND ".join(f"({t}.{q(k)} IS NOT DISTINCT FROM {s}.{q(k)})" for k in key)
    builder = table.merge(source, predicate=on, source_alias=s, target_alias=t)
    return builder, t, s, {q(n): f"{s}.{q(n)}" for n in names if n != "_op"}


def _aliases(names: list[str]) -> tuple[str, str]:
    """A MERGE's names for its target and its source, neither a column's name (DataFusion takes a
    column `t` in `t.x` for the table aliased `t`)."""
    mark = "_"
    while f"target{mark}" in names or f"source{mark}" in names:
        mark += "_"
    return f"target{mark}", f"source{mark}"
