"""Snapshotting one table again while the others keep their place in the stream.

Asked for by `binlake resnapshot <db.table>`, or taken by the stream itself: a table that changed
while it was being snapshotted (its snapshot mixes two schemas), and under `stream.schema-changes:
evolve` a change silver cannot follow in place (a new primary key, a type Delta cannot widen, a table
replaced by `CREATE OR REPLACE`).

Crash-safe by an intent file per table, written first and removed once the table is planned again:
    1. intent         `_binlake/resnapshot/<db>__<table>` (the table's name inside)
    2. retire         its chunks leave the split state (kept as `retired:<db.table>`)
    3. clear          bronze, silver and the recorded schema versions are removed
    4. plan           new chunks, with the table's schema as the server has it now
    5. done           the intent is removed; the snapshot reads the new chunks like any others
A crash anywhere before 5 leaves the intent, and the next `binlake run` does 2-5 again (each step is
idempotent). The stream's position stays: it passes the table's changes before each new chunk's high
watermark, as after any snapshot. A table that is gone from the server is only retired: its bronze and
silver stay as they were, and a table created again under its name is captured anew.
"""

from __future__ import annotations

import logging

from binlake import faults
from binlake.capture.context import Context
from binlake.capture.plan import plan
from binlake.capture.snapshot import snapshot
from binlake.capture.startup import SNAPSHOT_MODES
from binlake.errors import ConfigError, SchemaChangedError, SnapshotChangedError
from binlake.lake import split_state
from binlake.source.catalog import captured_tables
from binlake.source.connection import connect

log = logging.getLogger(__name__)


def request(ctx: Context, names: list[str]) -> None:
    """Record the intent to snapshot `names` again, then do it (plan and, in a snapshot mode, read)."""
    mode = ctx.cfg.get("stream.startup-mode")
    if mode not in SNAPSHOT_MODES:
        raise ConfigError(
            f"stream.startup-mode is {mode!r}, which takes no snapshot; binlake resnapshot needs a mode with one: "
            "set stream.startup-mode to initial"
        )
    known = set(ctx.schemas())
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ConfigError(
            f"{', '.join(unknown)} is not a captured table; binlake resnapshot takes tables source.tables matches "
            f"({', '.join(sorted(known))}): name one of them as db.table"
        )
    for name in names:
        ctx.target.resnapshot_intent(name).write_text(name)
    finish(ctx)


def pending(ctx: Context) -> list[str]:
    return sorted(p.read_text() for p in ctx.target.resnapshot_intents.iterdir())


def finish(ctx: Context) -> list[str]:
    """Carry out every recorded intent (after a crash, the ones it left); the tables set up again."""
    names = pending(ctx)
    if not names:
        return []
    spark = ctx.session()
    split_state.retire(spark, ctx.target.split_state, names)
    conn = connect(ctx.params)
    try:
        present = {f"{d}.{t}" for d, t in captured_tables(conn, ctx.cfg.tables)}
    finally:
        conn.close()
    for name in names:
        ctx.target.side_snapshot(name).unlink(missing_ok=True)  # planned and snapshotted here now
        if name not in present:
            log.warning("%s is gone from the source: no longer captured; its bronze and silver stay as they were", name)
            continue
        for location in (ctx.target.bronze(name).location, ctx.target.silver(name).location):
            ctx.target.storage(location).remove_tree()
        ctx.history(name).path.unlink(missing_ok=True)
    ctx.forget_schemas()
    again = [n for n in names if n in present]
    if again:
        plan(ctx.cfg, ctx)
    for name in names:
        ctx.target.resnapshot_intent(name).unlink(missing_ok=True)
    if again:
        log.warning("snapshotting %s again", ", ".join(again))
        snapshot(ctx.cfg, None, ctx, tables=again)
    return again


def after_change(ctx: Context, changed: SchemaChangedError, done: dict[str, int]) -> None:
    """Snapshot a changed table again where that is the way to follow the change (see
    `binlake.capture.resnapshot`); raise `changed` where it is not, or after 3 times for one table."""
    policy = ctx.cfg.get("stream.schema-changes")
    table = changed.table
    if (policy == "fail" or table is None or table not in ctx.schemas()
            or ctx.cfg.get("stream.startup-mode") not in SNAPSHOT_MODES
            or not (isinstance(changed, SnapshotChangedError) or policy == "evolve")):
        raise changed
    done[table] = done.get(table, 0) + 1
    if done[table] > 3:
        raise changed
    log.warning("%s; snapshotting %s again", changed.message.split(";")[0], table)
    request(ctx, [table])


def everything(ctx: Context) -> None:
    """Forget the stream and the snapshot of every captured table, then plan and snapshot them again.

    Crash-safe by its order: the checkpoint goes first, so until the split state is retired the next
    start still finds a purged position (the old high watermarks) and resets again; bronze and silver
    are emptied (not dropped, so their schemas and locations stay) before the chunks are retired.
    """
    from delta.tables import DeltaTable  # deferred: the Delta Python API needs a running JVM's classes

    spark = ctx.session()
    names = list(ctx.schemas())
    ctx.target.checkpoint_files.remove_tree()
    ctx.target.stream_progress.unlink(missing_ok=True)
    ctx.target.side_snapshots.remove_tree()
    for name in names:
        for location in (ctx.target.bronze(name).location, ctx.target.silver(name).location):
            if DeltaTable.isDeltaTable(spark, location):
                DeltaTable.forPath(spark, location).delete()
    split_state.retire(spark, ctx.target.split_state, names)
    # the new snapshot records its server afresh (after a source change, the new one); every position
    # of the old one is gone by now
    ctx.target.source_lineage.unlink(missing_ok=True)
    ctx.target.gtid_record.unlink(missing_ok=True)
    ctx.forget_lineage()
    faults.point("mid_resnapshot", ",".join(names))
    plan(ctx.cfg, ctx)
    snapshot(ctx.cfg, None, ctx)

