"""Where a table's snapshot chunks land when delta-rs commits them (`Landing`): its bronze, and the
rows kept for silver, which then needs no read of bronze."""

from __future__ import annotations

import logging
import os
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from binlake.capture.context import Context
from binlake.lake import arrow_commit, arrow_types, bronze
from binlake.lake.compaction import SMALL_SHARE
from binlake.lake.table_log import Snapshot, UnreadableLog
from binlake.schema import TableSchema
from binlake.splits import Split

log = logging.getLogger(__name__)

# the most a large table's landing holds in memory for one commit (Arrow's bytes), whatever its aim
HOLD_BYTES = int(os.environ.get("BINLAKE_SNAPSHOT_HOLD_BYTES", str(2 * arrow_commit.ARROW_BYTES)))


class Landing:
    """Where a table's chunks land when delta-rs commits them (`binlake.lake.arrow_commit`): its
    bronze, and the snapshot rows kept for silver, which then needs no read of bronze. A small table
    (`of`) is read whole and applied to silver once; a large one on a local lake (`large`) in
    commits of several groups (`hold`, `parcel`), each commit's rows applied to silver before the
    next commit (`take`), and typed by Arrow (`binlake.lake.arrow_types`): no Spark job at all.

    A large table's commit holds groups until their files come out at about `aim` bytes (a quarter of
    `lake.file-size`, what compaction's silver range holds, `SMALL_SHARE`) by bronze's bytes per row
    so far, or until they hold HOLD_BYTES in memory. A commit of one group each left the bench's 5M
    rows in 38 files of bronze and of silver (3.7 MB each), which compaction wrote again once the
    stream ran: about 8 s of CPU and a stall of 4-5 s. Commits of HOLD_BYTES (1.07M of its rows,
    133 bytes a row in Arrow, 22 in Parquet) left 6 files of 2-24 MB, not small for silver's
    compaction: in the steady bench (15 minutes) binlake's CPU per 1M changes was 30.6 s on MySQL
    against 31.4 before (same session), 28.2-29.5 on MariaDB against 38.2 on an earlier day. A crash
    loses the groups held, read and not landed, which the next run reads again."""

    def __init__(self, table: Any, created: bool, typer: arrow_types.Typer | None, location: str,
                 aim: int = 0) -> None:
        self.table, self.created, self.typer, self.location, self.aim = table, created, typer, location, aim
        self.rows: list[Any] = []
        self.spilled = False  # a read held more than arrow_commit.ARROW_BYTES: Spark writes the table
        self.held: list[tuple[list[Split], Any]] = []  # groups read for the next commit
        self._per_row: float | None = None  # bronze's bytes per row, once it holds one

    @classmethod
    def of(cls, ctx: Context, schema: TableSchema, splits: int) -> Landing | None:
        """The landing of a table whose `splits` chunks hold at most `arrow_commit.ARROW_ROWS` rows, or
        None (Spark writes it): a larger or key-less table, or a bronze delta-rs does not write."""
        b = ctx.target.bronze(schema.name).location
        if not arrow_commit.usable(b, schema.names, splits * ctx.cfg.chunk_size):
            return None
        return cls._at(b, schema, arrow_types.typer(schema))

    @classmethod
    def large(cls, ctx: Context, schema: TableSchema) -> Landing | None:
        """The landing of any table of a local lake whose columns Arrow types, or None (Spark reads,
        types and writes it)."""
        b = ctx.target.bronze(schema.name).location
        typer = arrow_types.typer(schema)
        if typer is None or not arrow_commit.usable(b, schema.names, 0):
            return None
        return cls._at(b, schema, typer, int(SMALL_SHARE * int(ctx.cfg.get("lake.file-size")) * 1024 * 1024))

    @classmethod
    def _at(cls, location: str, schema: TableSchema, typer: arrow_types.Typer | None,
            aim: int = 0) -> Landing | None:
        if schema.multiset:
            return None
        struct = bronze.struct(schema)
        created = arrow_commit.create(location, struct, bronze.PROPERTIES)
        table = arrow_commit.writable(location, struct.fieldNames())
        return None if table is None else cls(table, created, typer, location, aim)

    def read(self, ctx: Context, schema: TableSchema, job: dict[str, Any]) -> Any:
        """A group's chunks read in this process, as bronze's columns; None when they are too large
        to hold here (then Spark reads them, and every later group of the table)."""
        flat = ctx.snapshot_here(job)
        if flat is None:
            self.spilled = True
            return None
        if self.typer is not None:
            try:
                return self.typer(flat)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:  # Spark's cast says what it is
                log.debug("%s: Arrow could not type a read (%s); Spark types it", schema.name, exc)
        return bronze.typed_flat(ctx.session().createDataFrame(flat), schema).toArrow()

    def hold(self, splits: list[Split], rows: Any) -> bool:
        """Keep a group's `rows` (bronze columns) for the next commit; whether the groups kept are
        one commit's worth: files of about `aim` bytes at bronze's bytes per row, or HOLD_BYTES in
        memory."""
        self.held.append((splits, rows))
        count = sum(r.num_rows for _, r in self.held)
        return sum(r.nbytes for _, r in self.held) >= HOLD_BYTES or count * self._bytes_per_row() >= self.aim

    def parcel(self) -> tuple[list[Split], Any]:
        """The groups kept (`hold`) as one commit's splits and rows; none kept after."""
        held, self.held = self.held, []
        return [s for splits, _ in held for s in splits], pa.concat_tables([rows for _, rows in held])

    def _bytes_per_row(self) -> float:
        """Bronze's bytes per row (`Snapshot.bytes_per_row`); 0 while it holds none (HOLD_BYTES bounds
        the first commit: a file of at most about as many bytes)."""
        if self._per_row is None:
            try:
                self._per_row = Snapshot.read(self.location).bytes_per_row()
            except UnreadableLog:
                return 0.0
        return self._per_row or 0.0

    def append(self, rows: Any, chunks: list[int]) -> list[dict[str, Any]]:
        """Commit chunks' rows (bronze columns) to bronze; their marks, as `bronze.append_chunks`."""
        arrow_commit.append(self.table, rows)
        self.rows.append(rows.filter(pc.equal(rows.column("_op"), "r")))
        return bronze.arrow_marks(rows, chunks)

    def take(self) -> Any:
        """The snapshot rows kept since the last take."""
        rows, self.rows = self.rows, []
        return pa.concat_tables(rows)
