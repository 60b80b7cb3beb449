"""The Databricks side against a real MariaDB: the snapshot task's entry point reads its group into
bronze, and the Lakeflow pipeline source passes `spark-pipelines dry-run` on open-source Spark 4.2.

The dry run starts its own Spark Connect server (a second JVM next to the tests' session), imports
src/binlake/databricks/pipeline_source.py as Databricks would, and analyses every dataset and flow:
the binlog source, the per-table views and the AUTO CDC flows (their keys must exist in the view's
schema, their sequence must resolve). A recorder loaded before the source writes down what the
pipeline registered, which the test compares with the captured tables.
"""

from __future__ import annotations

import dataclasses
import decimal
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from binlake.source.identity import Lineage
from binlake import config as config_mod
from binlake.capture.context import Context
from binlake.capture.plan import group_ids, plan
from binlake.capture.snapshot import snapshot
from binlake.config import Config
from binlake.databricks import pipeline_source, stream_job
from binlake.databricks.entrypoints import snapshot_main
from binlake.errors import ConfigError, RuntimeFailure
from binlake.spark.session import delta_jars
from binlake.lake.bronze import CHANGES, typed
from binlake.lake.silver_shape import DELETED, Shape
from binlake.lake.target import Target
from binlake.schema import Column, TableSchema

from .conftest import ROOT

FIXTURES = Path(__file__).parent / "fixtures"
SOURCE = ROOT / "src" / "binlake" / "databricks" / "pipeline_source.py"
SERVER_IDS = "6410-6414"  # replica ids of their own, apart from the other tests' readers


@dataclass
class Shop:
    database: str
    port: int
    cfg: Config

    @property
    def tables(self) -> list[str]:
        return [f"{self.database}.orders", f"{self.database}.order_lines"]

    @property
    def columns(self) -> str:
        """source.columns: the orders' note is left out (the pipeline must be given the same list)."""
        return f"{{{self.database}.orders: {{exclude: [note]}}}}"

    @property
    def row_filter(self) -> str:
        """source.row-filter: silver keeps the orders over 10 (the pipeline must be given the same one)."""
        return f"{{{self.database}.orders: 'amount > 10'}}"


def shop_config(port: int, database: str, lake: Path, *extra: str) -> Config:
    return config_mod.load(None, [
        f"source.port={port}", "source.username=root", "source.password=",
        f"source.tables={database}\\..*", f"target.path={lake}", f"source.server-id={SERVER_IDS}",
        "snapshot.chunk-size=10", *extra,
    ])


@pytest.fixture(scope="module")
def shop(dev_db: Any, spark: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shop]:
    """Two tables, one with a composite key, planned and read into bronze by the local engine."""
    database = f"t_{uuid.uuid4().hex[:10]}"
    with dev_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{database}`")
        cur.execute(f"CREATE TABLE `{database}`.orders (id INT PRIMARY KEY, note VARCHAR(20), "
                    "amount DECIMAL(10,2), placed DATETIME(6))")
        cur.execute(f"CREATE TABLE `{database}`.order_lines (order_id INT, line INT, sku VARCHAR(12), "
                    "PRIMARY KEY (order_id, line))")
        cur.executemany(f"INSERT INTO `{database}`.orders VALUES (%s, %s, %s, NOW(6))",
                        [(i, f"order {i}", i * 1.25) for i in range(1, 26)])
        cur.executemany(f"INSERT INTO `{database}`.order_lines VALUES (%s, %s, %s)",
                        [(o, n, f"sku-{o}-{n}") for o in range(1, 6) for n in range(1, 4)])
        conn.commit()
    named = Shop(database, 0, None)  # type: ignore[arg-type]
    cfg = shop_config(dev_db.running_port(), database, tmp_path_factory.mktemp("lake"),
                      f"source.columns={named.columns}", f"source.row-filter={named.row_filter}")
    plan(cfg)
    snapshot(cfg)
    yield Shop(database, dev_db.running_port(), cfg)
    with dev_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{database}`")


# -- the snapshot task's entry point ---------------------------------------------------------------

class _NoSecrets:
    """dbutils of a job run without a secret scope configured: nothing may be read from it."""

    class secrets:
        @staticmethod
        def get(scope: str, key: str) -> str:
            raise AssertionError("no secret scope is configured, so no secret may be read")


