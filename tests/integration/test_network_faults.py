"""Network faults between binlake and the server: connections cut in the middle of a chunk's SELECT
and of a binlog read, stalled without closing (half-open), and slowed. Nothing is lost or duplicated,
and a stall longer than the timeouts fails with one line naming the settings, never a hang."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from binlake.config import load
from binlake.lake.target import Target

from .capture import connect, silver, snapshot_once, stream_once, write_config
from .faulty_network import Proxy
from .helpers import execute, seq
from .workload import bronze_duplicates, run_cli

ROWS = 30_000


def _table(dev_db: Any, database: str) -> None:
    execute(dev_db, database, "CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(40), pad CHAR(60))",
            f"INSERT INTO t SELECT seq, CONCAT('v', seq), REPEAT('p', 60) FROM {seq(1, ROWS)}")


def _config(tmp_path: Path, port: int, database: str, server_ids: str, **source: Any) -> Path:
    cfg = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.t"], tmp_path / "lake", server_ids,
                       chunk_size=10_000, group_size=4)
    doc = json.loads(cfg.read_text())
    doc["source"].update({k.replace("_", "-"): v for k, v in source.items()})
    cfg.write_text(json.dumps(doc))
    return cfg


def _assert_exact(spark: Any, cfg_path: Path, port: int, database: str) -> None:
    cfg = load(cfg_path)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v FROM t ORDER BY id")
        source = [(int(i), v) for i, v in cur.fetchall()]
    got = sorted((int(r["id"]), r["v"]) for r in silver(spark, cfg, f"{database}.t").select("id", "v").collect())
    assert got == source
    assert bronze_duplicates(spark, Target.of(cfg).bronze(f"{database}.t").location) == 0


@pytest.mark.slow
def test_connections_cut_mid_select_and_mid_binlog_read(dev_db: Any, database: str, spark: Any,
                                                        tmp_path: Path) -> None:
    """Each chunk SELECT (10,000 rows, about 1 MB) is cut after 200 kB the first times; later the
    binlog read of a 30,000-row update is cut the same way. Both are read again from where they stand."""
    _table(dev_db, database)
    with Proxy(dev_db.running_port()) as proxy:
        cfg = _config(tmp_path, proxy.port, database, "7100-7104", reconnect_timeout=60, read_timeout=10)
        cutter = _CutSome(proxy, 200_000, times=3)
        snapshot_once(cfg)
        assert cutter.done >= 1, "no SELECT was cut"
        execute(dev_db, database, "UPDATE t SET v = CONCAT(v, '-u')", "DELETE FROM t WHERE id % 7 = 0",
                f"INSERT INTO t SELECT seq, 'late', 'x' FROM {seq(ROWS + 1, ROWS + 5000)}")
        cutter = _CutSome(proxy, 400_000, times=2)
        stream_once(cfg)
        assert cutter.done >= 1, "no binlog read was cut"
    _assert_exact(spark, cfg, dev_db.running_port(), database)


def test_slow_connections_lose_nothing(dev_db: Any, database: str, spark: Any, tmp_path: Path) -> None:
    _table(dev_db, database)
    with Proxy(dev_db.running_port(), delay=0.002) as proxy:
        cfg = _config(tmp_path, proxy.port, database, "7110-7114")
        snapshot_once(cfg)
        execute(dev_db, database, "UPDATE t SET v = 'slow' WHERE id % 3 = 0")
        stream_once(cfg)
    _assert_exact(spark, cfg, dev_db.running_port(), database)


@pytest.mark.slow
@pytest.mark.parametrize("during", ["snapshot", "stream"])
def test_a_stall_past_the_timeouts_fails_with_one_line(dev_db: Any, database: str, tmp_path: Path,
                                                      during: str) -> None:
    """A half-open connection (the proxy forwards nothing and closes nothing) during a chunk's SELECT
    or during the binlog read: binlake gives up after source.read-timeout and source.reconnect-timeout
    with one line naming them, instead of hanging; after the network heals, a run finishes the job."""
    _table(dev_db, database)
    with Proxy(dev_db.running_port()) as proxy:
        cfg = _config(tmp_path, proxy.port, database, "7120-7124", read_timeout=3, reconnect_timeout=4,
                      connect_timeout=2)
        # the snapshot's connections stall 6 s into the run; the stream's binlog connection once it has
        # carried 1 MB of the update's 4 MB of row events
        stall = threading.Timer(6.0, proxy.stall)
        if during == "stream":
            assert run_cli("run", "-c", str(cfg), "--set", "stream.startup-mode=snapshot").returncode == 0
            execute(dev_db, database, "UPDATE t SET v = 'stalled'")
            proxy.stall_after(1_000_000)
        else:
            stall.start()
        began = time.monotonic()
        done = run_cli("run", "-c", str(cfg), "--until-caught-up", timeout=300)
        stall.cancel()
        took = time.monotonic() - began
        assert done.returncode == 1, done.stderr[-1500:]
        lines = [line for line in done.stderr.splitlines() if line.startswith("binlake:")]
        assert len(lines) == 1 and "Traceback" not in done.stderr and "\tat org.apache" not in done.stderr, \
            done.stderr[-3000:]
        assert "source.read-timeout" in lines[0], lines[0]
        assert took < 120, f"binlake took {took:.0f}s to give up on a stalled connection"
        proxy.heal()
        proxy.cut()
        assert run_cli("run", "-c", str(cfg), "--until-caught-up").returncode == 0


class _CutSome:
    """Cuts the next `times` connections that carry `n_bytes` from the server, then lets the rest be."""

    def __init__(self, proxy: Proxy, n_bytes: int, times: int) -> None:
        self.proxy, self.times, self.start = proxy, times, proxy.cuts
        proxy.cut_after(n_bytes)
        threading.Thread(target=self._watch, daemon=True).start()

    @property
    def done(self) -> int:
        return self.proxy.cuts - self.start

    def _watch(self) -> None:
        while self.done < self.times:
            time.sleep(0.01)
        self.proxy.heal()


def test_a_connection_stalled_in_its_tls_handshake_times_out(dev_db: Any) -> None:
    """PyMySQL starts TLS right after a write and keeps that write's timeout for the handshake: with
    none set, a network that stalled there hung the connection for good. Through a proxy that passes
    the server's greeting and then nothing, the connection fails within its timeouts."""
    from binlake.errors import RuntimeFailure
    from binlake.source.connection import connect as source_connect, encryption

    with source_connect({"host": "127.0.0.1", "port": dev_db.running_port(), "user": "root", "password": ""}) as conn:
        if encryption(conn) is None:
            pytest.skip("this server does not offer TLS")
    with Proxy(dev_db.running_port()) as proxy:
        proxy.stall_after(1)  # the greeting passes, the client's TLS request and all after it do not
        outcome: list[BaseException | None] = []

        def attempt() -> None:
            try:
                source_connect({"host": "127.0.0.1", "port": proxy.port, "user": "root", "password": "",
                                "connect_timeout": 2, "read_timeout": 2}).close()
                outcome.append(None)
            except BaseException as exc:  # noqa: BLE001 - the outcome is the assertion
                outcome.append(exc)

        trying = threading.Thread(target=attempt, daemon=True)
        trying.start()
        trying.join(60)
        assert not trying.is_alive(), "the connection hung in its TLS handshake"
        assert isinstance(outcome[0], RuntimeFailure) and "source.read-timeout" in str(outcome[0]), outcome
