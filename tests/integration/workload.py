"""A live source for the end-to-end tests: a table, writer threads, and runs of the real CLI."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pymysql

from .helpers import seq

ROOT = Path(__file__).resolve().parents[2]
BINLAKE = [sys.executable, "-m", "binlake"]
# A CLI run in a test lives for a minute at most: the client compiler alone starts it with much less CPU
CLI_ENV = {"JDK_JAVA_OPTIONS": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"}

TABLE_DDL = (
    "CREATE TABLE t (id INT PRIMARY KEY, k INT NOT NULL, v VARCHAR(64), amount DECIMAL(12,2), "
    "updated DATETIME(6), note TEXT)"
)


def create_table(port: int, database: str, rows: int, table: str = "t") -> None:
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database,
                         autocommit=True) as conn, conn.cursor() as cur:
        cur.execute(TABLE_DDL.replace("TABLE t ", f"TABLE {table} "))
        cur.execute(f"INSERT INTO {table} SELECT seq, seq % 97, CONCAT('row-', seq), seq / 7, "
                    f"'2024-01-01 00:00:00' + INTERVAL seq SECOND, IF(seq % 5 = 0, NULL, 'n') FROM {seq(1, rows)}")


def write_config(path: Path, port: int, database: str, lake: Path, chunk_size: int, group_size: int,
                 parallelism: int = 2) -> Path:
    path.write_text(
        f"source:\n  hostname: 127.0.0.1\n  port: {port}\n  username: root\n  password: ''\n"
        f"  tables: ['{database}\\.t']\n  server-id: 5600-5604\n"
        f"target:\n  path: {lake}\n"
        f"snapshot:\n  chunk-size: {chunk_size}\n  group-size: {group_size}\n  parallelism: {parallelism}\n"
    )
    return path


def run_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    full_env = dict(os.environ, **CLI_ENV, **(env or {}))
    full_env.pop("BINLAKE_RUN_PGID", None)
    return subprocess.run([*BINLAKE, *args], cwd=ROOT, env=full_env, capture_output=True, text=True,
                          timeout=timeout, start_new_session=True)


class RandomStatements:
    """`threads_count` threads (two unless a subclass says) changing keys 1..`keys` at random, each statement
    its own transaction, one every 20 ms a thread: `statement` picks and runs one (`op` uniform in
    [0, 1), `token` unique to it). `done` counts the statements run."""

    keys = 0
    threads_count = 2

    def __init__(self, port: int, database: str, seed: int) -> None:
        self.port, self.database, self.rnd = port, database, random.Random(seed)
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(self.threads_count)]
        self.done = 0

    def statement(self, cur: Any, token: str, key: int, op: float) -> None:
        raise NotImplementedError

    def start(self) -> None:
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        self.stop_flag.set()
        for t in self.threads:
            t.join(timeout=60)

    def _work(self, n: int) -> None:
        with pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", database=self.database,
                             autocommit=True) as conn, conn.cursor() as cur:
            count = 0
            while not self.stop_flag.is_set():
                count += 1
                self.statement(cur, f"w{n}-{count}", self.rnd.randint(1, self.keys), self.rnd.random())
                self.done += 1
                time.sleep(0.02)


def killed_once_streaming(cfg_path: Path, progress: Any, log: Path, seed: int) -> None:
    """`binlake run`, killed (SIGKILL to its process group) a moment after its stream lands a batch:
    `progress` (the target's stream progress file) records a batch, then 0.5 to 4 s, drawn from `seed`
    (the file may come first with a heartbeat alone, when the stream's first look finds nothing new)."""
    with log.open("wb") as out:
        proc = subprocess.Popen([*BINLAKE, "run", "-c", str(cfg_path)], cwd=ROOT, start_new_session=True,
                                env={**os.environ, **CLI_ENV}, stdout=out, stderr=out)
    try:
        deadline = time.monotonic() + 600
        while not _landed(progress):
            assert proc.poll() is None, f"binlake run ended (rc {proc.returncode}): {log.read_text()[-2000:]}"
            assert time.monotonic() < deadline, "no micro-batch landed in 600 s"
            time.sleep(0.5)
        time.sleep(random.Random(seed).uniform(0.5, 4.0))
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def _landed(progress: Any) -> bool:
    """Whether the stream progress file `progress` records a landed micro-batch."""
    try:
        return progress.exists() and "batch" in json.loads(progress.read_text())
    except ValueError:  # read while being written
        return False


def killed_under_writers(cfg_path: Path, progress: Any, log: Path, writers: RandomStatements, seed: int,
                         while_down: Callable[[], None] = lambda: None) -> None:
    """`binlake run` under `writers`, killed once its stream has landed a batch (`killed_once_streaming`);
    then, binlake down, `while_down` (schema changes, say) and two seconds more of writes, and the
    writers stop. The caller resumes."""
    writers.start()
    try:
        killed_once_streaming(cfg_path, progress, log, seed)
        while_down()
        time.sleep(2)  # the writers go on while binlake is down
    finally:
        writers.stop()


class Writers:
    """Threads doing inserts, updates, multi-row updates, deletes and primary-key changes in `table`."""

    def __init__(self, port: int, database: str, rows: int, threads: int = 2, pause: float = 0.0,
                 table: str = "t") -> None:
        self.port, self.database, self.rows, self.pause, self.table = port, database, rows, pause, table
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(threads)]
        self.ops = 0
        self.errors: list[str] = []

    def __enter__(self) -> Writers:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self.stop_flag.set()
        for t in self.threads:
            t.join(timeout=30)

    def _work(self, n: int) -> None:
        rnd = random.Random(n)
        fresh = (n + 1) * 10_000_000
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", database=self.database,
                               autocommit=True)
        cur = conn.cursor()
        while not self.stop_flag.is_set():
            op = rnd.random()
            target = rnd.randint(1, self.rows)
            try:
                if op < 0.25:
                    fresh += 1
                    cur.execute(f"INSERT INTO {self.table} VALUES (%s, %s, %s, %s, NOW(6), 'ins')",
                                (fresh, fresh % 97, f"new-{fresh}", rnd.randint(0, 10**6) / 100))
                elif op < 0.55:
                    cur.execute(f"UPDATE {self.table} SET v = %s, amount = amount + 1, updated = NOW(6) "
                                "WHERE id = %s",
                                (f"upd-{rnd.random():.6f}", target))
                elif op < 0.58:
                    cur.execute(f"UPDATE {self.table} SET k = k + 1, note = 'multi' "
                                "WHERE id BETWEEN %s AND %s",
                                (target, target + rnd.randint(20, 200)))
                elif op < 0.85:
                    cur.execute(f"DELETE FROM {self.table} WHERE id = %s", (target,))
                else:
                    fresh += 1
                    cur.execute(f"UPDATE {self.table} SET id = %s WHERE id = %s", (fresh, target))
                self.ops += 1
            except pymysql.err.MySQLError as exc:
                self.errors.append(str(exc))
            if self.pause:
                time.sleep(self.pause)
        conn.close()


