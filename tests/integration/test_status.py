"""`binlake status` with the source stopped: the lake's figures without a connection, the source named
unreachable in one line (with the reason in JSON), exit code 0. With the source up, its head and lag.
On a local lake, silver's live rows, files and bytes read from the Delta log, with no JVM started."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pymysql
import pytest

from binlake.cli import main
from binlake.commands.devdb import DevDb
from binlake.config import load
from binlake.lake.checkpoint import committed_offset
from binlake.lake.target import Target

from ..conftest import SERVERS
from .capture import connect, run_once, stream_once, write_config
from .helpers import seq
from .workload import ROOT, create_table, run_cli

ROWS = 1200
# distinctive: found anywhere in the output, it is a leak (the server is down, so nothing checks it)
SECRET = "Zq8-status-Secret!"


def _status_json(cfg_path: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    capsys.readouterr()
    assert main(["status", "-c", str(cfg_path), "--json"]) == 0
    out, err = capsys.readouterr()
    assert SECRET not in out + err
    return dict(json.loads(out))


@pytest.mark.parametrize("server", SERVERS)
def test_status_with_the_source_stopped(server: str, spark: Any, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("BINLAKE_SOURCE_PASSWORD", raising=False)
    db = DevDb(datadir=tmp_path / "db", server=server, server_id=91)
    port = db.start()
    try:
        with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", autocommit=True) as conn:
            conn.cursor().execute("CREATE DATABASE shop")
        create_table(port, "shop", ROWS)
        cfg_path = write_config(tmp_path / "binlake.yml", port, [r"shop\.t"], tmp_path / "lake", "5900-5903",
                                chunk_size=500, group_size=2)
        run_once(cfg_path)
        with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database="shop",
                             autocommit=True) as conn:
            conn.cursor().execute("UPDATE t SET k = k + 1 WHERE id <= 10")
        stream_once(cfg_path)  # a committed batch: the stream's position stored
        position = committed_offset(Target.of(load(cfg_path)).checkpoint)
        assert position is not None
        up = _status_json(cfg_path, capsys)
    finally:
        db.stop()
    assert up["source"]["reachable"] is True and up["source"]["history"] == "the same", up["source"]
    assert up["tables"][0]["binlog"]["head"] is not None and up["tables"][0]["binlog"]["lag_seconds"] == 0.0

    shown = run_cli("status", "-c", str(cfg_path), env={"BINLAKE_SOURCE_PASSWORD": SECRET}, timeout=300)
    assert shown.returncode == 0, shown.stderr[-3000:]
    assert SECRET not in shown.stdout + shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == (f"source: unreachable, its binlog head and the lag unknown (positions stored from "
                        f"{up['source']['stored']}): cannot connect to root@127.0.0.1:{port} (MySQL error 2003); "
                        "check source.hostname, source.port, source.username and source.password"), shown.stdout
    assert lines[1].startswith(f"stream: at {position}, last batch committed "), shown.stdout
    assert f"shop.t: binlog, chunks 3/3, rows {ROWS}, binlog {position} (lag -)" in lines, shown.stdout
    assert "Traceback" not in shown.stderr, shown.stderr[-3000:]

    monkeypatch.setenv("BINLAKE_SOURCE_PASSWORD", SECRET)
    down = _status_json(cfg_path, capsys)
    assert down["source"] == {"reachable": False, "error": lines[0].split("): ", 1)[1], "stored": up["source"]["stored"],
                              "now": None, "history": None}
    assert down["stream"] == up["stream"] and down["stream"]["position"] == str(position)
    [table] = down["tables"]
    assert table["binlog"] == {"position": str(position), "head": None, "lag_seconds": None}
    assert {k: v for k, v in table.items() if k != "binlog"} == {k: v for k, v in up["tables"][0].items() if k != "binlog"}
    assert table["phase"] == "binlog" and table["rows"] == ROWS and table["chunks"] == {"planned": 3, "done": 3}


# `binlake status --json` in a process of its own, and afterwards whether that process started a JVM:
# a SparkContext, or any child process still running (the JVM that pyspark launches is one)
_STATUS_THEN_JVM = """
import contextlib, io, json, sys
import psutil
from binlake.cli import main
out = io.StringIO()
with contextlib.redirect_stdout(out):
    code = main(["status", "-c", sys.argv[1], "--json"])
