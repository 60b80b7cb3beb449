"""The chunk oracle: every chunk the real chunk reader emits, checked against the binlog replayed
independently up to the chunk's high watermark.

The reader claims that a chunk read is exactly the chunk's state at its HW. The binlog says what
that state is: replay every row event of the table from the table's creation (P0) up to HW and
the replayed rows whose keys lie in `[start, end)` must equal the chunk's rows. The replay uses
mysql-replication directly -- not binlake's binlog reader or row decoder -- so a bug shared by the
chunk reader's fold and the replay cannot hide itself.

The source is made hostile on purpose: a private server with `sync_binlog=1` and
`innodb_flush_log_at_trx_commit=1` whose fsyncs are slowed by an LD_PRELOAD shim
(`fsync_delay.c`), so the window between a transaction reaching the binlog and becoming visible
is wide, and 16+ writer threads hammer a few hundred hot keys while the reads run.
"""

from __future__ import annotations

import itertools
import random
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pymysql
from pymysqlreplication import BinLogStreamReader
from pymysqlreplication.row_event import DeleteRowsEvent, UpdateRowsEvent, WriteRowsEvent

from binlake.offsets import BinlogPosition, file_index
from binlake.schema import TableSchema
from binlake.source.chunk_reader import ChunkResult
from binlake.source.connection import Connections
from binlake.splits import Split

SHIM_SOURCE = Path(__file__).with_name("fsync_delay.c")

TABLE = "t"
TABLE_DDL = f"CREATE TABLE {TABLE} (id INT PRIMARY KEY, n INT NOT NULL, s VARCHAR(32))"
KEYS = 1500  # ids live in 1..KEYS
HOT = tuple(range(1, KEYS + 1, 5))  # 300 hot keys, spread over every chunk
BOUNDS = (None, 375, 750, 1125, None)  # four chunks: (-inf, 375), [375, 750), [750, 1125), [1125, +inf)

Row = tuple[str, str | None]  # (n, s) as the chunk reader encodes them
Key = tuple[int, int]  # (binlog file index, position): a total order over binlog positions


def build_shim(directory: Path) -> Path:
    """The fsync-delaying shared object, compiled from `fsync_delay.c` with the system compiler."""
    out = directory / "fsync_delay.so"
    done = subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(out), str(SHIM_SOURCE), "-ldl"],
                          check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"cc could not build {SHIM_SOURCE.name}: {done.stderr.strip()[-400:]}")
    return out


def shim_loaded(pid: int, shim: Path) -> bool:
    """Whether the process mapped the shim: LD_PRELOAD is honoured by the loader, not by the server,
    and MySQL runs through its private root's own loader, so this is checked rather than assumed."""
    return str(shim) in Path(f"/proc/{pid}/maps").read_text()


def splits(database: str) -> list[Split]:
    table = f"{database}.{TABLE}"
    return [Split(table, 0, i, None if lo is None else (str(lo),), None if hi is None else (str(hi),))
            for i, (lo, hi) in enumerate(itertools.pairwise(BOUNDS))]


def _bound(b: tuple[str, ...] | None) -> int | None:
    return None if b is None else int(b[0])


@dataclass(frozen=True)
class Observed:
    """What one chunk read claimed: the chunk `[start, end)` holds these rows at `hw`. The rows are
    `packed` as "id\\tn\\ts" lines, because a soak keeps tens of thousands of reads."""

    start: int | None
    end: int | None
    lw: BinlogPosition
    hw: BinlogPosition
    folded: int
    packed: str

    @classmethod
    def of(cls, result: ChunkResult) -> Observed:
        lines = [f"{r['id']}\t{_field(r['n'])}\t{_field(r['s'])}" for r in result.rows]
        return cls(_bound(result.split.start), _bound(result.split.end), result.lw, result.hw,
                   result.folded_events, "\n".join(lines))

    def rows(self) -> dict[int, Row]:
        out: dict[int, Row] = {}
        for line in filter(None, self.packed.split("\n")):
            key, n, s = line.split("\t")
            out[int(key)] = (n, _unfield(s))
        return out

    def contains(self, key: int) -> bool:
        return (self.start is None or key >= self.start) and (self.end is None or key < self.end)


