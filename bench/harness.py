"""What every benchmark section shares: the private servers, the TPC-DS `customer` table, binlake
configurations, and timed runs of the real `binlake` CLI with the memory and CPU time of its whole
process tree.

The benchmark's servers live in `.binlake/bench-mariadb` and `.binlake/bench-mysql` (ports of their
own), so the test suite's and the demo's servers are never disturbed; lakes, configurations and CLI
logs go under `.binlake/bench`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import pymysql

ROOT = Path(__file__).resolve().parent.parent
DATADIR = ROOT / ".binlake" / "bench-mariadb"
WORK = ROOT / ".binlake" / "bench"
# BENCH_RESULTS: another folder, so a run at another size keeps the default run's report
RESULTS = Path(os.environ.get("BENCH_RESULTS") or ROOT / "bench" / "results").resolve()
BINLAKE = [str(Path(sys.executable).with_name("binlake"))]

CUSTOMER_DDL = """
CREATE TABLE {table} (
  c_customer_sk INT NOT NULL PRIMARY KEY,
  c_customer_id CHAR(16) NOT NULL,
  c_current_cdemo_sk INT,
  c_current_hdemo_sk INT,
  c_current_addr_sk INT,
  c_first_shipto_date_sk INT,
  c_first_sales_date_sk INT,
  c_salutation CHAR(10),
  c_first_name CHAR(20),
  c_last_name CHAR(30),
  c_preferred_cust_flag CHAR(1),
  c_birth_day INT,
  c_birth_month INT,
  c_birth_year INT,
  c_birth_country VARCHAR(20),
  c_login CHAR(13),
  c_email_address CHAR(50),
  c_last_review_date_sk INT
)"""

FIRST = "'James','Mary','Robert','Patricia','John','Jennifer','Michael','Linda','William','Elizabeth'"
LAST = "'Smith','Johnson','Williams','Brown','Jones','Garcia','Miller','Davis','Rodriguez','Martinez'"


def customer_select(first_key: str, seq_table: str) -> str:
    """A SELECT producing TPC-DS-shaped customer rows from a table of numbers (`Source.numbers`); `first_key` is an SQL
    expression of `seq` giving c_customer_sk. Values vary per row and about 3% of nullable ones are NULL,
    roughly like dsdgen's output."""
    k = first_key
    return f"""
SELECT {k},
  CONCAT('AAAAAAAA', LPAD(HEX({k}), 8, '0')),
  IF({k} % 31 = 0, NULL, 1 + {k} * 7 % 1920800),
  IF({k} % 37 = 0, NULL, 1 + {k} % 7200),
  IF({k} % 41 = 0, NULL, 1 + {k} * 13 % 50000),
  2449028 + {k} % 3650,
  2449058 + {k} % 3650,
  ELT(1 + {k} % 6, 'Mr.', 'Mrs.', 'Ms.', 'Dr.', 'Miss', 'Sir'),
  ELT(1 + {k} % 10, {FIRST}),
  ELT(1 + ({k} DIV 10) % 10, {LAST}),
  IF({k} % 43 = 0, NULL, IF({k} % 2, 'Y', 'N')),
  IF({k} % 29 = 0, NULL, 1 + {k} % 28),
  1 + {k} % 12,
  1924 + {k} % 69,
  ELT(1 + {k} % 7, 'UNITED STATES', 'GERMANY', 'JAPAN', 'BRAZIL', 'INDIA', 'NEW ZEALAND', 'SURINAME'),
  NULL,
  CONCAT(ELT(1 + {k} % 10, {FIRST}), '.', ELT(1 + ({k} DIV 10) % 10, {LAST}), '@',
         LPAD({k} % 100000, 5, '0'), '.example.com'),
  IF({k} % 47 = 0, NULL, 2452283 + {k} % 366)
FROM {seq_table}"""