class ReconnectingWriters(threading.Thread):
    """Inserts, updates, deletes and key changes on their own connection, reconnecting after the
    server restarts."""

    def __init__(self, port: int, database: str, rows: int, seed: int) -> None:
        super().__init__(daemon=True)
        self.port, self.database, self.rows, self.rnd = port, database, rows, random.Random(seed)
        self.stop_flag = threading.Event()
        self.fresh = 10_000_000
        self.done = 0  # statements that returned (a commit cut by a crash may have landed too)

    def run(self) -> None:
        while not self.stop_flag.is_set():
            try:
                with pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="",
                                     database=self.database, autocommit=True) as conn, conn.cursor() as cur:
                    while not self.stop_flag.is_set():
                        self._one(cur)
                        self.done += 1
                        time.sleep(0.002)
            except pymysql.err.MySQLError:
                time.sleep(0.2)

    def _one(self, cur: Any) -> None:
        op, target = self.rnd.random(), self.rnd.randint(1, self.rows)
        if op < 0.3:
            self.fresh += 1
            cur.execute("INSERT INTO t (id, k, v, amount, updated, note) VALUES (%s, 1, 'ins', 1.5, NOW(6), 'i')",
                        (self.fresh,))
        elif op < 0.7:
            cur.execute("UPDATE t SET v = %s, amount = amount + 1 WHERE id = %s", (f"u{self.rnd.random():.5f}", target))
        elif op < 0.9:
            cur.execute("DELETE FROM t WHERE id = %s", (target,))
        else:
            self.fresh += 1
            cur.execute("UPDATE t SET id = %s WHERE id = %s", (self.fresh, target))


class TailInserter(threading.Thread):
    """Inserts rows past the maximum key, a few at a time, until stopped."""

    def __init__(self, port: int, database: str, first: int, per_step: int = 2, pause: float = 0.05) -> None:
        super().__init__(daemon=True)
        self.port, self.database, self.next, self.per_step, self.pause = port, database, first, per_step, pause
        self.stop_flag = threading.Event()
        self.inserted = 0

    def run(self) -> None:
        with pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", database=self.database,
                             autocommit=True) as conn, conn.cursor() as cur:
            while not self.stop_flag.is_set():
                cur.execute(f"INSERT INTO t SELECT seq, seq % 97, CONCAT('tail-', seq), seq / 7, NOW(6), 'tail' "
                            f"FROM {seq(self.next, self.next + self.per_step - 1)}")
                self.next += self.per_step
                self.inserted += self.per_step
                time.sleep(self.pause)

    def stop(self) -> None:
        self.stop_flag.set()
        self.join(timeout=30)


def source_rows(port: int, database: str, table: str = "t") -> list[tuple[Any, ...]]:
    with pymysql.connect(host="127.0.0.1", port=port, user="root", password="", database=database) as conn, \
            conn.cursor() as cur:
        cur.execute(f"SELECT id, k, v, amount, updated, note FROM {table} ORDER BY id")
        return [tuple(r) for r in cur.fetchall()]


def silver_rows(spark: Any, location: str) -> list[tuple[Any, ...]]:
    df = spark.read.format("delta").load(location).select("id", "k", "v", "amount", "updated", "note")
    return sorted(tuple(r) for r in df.collect())


def bronze_duplicates(spark: Any, location: str) -> int:
    df = spark.read.format("delta").load(location).where("_op IN ('r','c','u','d')")
    return df.groupBy("id", "_seq", "_op").count().where("count > 1").count()


def assert_quiet(err: str) -> None:
    """binlake's output holds its own lines only: no Python traceback, no Java frame or exception, no
    line Java or Spark print at start-up."""
    from binlake.spark.jvm import START_UP_LINES

    assert "Traceback" not in err and "\tat " not in err and "Exception" not in err, err[-3000:]
    assert not any(line.encode().startswith(START_UP_LINES) for line in err.splitlines()), err[-3000:]