def _field(v: str | None) -> str:
    # NULL as \N; the writers' strings never contain a tab, a newline or a backslash
    return "\\N" if v is None else v


def _unfield(v: str) -> str | None:
    return None if v == "\\N" else v


class Writers:
    """Threads writing the table for the whole read phase, each on its own autocommit connection.

    Mostly single-statement transactions on the hot keys (the reads race these), plus inserts,
    deletes, primary-key moves (a delete and an insert in the binlog, possibly across chunks) and
    small two-statement transactions. Deadlocks and lock waits are expected and only counted.
    """

    def __init__(self, port: int, database: str, threads: int = 16) -> None:
        self.port, self.database = port, database
        self.stop_flag = threading.Event()
        self.threads = [threading.Thread(target=self._work, args=(i,), daemon=True) for i in range(threads)]
        self.lock = threading.Lock()
        self.commits = 0
        self.conflicts = 0
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
            t.join(timeout=60)

    def _work(self, n: int) -> None:
        rnd = random.Random(n)
        conn = pymysql.connect(host="127.0.0.1", port=self.port, user="root", password="",
                               database=self.database, autocommit=True)
        commits = conflicts = 0
        try:
            with conn.cursor() as cur:
                i = 0
                while not self.stop_flag.is_set():
                    i += 1
                    try:
                        self._one(cur, rnd, f"w{n}-{i}")
                        commits += 1
                    except pymysql.err.OperationalError as exc:
                        if exc.args[0] not in (1205, 1213):  # lock wait timeout, deadlock
                            raise
                        conflicts += 1
                        conn.rollback()
        except Exception as exc:  # a writer dying quietly would leave the reads racing nothing
            with self.lock:
                self.errors.append(f"writer {n}: {exc!r}")
        finally:
            conn.close()
            with self.lock:
                self.commits += commits
                self.conflicts += conflicts

    @staticmethod
    def _one(cur: Any, rnd: random.Random, tag: str) -> None:
        def hot() -> int:
            return rnd.choice(HOT)

        def any_key() -> int:
            return hot() if rnd.random() < 0.5 else rnd.randint(1, KEYS)

        p = rnd.random()
        if p < 0.55:
            cur.execute(f"UPDATE {TABLE} SET n = n + 1, s = %s WHERE id = %s", (tag, hot()))
        elif p < 0.75:
            cur.execute(f"INSERT IGNORE INTO {TABLE} (id, n, s) VALUES (%s, %s, %s)",
                        (any_key(), rnd.randint(0, 10**6), None if rnd.random() < 0.1 else tag))
        elif p < 0.88:
            cur.execute(f"DELETE FROM {TABLE} WHERE id = %s", (any_key(),))
        elif p < 0.93:
            cur.execute(f"UPDATE IGNORE {TABLE} SET id = %s, s = %s WHERE id = %s",
                        (any_key(), tag, any_key()))
        else:
            a, b = sorted((hot(), hot()))  # key order, so two of these never deadlock each other
            cur.execute("BEGIN")
            cur.execute(f"UPDATE {TABLE} SET n = n - 1, s = %s WHERE id = %s", (tag, a))
            cur.execute(f"INSERT INTO {TABLE} (id, n, s) VALUES (%s, 0, %s) "
                        "ON DUPLICATE KEY UPDATE n = n + 7", (b, tag))
            cur.execute("COMMIT")


ReadChunk = Callable[..., ChunkResult]  # chunk_reader.read_chunk


@dataclass
class Reads:
    """Chunk reads done in a loop by a few threads until `target` have finished."""

    observed: list[Observed] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0


