"""`binlake status` with the source stopped: the lake's figures without a connection, the source named
unreachable in one line (with the reason in JSON), exit code 0. With the source up, its head and lag."""

from __future__ import annotations

import json
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
from .capture import run_once, stream_once, write_config
from .workload import create_table, run_cli

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