def test_snapshot_main_reads_one_group_into_bronze(dev_db: Any, spark: Any, database: str, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from pyspark.sql import functions as F

    monkeypatch.delenv("BINLAKE_SOURCE_PASSWORD", raising=False)
    with dev_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY, v VARCHAR(10))")
        cur.executemany(f"INSERT INTO `{database}`.t VALUES (%s, %s)", [(i, f"v{i}") for i in range(1, 51)])
        conn.commit()
    lake = tmp_path / "lake"
    cfg = shop_config(dev_db.running_port(), database, lake, "snapshot.group-size=2")
    plan(cfg)
    groups = group_ids(cfg)
    assert len(groups) == 3, groups  # 5 chunks of 10 rows, 2 chunks a group

    group = groups[1]
    snapshot_main([
        "--source-host", "127.0.0.1", "--source-port", str(dev_db.running_port()), "--source-user", "root",
        "--tables", f"{database}\\.t", "--target-path", str(lake), "--chunk-size", "10",
        "--set", "snapshot.group-size=2", "--set", f"source.server-id={SERVER_IDS}",
        "--group", str(group),
    ], dbutils=_NoSecrets())  # type: ignore[arg-type]

    from binlake.lake import split_state as state

    splits = state.load(spark, Target.of(cfg).split_state, 2)[f"{database}.t"]
    mine = [s for s in splits if s.group == group]
    assert len(mine) == 2
    assert all(s.status == "landed" and s.hw is not None for s in mine)  # silver is the pipeline's AUTO CDC
    assert all(s.status == "planned" for s in splits if s.group != group)

    expected = {i for s in mine for i in range(1, 51)
                if (s.start is None or i >= int(s.start[0])) and (s.end is None or i < int(s.end[0]))}
    bronze = spark.read.format("delta").load(Target.of(cfg).bronze(f"{database}.t").location)
    rows = bronze.where(F.col("_op") == "r").select("id", "v", "_chunk").collect()
    assert sorted(r["id"] for r in rows) == sorted(expected)
    assert {r["v"] for r in rows} == {f"v{i}" for i in expected}
    assert {r["_chunk"] for r in rows} == {s.index for s in mine}
    marks = bronze.where(F.col("_op") == "w").select("_chunk").collect()
    assert sorted(r["_chunk"] for r in marks) == sorted(s.index for s in mine)


# -- the pipeline's stream job ---------------------------------------------------------------------

def test_the_stream_job_is_the_one_the_local_stream_builds(shop: Shop, spark: Any) -> None:
    ctx = Context(shop.cfg)
    job = stream_job.build(ctx)
    assert set(job.schemas) == set(shop.tables)
    # the left-out column is in no schema the binlog source decodes with, so in no view AUTO CDC reads
    orders = job.schemas[f"{shop.database}.orders"]
    assert orders.names == ["id", "amount", "placed"] and orders.choice is not None
    assert [c["name"] for c in job.job["schemas"][f"{shop.database}.orders"]["columns"]] == orders.names
    bronze = spark.read.format("delta").load(ctx.target.bronze(f"{shop.database}.orders").location)
    assert "note" not in bronze.columns and bronze.where("_op = 'r'").count() == 25
    body = job.job
    assert set(body) == {"connection", "schemas", "splits", "server_id", "start", "until", "since",
                         "reconnect_timeout", "applied", "patterns", "schema_changes", "versions", "lineage",
                         "failover", "gtid_trailer", "gtid_offsets", "signal_table"}
    assert body["signal_table"] is None  # the pipeline takes no signals (docs/databricks.md)
    assert body["gtid_trailer"] is False  # its rows go to the pipeline's tables: no GTID record rows
    assert body["gtid_offsets"] is True  # the GTID state travels in the offsets Spark checkpoints
    # the server the snapshot was read from: the pipeline's stream checks it before it reads on
    assert body["lineage"]["identity"]["server_id"] == Lineage.load(ctx.target.source_lineage).identity.server_id
    assert body["applied"] is None  # only a GTID startup position skips transactions
    # AUTO CDC's target keeps its columns: the pipeline stops at a schema change (stream.schema-changes: fail)
    assert body["schema_changes"] == "fail" and body["versions"] == {}
    assert body["patterns"] is None  # the pipeline does not capture tables created while it runs
    assert body["until"] is None  # the pipeline streams on; only --until-caught-up stops at a position
    assert body["since"] is None  # only startup mode timestamp skips changes written before a time
    assert body["reconnect_timeout"] == shop.cfg.get("source.reconnect-timeout")
    assert "password" not in body["connection"]
    assert body["server_id"] == 6410
    hws = [(s["hw_file"], s["hw_pos"]) for ss in body["splits"].values() for s in ss]
    assert all(f and p for f, p in hws)
    first = min(hws, key=lambda fp: (int(fp[0].rsplit(".", 1)[1]), fp[1]))
    assert (body["start"]["file"], body["start"]["pos"]) == first
    assert json.loads(job.options()["job"]) == body
    assert job.options()["password"] == ""