def read_chunks(read: ReadChunk, params: dict[str, Any], schema: TableSchema, chunks: list[Split],
                target: int, server_ids: list[int], deadline: float) -> Reads:
    """Call `read` on the chunks round robin from one thread per server id (each its own binlog
    replica id) until `target` reads finished or `deadline` (monotonic) passed. Each thread keeps its
    connections across its reads, as a snapshot reader does (`Connections`). A read that raises is
    recorded and the loop goes on, as a failed chunk is simply read again."""
    out = Reads()
    lock = threading.Lock()
    began = time.monotonic()

    def loop(n: int, server_id: int) -> None:
        i = n
        held = Connections(params)
        while time.monotonic() < deadline:
            with lock:
                if len(out.observed) >= target or len(out.failures) > max(20, target // 10):
                    return
            split = chunks[i % len(chunks)]
            i += 1
            try:
                seen = Observed.of(read(params, schema, split, server_id, held=held))
            except Exception as exc:
                with lock:
                    out.failures.append(f"{split.id}: {exc!r}"[:400])
                continue
            with lock:
                out.observed.append(seen)
        held.close()

    threads = [threading.Thread(target=loop, args=(n, sid), daemon=True) for n, sid in enumerate(server_ids)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.seconds = time.monotonic() - began
    return out


@dataclass(frozen=True)
class Change:
    """One row of a row event: at `at` (start of its event, in `file`), `before` leaves and `after`
    arrives."""

    file: str
    at: Key
    before: int | None
    after: tuple[int, Row] | None

    @property
    def position(self) -> BinlogPosition:
        return BinlogPosition(self.file, self.at[1])


def replay(params: dict[str, Any], database: str, start: BinlogPosition, stop: BinlogPosition,
           server_id: int) -> Iterator[Change]:
    """Every row change of the table from `start` to `stop`, in binlog order, decoded by
    mysql-replication alone (an event's start is its end position minus its whole size)."""
    stream = BinLogStreamReader(
        connection_settings={"host": params["host"], "port": int(params["port"]), "user": params["user"],
                             "password": params["password"]},
        server_id=server_id, log_file=start.file, log_pos=start.pos, resume_stream=True, blocking=False,
        only_events=[WriteRowsEvent, UpdateRowsEvent, DeleteRowsEvent],
        only_schemas=[database], only_tables=[TABLE],
        # is_mariadb=True would start from a GTID state instead of log_file/log_pos
        is_mariadb=False, enable_logging=False,
    )
    try:
        for event in stream:
            begin = int(event.packet.log_pos) - int(event.packet.event_size)
            file = stream.log_file
            at = (file_index(file), begin)
            if BinlogPosition(file, begin) >= stop:
                return
            if event.schema != database or event.table != TABLE:
                continue
            for row in event.rows:
                if isinstance(event, WriteRowsEvent):
                    yield Change(file, at, None, _image(row["values"]))
                elif isinstance(event, UpdateRowsEvent):
                    yield Change(file, at, int(row["before_values"]["id"]), _image(row["after_values"]))
                else:
                    yield Change(file, at, int(row["values"]["id"]), None)
        # a non-blocking dump ends at the synced end of the binlog: it must not stop short of `stop`
        end = BinlogPosition(stream.log_file, int(stream.log_pos or 0))
    finally:
        stream.close()
    if end < stop:
        raise RuntimeError(f"the binlog dump ended at {end}, before {stop}")


def _image(values: dict[str, Any]) -> tuple[int, Row]:
    s = values["s"]
    if isinstance(s, bytes):  # binlake's reader settings make the library keep text as its (utf8mb4) bytes
        s = s.decode("utf-8")
    return int(values["id"]), (str(int(values["n"])), None if s is None else str(s))


@dataclass
class Difference:
    key: int
    chunk: Row | None  # None: the key is absent from the chunk
    truth: Row | None  # None: the key is absent at HW
    changed: BinlogPosition | None  # the last change of the key before HW (None: never changed)
    after: str | None = None  # the key's first change at or after HW, as the sweep meets it

    def later(self, change: Change) -> None:
        image = "absent" if change.after is None or change.after[0] != self.key else _show(change.after[1])
        self.after = f"next changed at {change.position} to {image}"

    def when(self, lw: BinlogPosition, hw: BinlogPosition) -> str:
        """Where the key's last change lies: before LW points at the SELECT or the settle, between LW
        and HW at the fold."""
        if self.changed is None:
            return "never changed"
        return f"last changed at {self.changed} ({'before LW' if self.changed < lw else 'between LW and HW'})"

    def __str__(self) -> str:
        return f"id={self.key}: chunk {_show(self.chunk)}, binlog at hw {_show(self.truth)}"


@dataclass
class Mismatch:
    observed: Observed
    differences: list[Difference]


@dataclass
class Report:
    server: str
    chunks: int
    mismatched: list[Mismatch]
    failures: list[str]
    folded: int  # chunks whose read folded binlog changes
    events: int  # row changes replayed
    read_seconds: float
    commits: int
    conflicts: int

    def __str__(self) -> str:
        lines = [(
            f"chunk oracle on {self.server}: {self.chunks} chunks read in {self.read_seconds:.0f}s "
            f"({self.chunks / max(self.read_seconds, 1e-9):.1f}/s), {len(self.mismatched)} mismatched, "
            f"{len(self.failures)} reads failed, {self.folded} folded; writers committed {self.commits} "
            f"({self.conflicts} deadlocks/lock waits); {self.events} row changes replayed"
        )]
        for m in self.mismatched[:10]:
            o = m.observed
            lines.append(f"  chunk [{o.start}, {o.end}) lw={o.lw} hw={o.hw} folded={o.folded}: "
                         f"{len(m.differences)} keys differ")
            for d in m.differences[:10]:
                lines.append(f"    {d}, {d.when(o.lw, o.hw)}, {d.after or 'not changed after hw'}")
        for f in self.failures[:3]:
            lines.append(f"  failed read: {f}")
        return "\n".join(lines)


def _show(row: Row | None) -> str:
    return "absent" if row is None else f"n={row[0]} s={row[1]!r}"


def check(observed: list[Observed], changes: Iterator[Change]) -> tuple[list[Mismatch], int]:
    """Sort the reads by HW and sweep the replay once: apply every change that starts before a
    read's HW, then compare the read with the replayed rows of its range. Returns the mismatches
    and the number of changes applied."""
    state: dict[int, Row] = {}
    changed: dict[int, Change] = {}  # each key's last change so far
    applied = 0
    pending: Change | None = next(changes, None)
    mismatched: list[Mismatch] = []
    waiting: dict[int, list[Difference]] = {}  # differing keys whose next change is not met yet

    def meet(change: Change) -> None:
        for key in {change.before, None if change.after is None else change.after[0]} - {None}:
            for d in waiting.pop(key, []):  # type: ignore[arg-type]
                d.later(change)

    for o in sorted(observed, key=lambda o: o.hw.key):
        while pending is not None and pending.position < o.hw:
            meet(pending)
            if pending.before is not None:
                state.pop(pending.before, None)
                changed[pending.before] = pending
            if pending.after is not None:
                state[pending.after[0]] = pending.after[1]
                changed[pending.after[0]] = pending
            applied += 1
            pending = next(changes, None)
        got = o.rows()
        truth = {k: v for k, v in state.items() if o.contains(k)}
        if got != truth:
            keys = sorted(k for k in got.keys() | truth.keys() if got.get(k) != truth.get(k))
            last = {k: changed[k].position for k in keys if k in changed}
            differences = [Difference(k, got.get(k), truth.get(k), last.get(k)) for k in keys]
            for d in differences:
                waiting.setdefault(d.key, []).append(d)
            mismatched.append(Mismatch(o, differences))
    for change in itertools.chain([] if pending is None else [pending], changes):
        meet(change)  # and drain, so the stream's own end check runs
        applied += 1
    return mismatched, applied
