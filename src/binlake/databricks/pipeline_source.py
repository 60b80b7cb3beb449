"""The binlake Lakeflow pipeline: the binlog into bronze, then AUTO CDC into one silver table per source table.

resources/binlake.pipeline.yml names this file as the pipeline's source; the pipeline runtime (or
open-source `spark-pipelines`) executes it with `spark` defined. The graph:

    binlake_binlog source ──► binlake_changes            every row event of every captured table,
                                   │                      as the source emits it (generic rows)
              per table:           ▼
    <db>__<table>_bronze ──► <db>__<table>_changes ──AUTO CDC──► <db>__<table>_silver
    (the snapshot rows the      typed binlog changes of          keyed by the table's key,
     job's snapshot task wrote)  the table + its snapshot rows    ordered by _seq, 'd' deletes

The snapshot rows and the binlog changes share one order, `_seq` (a chunk's rows rank at its high
watermark), so AUTO CDC lets a snapshot row that arrives after a later change of its key lose, as
the local MERGE does. `silver.history` is AUTO CDC's `stored_as_scd_type` (2 on Databricks only).
`silver.deletes: hard` is `apply_as_deletes` (`_op = 'd'`); `soft` gives the changes a `_deleted`
column (`_op = 'd'`), so a delete is applied as the row's last image, as the local MERGE keeps it. A
change whose row is out of `source.row-filter` is marked before AUTO CDC as the local MERGE takes it
(`binlake.lake.row_filter.filtered`): a `d` under hard deletes, `x` under soft ones, and then
`apply_as_deletes` is `_op = 'x'` alone, so it leaves silver with no tombstone and, under type 2,
ends the current version and starts none (`delete_condition`).

Settings come from the pipeline configuration, `binlake.<section>.<key>` for every key of
`binlake.config` (`binlake.source.hostname`, `binlake.silver.history`, ...); `binlake.silver.scd-type`
is the older spelling of `binlake.silver.history`. The password is read from the secret scope and key named by
`binlake.databricks.secret-scope` / `secret-key`, or locally from BINLAKE_SOURCE_PASSWORD; it is
never part of the configuration.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from binlake import config as config_mod
from binlake.capture.context import Context
from binlake.databricks import stream_job
from binlake.databricks.entrypoints import load_with_secret, runtime_dbutils
from binlake.errors import ConfigError
from binlake.lake import bronze, row_filter, silver
from binlake.lake.silver_shape import DELETED, Shape
from binlake.lake.target import Target
from binlake.schema import TableSchema
from binlake.spark.sources import register

CONF_PREFIX = "binlake."
SCD_TYPE_KEY = "binlake.silver.scd-type"  # the older spelling of HISTORY_KEY
HISTORY_KEY = "binlake.silver.history"
PIPELINE_ONLY_KEYS = frozenset({SCD_TYPE_KEY})  # pipeline settings that are no binlake.config key
BINLOG_TABLE = "binlake_changes"
# bronze metadata that silver does not keep; silver keeps what binlake.lake.silver keeps locally
EXCEPT_COLUMNS = [f.name for f in bronze.META_FIELDS if f.name not in {s.name for s in silver.SILVER_META}]


def conf_overrides(conf_get: Callable[[str], str | None]) -> list[str]:
    """`section.key=value` overrides from the pipeline configuration's `binlake.section.key` entries."""
    if conf_get(f"{CONF_PREFIX}source.password") is not None:
        raise ConfigError(
            "binlake.source.password is set in the pipeline configuration, where every workspace user can "
            "read it; binlake reads the password only from a secret scope: remove it and set "
            "binlake.databricks.secret-scope and binlake.databricks.secret-key"
        )
    out: list[str] = []
    for section, keys in config_mod.SCHEMA.items():
        for key in keys:
            dotted = f"{section}.{key}"
            value = conf_get(CONF_PREFIX + dotted)
            if value is None or dotted in config_mod.SECRET_KEYS:
                continue
            # a value given as text is read by its setting's type: a host named 'null' stays a name
            out.append(f"{dotted}={value}")
    return out