def test_the_stream_job_waits_for_the_snapshot(dev_db: Any, spark: Any, database: str, tmp_path: Path) -> None:
    with dev_db.connect() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE TABLE `{database}`.t (id INT PRIMARY KEY)")
        cur.executemany(f"INSERT INTO `{database}`.t VALUES (%s)", [(i,) for i in range(1, 31)])
        conn.commit()
    cfg = shop_config(dev_db.running_port(), database, tmp_path / "lake")
    with pytest.raises(RuntimeFailure, match=r"has no planned chunks in the split state .*run the binlake job"):
        stream_job.build(Context(cfg))
    plan(cfg)
    with pytest.raises(RuntimeFailure, match=rf"snapshot chunks not read yet: {database}\.t \(3\)"):
        stream_job.build(Context(cfg))


# -- the pipeline configuration --------------------------------------------------------------------

def test_configuration_keys_become_config_values_verbatim() -> None:
    conf = {
        "binlake.source.hostname": "null", "binlake.source.port": "3307",
        "binlake.source.tables": r"shop\.orders,shop\.customer.*", "binlake.target.schema": "007",
        "binlake.source.chunk-key": '{"shop.log": ["ts", "seq"]}', "binlake.silver.scd-type": "2",
        "spark.sql.shuffle.partitions": "8",
    }
    cfg = config_mod.load(None, pipeline_source.conf_overrides(conf.get), env={})
    assert cfg.get("source.hostname") == "null"
    assert cfg.get("source.port") == 3307
    assert cfg.tables == [r"shop\.orders", r"shop\.customer.*"]
    assert cfg.get("target.schema") == "007"
    assert cfg.get("source.chunk-key") == {"shop.log": ["ts", "seq"]}
    assert pipeline_source.scd_type(conf.get) == 2
    assert pipeline_source.scd_type({}.get) == 1


def test_a_password_in_the_configuration_is_refused() -> None:
    conf = {"binlake.source.password": "hunter2"}
    with pytest.raises(ConfigError, match="secret scope") as err:
        pipeline_source.conf_overrides(conf.get)
    assert "hunter2" not in err.value.message


@pytest.mark.parametrize("value", ["3", "scd2", ""])
def test_an_unknown_scd_type_is_refused(value: str) -> None:
    if value == "":
        assert pipeline_source.scd_type({"binlake.silver.scd-type": value}.get) == 1
        return
    with pytest.raises(ConfigError, match="binlake.silver.scd-type"):
        pipeline_source.scd_type({"binlake.silver.scd-type": value}.get)


def test_the_password_comes_from_the_secret_scope_named_in_the_configuration() -> None:
    class Conf:
        def __init__(self, values: dict[str, str]) -> None:
            self.values = values

        def get(self, key: str, default: str | None = None) -> str | None:
            return self.values.get(key, default)

    class Session:
        conf = Conf({"binlake.databricks.secret-scope": "binlake", "binlake.databricks.secret-key": "pw"})

    reads: list[tuple[str, str]] = []

    class Secrets:
        def get(self, scope: str, key: str) -> str:
            reads.append((scope, key))
            return "s3cr3t"

    class DbUtils:
        secrets = Secrets()

    cfg = pipeline_source.pipeline_config(Session(), lambda: DbUtils())
    assert cfg.get("source.password") == "s3cr3t"
    assert reads == [("binlake", "pw")]
    assert "s3cr3t" not in cfg.dump()


def test_scd_type_2_needs_databricks() -> None:
    """Open-source Spark refuses the argument before the flow reaches any pipeline graph."""
    from pyspark import pipelines as dp

    with pytest.raises(ConfigError, match="silver.history is 2.*Databricks"):
        pipeline_source.auto_cdc_flow(dp, "shop__orders_silver", "shop__orders_changes", ["id"], 2)


def test_silver_history_is_the_scd_type_and_scd_type_its_older_spelling() -> None:
    assert pipeline_source.scd_type({"binlake.silver.history": "2"}.get) == 2
    assert pipeline_source.scd_type({"binlake.silver.history": "2", "binlake.silver.scd-type": "2"}.get) == 2
    with pytest.raises(ConfigError, match="binlake.silver.history is 1 and binlake.silver.scd-type .* is 2"):
        pipeline_source.scd_type({"binlake.silver.history": "1", "binlake.silver.scd-type": "2"}.get)


