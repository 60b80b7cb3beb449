"""binlake's own commits to a local Delta table: rows marked deleted in deletion vectors
(`binlake.lake.deletion_vectors`) and new data files, in one Delta transaction -- a marked micro-batch
(`binlake.lake.marked_merge`) and a compaction step (`binlake.lake.compaction`). For each marked file:
`remove` (with the DV it had) and `add` of the same path with the new DV, the union of the old one and
the new marks; a file all of whose rows are marked is removed. delta-rs cannot write such a commit (its
`AddAction` and `RemoveAction` have no `deletionVector`, and `create_write_transaction` refuses a path
both removed and added), so the commit file is written here, as Spark writes its DELETE's.

Concurrency is Delta's optimistic one on a local disk: the next version's commit file is linked
into place, which fails if another writer made that version first; then the commit is tried at the
version after, unless the winner removed a file this commit marks or changed the table's metadata or
protocol (`CommitConflict`: the caller plans its marks again on a fresh `Snapshot`).
"""

from __future__ import annotations

import functools
import json
import os
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy.typing as npt

from binlake.errors import RuntimeFailure
from binlake.lake.deletion_vectors import inline, positions, write_file
from binlake.lake.table_log import LOG, Snapshot, stated_records

# the writer features of a table this module commits to correctly
WRITER_FEATURES = frozenset({"deletionVectors", "columnMapping", "timestampNtz", "invariants", "appendOnly"})


class CommitConflict(RuntimeFailure):
    """Another writer's commit, made since the snapshot the marks were planned on, removed a file
    they mark or changed the table's metadata or protocol: nothing was committed."""


