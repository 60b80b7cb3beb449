"""Compaction of a local lake's tables while the stream runs: the small files the micro-batches add
are merged into files of about `lake.file-size`, silver's in key order, one bounded step at a time
between two micro-batches of the table.

Bronze takes a file per batch (about 35,000 a day at one batch a second) and is only ever appended
to, so its small files are merged as they are, a tier of files of about one size at a time (see
`_crowded_tier`), in `_seq` order, and committed as Delta's OPTIMIZE is
(`dataChange` false: no change for a reader of the table's changes; delta-rs's own compaction refuses
tables with column mapping, as binlake's are). 

Silver's marked batches (`binlake.lake.marked_merge`) each add a small file of new images at keys
anywhere in the table, tagged as the "pool" (`POOL`), and mark the old rows in the other files'
deletion vectors. Three kinds of step keep it few files in key order:
- the pool's files are merged among themselves as bronze's are, a tier at a time (their live rows, by
  key), so they stay few however many batches land;
- once the pool holds more than POOL_SHARE of the table's live rows (or a file out of it has
  MARKED_SHARE of its rows marked), one range of the key space -- a run of files out of the pool in key
  order of at most a quarter of `lake.file-size`, and the keys up to the next run's first -- is written
  again whole: those files' live rows with the pool's rows in the range, sorted by key, as new files
  out of the pool; the same commit removes the range's files and marks the rows it took in the pool's.
  The range chosen is the one with the most rows to gain (marked rows dropped, pool rows taken in).
- otherwise, a range of two or more small files out of the pool (each under an eighth of
  `lake.file-size`) is written so too, as one: the snapshot leaves silver a file per chunk group, and
  a batch at random keys marks rows in nearly every file, so each small file cost its DV and its key
  search at every batch (`_crowded`).
A step of either kind costs what it writes, not the table, and a changed row is written again in key
order about 1 / POOL_SHARE times (and a few times in the pool's tiers); a read filtered by key skips
every file out of the pool whose range misses it. A table of pool files alone is written again as one
range.

Steps are commits like any other: a crash leaves one whole or none, and files written for a step that
did not commit are removed by retention (`binlake.lake.retention`). They run in the thread that lands
the table's batches, so no batch is reordered or waits on another writer; the stream waits for at most
one step of one table at a time.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from binlake.config import Config
from binlake.lake import arrow_commit, storage
from binlake.lake.delta_commit import commit, data_file
from binlake.lake.table_log import Snapshot, data_path
from binlake.lake.key_index import KeyIndex, indexable
from binlake.lake.target import Target
from binlake.schema import TableSchema

log = logging.getLogger(__name__)

# the tag of the files a marked batch adds (their add actions' `tags`; binlake.lake.marked_merge): rows
# at keys anywhere in the table, merged among themselves and taken back into key order (the "pool")
POOL = {"binlake.pool": "true"}
# a silver key range holds at most this share of the target size
SMALL_SHARE = 0.25
# a tier of bronze files, or of silver's pool files, is merged once it holds this many files
SMALL_FILES = 8
# a silver range is written again once the pool holds more than this share of the table's live rows:
# a range's step takes in the pool's rows in it, so each changed row is written again in key order
# about 1 / POOL_SHARE times (with a step every 32 batches, at 1M rows under 2,000 changes/s, it was
# 16 times, and compaction was a quarter of the stream's CPU)
POOL_SHARE = 0.2
# or once a file out of the pool has this share of its rows marked
MARKED_SHARE = 0.3
# the bytes below which a bronze file is in the lowest tier
TIER_BASE = 64 * 1024


@dataclass(frozen=True)
class Step:
    """What one compaction step did, for the log, `binlake status` and the metrics."""

    table: str
    at: float
    removed: int
    added: int
    seconds: float

    def to_dict(self) -> dict[str, Any]:
        return {"at": self.at, "files_removed": self.removed, "files_added": self.added, "seconds": self.seconds}


def compact_bronze(location: str, file_size: int, snapshot: Snapshot | None = None) -> Step | None:
    """Merge the local bronze table's small files, once a tier of them holds SMALL_FILES, into files of
    about `file_size` in `_seq` order (`dataChange` false); None when there was nothing to do. delta-rs's
    own compaction refuses a table with column mapping, as binlake's are."""
    snapshot = snapshot or Snapshot.read(location)
    small = _crowded_tier({p: int(a.get("size") or 0) for p, a in snapshot.files.items()}, file_size)
    if not small or not snapshot.flat:
        return None
    began = time.monotonic()
    rows = _in_seq_order([_live_rows(snapshot, p, None) for p in small])
    adds = _written(snapshot, rows, file_size)
    marks = {p: np.arange(snapshot.num_records(p), dtype=np.int64) for p in small}
    commit(snapshot, marks, adds, operation="OPTIMIZE", parameters={"predicate": "small files"}, data_change=False)
    return Step(location, time.time(), len(small), len(adds), round(time.monotonic() - began, 3))


