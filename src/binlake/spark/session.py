"""The one place binlake's SparkSession is had: the launcher's, or a local one with Delta.

Under `spark-submit` (any master: a standalone cluster, YARN, Kubernetes) or in a process where
Spark already runs, binlake takes that session and its configuration as they are: the master, the
packages, the executors' Python. It adds only the settings it needs that the launcher left unset
(Delta's SQL extension and catalog, UTC session time, ...). It builds `local[N]` only when it starts
Spark itself.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
from pathlib import Path

from binlake.errors import ConfigError
from binlake.spark import jvm

LOG_CONFIG = Path(__file__).with_name("log4j2.properties")
DELTA_JARS = ("delta-spark_4.2_2.13-4.4.0.jar", "delta-storage-4.4.0.jar")
DELTA_PACKAGE = "io.delta:delta-spark_4.2_2.13:4.4.0"
# what binlake needs of any session it runs in; a launcher's own value of a key is kept
SETTINGS = (
    ("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension"),
    ("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog"),
    ("spark.sql.session.timeZone", "UTC"),
    ("spark.databricks.delta.snapshotPartitions", "2"),
    # Delta keeps each table's log state it read in the driver (10,000 tables by default): with a
    # thousand captured tables a restart filled a 2 GB heap (OutOfMemoryError); a table not among
    # the last 64 read is read again from its log and checkpoint
    ("spark.databricks.delta.delta.log.cacheSize", "64"),
    ("spark.databricks.delta.properties.defaults.enableChangeDataFeed", "false"),
    ("spark.sql.execution.arrow.pyspark.enabled", "true"),
    ("spark.python.worker.reuse", "true"),
    ("spark.sql.streaming.stopGracefullyOnShutdown", "true"),
    # the Python side's connection to a JVM result socket; 15 s is too short on a loaded machine
    ("spark.python.authenticate.socketTimeout", "120s"),
)


def jars_dir() -> Path:
    return Path(os.environ.get("BINLAKE_JARS_DIR", Path(sys.prefix) / "share" / "binlake" / "jars"))


def delta_jars() -> list[str]:
    d = jars_dir()
    missing = [j for j in DELTA_JARS if not (d / j).is_file()]
    if missing:
        raise ConfigError(
            f"Delta jars {', '.join(missing)} are not in {d}; binlake needs them on the classpath: run make setup"
        )
    return [str(d / j) for j in DELTA_JARS]


def archive_path() -> Path:
    """The JVM class archive `make setup` writes (see jvm_archive)."""
    return jars_dir() / "binlake-classes.jsa"


def log_option() -> str:
    return f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}"


def java_options() -> str:
    """The local JVM's options: binlake's logging, and the class archive when there is one (one made
    by another Java build or for other jars is ignored)."""
    options = [log_option()]
    archive = archive_path()
    if archive.is_file():
        options += [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    return " ".join(options)


def submit_args(java: str) -> str:
    """spark-submit's arguments for the local JVM. The Delta jars go on the driver's class path: in
    local mode the tasks run in the driver, the class archive then holds Delta's classes too, and no
    session copies the jars to a scratch directory as `spark.jars` would."""
    return (f"--driver-class-path {shlex.quote(os.pathsep.join(delta_jars()))} "
            f"--driver-java-options {shlex.quote(java)} pyspark-shell")


def quiet_python_loggers() -> None:
    """binlake reports each failure in one line; the loggers that would print it again, whole, are
    silenced: py4j's (a foreachBatch function's exception with its traceback), and pyspark's query
    context loggers (an analysis error, such as a row filter naming no column, as JSON with the JVM's
    stack trace)."""
    for name in ("py4j.clientserver", "SQLQueryContextLogger", "DataFrameQueryContextLogger"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def launched() -> bool:
    """Whether a launcher started Spark for this process: spark-submit runs a Python driver with the
    address of the JVM it started, and a process that made a SparkContext itself has one running."""
    from pyspark import SparkContext

    return "PYSPARK_GATEWAY_PORT" in os.environ or SparkContext._active_spark_context is not None


def get_spark(parallelism: int = 2, app_name: str = "binlake", log_file: Path | None = None):  # type: ignore[no-untyped-def]
    """The active session if there is one (Databricks, tests), the launcher's if one started Spark
    (see the module), else a local one with Delta, whose Spark errors go to `log_file` (binlake
    reports each failure in one line)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if launched():
        return launcher_session(app_name)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_SUBMIT_ARGS", submit_args(java_options()))
    if log_file is not None:  # read by log4j2.properties when the JVM starts (an inherited one is replaced)
        log_file.parent.mkdir(parents=True, exist_ok=True)
        os.environ["BINLAKE_SPARK_LOG"] = str(log_file)
    quiet_python_loggers()
    conf = SparkConf().setMaster(f"local[{max(1, parallelism)}]").setAppName(app_name).setAll([
        *SETTINGS,
        ("spark.sql.shuffle.partitions", str(max(2, parallelism))),
        ("spark.default.parallelism", str(max(2, parallelism))),
        ("spark.ui.enabled", "false"),
        ("spark.ui.showConsoleProgress", "false"),
        ("spark.driver.memory", os.environ.get("BINLAKE_DRIVER_MEMORY", "2g")),
    ])
    if delta_jars()[0] not in os.environ["PYSPARK_SUBMIT_ARGS"]:  # the caller's own arguments
        conf.set("spark.jars", ",".join(delta_jars()))
    # a JVM this process started before (a session stopped and built again) is used again, as pyspark does
    SparkContext(conf=conf, gateway=SparkContext._gateway or jvm.launch(conf))
    spark = SparkSession.builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def launcher_session(app_name: str = "binlake"):  # type: ignore[no-untyped-def]
    """The session of the Spark a launcher started: its master and settings, with `SETTINGS` added
    where it left them unset; Delta's classes must be on its class path (`--packages`)."""
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    quiet_python_loggers()
    SparkContext._ensure_initialized()  # connects to the launcher's JVM
    assert SparkContext._jvm is not None
    if not SparkContext._jvm.org.apache.spark.util.Utils.classIsLoadable("io.delta.sql.DeltaSparkSessionExtension"):
        raise ConfigError(f"the Spark that launched binlake has no Delta classes; binlake needs {DELTA_PACKAGE}: "
                          f"pass --packages {DELTA_PACKAGE} to spark-submit")
    context = SparkContext._active_spark_context
    if context is None:
        conf = SparkConf()  # the launcher's settings: --master, --conf, spark-defaults.conf
        conf.setIfMissing("spark.app.name", app_name)
        for key, value in SETTINGS:
            conf.setIfMissing(key, value)
        SparkContext(conf=conf)
    return SparkSession.builder.getOrCreate()
