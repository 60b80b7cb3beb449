"""A run's context: the configuration, the lake's locations, the Spark session (started on first use),
the captured tables' schemas as the stream follows them, and the server binlake reads (its lineage).

Every step (`binlake.capture.plan`, `snapshot`, `stream`, `run`) takes one, so a run that chains them
loads the schemas, starts Spark and identifies the server once.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, TypeVar

from binlake.columns import ColumnChoice
from binlake.config import Config
from binlake.errors import ConfigError
from binlake.lake import arrow_commit
from binlake.lake.evolution import History, Version
from binlake.lake.silver_shape import Shape
from binlake.lake.target import Target
from binlake.offsets import BinlogPosition
from binlake.schema import TableSchema
from binlake.source.catalog import captured_tables, load_captured
from binlake.source.connection import Connections, connect
from binlake.source.dialect import Dialect, binlog_head
from binlake.source.identity import Lineage, identify
from binlake.source.reconnect import retrying

# the one place capture/ reaches into spark/: the first step that needs Spark starts it
from binlake.spark.session import get_spark

log = logging.getLogger(__name__)

T = TypeVar("T")


def refusals(schemas: list[TableSchema], shape: Shape) -> list[str]:
    """Why a run refuses to capture these tables in this silver shape, one line each, before it reads
    any of them: a column it cannot map (`TableSchema.refusal`), soft deletes or history on a table
    without a unique key (`Shape.refusal`), a row filter it cannot keep (`Shape.filter_refusal`).
    `binlake check` reports the same lines."""
    return [r for r in [*map(TableSchema.refusal, schemas), *map(shape.refusal, schemas),
                        *map(shape.filter_refusal, schemas)] if r]


@dataclass
class Context:
    cfg: Config
    target: Target = field(init=False)
    spark: Any = field(init=False, default=None)
    _schemas: dict[str, TableSchema] | None = field(init=False, default=None)
    dialect: Dialect = field(init=False, default=Dialect("mariadb", (0, 0, 0)))
    new_seen: set[str] = field(init=False, default_factory=set)  # new tables met that were gone again
    _lineage: Lineage | None = field(init=False, default=None)
    _readers: _Readers | None = field(init=False, default=None)
    # bronze tables this process created with their snapshot's rows, which hold no binlog change yet
    _changeless: set[str] = field(init=False, default_factory=set)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)  # for tables read at once
    _idle: list[Connections] = field(init=False, default_factory=list)  # see `held`

    def __post_init__(self) -> None:
        self.target = Target.of(self.cfg, self.session)

    def session(self) -> Any:
        if self.spark is None:
            # deferred: the data sources load pyspark and pyarrow, which status and check never need
            from binlake.spark.sources import register

            self.spark = get_spark(self.cfg.parallelism, log_file=self.target.spark_log)
            register(self.spark)
        return self.spark

    def snapshot_rows(self, job: dict[str, Any]) -> Any:
        """The `binlake_snapshot` source's rows of `job` (`flat_changes`), read by a Spark job."""
        return self.session().read.format("binlake_snapshot").options(**self._snapshot_options(job)).load()

    def snapshot_here(self, job: dict[str, Any]) -> Any:
        """The rows `snapshot_rows` reads, read in this process instead (a pyarrow Table); None once
        they hold more than `arrow_commit.ARROW_BYTES` (nothing is written: the read may be repeated)."""
        from binlake.spark.sources import read_here  # deferred as in `session`

        with self.held() as held:
            return read_here(self._snapshot_options(job), held, arrow_commit.ARROW_BYTES)

    def _snapshot_options(self, job: dict[str, Any]) -> dict[str, str]:
        return {"job": json.dumps(job), "password": self.params["password"]}

    @contextmanager
    def held(self) -> Iterator[Connections]:
        """Connections to the source kept across the small tables this process reads one after
        another (`Connections`: a handshake each saved), one set per read running at once."""
        params = self.params
        with self._lock:
            held = self._idle.pop() if self._idle else None
        if held is None or held.params != params:  # none idle, or opened before a failover
            if held is not None:
                held.close()
            held = Connections(params)
        try:
            yield held
        finally:
            with self._lock:
                self._idle.append(held)

    def release(self) -> None:
        """Close the connections `held` keeps: the reads they served are over."""
        with self._lock:
            idle, self._idle = self._idle, []
        for held in idle:
            held.close()

    def retrying(self, doing: str, call: Callable[[], T]) -> T:
        """`call()` on connections of its own, retried while the source is away (a restart, a network
        cut) for up to `source.reconnect-timeout` seconds: what a run asks the server between its reads."""
        return retrying(self.params, float(self.cfg.get("source.reconnect-timeout")), doing, call)

    @property
    def params(self) -> dict[str, Any]:
        """The connection parameters, with the epoch of the server's positions (binlake.offsets)."""
        return {**self.cfg.connection(), "epoch": self.lineage().epoch}

    def public_params(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if k != "password"}

    def schemas(self) -> dict[str, TableSchema]:
        if self._schemas is None:
            conn = connect(self.params)
            try:
                self.dialect = Dialect.of(conn)
                tables = captured_tables(conn, self.cfg.tables)
                if not tables:
                    raise ConfigError(
                        f"source.tables {self.cfg.tables} matches no table on the server; binlake needs at "
                        "least one: fix the regexes (they match 'db.table' in full)"
                    )
                # a list is checked against the table at its first capture: a column it names may be
                # dropped since, and the list stays the one the table was captured with
                loaded = [load_captured(conn, self.cfg, d, t, strict=not self.history(f"{d}.{t}").exists())
                          for d, t in tables]
                refused = refusals(loaded, self.shape)
                if refused:
                    raise ConfigError(refused[0])
                self._schemas = {s.name: self._captured(s) for s in loaded}
            finally:
                conn.close()
        return self._schemas

    def _captured(self, schema: TableSchema) -> TableSchema:
        """The table's schema as the stream last followed it, kept from its first capture on: the
        server's may have changed since (the stream meets those changes in binlog order)."""
        history = self.history(schema.name)
        if history.exists():
            latest = history.latest()
            if latest.choice != schema.choice:
                def shown(choice: ColumnChoice | None) -> str:
                    return json.dumps(choice.to_dict()) if choice else "every column"
                raise ConfigError(
                    f"source.columns for {schema.name} is {shown(schema.choice)}, but the table was captured with "
                    f"{shown(latest.choice)}; binlake cannot change a captured table's columns in place: restore "
                    f"the setting, or snapshot the table again (binlake resnapshot {schema.name})"
                )
            if latest.row_filter != schema.row_filter:
                raise ConfigError(
                    f"source.row-filter for {schema.name} is {schema.row_filter or '(none)'!r}, but the table was "
                    f"captured with {latest.row_filter or '(none)'!r}; silver holds the rows of the filter it was "
                    f"built with: restore the setting, or snapshot the table again (binlake resnapshot {schema.name})"
                )
            return latest
        history.start(schema)
        return schema

    @property
    def shape(self) -> Shape:
        """What silver keeps beyond the current rows (`silver.deletes`, `silver.history`)."""
        return Shape.of(self.cfg)

    def history(self, name: str) -> History:
        return History(self.target.captured_schema(name))

    def versions(self) -> dict[str, list[Version]]:
        """Every captured table's schema versions (see `binlake.lake.evolution`)."""
        return {name: self.history(name).versions() for name in self.schemas()}

    def forget_schemas(self) -> None:
        """Load the captured tables and their schemas again (tables may have come or gone)."""
        self._schemas = None

    def lineage(self) -> Lineage:
        """The server binlake reads (`_binlake/source.json`), recorded at the first connection: its
        identity and the creation time of its binlog's head file."""
        if self._lineage is not None:
            return self._lineage
        path = self.target.source_lineage
        found = Lineage.load(path)
        if found is None:
            params = self.cfg.connection()
            conn = connect(params)
            try:
                identity, _ = identify(conn)
                head = binlog_head(conn)
            finally:
                conn.close()
            found = Lineage(identity)
            found.note(params, [head.file])
            found.save(path)
            log.info("source is %s", identity)
        self._lineage = found
        return found

    def forget_lineage(self) -> None:
        self._lineage = None

    def note_files(self, files: list[str]) -> None:
        """Record the creation time of binlog files stored positions now lie in (see `lineage`)."""
        lineage = self.lineage()
        with self._lock:
            if lineage.note(self.cfg.connection(), files):
                lineage.save(self.target.source_lineage)

    def reader_ids(self, most: int | None = None) -> list[int]:
        """The server ids past the stream's, up to `most` of them (default `snapshot.parallelism`)."""
        ids = self.cfg.server_ids
        n = self.cfg.parallelism
        if len(ids) < 2:
            raise ConfigError(
                f"source.server-id has {len(ids)} id; binlake needs one for the stream and one per parallel "
                f"chunk reader ({n + 1} for snapshot.parallelism {n}): set source.server-id to a range like "
                f"{ids.first}-{ids.first + n}"
            )
        return [ids.pick(1 + i) for i in range(min(most or n, len(ids) - 1))]

    @contextmanager
    def readers(self, count: int) -> Iterator[list[int]]:
        """`count` server ids for chunk readers (at most as many as there are), held apart from any
        other read's until the block ends: two binlog connections under one server id end each
        other. Several tables are read at once (`tables_at_once`), so the ids of `source.server-id`
        past the stream's, up to two per reading slot, are shared out in turn."""
        with self._lock:
            if self._readers is None:
                self._readers = _Readers(self.reader_ids(self.tables_at_once))
        with self._readers.lease(min(count, self.cfg.parallelism)) as leased:
            yield leased

    def created_bronze(self, name: str) -> None:
        """`name`'s bronze was created by its snapshot read in this process: no binlog change in it."""
        self._changeless.add(name)

    def take_changeless(self) -> set[str]:
        """The bronze tables created here that hold no binlog change, for the first stream query to
        take (and only it: once it has appended, they hold changes)."""
        taken, self._changeless = self._changeless, set()
        return taken

    @property
    def tables_at_once(self) -> int:
        """Tables read, or a micro-batch's tables written, at once: twice the reading slots, as a
        Delta commit keeps the driver busy in short bursts between which another table's work runs
        (measured on 2 cores: 20 small appends 0.46 s each one at a time, 0.30 s each four at once)."""
        return 2 * self.cfg.parallelism


class _Readers:
    """Server ids lent to chunk reads in the order they asked, none to two reads at once."""

    def __init__(self, ids: list[int]) -> None:
        self.free = ids
        self.size = len(ids)
        self.changed = threading.Condition()
        self.tickets, self.serving = 0, 0

    @contextmanager
    def lease(self, count: int) -> Iterator[list[int]]:
        count = max(1, min(count, self.size))
        with self.changed:
            ticket, self.tickets = self.tickets, self.tickets + 1
            self.changed.wait_for(lambda: self.serving == ticket and len(self.free) >= count)
            leased, self.free = self.free[:count], self.free[count:]
            self.serving += 1
            self.changed.notify_all()
        try:
            yield leased
        finally:
            with self.changed:
                self.free = self.free + leased
                self.changed.notify_all()


def current_position(ctx: Context) -> BinlogPosition:
    conn = connect(ctx.params)
    try:
        return binlog_head(conn)
    finally:
        conn.close()