def scd_type(conf_get: Callable[[str], str | None]) -> int:
    """Silver's SCD type from `binlake.silver.history`, or its older spelling `binlake.silver.scd-type`:
    1 (default) or 2 (Databricks pipelines only)."""
    given = {k: (conf_get(k) or "").strip() for k in (HISTORY_KEY, SCD_TYPE_KEY)}
    for key, raw in given.items():
        if raw and raw not in ("1", "2"):
            raise ConfigError(f"{key} is {raw!r}; binlake needs 1 or 2: fix {key}")
    if given[HISTORY_KEY] and given[SCD_TYPE_KEY] and given[HISTORY_KEY] != given[SCD_TYPE_KEY]:
        raise ConfigError(f"{HISTORY_KEY} is {given[HISTORY_KEY]} and {SCD_TYPE_KEY} (its older spelling) is "
                          f"{given[SCD_TYPE_KEY]}; binlake needs one value: remove {SCD_TYPE_KEY}")
    return int(given[HISTORY_KEY] or given[SCD_TYPE_KEY] or "1")


def dataset_name(target: Target, kind: str, source: str) -> str:
    """`<db>__<table>_<kind>`, unqualified: the pipeline publishes to its own catalog and schema."""
    leaf = target.bronze(source).name.rsplit(".", 1)[-1]
    return f"{leaf.removesuffix('_bronze')}_{kind}"


def pipeline_config(spark: Any, dbutils: Callable[[], Any] | None = None) -> config_mod.Config:
    """The binlake configuration from the pipeline configuration, with the password from the secret scope."""
    def conf_get(key: str) -> str | None:
        value = spark.conf.get(key, None)
        return None if value is None else str(value)

    def utils() -> Any:
        return dbutils() if dbutils is not None else runtime_dbutils("binlake pipeline", needs_task_values=False)

    return load_with_secret(conf_overrides(conf_get), utils)


# The pipeline's tables keep themselves: optimized writes size the files each update writes, auto
# compaction merges small ones after a write, and deletion vectors let AUTO CDC's MERGE mark the rows it
# replaces instead of rewriting their files (what binlake.lake.compaction and marked_merge do locally).
# Where Unity Catalog's predictive optimization is on, Databricks also runs OPTIMIZE and VACUUM on
# these managed tables by itself (docs/databricks.md).
UPKEEP = {"delta.autoOptimize.optimizeWrite": "true", "delta.autoOptimize.autoCompact": "true",
          "delta.enableDeletionVectors": "true"}


def define(spark: Any, dbutils: Callable[[], Any] | None = None) -> None:
    """Register the pipeline's datasets and flows with the active pipeline graph."""
    from pyspark import pipelines as dp

    cfg = pipeline_config(spark, dbutils)
    shape = Shape(cfg.get("silver.deletes"), scd_type(lambda k: spark.conf.get(k, None)))
    ctx = Context(cfg)
    ctx.spark = spark  # the pipeline's session; never a local one
    register(spark)
    job = stream_job.build(ctx)

    @dp.table(name=BINLOG_TABLE, comment="every binlog row event of the captured tables, from min(HW) on",
              table_properties=UPKEEP)
    def binlog_changes() -> Any:
        return spark.readStream.format("binlake_binlog").options(**job.options()).load()

    for name, schema in job.schemas.items():
        _define_table(dp, spark, ctx.target, name, schema, shape)


