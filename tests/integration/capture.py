"""Small helpers for tests that capture arbitrary tables in-process and read silver back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import deltalake
import pyarrow
import pymysql

from binlake.config import Config, load
from binlake.capture.run import run
from binlake.capture.stream import stream
from binlake.lake.target import Target


def write_config(path: Path, port: int, tables: list[str], lake: Path, server_ids: str, chunk_size: int = 4,
                 group_size: int = 4, chunk_keys: dict[str, list[str]] | None = None) -> Path:
    """A binlake.yml; `server_ids` must not overlap another test's (replicas with one id evict each other)."""
    doc = {
        "source": {"hostname": "127.0.0.1", "port": port, "username": "root", "password": "",
                   "tables": tables, "server-id": server_ids, **({"chunk-key": chunk_keys} if chunk_keys else {})},
        "target": {"path": str(lake)},
        "snapshot": {"chunk-size": chunk_size, "group-size": group_size, "parallelism": 2},
    }
    path.write_text(json.dumps(doc, ensure_ascii=False))  # JSON is YAML
    return path


def with_stream(cfg_path: Path, **stream: Any) -> Path:
    """The config at `cfg_path` with `stream` keys set (underscores for dashes)."""
    doc = json.loads(cfg_path.read_text())
    doc.setdefault("stream", {}).update({k.replace("_", "-"): v for k, v in stream.items()})
    cfg_path.write_text(json.dumps(doc, ensure_ascii=False))
    return cfg_path


def run_once(cfg_path: Path) -> Config:
    cfg = load(cfg_path)
    run(cfg, until_caught_up=True)
    return cfg


def snapshot_once(cfg_path: Path) -> None:
    """The snapshot alone (stream.startup-mode snapshot): what a race against the snapshot runs under its writers."""
    run(load(cfg_path, ["stream.startup-mode=snapshot"]))


def stream_once(cfg_path: Path) -> Config:
    """The stream to the head: after `snapshot_once`, every change since the chunks' high watermarks."""
    cfg = load(cfg_path)
    stream(cfg, until_caught_up=True)
    return cfg


def silver(spark: Any, cfg: Config, name: str) -> Any:
    return spark.read.format("delta").load(Target.of(cfg).silver(name).location)


def silver_rows(cfg: Config, name: str) -> list[dict[str, Any]]:
    """Silver read with delta-rs, not with binlake's Spark code: an independent reader of the table.
    (Its SQL engine, since the plain reader refuses deletion vectors and column mapping.)"""
    table = deltalake.DeltaTable(Target.of(cfg).silver(name).location)
    result = deltalake.QueryBuilder().register("silver", table).execute("SELECT * FROM silver").read_all()
    return pyarrow.table(result).to_pylist()


def connect(port: int, database: str | None = None, **session: str) -> pymysql.connections.Connection:
    """A plain PyMySQL connection; `session` sets session variables (time_zone, sql_mode)."""
    conn = pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                           autocommit=True, charset="utf8mb4")
    with conn.cursor() as cur:
        for k, v in session.items():
            cur.execute(f"SET SESSION {k} = %s", (v,))
    return conn