@dataclass
class Source:
    """A running benchmark server: MariaDB or MySQL."""

    port: int
    db: Any = None
    server: str = "mariadb"

    @property
    def key(self) -> str:
        """The suffix of this server's sections in the results: none for MariaDB, `-mysql` for MySQL."""
        return "" if self.server == "mariadb" else f"-{self.server}"

    def connect(self, database: str | None = None) -> pymysql.connections.Connection:
        return pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="", database=database,
                               autocommit=True, charset="utf8mb4")

    def numbers(self, n: int) -> str:
        """A table of the whole numbers 1 to `n` in a column `seq`, for a FROM clause: MariaDB's Sequence
        engine, or a recursive CTE on MySQL (`execute` lifts its recursion limit)."""
        if self.server == "mariadb":
            return f"seq_1_to_{n}"
        return f"(WITH RECURSIVE s (seq) AS (SELECT 1 UNION ALL SELECT seq + 1 FROM s WHERE seq < {n}) SELECT seq FROM s) AS n"

    def tool(self, name: str) -> list[str]:
        """How to run a client program of this server (`mysql`, `mysqlbinlog`): MySQL's from its private
        root through the root's own loader, as binlake's dev-db runs mysqld; MariaDB's own names."""
        if self.server == "mariadb":
            return [{"mysql": "mariadb", "mysqlbinlog": "mariadb-binlog"}[name]]
        from binlake.commands.devdb import mysql_root, root_program

        return root_program(mysql_root() / "usr" / "bin" / name)

    def cpu_s(self) -> float:
        """CPU seconds the server process has used so far."""
        t = psutil.Process(self.db.pid()).cpu_times()
        return t.user + t.system

    def execute(self, *statements: str, database: str | None = None, log_bin: bool = True) -> list[int]:
        """Run statements on one connection; returns the affected row count of each."""
        counts = []
        with self.connect(database) as conn, conn.cursor() as cur:
            if self.server == "mysql":
                cur.execute("SET SESSION cte_max_recursion_depth = 100000000")
            if not log_bin:
                cur.execute("SET SESSION sql_log_bin = 0")
            for s in statements:
                counts.append(int(cur.execute(s)))
        return counts

    def scalar(self, sql: str, database: str | None = None) -> Any:
        with self.connect(database) as conn, conn.cursor() as cur:
            cur.execute(sql)
            row = cur.fetchone()
            return None if row is None else row[0]

    def position(self) -> tuple[str, int]:
        with self.connect() as conn, conn.cursor() as cur:
            cur.execute("SHOW MASTER STATUS" if self.server == "mariadb" else "SHOW BINARY LOG STATUS")
            f, p = cur.fetchone()[:2]
            return str(f), int(p)

    def version(self) -> str:
        return str(self.scalar("SELECT VERSION()"))


def start_source(server: str = "mariadb", name: str = "bench") -> Source:
    """A benchmark server of that kind, in .binlake/<name>-<server>."""
    from binlake.commands.devdb import DevDb

    db = DevDb(datadir=DATADIR.with_name(f"{name}-{server}"), server_id=1, server=server)  # type: ignore[arg-type]
    port = db.start()
    return Source(port, db, server)


def stop_source(source: Source) -> None:
    if source.db is not None:
        source.db.stop()


def create_customer(source: Source, database: str, rows: int, table: str = "customer") -> float:
    """(Re)create `database.table` with `rows` customer rows, outside the binlog (the snapshot reads the
    table, not its history). Returns the seconds it took."""
    began = time.monotonic()
    source.execute(f"DROP DATABASE IF EXISTS `{database}`", f"CREATE DATABASE `{database}`")
    source.execute(CUSTOMER_DDL.format(table=table), database=database)
    step = 500_000  # one statement per half million rows keeps each transaction's undo log modest
    for lo in range(0, rows, step):
        n = min(step, rows - lo)
        source.execute(f"INSERT INTO {table} {customer_select(f'(seq + {lo})', source.numbers(n))}",
                       database=database, log_bin=False)
    source.execute(f"ANALYZE TABLE {table}", database=database, log_bin=False)
    return time.monotonic() - began