spark = sys.modules.get("pyspark")
print(json.dumps({"code": code, "report": json.loads(out.getvalue()),
                  "spark_context": spark is not None and spark.SparkContext._active_spark_context is not None,
                  "children": [p.name() for p in psutil.Process().children(recursive=True)]}))
"""


def _status_without_a_jvm(cfg_path: Path) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", _STATUS_THEN_JVM, str(cfg_path)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["code"] == 0
    assert not found["spark_context"] and found["children"] == [], f"status started a JVM: {found}"
    return dict(found["report"])


def _spark_files(spark: Any, location: str) -> dict[str, int]:
    detail = spark.sql(f"DESCRIBE DETAIL delta.`{location}`").first()
    return {"rows": spark.read.format("delta").load(location).count(), "files": detail["numFiles"],
            "bytes": detail["sizeInBytes"]}


def test_status_counts_silver_from_its_log_without_a_jvm(dev_db: Any, database: str, spark: Any,
                                                         tmp_path: Path) -> None:
    """Status's rows, files and bytes of each silver table on a local lake, read from its Delta log: equal
    to the source's count after the stream landed deletes, updates and inserts, and to Spark's count
    after a DELETE by Spark left deletion vectors; and no JVM started for them."""
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        for t in ("a", "b"):
            cur.execute(f"CREATE TABLE {t} (id INT PRIMARY KEY, k INT, v VARCHAR(40))")
            cur.execute(f"INSERT INTO {t} SELECT seq, seq % 7, CONCAT('v', seq) FROM {seq(1, 300)}")
    cfg_path = write_config(tmp_path / "binlake.yml", port, [rf"{database}\.(a|b)"], tmp_path / "lake", "5910-5913",
                            chunk_size=100, group_size=2)
    cfg = run_once(cfg_path)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("DELETE FROM a WHERE id % 5 = 0")
        cur.execute("UPDATE a SET k = k + 1 WHERE id % 3 = 0")
        cur.execute(f"INSERT INTO a SELECT seq, 1, 'new' FROM {seq(301, 340)}")
        cur.execute("UPDATE b SET v = CONCAT(v, '+')")
        cur.execute("DELETE FROM b WHERE id > 290")
    stream_once(cfg_path)

    report = _status_without_a_jvm(cfg_path)
    tables = {t["source"]: t for t in report["tables"]}
    assert sorted(tables) == [f"{database}.a", f"{database}.b"]
    with connect(port, database) as conn, conn.cursor() as cur:
        for name, table in tables.items():
            cur.execute(f"SELECT COUNT(*) FROM {name.split('.')[1]}")
            assert table["rows"] == cur.fetchone()[0] == (300 - 60 + 40 if name.endswith(".a") else 290), table
            silver = Target.of(cfg).silver(name).location
            assert {k: table[k] for k in ("rows", "files", "bytes")} == _spark_files(spark, silver), name
            assert table["phase"] == "binlog" and table["chunks"]["planned"] == table["chunks"]["done"] > 0, table

    # rows a Spark DELETE marks by deletion vectors (what Spark's MERGE leaves in silver too)
    silver = Target.of(cfg).silver(f"{database}.a").location
    spark.sql(f"ALTER TABLE delta.`{silver}` SET TBLPROPERTIES ('delta.enableDeletionVectors' = 'true')")
    spark.sql(f"DELETE FROM delta.`{silver}` WHERE id % 4 = 0")
    last = spark.sql(f"DESCRIBE HISTORY delta.`{silver}` LIMIT 1").first()
    assert last["operation"] == "DELETE" and int(last["operationMetrics"]["numDeletionVectorsAdded"]) > 0, last
    [counted] = [t for t in _status_without_a_jvm(cfg_path)["tables"] if t["source"] == f"{database}.a"]
    assert {k: counted[k] for k in ("rows", "files", "bytes")} == _spark_files(spark, silver)
    kept = [i for i in range(1, 341) if i % 5 or i > 300]  # the ids a holds: 1-300 but every fifth, 301-340
    assert counted["rows"] == len([i for i in kept if i % 4])