# a snapshot row, an update and a delete each of a row in the filter (ids 1, 3, 5) and of one out of it (2, 4, 6)
VIEW_CHANGES = [("r", 1, 7), ("r", 2, 8), ("u", 3, 7), ("u", 4, None), ("d", 5, 7), ("d", 6, 8)]
FILTERED = TableSchema("shop", "orders", (Column("id", "int", "int(11)", False), Column("tenant", "int", "int(11)")),
                       ("id",), row_filter="tenant = 7")


@pytest.mark.parametrize("filtered", [False, True], ids=["all-rows", "filtered"])
@pytest.mark.parametrize("history", [1, 2])
@pytest.mark.parametrize("deletes", ["hard", "soft"])
def test_the_flow_deletes_what_leaves_silver_in_each_shape(spark: Any, deletes: str, history: int,
                                                          filtered: bool) -> None:
    """The view's changes (`silver_changes`) and the flow's arguments for each shape, with a row filter
    and without: AUTO CDC's `apply_as_deletes` selects every delete under hard deletes (a row out of
    the filter is one), and under soft ones only a row out of the filter, while a delete of a row in
    it is an image with `_deleted` true; type 2 is passed as `stored_as_scd_type`."""
    from pyspark.sql import functions as F

    shape = Shape(deletes, history)  # type: ignore[arg-type]
    schema = FILTERED if filtered else dataclasses.replace(FILTERED, row_filter=None)
    calls: list[dict[str, Any]] = []

    class Graph:
        @staticmethod
        def create_auto_cdc_flow(**kwargs: Any) -> None:
            calls.append(kwargs)

    pipeline_source.auto_cdc_flow(Graph, "shop__orders_silver", "shop__orders_changes", ["id"], history,
                                  pipeline_source.delete_condition(shape, filtered))
    (call,) = calls
    assert call["stored_as_scd_type"] == history
    raw = spark.createDataFrame([("shop.orders", op, decimal.Decimal(100 + k), 0, "b.000001", 0, None, None, None,
                                  None, [str(k), None if t is None else str(t)]) for op, k, t in VIEW_CHANGES],
                                CHANGES)
    view = pipeline_source.silver_changes(typed(raw, schema), schema, shape)
    removed = {r["id"] for r in view.where(F.expr(call["apply_as_deletes"])).collect()} \
        if "apply_as_deletes" in call else set()
    out = {2, 4, 6} if filtered else set()
    assert removed == (out if shape.soft else out | {5, 6})
    if shape.soft:
        assert {r["id"] for r in view.where(DELETED).collect()} == {5, 6} - out
    else:
        assert DELETED not in view.columns


def test_dataset_names_follow_the_target_naming() -> None:
    local = Target(Path("/lake"))
    uc = Target(Path("/Volumes/main/cdc/binlake"), "main", "cdc")
    for target in (local, uc):
        assert pipeline_source.dataset_name(target, "silver", "shop.orders") == "shop__orders_silver"
        assert pipeline_source.dataset_name(target, "changes", "shop.order-lines") == "shop__order_lines_changes"
    assert uc.silver("shop.orders").name == "main.cdc.shop__orders_silver"


# -- spark-pipelines dry-run -----------------------------------------------------------------------