def _in_seq_order(parts: list[Any]) -> Any:
    """Bronze's rows of `parts` (one table a file) as one table in `_seq` order. A batch's file is
    written in binlog order and files do not overlap, so the files put in the order of their first
    `_seq` are usually in order whole, which a look at each neighbour confirms; a file not so (Spark's
    write of a replayed batch keeps no order) makes it a sort. At 500,000 rows the look took 3 ms, the
    sort and its take 48 ms."""
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = [p for p in parts if p.num_rows]
    parts.sort(key=lambda p: p.column("_seq")[0].as_py() or 0)
    rows = pa.concat_tables(parts, promote_options="permissive") if parts else pa.table({})
    seq = rows.column("_seq") if rows.num_rows else None
    if seq is not None and seq.length() > 1 and pc.any(pc.less(seq[1:], seq[:-1])).as_py():
        rows = rows.take(pc.sort_indices(rows, [("_seq", "ascending")]))
    return rows


def _crowded_tier(sizes: dict[str, int], file_size: int) -> list[str]:
    """The files of the smallest tier holding SMALL_FILES or more, of those under half of `file_size`;
    none when no tier is that full. A tier spans a factor of SMALL_FILES in size, so merging a full tier
    makes a file of the next one up: each change is written again once per tier, a few times in all,
    and the live files stay at most SMALL_FILES a tier. A file of half the size or more is done: merged
    with others of its size it would come out as as many files again."""
    tiers: dict[int, list[str]] = {}
    for path, size in sizes.items():
        if size < file_size / 2:
            tier = int(math.log(max(size, TIER_BASE) / TIER_BASE, SMALL_FILES))
            tiers.setdefault(tier, []).append(path)
    full = [tier for tier, paths in tiers.items() if len(paths) >= SMALL_FILES]
    return sorted(tiers[min(full)]) if full else []


def compact_silver(location: str, key: str, file_size: int, index: KeyIndex,
                   snapshot: Snapshot | None = None) -> Step | None:
    """One step of the local silver table's compaction (see the module), `index` its key index, when
    one is due: a tier of pool files merged, else a key range written again; None otherwise."""
    snapshot = snapshot or Snapshot.read(location)
    if not indexable(snapshot, [key]) or not snapshot.flat:
        return None
    pool = {p for p, a in snapshot.files.items() if (a.get("tags") or {}).keys() & POOL.keys()}
    tier = _crowded_tier({p: int(snapshot.files[p].get("size") or 0) for p in pool}, file_size)
    if tier:
        return _merged_pool(snapshot, key, tier, file_size)
    live = {p: snapshot.num_records(p) - _marked(snapshot, p) for p in snapshot.files}
    pooled = sum(live[p] for p in pool)
    heavy = any(_marked(snapshot, p) >= MARKED_SHARE * snapshot.num_records(p) for p in snapshot.files if p not in pool)
    if not heavy and pooled <= POOL_SHARE * sum(live.values()):
        # small files side by side matter once batches mark the table (they add the pool); a table
        # delta-rs's MERGE keeps has none, and its index is not kept (nor read here) at every look
        small = [p for p, a in snapshot.files.items() if p not in pool and _small(int(a.get("size") or 0), file_size)]
        if not pool or len(small) < 2:
            return None
        return _range_step(snapshot, key, pool, file_size, index, crowded=True)
    return _range_step(snapshot, key, pool, file_size, index)


