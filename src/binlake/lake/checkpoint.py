"""The stream's checkpoint and the progress file beside it: where the binlog stream stands.

Spark's checkpoint holds the stream's offsets (binlog positions with their file's creation time, see
`binlake.source.identity`) and the batches committed; binlake reads the end of the last committed one
to know where the stream will read on, and to tell `binlake status`.

On a local lake the stream's batches are planned and committed by binlake itself
(`binlake.capture.stream_loop`), in Spark's own format, so that either resumes the other: a batch's
end offset is written before the batch (`plan_batch`: Spark's `offsets/N`, a version line, the
batch's metadata, the source's offset), and a line after it has landed (`commit_batch`: `commits/N`).
A batch planned and not committed is replayed with the same offsets by whichever runs next.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any

from binlake.lake.storage import Location, location
from binlake.offsets import BinlogPosition

# Spark's offset and commit logs: their version line, and how many batches a query keeps
_LOG_VERSION = "v1"
_RETAINED = 100
# the SQL settings Spark 4.2 records in each batch's metadata (OffsetSeqMetadata.relevantSQLConfs)
_RECORDED_CONF = (
    "spark.sql.shuffle.partitions",
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.stateStore.rocksdb.mergeOperatorVersion",
    "spark.sql.streaming.stateStore.rocksdb.formatVersion",
    "spark.sql.streaming.queryEvolution.enableSourceEvolution",
    "spark.sql.streaming.stateStore.encodingFormat",
    "spark.sql.streaming.statefulOperator.useStrictDistribution",
    "spark.sql.streaming.flatMapGroupsWithState.stateFormatVersion",
    "spark.sql.streaming.multipleWatermarkPolicy",
    "spark.sql.streaming.stateStore.rowChecksum.enabled",
    "spark.sql.streaming.aggregation.stateFormatVersion",
    "spark.sql.function.protobufExtensions.enabled",
    "spark.sql.streaming.join.stateFormatVersion",
    "spark.sql.streaming.stateStore.compression.codec",
    "spark.sql.optimizer.pruneFiltersCanPruneStreamingSubplan",
)


def _folder(checkpoint: Location | str) -> Location:
    return checkpoint if isinstance(checkpoint, Location) else location(checkpoint)


def stream_id(checkpoint: Location | str) -> str:
    """A stable id for this checkpoint: the idempotent-append key must change if the checkpoint does,
    or a fresh stream's batch ids 0, 1, ... would be skipped as already written. Its first write is a
    create-if-absent, so the id never changes under a stream once one was read."""
    f = _folder(checkpoint) / "binlake-stream-id"
    if not f.exists():
        f.create_text(uuid.uuid4().hex)
    return f.read_text().strip()


def committed_end(checkpoint: Location | str) -> dict[str, Any] | None:
    """The end offset of the last committed micro-batch in the checkpoint, as stored: the position
    and its file's creation time (see binlake.source.identity)."""
    folder = _folder(checkpoint)
    done = sorted((int(p.name) for p in (folder / "commits").iterdir() if p.name.isdigit()), reverse=True)
    return next((end for n in done if (end := _end_offset(folder, n)) is not None), None)


def _end_offset(folder: Location, batch_id: int) -> dict[str, Any] | None:
    """The source offset Spark recorded as batch `batch_id`'s end (its offsets file's last line), if
    the checkpoint still holds it."""
    f = folder / "offsets" / str(batch_id)
    return dict(json.loads(f.read_text().strip().splitlines()[-1])) if f.exists() else None


def pending(checkpoint: Location | str) -> tuple[int, dict[str, Any] | None, dict[str, Any] | None]:
    """Where the stream goes on: the next batch's id, the offset it starts from (the end of the batch
    before it; None for batch 0, which starts at the query's start) and, when it was planned and not
    committed (a run cut short), its end offset, to be read again as it was."""
    folder = _folder(checkpoint)
    planned = max((int(p.name) for p in (folder / "offsets").iterdir() if p.name.isdigit()), default=None)
    if planned is None:
        return 0, None, None
    done = (folder / "commits" / str(planned)).exists()
    batch_id = planned + 1 if done else planned
    start = _end_offset(folder, batch_id - 1) if batch_id > 0 else None
    return batch_id, start, None if done else _end_offset(folder, planned)