def write_config(name: str, source: Source, tables: list[str], *, file_uri: bool = False,
                 **snapshot: Any) -> tuple[Path, Path]:
    """A fresh lake and a configuration for it; returns (config path, lake path). With `file_uri` the
    lake is addressed as `file:/...`, as a cluster's lake is (README, "Running on a Spark cluster")."""
    base = WORK / name
    if base.exists():
        shutil.rmtree(base)
    lake = base / "lake"
    lake.mkdir(parents=True)
    lines = [
        "source:", "  hostname: 127.0.0.1", f"  port: {source.port}", "  username: root", "  password: ''",
        "  tables: [" + ", ".join(f"'{t}'" for t in tables) + "]", "  server-id: 6100-6108",
        "target:", f"  path: {'file:' if file_uri else ''}{lake}",
    ]
    if snapshot:
        lines.append("snapshot:")
        lines += [f"  {k.replace('_', '-')}: {v}" for k, v in snapshot.items()]
    cfg = base / "binlake.yml"
    cfg.write_text("\n".join(lines) + "\n")
    return cfg, lake


class TreeSampler:
    """Samples the resident memory of a process and all its descendants (the CLI's Python, the JVM,
    Spark's Python workers) every `interval` seconds and keeps the peak of their sum."""

    def __init__(self, pid: int, interval: float = 0.2) -> None:
        self.pid, self.interval = pid, interval
        self.peak_bytes = 0
        self.peak_pss_bytes = 0
        self.peak_parts: dict[str, float] = {}
        self.cpu: dict[int, float] = {}  # pid -> CPU seconds (user + system) at its last sample
        self.kinds: dict[int, str] = {}  # pid -> what it is (`_kind`)
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> TreeSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        try:
            root = psutil.Process(self.pid)
        except psutil.NoSuchProcess:
            return
        while not self._stop.is_set():
            total, pss, parts = 0, 0, {}
            try:
                procs = [root, *root.children(recursive=True)]
            except psutil.NoSuchProcess:
                break
            for p in procs:
                try:
                    info = p.memory_full_info()
                    kind = _kind(p)
                    t = p.cpu_times()
                    self.cpu[p.pid] = t.user + t.system
                    self.kinds[p.pid] = kind
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                total += info.rss
                pss += getattr(info, "pss", info.rss)
                parts[kind] = parts.get(kind, 0) + info.rss
            self.samples += 1
            self.peak_pss_bytes = max(self.peak_pss_bytes, pss)
            if total > self.peak_bytes:
                self.peak_bytes = total
                self.peak_parts = {k: round(v / 2**20, 1) for k, v in parts.items()}
            self._stop.wait(self.interval)

    @property
    def peak_mb(self) -> float:
        return round(self.peak_bytes / 2**20, 1)

    @property
    def cpu_s(self) -> float:
        """CPU seconds of the whole tree, as last sampled per process (a process's last interval before
        it ended is missed: Spark's Python workers live as long as the JVM)."""
        return round(sum(self.cpu.values()), 1)

    def cpu_by_kind(self) -> dict[str, float]:
        """`cpu_s` split by what each process is: the CLI's Python, the JVM, Spark's Python workers."""
        split: dict[str, float] = {}
        for pid, seconds in self.cpu.items():
            split[self.kinds[pid]] = split.get(self.kinds[pid], 0.0) + seconds
        return split

    @property
    def peak_pss_mb(self) -> float:
        """Proportional set size: pages shared by forked Python workers counted once, not per process."""
        return round(self.peak_pss_bytes / 2**20, 1)


def _kind(p: psutil.Process) -> str:
    name = p.name()
    if name == "java":
        return "jvm"
    cmd = " ".join(p.cmdline()[:4])
    if "pyspark" in cmd:
        return "python_workers"
    return "cli_python" if "python" in name or "binlake" in cmd else name


@dataclass
class CliRun:
    args: list[str]
    returncode: int
    wall_s: float
    peak_rss_mb: float
    peak_rss_parts: dict[str, float]
    peak_pss_mb: float
    log: Path
    output: str = field(repr=False, default="")
    cpu_s: float = 0.0

    def check(self) -> CliRun:
        if self.returncode != 0:
            tail = "\n".join(self.output.strip().splitlines()[-15:])
            raise RuntimeError(f"binlake {' '.join(self.args)} exited {self.returncode}; log {self.log}:\n{tail}")
        return self


