"""What the Lakeflow pipeline's binlog source needs: the same `job` option `binlake stream` builds.

`binlake_binlog` (spark/binlog_source.py over capture/binlog_batches.py) reads one JSON option `job`:
the connection without the password (that travels in the `password` option, which Spark redacts),
the schemas of the captured tables, every table's chunks with their high watermarks, the stream's
server id, the start position min(HW) and whether the server is MariaDB. The local stream (capture/stream_query.py) builds it inline;
this module builds the same for the pipeline from `binlake.capture.context.Context` and the split state.

The stream starts after the snapshot, so a table that has no chunks, or a chunk not read yet, is
refused here with the step to run: without a high watermark the handover rule cannot tell which
binlog events a chunk already holds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from binlake.errors import RuntimeFailure
from binlake.schema import TableSchema
from binlake.splits import Split, newest

if TYPE_CHECKING:
    from binlake.capture.context import Context

# error conditions Spark and Delta give for a path that holds no Delta table (yet)
_NO_TABLE = ("PATH_NOT_FOUND", "DELTA_MISSING_DELTA_TABLE", "DELTA_TABLE_NOT_FOUND", "is not a Delta table")


@dataclass(frozen=True)
class StreamJob:
    """The binlog source's options for one pipeline update, and the tables it captures."""

    job: dict[str, Any]
    password: str
    schemas: dict[str, TableSchema]

    def options(self) -> dict[str, str]:
        """`format("binlake_binlog").options(**...)`: the job as JSON, the password on its own."""
        return {"job": json.dumps(self.job), "password": self.password}


def load_splits(spark: Any, path: str, group_size: int, tables: list[str]) -> dict[str, list[Split]]:
    """The split state's chunks of `tables`, in chunk order; {} when there is no split state yet.

    Read as a plain Delta table rather than through `binlake.lake.split_state.load`, which asks
    `delta.tables.DeltaTable` whether the table exists: under Spark Connect (a pipeline's session)
    that call needs Delta's Connect plugin in the server, which open-source `spark-pipelines` lacks.
    """
    from pyspark.errors import AnalysisException

    try:
        rows = spark.read.format("delta").load(path).collect()
    except AnalysisException as exc:
        text = f"{exc.getCondition() or ''} {exc}"
        if any(marker in text for marker in _NO_TABLE):
            return {}
        raise
    wanted = set(tables)
    return newest((r.asDict() for r in rows if r["table"] in wanted), group_size)


def build(ctx: Context) -> StreamJob:
    """The binlog source's job for the captured tables, starting at the smallest high watermark."""
    schemas = ctx.schemas()
    state = ctx.target.split_state
    splits = load_splits(ctx.session(), state, int(ctx.cfg.get("snapshot.group-size")), list(schemas))
    unplanned = [name for name in schemas if not splits.get(name)]
    if unplanned:
        raise RuntimeFailure(
            f"{', '.join(unplanned)} has no planned chunks in the split state {state}; the pipeline streams "
            "the binlog after the snapshot: run the binlake job (plan, snapshot, then this pipeline), and "
            "check that target.path is the same for the job and the pipeline"
        )
    pending = {name: sum(1 for s in ss if not s.landed) for name, ss in splits.items()}
    pending = {name: n for name, n in pending.items() if n}
    if pending:
        listed = ", ".join(f"{name} ({n})" for name, n in sorted(pending.items()))
        raise RuntimeFailure(
            f"snapshot chunks not read yet: {listed}; the pipeline streams the binlog after the snapshot: "
            "run the binlake job's snapshot task (or binlake snapshot) first"
        )
    start = min(s.hw for ss in splits.values() for s in ss if s.hw is not None)
    from binlake.capture.stream_query import binlog_job

    job = binlog_job(ctx, schemas, splits, start, gtid_offsets=True)
    return StreamJob(job, str(ctx.params["password"]), schemas)
