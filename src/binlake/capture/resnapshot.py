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
import shutil
from typing import TYPE_CHECKING

from binlake.errors import ConfigError
from binlake.source.catalog import captured_tables
from binlake.source.connection import connect

if TYPE_CHECKING:
    from binlake.capture.pipeline import Context

log = logging.getLogger(__name__)


def request(ctx: Context, names: list[str]) -> None:
    """Record the intent to snapshot `names` again, then do it (plan and, in a snapshot mode, read)."""
    from binlake.capture.startup import SNAPSHOT_MODES

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
        intent = ctx.target.resnapshot_intent(name)
        intent.parent.mkdir(parents=True, exist_ok=True)
        intent.write_text(name)
    finish(ctx)


def pending(ctx: Context) -> list[str]:
    folder = ctx.target.resnapshot_intents
    return sorted(p.read_text() for p in folder.iterdir()) if folder.is_dir() else []


def finish(ctx: Context) -> list[str]:
    """Carry out every recorded intent (after a crash, the ones it left); the tables set up again."""
    from binlake.capture import pipeline
    from binlake.lake import split_state

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
        if name not in present:
            log.warning("%s is gone from the source: no longer captured; its bronze and silver stay as they were", name)
            continue
        for location in (ctx.target.bronze(name).location, ctx.target.silver(name).location):
            shutil.rmtree(location, ignore_errors=True)
        ctx.history(name).path.unlink(missing_ok=True)
    ctx.forget_schemas()
    again = [n for n in names if n in present]
    if again:
        pipeline.plan(ctx.cfg, ctx)
    for name in names:
        ctx.target.resnapshot_intent(name).unlink(missing_ok=True)
    if again:
        log.warning("snapshotting %s again", ", ".join(again))
        pipeline.snapshot(ctx.cfg, None, ctx, tables=again)
    return again