def _merged_pool(snapshot: Snapshot, key: str, tier: list[str], file_size: int) -> Step:
    """The pool files `tier` merged into one (their live rows, by key), still in the pool."""
    import pyarrow as pa
    import pyarrow.compute as pc

    began = time.monotonic()
    rows = pa.concat_tables([_live_rows(snapshot, p, None) for p in tier], promote_options="permissive")
    rows = rows.take(pc.sort_indices(rows, [(key, "ascending")]))
    adds = _written(snapshot, rows, file_size, POOL)
    marks = {p: np.arange(snapshot.num_records(p), dtype=np.int64) for p in tier}
    commit(snapshot, marks, adds, operation="OPTIMIZE", parameters={"predicate": "pool files"}, data_change=False)
    return Step(snapshot.location, time.time(), len(tier), len(adds), round(time.monotonic() - began, 3))


def _range_step(snapshot: Snapshot, key: str, pool: set[str], file_size: int, index: KeyIndex,
                crowded: bool = False) -> Step | None:
    """One key range written again: its files' live rows and the pool's rows in the range, by key, as
    new files out of the pool; the range with the most rows to gain (marked rows dropped, pool rows
    taken in). A table of pool files alone is written again as one range. With `crowded`, only a
    range of small files (`_crowded`) is, and None when there is none."""
    began = time.monotonic()
    index.sync(snapshot)
    sizes = {p: int(a.get("size") or 0) for p, a in snapshot.files.items()}
    pool = pool | {p for p in snapshot.files if not index.files[p].keys.size}
    ranges = _ranges(index, [p for p in snapshot.files if p not in pool], sizes, SMALL_SHARE * file_size)
    if crowded:
        ranges = [r for r in ranges if _crowded(r[0], sizes, file_size)]
        if not ranges:
            return None
    files, lo, hi = max(ranges, key=lambda r: _gain(snapshot, index, pool, *r)) if ranges else ([], None, None)
    taken = {p: _in_range(index, p, lo, hi) for p in pool}
    taken = {p: rows for p, rows in taken.items() if rows.size}
    if not files and len(taken) < 2:
        return None
    import pyarrow as pa
    import pyarrow.compute as pc

    parts = [_live_rows(snapshot, p, None) for p in files] + [_live_rows(snapshot, p, r) for p, r in taken.items()]
    rows = pa.concat_tables(parts, promote_options="permissive")
    rows = rows.take(pc.sort_indices(rows, [(key, "ascending")]))
    adds = _written(snapshot, rows, file_size)
    marks = {**taken, **{p: np.arange(snapshot.num_records(p), dtype=np.int64) for p in files}}
    commit(snapshot, marks, adds, operation="OPTIMIZE", parameters={"predicate": f"key range of {key}"},
           data_change=False)
    removed = len(files) + sum(
        1 for p, r in taken.items() if r.size + snapshot.marks(p).count >= snapshot.num_records(p))
    return Step(snapshot.location, time.time(), removed, len(adds), round(time.monotonic() - began, 3))


def _ranges(index: KeyIndex, large: list[str], sizes: dict[str, int], most: float) -> list[tuple[list[str], Any, Any]]:
    """The key ranges of a step: the large files in key order, grouped while a group holds at most `most`
    bytes (one file at least), each group with its range, from its first file's least key (the first
    group: from the least of all) to the next group's (the last: to the greatest)."""
    ordered = sorted(large, key=lambda p: index.files[p].keys[0])
    groups: list[list[str]] = []
    for path in ordered:
        if groups and sum(sizes[p] for p in groups[-1]) + sizes[path] <= most:
            groups[-1].append(path)
        else:
            groups.append([path])
    starts = [index.files[g[0]].keys[0] for g in groups]
    return [(g, None if i == 0 else starts[i], starts[i + 1] if i + 1 < len(groups) else None)
            for i, g in enumerate(groups)]