def _define_table(dp: Any, spark: Any, target: Target, name: str, schema: TableSchema, shape: Shape) -> None:
    from pyspark.sql import functions as F

    if schema.multiset:
        # AUTO CDC keeps one row per key; keyed by every column, identical source rows would collapse
        raise ConfigError(
            f"source.chunk-key for {name} is not unique (no UNIQUE index over NOT NULL columns within it); "
            "the Databricks pipeline needs a unique key to apply changes: set source.chunk-key to the "
            "columns of a UNIQUE NOT NULL index, add a primary key, or capture this table with binlake run"
        )
    view = dataset_name(target, "changes", name)
    snapshot_location = target.bronze(name).location

    # Built here, not in the view's function: bronze.typed parses the column types, which under Spark
    # Connect is a call to the server that a pipeline refuses inside a query function
    # (ATTEMPT_ANALYSIS_IN_PIPELINE_QUERY_FUNCTION). The frame itself stays lazy.
    binlog = bronze.typed(spark.readStream.table(BINLOG_TABLE).where(F.col("_table") == name), schema)
    # The snapshot task writes each chunk once (a re-read replaces rows it never committed), so the
    # bronze table only grows and can be read as a stream.
    snapshot = spark.readStream.format("delta").load(snapshot_location).where(F.col("_op") == "r")
    frame = silver_changes(binlog.unionByName(snapshot, allowMissingColumns=True), schema, shape)

    @dp.temporary_view(name=view, comment=f"{name}: snapshot rows and binlog changes, typed")
    def changes() -> Any:
        return frame

    table = dataset_name(target, "silver", name)
    dp.create_streaming_table(table, comment=f"{name}: current state (SCD type {shape.history}) applied by AUTO CDC",
                              table_properties=UPKEEP)
    auto_cdc_flow(dp, table, view, list(schema.key), shape.history, delete_condition(shape, bool(schema.row_filter)))


def silver_changes(frame: Any, schema: TableSchema, shape: Shape) -> Any:
    """A table's typed changes as AUTO CDC takes them: a row out of the filter marked to leave
    (`binlake.lake.row_filter`), and under soft deletes `_deleted` (`_op = 'd'`), so a delete is the
    row's last image (`binlake.lake.silver_shape`)."""
    from pyspark.sql import functions as F

    frame = row_filter.filtered(frame, schema, shape)
    return frame.withColumn(DELETED, F.col("_op") == "d") if shape.soft else frame


def delete_condition(shape: Shape, filtered: bool) -> str | None:
    """AUTO CDC's `apply_as_deletes` for `silver_changes`, or None: every `d` under hard deletes (a row
    out of the filter is one); under soft deletes only a row out of the filter (`LEAVES`), which
    leaves silver with no tombstone, or nothing when the table has no filter."""
    if not shape.soft:
        return "_op = 'd'"
    return f"_op = '{row_filter.LEAVES}'" if filtered else None


def auto_cdc_flow(dp: Any, table: str, view: str, keys: list[str], scd: int,
                  apply_as_deletes: str | None = "_op = 'd'") -> None:
    """Apply `view`'s changes to `table`: per key, the change with the highest `_seq` wins, and those
    `apply_as_deletes` selects (`delete_condition`) delete the key (under type 2: end its current version); a
    change it does not select is applied as an image (a soft delete's, with `_deleted` true).

    Only arguments open-source Spark 4.2's `create_auto_cdc_flow` takes, so one source file serves
    both; it refuses SCD type 2, which Databricks keeps.
    """
    as_deletes = {} if apply_as_deletes is None else {"apply_as_deletes": apply_as_deletes}
    try:
        dp.create_auto_cdc_flow(
            target=table,
            source=view,
            keys=keys,
            sequence_by="_seq",
            except_column_list=list(EXCEPT_COLUMNS),
            stored_as_scd_type=scd,
            **as_deletes,
        )
    except TypeError as exc:  # PySparkTypeError
        if scd == 1 or "stored_as_scd_type" not in str(exc):
            raise
        raise ConfigError(
            f"{HISTORY_KEY} is 2; this Spark's create_auto_cdc_flow keeps SCD type 1 only (open-source "
            f"Spark), type 2 (every version) needs a Databricks pipeline: set {HISTORY_KEY}=1 here"
        ) from None


def _runtime_globals() -> tuple[Any, Callable[[], Any] | None]:
    """`spark` and `dbutils` as the pipeline runtime defines them for this file, if it does."""
    try:
        session = spark  # type: ignore[name-defined]  # defined by the pipeline runtime
    except NameError:
        return None, None
    try:
        utils = dbutils  # type: ignore[name-defined]  # defined on Databricks
    except NameError:
        return session, None
    return session, lambda: utils


_session, _dbutils = _runtime_globals()
if _session is not None:
    define(_session, _dbutils)
