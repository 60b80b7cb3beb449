"""The JVM's class-data-sharing archive for binlake, made once by `make setup`.

A local binlake run starts one JVM, and a cold JVM spends most of a short run loading, parsing and
verifying Spark's and Delta's classes and compiling their code. `python -m binlake.spark.jvm_archive`
runs the Delta work binlake does (create with column mapping and deletion vectors, append, an
observed append, MERGE, read) in a JVM started with `-XX:ArchiveClassesAtExit`, which writes the
classes it loaded into an archive that later JVMs map instead (`-XX:SharedArchiveFile`). An archive
made by another Java build or for other jars is ignored by the JVM; binlake then just starts slower.
The archive is written to a `.partial` file and renamed only after the JVM exited cleanly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from binlake.spark.session import archive_path, get_spark, log_option, submit_args


def make(path: Path) -> bool:
    """Write the archive to `path` by a training run in a child process; False if it could not."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.unlink(missing_ok=True)
    env = dict(os.environ)
    env["PYSPARK_SUBMIT_ARGS"] = submit_args(f"{log_option()} -XX:ArchiveClassesAtExit={partial} "
                                             "-Xlog:cds=off -Xlog:cds+dynamic=off")
    done = subprocess.run([sys.executable, "-m", "binlake.spark.jvm_archive", "--train"], env=env,
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900)
    if done.returncode != 0 or not partial.is_file():
        print(f"binlake setup: no JVM class archive ({done.stderr.strip().splitlines()[-1:] or 'no archive written'}); "
              "runs start slower", file=sys.stderr)
        partial.unlink(missing_ok=True)
        return False
    partial.replace(path)
    return True


def train() -> int:
    """The Delta work of a binlake run, on a throwaway table; the JVM exits cleanly so it writes the archive."""
    from delta.tables import DeltaTable
    from pyspark.sql import Observation
    from pyspark.sql import functions as F


    spark = get_spark()
    with tempfile.TemporaryDirectory() as d:
        t = f"{d}/t"
        (DeltaTable.createIfNotExists(spark).location(t).addColumn("id", "BIGINT").addColumn("v", "STRING")
         .addColumn("_seq", "DECIMAL(38,0)").property("delta.enableDeletionVectors", "true")
         .property("delta.columnMapping.mode", "name").execute())
        rows = spark.range(2000).select("id", F.col("id").cast("string").alias("v"),
                                        F.col("id").cast("decimal(38,0)").alias("_seq"))
        rows.write.format("delta").mode("append").option("txnAppId", "a").option("txnVersion", 1).save(t)
        seen = Observation()
        (rows.where("id < 100").observe(seen, F.collect_list(F.when(F.col("id") == 1, F.struct("id", "v"))),
                                        F.count_if(F.col("id") > 5)).write.format("delta").mode("append").save(t))
        seen.get
        (DeltaTable.forPath(spark, t).alias("t").merge(rows.where("id > 1000").alias("s"), "t.id <=> s.id")
         .whenMatchedDelete("s.id % 2 = 0").whenMatchedUpdateAll("s._seq > t._seq").whenNotMatchedInsertAll()
         .execute())
        spark.read.format("delta").load(t).groupBy((F.col("id") % 10).alias("k")).agg(F.max("_seq")).collect()
    proc = spark.sparkContext._gateway.proc  # type: ignore[union-attr]
    spark.stop()
    proc.stdin.close()  # the JVM exits when its stdin closes, and writes the archive on the way out
    return int(proc.wait(timeout=300))  # not 0: the JVM failed, maybe while writing the archive


if __name__ == "__main__":
    if sys.argv[1:] == ["--train"]:
        sys.exit(train())
    else:
        sys.exit(0 if make(archive_path()) else 1)