def plan_batch(checkpoint: Location | str, batch_id: int, end: dict[str, Any],
               conf: Callable[[], dict[str, str]]) -> None:
    """Record batch `batch_id`'s end offset before it is read, as Spark's offset log does. The
    metadata line keeps the SQL settings of the batch before it, as Spark carries them from batch to
    batch, or `conf()` (`query_conf`) for a checkpoint's first batch: Spark reads them back when it
    resumes (and fails on a batch whose settings lack the shuffle partitions)."""
    folder = _folder(checkpoint)
    before = folder / "offsets" / str(batch_id - 1)
    kept = json.loads(before.read_text().splitlines()[1]).get("conf") if before.exists() else None
    meta = {"batchWatermarkMs": 0, "batchTimestampMs": int(time.time() * 1000), "conf": kept or conf()}
    if not (folder / "metadata").exists():  # the query's id, as Spark writes it on a query's first start
        (folder / "metadata").create_text(json.dumps({"id": str(uuid.uuid4())}))
    (folder / "offsets" / str(batch_id)).write_text(f"{_LOG_VERSION}\n{json.dumps(meta)}\n{json.dumps(end)}")


def query_conf(spark: Any) -> dict[str, str]:
    """The SQL settings Spark records in a batch's metadata, as `spark` has them."""
    return {key: str(spark.conf.get(key)) for key in _RECORDED_CONF}


def commit_batch(checkpoint: Location | str, batch_id: int) -> None:
    """Record batch `batch_id` as landed, as Spark's commit log does, and forget batches older than
    Spark keeps (`spark.sql.streaming.minBatchesToRetain`)."""
    folder = _folder(checkpoint)
    (folder / "commits" / str(batch_id)).write_text(f'{_LOG_VERSION}\n{{"nextBatchWatermarkMs":0}}')
    for log in ("offsets", "commits"):
        old = folder / log / str(batch_id - _RETAINED)
        if batch_id >= _RETAINED and old.exists():
            old.unlink(missing_ok=True)


def committed_offset(checkpoint: Location | str) -> BinlogPosition | None:
    """The end position of the last committed micro-batch in the checkpoint, if any."""
    end = committed_end(checkpoint)
    return None if end is None else BinlogPosition.from_dict(end)


def write_progress(path: Location, batch_id: int, tables: dict[str, tuple[int, Any]], began: float) -> None:
    """Rows and newest event per table, and `head_at`: the wall time this batch began. Every batch
    ends at the head the server had when Spark planned it, just before: once the batch commits, the
    stream holds every change the source had at about that time, for idle tables too. `batch`: this
    batch's changes and the seconds it took so far (all but its commit to the checkpoint)."""
    old: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"tables": {}}
    for name, (n, ts) in tables.items():
        t = old["tables"].setdefault(name, {"rows": 0})
        t["rows"] = int(t.get("rows", 0)) + n
        t["last_event"] = int(ts) if ts is not None else t.get("last_event")
    old["batch"] = batch_id
    old["last_batch"] = {"id": batch_id, "rows": sum(n for n, _ in tables.values()),
                         "seconds": round(time.monotonic() - began, 3)}
    old["head_at"] = time.time() - (time.monotonic() - began)
    old["updated"] = time.time()
    path.write_text(json.dumps(old))



def write_heartbeat(path: Location, position: dict[str, Any], caught_up: bool) -> None:
    """Where the stream stands now, with no change of a captured table to land: `position`, the end of
    its last committed batch (or its start), and whether its last look at the source found nothing
    past it (`caught_up`). Beside the checkpoint, not in it: Spark's query resumes from its own offsets,
    and a heartbeat is no batch. `head_at` moves too when caught up, so a restarted run's lag starts
    from this look, not from the last batch."""
    old: dict[str, Any] = json.loads(path.read_text()) if path.exists() else {"tables": {}}
    now = time.time()
    old["heartbeat"] = {"at": now, "position": position, "caught_up": caught_up}
    if caught_up:
        old["head_at"] = now
    path.write_text(json.dumps(old))
