"""What silver's side of a steady stream costs, without a server or Spark: `python bench/profile_apply.py`
(not part of `make bench`).

The steady section measures binlake's whole process against a live server, and on a shared 2-core
machine two runs of the same commit differ by 10% in CPU per change: a change of a few percent in one
part cannot be told from that. This replays the part of it on the lake's side, alone and repeatable:
1. a silver table of PROFILE_APPLY_ROWS rows (5,000,000) of the steady section's columns, written as
   the snapshot writes it (a file per chunk group of about 131,000 rows, in key order);
2. PROFILE_APPLY_BATCHES micro-batches (300) of 2,000 changes each at random keys (96% updates, 2%
   inserts of new keys, 2% deletes: the steady writer's mix), each applied by marking
   (`binlake.lake.marked_merge.apply_marked`) with the key index kept from batch to batch, and a
   compaction look every 5 batches (`binlake.lake.compaction.compact_silver`, at the stream's one look
   every 5 s at a batch a second);
3. the CPU seconds per 1M changes of the apply and of compaction, after PROFILE_APPLY_WARMUP batches
   (30), and the table's live files and marked rows at the end. PROFILE_APPLY_POOL_SHARE sets
   compaction's POOL_SHARE, to weigh another one; PROFILE_APPLY_PAUSE (seconds, 0 by default) a pause
   after each batch, untimed, as the stream waits for its next one (binlake.memory measured its allocator
   so).

Each batch's changes are made before the clock starts, so only binlake's work is timed. Run it with
PYTHONPATH naming another checkout's src to compare two commits in one session.
"""

from __future__ import annotations

import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from binlake.memory import tune

tune()  # as in binlake's own processes, before pyarrow is imported (binlake.memory)

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness

from binlake.lake import compaction, marked_merge, silver
from binlake.lake.compaction import compact_silver
from binlake.lake.key_index import KeyIndex
from binlake.lake.table_log import Snapshot
from binlake.schema import Column, TableSchema

SCHEMA = TableSchema("bench_steady", "account", (
    Column("id", "bigint", "bigint(20)", False, in_key=True),
    Column("visits", "int", "int(11)", False),
    Column("total", "bigint", "bigint(20)", False),
    Column("name", "varchar", "varchar(32)", False, length=32),
    Column("balance", "decimal", "decimal(12,2)", False, precision=12, scale=2),
    Column("updated_at", "datetime", "datetime(6)", False, fraction=6)), ("id",))
CHUNK = 131_072  # rows of a snapshot file at 5M rows (38 files)
BATCH = 2_000
FILE_SIZE = 128 * 1024 * 1024  # lake.file-size's default
AT = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)


def rows_of(ids: np.ndarray, seq: np.ndarray, ops: list[str] | np.ndarray, version: int) -> pa.Table:
    """Bronze-typed changes of `ids` (as a micro-batch hands them to silver)."""
    n = ids.size
    units = (ids * 37 + version) % 10_000_000
    return pa.table({
        "id": pa.array(ids, pa.int64()),
        "visits": pa.array((ids * 7 + version) % 1000, pa.int32()),
        "total": pa.array(ids * 3 + version, pa.int64()),
        "name": pa.array(np.char.add("customer-", ids.astype(str)), pa.string()),
        "balance": pa.array(units, pa.int32()).cast(pa.decimal128(12, 2), safe=False),
        "updated_at": pa.array(np.full(n, int(AT.timestamp() * 1e6) + version, np.int64), pa.int64())
        .cast(pa.timestamp("us")),
        "_seq": pa.array(seq, pa.int64()).cast(pa.decimal128(38, 0)),
        "_ts": pa.array(np.full(n, int(AT.timestamp() * 1e6), np.int64), pa.int64()).cast(pa.timestamp("us", "UTC")),
        "_op": pa.array(ops, pa.string()),
    })


def write_silver(location: str, rows: int) -> None:
    """Silver as the snapshot leaves it: one file per chunk group, each in key order."""
    for begin in range(0, rows, CHUNK):
        ids = np.arange(begin + 1, min(rows, begin + CHUNK) + 1, dtype=np.int64)
        chunk = rows_of(ids, np.zeros(ids.size, np.int64), ["r"] * ids.size, 0)
        assert silver.insert_snapshot_arrow(SCHEMA, chunk, location, fresh=True)


def batches(rows: int, count: int) -> list[pa.Table]:
    """`count` batches of the steady writer's mix, made in advance (each key's newest change wins)."""
    rng = np.random.default_rng(52)
    live = rows
    made, seq = [], 1
    for number in range(1, count + 1):
        ids = rng.integers(1, live + 1, BATCH, dtype=np.int64)
        ops = np.full(BATCH, "u", dtype=object)
        ops[: BATCH // 50] = "d"
        ops[BATCH // 50: BATCH // 25] = "c"
        new = np.arange(live + 1, live + 1 + BATCH // 50, dtype=np.int64)
        ids[BATCH // 50: BATCH // 25] = new  # inserts of keys not in the table yet
        live += new.size
        made.append(rows_of(ids, np.arange(seq, seq + BATCH, dtype=np.int64), ops.tolist(), number))
        seq += BATCH
    return made


def main() -> None:
    rows = harness.env_int("PROFILE_APPLY_ROWS", 5_000_000)
    count = harness.env_int("PROFILE_APPLY_BATCHES", 300)
    warmup = harness.env_int("PROFILE_APPLY_WARMUP", 30)
    pause = float(os.environ.get("PROFILE_APPLY_PAUSE") or 0)
    if os.environ.get("PROFILE_APPLY_POOL_SHARE"):  # compaction's trigger, to weigh another one
        compaction.POOL_SHARE = float(os.environ["PROFILE_APPLY_POOL_SHARE"])
    work = Path(tempfile.mkdtemp(prefix="binlake-profile-apply-"))
    try:
        location = str(work / "silver")
        began = time.monotonic()
        write_silver(location, rows)
        made = batches(rows, count + warmup)
        print(f"silver of {rows:,} rows and {len(made)} batches made in {time.monotonic() - began:.1f}s",
              file=sys.stderr)
        index = KeyIndex("id")
        apply_cpu = compact_cpu = 0.0
        steps = 0
        for number, changes in enumerate(made):
            cpu = time.process_time()
            assert marked_merge.apply_marked(location, SCHEMA, changes, index), f"batch {number} was not marked"
            applied = time.process_time()
            step = compact_silver(location, "id", FILE_SIZE, index) if number % 5 == 4 else None
            if number >= warmup:
                apply_cpu += applied - cpu
                compact_cpu += time.process_time() - applied
                steps += step is not None
            time.sleep(pause)  # the stream idles between its batches: memory freed meanwhile is reused, or not
        timed = count * BATCH
        snapshot = Snapshot.read(location)
        marked = sum(int((a.get("deletionVector") or {}).get("cardinality") or 0) for a in snapshot.files.values())
        print(f"- apply: {apply_cpu * 1e6 / timed:.2f} CPU s per 1M changes")
        print(f"- compaction: {compact_cpu * 1e6 / timed:.2f} CPU s per 1M changes ({steps} steps)")
        print(f"- silver at the end: {len(snapshot.files)} live files, {marked:,} rows marked")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