def _small(size: int, file_size: int) -> bool:
    """Whether a silver file out of the pool of `size` bytes is small: under half of what a range holds."""
    return size < SMALL_SHARE * file_size / 2


def _crowded(files: list[str], sizes: dict[str, int], file_size: int) -> bool:
    """Whether a range's `files` are small files that one would hold: two or more, each `_small`. The snapshot leaves silver so (a file per chunk group: 38 files of 3.7 MB at 5M rows, 152 at
    20M), and a batch marks rows in nearly every file at random keys, each file's DV written again and
    its keys searched at every batch; written again as one, they cost that once."""
    return len(files) >= 2 and all(_small(sizes[p], file_size) for p in files)


def _marked(snapshot: Snapshot, path: str) -> int:
    """The rows of the live file `path` its DV marks, by the log."""
    return int((snapshot.files[path].get("deletionVector") or {}).get("cardinality") or 0)


def _in_range(index: KeyIndex, path: str, lo: Any, hi: Any) -> Any:
    """The live rows of `path` whose keys are in [lo, hi) (None: unbounded), by the index."""
    f = index.files[path]
    keys = f.keys
    start = 0 if lo is None else int(np.searchsorted(keys, lo, side="left"))
    stop = keys.size if hi is None else int(np.searchsorted(keys, hi, side="left"))
    rows = np.arange(start, stop, dtype=np.int64) if f.rows is None else f.rows[start:stop]
    return rows[f.unmarked(rows)]


def _gain(snapshot: Snapshot, index: KeyIndex, pool: set[str], files: list[str], lo: Any, hi: Any) -> int:
    """What rewriting a range gains: its files' marked rows dropped and the pool's rows taken in."""
    return sum(_marked(snapshot, p) for p in files) + sum(int(_in_range(index, p, lo, hi).size) for p in pool)


def _live_rows(snapshot: Snapshot, path: str, rows: Any) -> Any:
    """The rows `rows` of the data file `path` (None: every live one), with the table's column names."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = {physical: name for name, physical in snapshot.physical_names.items()}
    with pq.ParquetFile(data_path(snapshot.location, path)) as file:  # no dataset: see key_index._read
        table = _plain_types(file.read(columns=list(names)))
    if rows is None:
        marks = snapshot.marks(path)
        if marks.count:  # a file with no DV (bronze's are all so) is taken as it was read, not copied
            table = table.filter(pa.array(marks.unmarked(table.num_rows)))
    else:
        table = table.take(pa.array(rows, pa.int64()))
    return table.rename_columns([names[n] for n in table.column_names])


def _plain_types(table: Any) -> Any:
    """`table` with view types (delta-rs writes strings and binaries as views) as their plain forms,
    which Arrow's take and sort kernels all accept and every Delta reader reads the same."""
    import pyarrow as pa

    plain = {pa.string_view(): pa.large_string(), pa.binary_view(): pa.large_binary()}
    schema = pa.schema([f.with_type(plain.get(f.type, f.type)) for f in table.schema])
    return table if schema == table.schema else table.cast(schema)