def data_file(snapshot: Snapshot, rows: Any, tags: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Write the Arrow table `rows` (the table's columns, by their names) as a new data file of the
    table of `snapshot`, with its columns' physical names under column mapping: its add action, with
    `numRecords`, null counts, and the least and greatest value of its integer and short string
    columns (other columns have none: no file is skipped on them), and `tags` (the add's, which
    readers pass over) when given."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    physical = snapshot.physical_names
    if any(pa.types.is_nested(t) for t in rows.schema.types) and any(k != v for k, v in physical.items()):
        raise ValueError("a nested column under column mapping needs its nested physical names, not written here")
    rows = rows.rename_columns([physical[n] for n in rows.column_names])
    stats: dict[str, Any] = {"numRecords": rows.num_rows, "minValues": {}, "maxValues": {}, "nullCount": {}}
    for name, column in zip(rows.column_names, rows.columns):
        stats["nullCount"][name] = column.null_count
        kind = column.type
        if rows.num_rows > column.null_count and (pa.types.is_integer(kind) or pa.types.is_string(kind)):
            least, greatest = pc.min_max(column).values()
            if not pa.types.is_string(kind) or max(len(least.as_py()), len(greatest.as_py())) <= 32:
                stats["minValues"][name], stats["maxValues"][name] = least.as_py(), greatest.as_py()
    path = f"part-00000-{uuid.uuid4()}-c000.snappy.parquet"
    target = Path(snapshot.location) / path
    # Delta readers take microseconds: a timestamp read back as nanoseconds (delta-rs writes INT96, which
    # pyarrow reads so) would be written as Parquet NANOS, which Spark refuses as a plain INT64. A decimal
    # of 18 digits or fewer is stored as an integer, as Spark and delta-rs write it: a fifth faster to
    # read than fixed-length bytes. Only text columns are dictionary-encoded: a number's dictionary
    # rarely pays (keys, stamps and amounts are mostly distinct) and building it was most of the write.
    # Measured on 200,000 rows of the steady bench's columns: 145 ms to write with every column's
    # dictionary, 52 ms with the text columns' only, and that file 11% smaller and 33% faster to read.
    texts = [f.name for f in rows.schema if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
             or pa.types.is_string_view(f.type) or pa.types.is_binary(f.type) or pa.types.is_large_binary(f.type)
             or pa.types.is_binary_view(f.type)]
    pq.write_table(rows, target, compression="snappy", coerce_timestamps="us", use_dictionary=texts,
                   allow_truncated_timestamps=False, store_decimal_as_integer=True)
    add = {"path": path, "partitionValues": {}, "size": target.stat().st_size,
           "modificationTime": int(target.stat().st_mtime * 1000), "dataChange": True, "stats": json.dumps(stats)}
    return {**add, "tags": dict(tags)} if tags else add


def commit(snapshot: Snapshot, deletions: Mapping[str, Iterable[int] | npt.ArrayLike],
           adds: Sequence[Mapping[str, Any]] = (), operation: str = "MERGE",
           parameters: Mapping[str, Any] | None = None, inline_dvs: bool = False, prefix: str = "",
           data_change: bool = True) -> int:
    """Commit, on the table of `snapshot`, the rows `deletions` marks in each of its live files (by
    path: row positions) and the new data files `adds` (their add actions, files already written):
    one transaction, the version after `snapshot`'s or, past commits of others that touch none of
    these files, a later one. Its version.

    A file's new marks are united with those of its DV; a file all of whose rows are then marked is
    removed, with no add; a file whose marks change nothing is left as it is. The new DVs go to one
    DV file (in the table's folder `prefix`, when given), or with `inline_dvs` into the log itself.
    Nothing to commit, nothing committed: `snapshot`'s version. `data_change` False says the commit
    changes no row's value, as compaction's (Delta's `dataChange`: a reader of changes passes it over). Raises CommitConflict (nothing
    committed) when another commit removed a marked file or changed the table's metadata or protocol."""
    removes, readds, bitmaps, marked = [], [], [], 0
    now = int(time.time() * 1000)
    for path, new in deletions.items():
        add = snapshot.files.get(path)
        if add is None:
            raise CommitConflict(f"deletion vectors: {path} is not a live file of {snapshot.location} at "
                                 f"version {snapshot.version}")
        new = positions(new)
        records = snapshot.num_records(path)
        if new.size and new[-1] >= records:
            raise ValueError(f"row {int(new[-1])} is past the {records} rows of {path}")
        rows, fresh = snapshot.marks(path).united(new)
        if not fresh:
            continue
        marked += fresh
        removes.append({**_remove(add, now), "dataChange": data_change})
        if rows.count < records:
            readds.append({**add, "dataChange": data_change, "stats": _loosened(add.get("stats") or "{}", records)})
            bitmaps.append(rows)
    if not removes and not adds:
        return snapshot.version
    _check_writable(snapshot, with_dvs=bool(readds))
    stored = [inline(b) for b in bitmaps] if inline_dvs else write_file(snapshot.location, bitmaps, prefix)
    for readd, dv in zip(readds, stored):
        readd["deletionVector"] = dv.to_dict()
    info = {"timestamp": now, "operation": operation, "operationParameters": dict(parameters or {}),
            "readVersion": snapshot.version, "isolationLevel": "Serializable", "isBlindAppend": not removes,
            "operationMetrics": {"numDeletionVectorsAdded": str(len(readds)),
                                 "numDeletionVectorsRemoved": str(sum("deletionVector" in r for r in removes)),
                                 "numRemovedFiles": str(len(removes) - len(readds)), "numAddedFiles": str(len(adds)),
                                 "numDeletedRows": str(marked)},
            "engineInfo": "binlake", "txnId": str(uuid.uuid4())}
    actions = [{"commitInfo": info}, *({"remove": r} for r in removes), *({"add": a} for a in readds),
               *({"add": {**a, "dataChange": data_change}} for a in adds)]
    version = _put(snapshot, "".join(json.dumps(a) + "\n" for a in actions), {r["path"] for r in removes})
    if version == snapshot.version + 1:  # no other commit in between: the next read goes on from here
        snapshot.then(version, actions)
    # a writer checkpoints at the versions the table's interval names (delta-rs keeps the DVs in it)
    if version % int(snapshot.metadata.get("configuration", {}).get("delta.checkpointInterval", "10")) == 0:
        from deltalake import DeltaTable

        DeltaTable(snapshot.location).create_checkpoint()
    return version


def can_mark(snapshot: Snapshot) -> bool:
    """Whether a commit here may write deletion vectors to the table of `snapshot`."""
    try:
        _check_writable(snapshot, with_dvs=True)
        return True
    except ValueError:
        return False


def _check_writable(snapshot: Snapshot, with_dvs: bool) -> None:
    """ValueError unless this module writes the table of `snapshot` correctly: its writer features
    among WRITER_FEATURES, and deletion vectors enabled when the commit writes any (`with_dvs`; a
    commit that removes whole files and adds new ones, as compaction's, needs none)."""
    features = set(snapshot.protocol.get("writerFeatures") or [])
    if not features <= WRITER_FEATURES:
        raise ValueError(f"{snapshot.location}: binlake commits here to a table whose writer features are among "
                         f"{sorted(WRITER_FEATURES)}, not {sorted(features)}")
    if with_dvs and "deletionVectors" not in features:
        raise ValueError(f"{snapshot.location}: deletion vectors are written here to a table whose writer features "
                         f"include deletionVectors and are among {sorted(WRITER_FEATURES)}, not {sorted(features)}")
    if with_dvs and snapshot.metadata.get("configuration", {}).get("delta.enableDeletionVectors") != "true":
        raise ValueError(f"{snapshot.location}: delta.enableDeletionVectors is not 'true', so no DV may be written "
                         f"(ALTER TABLE ... SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true'))")
    if snapshot.metadata.get("partitionColumns"):
        raise ValueError(f"{snapshot.location}: a partitioned table is not written here")


def _remove(add: Mapping[str, Any], now: int) -> dict[str, Any]:
    """The remove action of the live `add`, as Spark writes one (its DV and its row count kept)."""
    remove = {"path": add["path"], "deletionTimestamp": now, "dataChange": True, "extendedFileMetadata": True,
              "partitionValues": add.get("partitionValues", {}), "size": add["size"]}
    for key in ("tags", "deletionVector", "baseRowId", "defaultRowCommitVersion"):
        if add.get(key) is not None:
            remove[key] = add[key]
    records = stated_records(add.get("stats") or "{}")
    return remove if records is None else {**remove, "stats": _records_only(records)}


@functools.lru_cache(maxsize=16384)
def _loosened(stats: str, records: int) -> str:
    """The `stats` text of a file re-added with a DV: its row count, and its bounds no longer tight (the
    marked rows' values may be the least or greatest). Made once per text: a file marked at every batch
    is re-added with the text it had, whose JSON was parsed and written again at every commit."""
    return json.dumps({**json.loads(stats), "numRecords": records, "tightBounds": False})


@functools.lru_cache(maxsize=1024)
def _records_only(records: int) -> str:
    return json.dumps({"numRecords": records})


def _put(snapshot: Snapshot, text: str, removed: set[str]) -> int:
    """Link the commit `text` in as the first free version after `snapshot`'s, checking each commit
    found in the way for a conflict with the files it removes."""
    log = Path(snapshot.location) / LOG
    staged = log / f".{uuid.uuid4()}.tmp"
    staged.write_text(text)
    try:
        version = snapshot.version + 1
        while True:
            try:
                os.link(staged, log / f"{version:020d}.json")
                return version
            except FileExistsError:
                _check_winner(log, version, removed)
                version += 1
    finally:
        staged.unlink()


def _check_winner(log: Path, version: int, removed: set[str]) -> None:
    for line in (log / f"{version:020d}.json").read_text().splitlines():
        action = json.loads(line) if line else {}
        if "metaData" in action or "protocol" in action:
            raise CommitConflict(f"deletion vectors: version {version} of {log.parent} changed its metadata or "
                                 f"protocol since the version the marks were planned on; plan them again")
        gone = action.get("remove", {}).get("path")
        if gone in removed:
            raise CommitConflict(f"deletion vectors: version {version} of {log.parent} removed {gone}, a file "
                                 f"whose rows were to be marked; plan the marks again")
