"""`binlake run`: plan, snapshot and stream, as `stream.startup-mode` says, resuming wherever the last
run stopped. Every step reads what the previous ones left in Delta (split state, bronze) and writes
idempotently, so a run may be cut short at any point and started again.
"""

from __future__ import annotations

from binlake.capture import metrics, resnapshot, side_snapshot
from binlake.capture.context import Context
from binlake.capture.plan import plan
from binlake.capture.snapshot import Reading, snapshot
from binlake.capture.startup import SNAPSHOT_MODES, validate
from binlake.capture.stream import stream
from binlake.config import Config
from binlake.errors import SchemaChangedError, SnapshotChangedError, raised_in_spark
from binlake.source.validation import check_server_ids


def run(cfg: Config, until_caught_up: bool = False) -> None:
    """Plan, snapshot and stream, as `stream.startup-mode` says: `snapshot` stops after the
    snapshot; the modes that start from a binlog position skip the snapshot. Planning and reading
    interleave: each batch of planned groups is read while the rest is still to be planned, several
    tables at once (`snapshot.Reading`); the final snapshot picks up whatever a crash left unread
    (planned, or landed and not yet in silver)."""
    validate(cfg)
    check_server_ids(cfg)
    ctx = Context(cfg)
    mode = cfg.get("stream.startup-mode")
    if mode in SNAPSHOT_MODES:
        resnapshot.finish(ctx)  # what a crash left half done
        side_snapshot.adopt_new(ctx)  # tables new to a stream that ran before: beside it, not before it
        done: dict[str, int] = {}
        while True:
            try:
                with Reading(cfg, ctx) as reading:
                    plan(cfg, ctx, on_batch=reading)
                snapshot(cfg, None, ctx)
                break
            except Exception as exc:  # a chunk read saw its table change: the snapshot mixes two schemas
                changed = exc if isinstance(exc, SchemaChangedError) else raised_in_spark(exc)
                if not isinstance(changed, SchemaChangedError):
                    raise
                again = SnapshotChangedError(changed.message)
                metrics.error(again)  # one the run recovers from: counted, kept as the last error
                resnapshot.after_change(ctx, again, done)
    if mode != "snapshot":
        stream(cfg, until_caught_up, ctx)