def _written(snapshot: Snapshot, rows: Any, file_size: int, tags: dict[str, str] | None = None) -> list[dict[str, Any]]:
    """`rows` written as data files of about `file_size` bytes each, in their order: their add actions
    (with `tags`, when given). A file's rows are counted by the bytes a row took in the files they were
    read from (Parquet's, a few times smaller than Arrow's in memory)."""
    if rows.num_rows == 0:
        return []
    per_row = snapshot.bytes_per_row() or max(1, rows.nbytes // rows.num_rows)
    step = max(1, int(file_size * 0.9 / per_row))  # files stay under the size
    return [data_file(snapshot, rows.slice(at, step), tags) for at in range(0, rows.num_rows, step)]


# seconds between two looks at whether a table's compaction is due
LOOK_EVERY = 5.0


class Compaction:
    """The running stream's compaction (see the module): `after_batch` of a table, from the thread that
    landed the table's batch, takes at most one step for its bronze and one for its silver, looking at
    most every LOOK_EVERY seconds per table; each step is recorded (`last_steps`) for `binlake status`."""

    def __init__(self, target: Target, on: bool, file_size: int, every: float = LOOK_EVERY) -> None:
        self.target, self.on, self.file_size, self.every = target, on, file_size, every
        self.looked: dict[str, float] = {}
        self.live: dict[tuple[str, str], tuple[int, int]] = {}  # (table, side): live files and bytes at the last look
        self.lock = threading.Lock()  # the record is one file, and tables land on several threads

    @classmethod
    def of(cls, cfg: Config, target: Target) -> Compaction:
        return cls(target, cfg.get("lake.compaction") == "on", int(cfg.get("lake.file-size")) * 1024 * 1024)

    def after_batch(self, schema: TableSchema, index: KeyIndex | None) -> dict[str, Step]:
        """A step for `schema`'s local bronze and silver when due, `index` silver's key index (None: a
        key silver's compaction does not take): the steps taken, by side."""
        name = schema.name
        now = time.monotonic()
        if not self.on or now - self.looked.get(name, -self.every) < self.every:
            return {}
        self.looked[name] = now
        bronze, silver = self.target.bronze(name).location, self.target.silver(name).location
        steps: dict[str, Step | None] = {}
        if arrow_commit.local(bronze) and storage.has_commit(bronze):
            steps["bronze"] = self._step(name, "bronze", lambda: compact_bronze(
                bronze, self.file_size, self._seen(name, "bronze", bronze)))
        if index is not None and not schema.multiset and arrow_commit.local(silver) and storage.has_commit(silver):
            steps["silver"] = self._step(name, "silver", lambda: compact_silver(
                silver, index.key, self.file_size, index, self._seen(name, "silver", silver)))
        taken = {side: step for side, step in steps.items() if step is not None}
        for side, step in taken.items():
            self._record(name, side, step)
        return taken

    @staticmethod
    def _step(name: str, side: str, step: Callable[[], Step | None]) -> Step | None:
        """`step()`, or None when it fails: compaction is upkeep, and a step that cannot be taken now
        (another writer changed the table's schema meanwhile, a file it cannot write) leaves the table
        as it was; the stream goes on, and the next look tries again."""
        try:
            return step()
        except Exception as failed:  # noqa: BLE001 - never in the stream's way
            log.warning("%s: %s compaction skipped (%s: %s)", name, side, type(failed).__name__,
                        " ".join(str(failed).split())[:300])
            return None

    def _seen(self, name: str, side: str, location: str) -> Snapshot:
        """The table as the look finds it, its live files and bytes kept in `live` (for the metrics)."""
        snapshot = Snapshot.read(location)
        self.live[(name, side)] = (len(snapshot.files), sum(int(a.get("size") or 0) for a in snapshot.files.values()))
        return snapshot

    def _record(self, name: str, side: str, step: Step) -> None:
        log.info("%s: %s compacted, %d files into %d in %.3fs", name, side, step.removed, step.added, step.seconds)
        with self.lock:
            place = self.target.compaction_record
            try:
                record = json.loads(place.read_text()) if place.exists() else {}
            except ValueError:
                record = {}
            record.setdefault(name, {})[side] = step.to_dict()
            place.write_text(json.dumps(record))


def last_steps(target: Target) -> dict[str, dict[str, Any]]:
    """Each table's last compaction steps, by source table and side (bronze, silver), as recorded."""
    try:
        return dict(json.loads(target.compaction_record.read_text()))
    except (FileNotFoundError, ValueError):
        return {}
