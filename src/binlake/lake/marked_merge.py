"""A micro-batch applied to a large silver table by marking, not rewriting: Delta's merge-on-read,
written by binlake (`binlake.lake.delta_commit`).

delta-rs's MERGE is copy-on-write: each file holding a key of the batch is read and written again
whole. A large table's changes at random keys touch every file, so each batch rewrote the table:
measured at 5M rows, 2.4-4 s and 95 MB written per batch of a few thousand changes, and the cost grew
with the table. Here the same batch finds the rows it replaces in the key index
(`binlake.lake.key_index`), marks them in each file's deletion vector, and writes its new images as
one small file, sorted by key, in one commit: kilobytes of DVs and the batch's own rows.

Which way a batch goes is decided by what it would rewrite: a table smaller than `MARK_FROM_BYTES`, or
a batch whose rows lie in files of fewer bytes than that (keys arriving in a range, as an append-mostly
table's do), keeps delta-rs's MERGE, which leaves no DV behind and reads fastest afterwards; a batch
that would rewrite more is marked. The files the marked batches add are merged back into key order by
compaction (`binlake.lake.compaction`).

The rule is the MERGE's (`binlake.lake.silver.apply_arrow`): each key's newest change wins; a delete
removes the key's row, any other change replaces it or inserts it. It is used only where the MERGE's
`_seq` guard can never refuse a change: a batch bronze held none of (not a replay), whose every change
is newer than anything silver holds of its key (the stream hands a key over after its chunk's high
watermark). A replay goes to Spark's MERGE, as before.
"""

from __future__ import annotations

import logging
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from binlake import faults
from binlake.lake.compaction import POOL
from binlake.lake.delta_commit import CommitConflict, can_mark, commit, data_file
from binlake.lake.table_log import Snapshot
from binlake.lake.key_index import KeyIndex, indexable, table_bytes, touched_bytes
from binlake.lake.silver import DATA_OPS, latest_arrow, struct
from binlake.schema import TableSchema

log = logging.getLogger(__name__)

# a batch is marked when the files it would rewrite hold more bytes than this (see the module)
MARK_FROM_BYTES = int(os.environ.get("BINLAKE_MARK_FROM_BYTES", str(16 * 1024 * 1024)))
# commits another writer won in between, each planned again, before the batch goes back to the MERGE
ATTEMPTS = 3


def apply_marked(location: str, schema: TableSchema, changes: Any, index: KeyIndex | None) -> bool:
    """Apply the bronze-typed Arrow `changes` (no replay: see the module) to the local silver table at
    `location` by marking, with `index` kept from batch to batch for this table. False, with nothing
    written, when the batch is better rewritten by delta-rs's MERGE (or the key is not indexable)."""
    data = changes.filter(pc.is_in(changes.column("_op"), pa.array(DATA_OPS)))
    if data.num_rows == 0 or index is None:
        return False
    key = list(schema.key)
    latest = latest_arrow(data, key)
    keys = latest.column(key[0]).to_numpy(zero_copy_only=False)
    names = [f.name for f in struct(schema).fields]
    images = latest.filter(pc.not_equal(latest.column("_op"), "d")).select(names)
    images = images.take(pc.sort_indices(images, [(key[0], "ascending")]))  # in key order, as the index likes
    for _ in range(ATTEMPTS):
        snapshot = Snapshot.read(location)
        if table_bytes(snapshot) < MARK_FROM_BYTES or not _markable(snapshot, key):
            return False
        index.sync(snapshot)
        rows = index.locate(keys)
        if touched_bytes(snapshot, rows) < MARK_FROM_BYTES:
            return False
        adds = [data_file(snapshot, images, POOL)] if images.num_rows else []
        faults.point("mid_merge", schema.name)
        try:
            commit(snapshot, rows, adds, operation="MERGE",
                   parameters={"predicate": f"marked by key ({key[0]})"})
            for add in adds:  # the new file's keys are these, in its order: not read back at the next batch
                index.learn(add["path"], images.column(key[0]).to_numpy(zero_copy_only=False))
            return True
        except CommitConflict as lost:
            log.info("%s: %s", schema.name, lost.message)
    return False


def _markable(snapshot: Snapshot, key: list[str]) -> bool:
    """Whether batches of the table of `snapshot` may be marked: a key the index takes, simple columns
    (binlake writes no nested one), deletion vectors enabled and no writer feature binlake does not keep."""
    return indexable(snapshot, key) and snapshot.flat and can_mark(snapshot)