def cli_env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("BINLAKE_RUN_PGID", None)
    return env


def run_cli(args: list[str], log: Path, timeout: float = 3600) -> CliRun:
    """Run `binlake -v ARGS` to completion, timing it and sampling its process tree's memory."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as out:
        began = time.monotonic()
        proc = subprocess.Popen([*BINLAKE, "-v", *args], cwd=ROOT, env=cli_env(), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
        with TreeSampler(proc.pid) as sampler:
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                stop_group(proc)
                rc = -9
        wall = time.monotonic() - began
    return CliRun(args, rc, wall, sampler.peak_mb, sampler.peak_parts, sampler.peak_pss_mb, log,
                  log.read_text(errors="replace"), sampler.cpu_s)


def stop_group(proc: subprocess.Popen[Any], grace: float = 60.0, leader_first: bool = False) -> dict[str, Any]:
    """Stop a CLI started with start_new_session=True: optionally SIGTERM its leader alone first (binlake
    finishes the running micro-batch and stops the query), then SIGTERM the whole process group, then
    SIGKILL it. Returns how it ended."""
    steps: list[tuple[str, Any]] = []
    if leader_first:
        steps.append(("SIGTERM to the CLI process", lambda: os.kill(proc.pid, signal.SIGTERM)))
    steps.append(("SIGTERM to the process group", lambda: os.killpg(proc.pid, signal.SIGTERM)))
    steps.append(("SIGKILL to the process group", lambda: os.killpg(proc.pid, signal.SIGKILL)))
    began = time.monotonic()
    for how, send in steps:
        if proc.poll() is not None:
            break
        try:
            send()
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
            return {"stopped_by": how, "returncode": proc.returncode, "stop_s": round(time.monotonic() - began, 1)}
        except subprocess.TimeoutExpired:
            continue
    proc.wait()
    return {"stopped_by": "already exited", "returncode": proc.returncode, "stop_s": round(time.monotonic() - began, 1)}


SNAPSHOT_LINE = re.compile(r"snapshot: (\d+) chunks, ([\d,]+) rows in ([\d.]+)s")


class LogFollower:
    """A Delta table's log read as it grows (the latency and steady sections' watchers): each whole new
    commit once, with its file's modification time and one column of every file it adds, read by the
    column's Parquet name (the table's metadata maps it by name)."""

    def __init__(self, table: Path, column: str) -> None:
        self.table, self.column = table, column
        self.next_version = 0
        self.physical: str | None = None

    def commits(self) -> Iterator[tuple[float, float, list[Any]]]:
        """The commits new since the last call, in order: (their file's modification time, when this
        call found it whole, before reading its files; the column of each file it adds, as Arrow
        arrays). A commit being written is read on the next call."""
        import pyarrow.parquet as pq

        log = self.table / "_delta_log"
        while (path := log / f"{self.next_version:020d}.json").exists():
            try:
                actions = [json.loads(line) for line in path.read_text().splitlines()]
            except ValueError:
                return
            found, columns = time.time(), []
            for action in actions:
                if "metaData" in action:
                    fields = json.loads(action["metaData"]["schemaString"])["fields"]
                    mapped = next(f for f in fields if f["name"] == self.column).get("metadata", {})
                    self.physical = mapped.get("delta.columnMapping.physicalName", self.column)
                add = action.get("add")
                if add and self.physical is not None:
                    columns.append(pq.read_table(self.table / add["path"], columns=[self.physical]).column(0))
            yield path.stat().st_mtime, found, columns
            self.next_version += 1


def parse_snapshot_line(text: str) -> dict[str, float] | None:
    """The pipeline's own `snapshot: N chunks, R rows in Xs` line, if the log has one."""
    found = SNAPSHOT_LINE.findall(text)
    if not found:
        return None
    chunks, rows, secs = found[-1]
    return {"chunks": int(chunks), "rows": int(rows.replace(",", "")), "seconds": float(secs)}


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").replace("_", "")
    return int(raw) if raw else default


def rate(rows: float, seconds: float) -> float:
    return round(rows / seconds, 1) if seconds > 0 else 0.0
