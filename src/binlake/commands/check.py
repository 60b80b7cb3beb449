"""`binlake check`: the source's setup (`binlake.source.validation`), then the capture options against
the tables as the server has them now, so that what a run would refuse is said before anything runs.

Each captured table is loaded as a run loads it (`binlake.source.catalog.load_captured`) and judged by
the run's own rules, not copies of them: a `source.columns` list naming a column the table does not
have or leaving out a key column (`ColumnChoice.refusal`, when the table is first captured), a type
binlake cannot map, soft deletes, history or a row filter on a table without a unique key
(`binlake.capture.context.refusals`), and a row filter Spark cannot evaluate over the captured columns
(`binlake.lake.row_filter.check`). On top, a table `source.columns` or `source.row-filter` names must
be one the run captures: a run passes over any other, so a misspelt name would capture a column
meant to be left out, or every row of a table meant to be filtered.

The row filter needs Spark, which the rest of the check does not: Spark starts (a local session with
one core, or the one already running) only when a captured table has a filter.

Whether a table was captured before decides, as in the run, whether its column list is checked against
its columns (a column it names may have been dropped since). The check reads that from a lake on a
local path; a lake behind a Hadoop URI is reached through Spark, so there every table is judged as at
its first capture.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable

from binlake.capture.context import Context, refusals
from binlake.config import Config
from binlake.errors import ConfigError
from binlake.lake.silver_shape import Shape
from binlake.lake.storage import is_local
from binlake.schema import TableSchema
from binlake.source.catalog import matches
from binlake.source.validation import Inspection, SourceFacts, inspect
from binlake.spark.session import get_spark

log = logging.getLogger(__name__)

OPTIONS = ("source.columns", "source.row-filter")


def check(cfg: Config) -> Inspection:
    """Every problem with the source's setup and the capture options, one line each (none: ready)."""
    seen = inspect(cfg, _captured_before(cfg))
    if seen.facts is None:  # the server did not answer: its line says why
        return seen
    schemas = list(seen.schemas)
    found = [*seen.problems, *refusals(schemas, Shape.of(cfg)), *_named_tables(cfg, seen.facts),
             *_row_filters([s for s in schemas if s.row_filter])]
    return Inspection(found, seen.encrypted, seen.facts, seen.schemas)


def options_in_use(cfg: Config) -> str | None:
    """The capture options set, for check's report when they fit: 'source.columns (shop.customers)'."""
    used = [f"{option} ({', '.join(sorted(cfg.get(option)))})" for option in OPTIONS if cfg.get(option)]
    return ", ".join(used) or None


def _captured_before(cfg: Config) -> Callable[[str], bool]:
    """Whether the lake holds a table already (see the module: read from a local lake only)."""
    if not is_local(cfg.target_path):
        return lambda name: False
    ctx = Context(cfg)
    return lambda name: ctx.history(name).exists()


def _named_tables(cfg: Config, facts: SourceFacts) -> list[str]:
    """A line for each table a capture option names that the run does not capture."""
    visible = set(facts.visible_tables)
    captured = sorted(t for t in visible if matches(cfg.tables, *t.split(".", 1)))
    out = []
    for option in OPTIONS:
        for name in cfg.get(option):
            if name in captured:
                continue
            if name in visible:
                found = f"which source.tables {cfg.tables} does not capture"
                fix = f"add it to source.tables, or take it out of {option}"
            else:
                found = f"which is no table {facts.account} can see on the server"
                close = difflib.get_close_matches(name, captured, n=1)
                fix = f"fix the name{f' ({close[0]}?)' if close else ''}, or take it out of {option}"
            out.append(f"{option} names table {name}, {found}; binlake applies {option} to captured tables "
                       f"only: {fix}")
    return out


def _row_filters(filtered: list[TableSchema]) -> list[str]:
    """A line for each row filter Spark cannot evaluate over its table's captured columns. Spark
    starts here only when there is one to try; a session this check started is stopped again."""
    if not filtered:
        return []
    from pyspark.sql import SparkSession

    from binlake.lake import row_filter

    running = SparkSession.getActiveSession()
    spark = running or get_spark(parallelism=1, app_name="binlake-check")
    out = []
    try:
        for schema in filtered:
            try:
                row_filter.check(spark, schema)
            except ConfigError as exc:
                out.append(exc.message)
    finally:
        if running is None:
            spark.stop()
    return out