def dry_run(shop: Shop, workdir: Path, deletes: str = "hard") -> tuple[subprocess.CompletedProcess[str],
                                                                       list[dict[str, Any]]]:
    """`spark-pipelines dry-run` of tests/bundle/fixtures/spark-pipeline.yml, with the graph recorder
    loaded first, under `silver.deletes: <deletes>`; returns the finished process and the recorded
    graph elements."""
    spec = yaml.safe_load((FIXTURES / "spark-pipeline.yml").read_text())
    (source,) = [lib["glob"]["include"] for lib in spec["libraries"]]
    assert (FIXTURES / source).resolve() == SOURCE
    spec["storage"] = (workdir / "storage").as_uri()
    spec["libraries"] = [{"glob": {"include": os.path.relpath(p, workdir)}}
                         for p in (FIXTURES / "record_graph.py", SOURCE)]
    spec_path = workdir / "spark-pipeline.yml"
    spec_path.write_text(yaml.safe_dump(spec))
    record = workdir / "graph.jsonl"

    bin_dir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if not k.startswith("BINLAKE_")}
    env.update({
        "PATH": f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        "PYSPARK_PYTHON": sys.executable,
        "SPARK_LOCAL_IP": "127.0.0.1",
        "BINLAKE_SOURCE_PORT": str(shop.port),
        "BINLAKE_SOURCE_TABLES": f"{shop.database}\\..*",
        "BINLAKE_SOURCE_COLUMNS": shop.columns,  # as the bundle passes ${var.columns}: a pipeline without it is refused
        "BINLAKE_SOURCE_ROW_FILTER": shop.row_filter,  # likewise ${var.row_filter}
        "BINLAKE_SILVER_DELETES": deletes,
        "BINLAKE_TARGET_PATH": str(shop.cfg.target_path),
        "BINLAKE_GRAPH_RECORD": str(record),
    })
    # Exactly these options: with one more spark-submit option (--driver-memory, or a third --conf)
    # the Connect server that spark-pipelines starts came up without the Delta jars here
    # (DATA_SOURCE_NOT_FOUND: delta).
    cmd = [
        str(bin_dir / "spark-pipelines"), "dry-run", "--spec", str(spec_path),
        "--jars", ",".join(delta_jars()),
        "--conf", "spark.sql.extensions=io.delta.sql.DeltaSparkSessionExtension",
        "--conf", "spark.sql.catalog.spark_catalog=org.apache.spark.sql.delta.catalog.DeltaCatalog",
    ]
    done = subprocess.run(cmd, check=False, cwd=workdir, env=env, capture_output=True, text=True, timeout=600)
    recorded = [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []
    return done, recorded


# a dry run takes about a minute: the soft-deletes graph takes turns among the slow tests (tests/conftest.py),
# and test_the_flow_deletes_what_leaves_silver_in_each_shape checks its view and arguments every day
@pytest.mark.parametrize("deletes", [pytest.param("hard", marks=pytest.mark.one_server),
                                     pytest.param("soft", marks=pytest.mark.slow)])
def test_pipeline_source_passes_spark_pipelines_dry_run(shop: Shop, tmp_path: Path, deletes: str) -> None:
    """The graph with the orders filtered, under hard and soft deletes: the view's marks of a row out
    of the filter and `_deleted` analyse, and the flows delete what `delete_condition` says."""
    done, graph = dry_run(shop, tmp_path, deletes)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output[-4000:]
    assert "Run is COMPLETED" in output, output[-4000:]

    outputs = {e["name"]: e["type"] for e in graph if e["kind"] == "output"}
    flows = {e["name"]: e["target"] for e in graph if e["kind"] == "flow"}
    cdc = {e["target"]: e for e in graph if e["kind"] == "auto_cdc_flow"}

    # the binlog: one table fed by the binlake_binlog source
    assert pipeline_source.BINLOG_TABLE in outputs
    # every table the pipeline keeps asks for optimized writes, auto compaction and deletion vectors
    properties = {e["name"]: e["table_properties"] for e in graph
                  if e["kind"] == "output" and e["type"] != "TemporaryView"}
    assert properties and all(p == pipeline_source.UPKEEP for p in properties.values()), properties
    assert flows[pipeline_source.BINLOG_TABLE] == pipeline_source.BINLOG_TABLE

    # per captured table: a view of its changes and a silver table kept by one AUTO CDC flow
    keys = {f"{shop.database}.orders": ["id"], f"{shop.database}.order_lines": ["order_id", "line"]}
    assert len(cdc) == len(keys)
    for table, key in keys.items():
        leaf = table.replace(".", "__")
        view, silver = f"{leaf}_changes", f"{leaf}_silver"
        assert outputs[view] == "TemporaryView"
        assert flows[view] == view
        assert outputs[silver] == "StreamingTable"
        flow = cdc[silver]
        assert flow["source"] == view
        assert flow["keys"] == [f"Column<'{k}'>" for k in key]
        assert flow["sequence_by"] == "Column<'_seq'>"
        if deletes == "hard":  # a row out of the orders' filter is a 'd' too
            assert "_op = 'd'" in flow["apply_as_deletes"]
        elif table.endswith(".orders"):  # only a row out of the filter is deleted; a delete is an image
            assert "_op = 'x'" in flow["apply_as_deletes"]
        else:
            assert flow["apply_as_deletes"] is None
        assert flow["except_column_list"] == [f"Column<'{c}'>" for c in ["_op", "_file", "_pos", "_gtid", "_chunk", "_lw"]]
        assert str(flow["stored_as_scd_type"]) == "1"
