"""The stream's checkpoint and the progress file beside it: where the binlog stream stands.

Spark's checkpoint holds the stream's offsets (binlog positions with their file's creation time, see
`binlake.source.identity`) and the batches committed; binlake reads the end of the last committed one
to know where the stream will read on, and to tell `binlake status`.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from binlake.lake.storage import Location, location
from binlake.offsets import BinlogPosition


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


def batch_range(checkpoint: Location | str, batch_id: int,
                first: BinlogPosition) -> tuple[BinlogPosition, BinlogPosition] | None:
    """The binlog range of micro-batch `batch_id` as Spark recorded it before running it: from the
    previous batch's end offset (or `first`, the query's start, for batch 0) to its own; None where
    the checkpoint no longer holds them."""
    folder = _folder(checkpoint)
    end = _end_offset(folder, batch_id)
    start = first.to_dict() if batch_id == 0 else _end_offset(folder, batch_id - 1)
    return None if start is None or end is None else (BinlogPosition.from_dict(start), BinlogPosition.from_dict(end))


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

