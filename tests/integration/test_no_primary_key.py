"""Tables without a primary key: a clear configuration error, or a configured NOT NULL chunk key."""

from __future__ import annotations

from pathlib import Path

from .capture import connect, run_once, silver, write_config
from .workload import run_cli


def test_without_chunk_key_run_exits_2_naming_the_setting(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE nopk (a INT NOT NULL, b VARCHAR(10))")
    cfg = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.nopk"], tmp_path / "lake", "6120-6124")
    done = run_cli("run", "-c", str(cfg), "--until-caught-up")
    assert done.returncode == 2, done.stderr[-2000:]
    message = done.stderr.strip().splitlines()[-1]
    assert "source.chunk-key" in message and f"{database}.nopk" in message and "no primary key" in message


def test_unique_not_null_chunk_key(dev_db, database, spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE u (code VARCHAR(12) NOT NULL, v INT, UNIQUE KEY (code)) CHARACTER SET utf8mb4")
        cur.execute("INSERT INTO u SELECT CONCAT('c', seq), seq FROM seq_1_to_200")
    name = f"{database}.u"
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.u"], tmp_path / "lake", "6120-6124",
                            chunk_size=25, group_size=4, chunk_keys={name: ["code"]})
    cfg = run_once(cfg_path)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("UPDATE u SET v = v * 10 WHERE v % 3 = 0")
        cur.execute("DELETE FROM u WHERE v % 7 = 0")
        cur.execute("UPDATE u SET code = UPPER(code) WHERE v % 5 = 0")
        cur.execute("INSERT INTO u VALUES ('new', -1)")
    run_once(cfg_path)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("SELECT code, v FROM u")
        source = sorted(cur.fetchall())
    lake = sorted(tuple(r) for r in silver(spark, cfg, name).select("code", "v").collect())
    assert lake == source
