"""Where each key of a silver table lives: for each live data file, its key column and the rows its
deletion vector marks, held in the driver from one micro-batch to the next, so that a batch
finds the rows it replaces by looking its keys up, not by reading the table.

This is what lets a batch's cost follow its changes (`binlake.lake.silver.apply_marked`): a MERGE
has to find the rows its keys match, and without an index that is a scan of every file a key may fall
in, which for keys at random is the whole table. Here a batch of 6,000 keys is a binary search in the
sorted keys of each file whose key range holds some; the table is read once, when the index is first
built (the key column alone), and then only the files that are new since the last batch.

Files are immutable, so a file's keys, once read, stay right for as long as the file is live; what
changes is which files are live and which of their rows a deletion vector marks. `sync` brings the
index to a version of the table by its log (`binlake.lake.table_log.Snapshot`): files gone are
dropped, new ones read, and a file whose DV changed takes its marked rows from it (decoded once, and
not at all for the DVs this process wrote). Any writer may have made those commits (this stream's
batches, a Spark MERGE of a replayed batch, a compaction): the index follows the log, never its own
guesses.

Only a key of one integer column is indexed (`indexable`): keys compare as numbers with no collation,
and 8 bytes a row is what the index costs (40 MB for a table of 5M rows). Each file's keys are kept
sorted with their row positions (16 bytes a row); a file written in key order (the marked batches',
compaction's) needs no positions. The bench's 5M-row snapshot wrote silver's files each in a key range
but not in key order within it. A found key's row is looked up in the file's marked rows, not in a
mask of its live ones, which cost a pass over the file at each change of its DV: on a 20M-row silver
under random updates every file's DV changes at every batch, and that pass took 12% of the stream's
Python samples.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from binlake.lake.deletion_vectors import NO_MARKS, Marks
from binlake.lake.table_log import Snapshot, data_path


@dataclass
class FileKeys:
    """One data file's keys, sorted, with the row each is at (None: the file is in key order, so a
    key's row is its place) and the rows its DV marks."""

    keys: npt.NDArray[np.int64]
    rows: npt.NDArray[np.int64] | None
    # the rows the file's DV marks (as the DV cache holds them: a batch's own DVs are never decoded); a
    # key's row is looked up in them only when a batch finds it, so a changed DV costs nothing here,
    # where a mask of the file's live rows cost a pass over the file at each change
    marked: Marks
    dv: dict[str, Any] | None  # the DV `marked` was read from (its descriptor; None for none)
    distinct: bool = True  # no key twice in the file (as binlake writes silver's files)

    def find(self, wanted: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """The rows (positions in the file) of the live keys among the sorted, distinct `wanted` (a key
        twice in a file, live once at most, is found at each place), and which of `wanted` were found."""
        found = np.zeros(wanted.size, np.bool_)
        if not self.keys.size or not wanted.size:
            return np.empty(0, np.int64), found
        # only the wanted keys within the file's least and greatest: most files hold one key range
        begin = int(np.searchsorted(wanted, self.keys[0], "left"))
        within = wanted[begin:np.searchsorted(wanted, self.keys[-1], "right")]
        left = np.searchsorted(self.keys, within, side="left")
        if self.distinct:
            present = self.keys[np.minimum(left, self.keys.size - 1)] == within
            hit, of = left[present], np.flatnonzero(present)
        else:
            counts = np.searchsorted(self.keys, within, side="right") - left
            starts = np.repeat(left, counts)
            hit = starts + (np.arange(starts.size) - np.repeat(np.cumsum(counts) - counts, counts))
            of = np.repeat(np.arange(within.size), counts)
        rows = (hit if self.rows is None else self.rows[hit]).astype(np.int64)
        live = self.unmarked(rows)
        found[begin + of[live]] = True
        return rows[live], found

    @property
    def span(self) -> int:
        """How wide the file's key range is: its greatest key less its least."""
        return int(self.keys[-1]) - int(self.keys[0]) if self.keys.size else 0

    def unmarked(self, rows: npt.NDArray[np.int64]) -> npt.NDArray[np.bool_]:
        """Which of the file's `rows` its DV leaves live."""
        return ~self.marked.holds(rows)

    @property
    def live(self) -> npt.NDArray[np.bool_]:
        """Which of the sorted keys are live."""
        return self.unmarked(np.arange(self.keys.size, dtype=np.int64) if self.rows is None else self.rows)


def indexable(snapshot: Snapshot, key: list[str]) -> bool:
    """Whether the table's key is one integer column (see the module)."""
    if len(key) != 1:
        return False
    fields = {f["name"]: f for f in json.loads(snapshot.metadata["schemaString"])["fields"]}
    kind = fields.get(key[0], {}).get("type")
    return kind in ("long", "integer", "short", "byte")


class KeyIndex:
    """The keys of one table's live files (see the module), as of `version`."""

    def __init__(self, key: str) -> None:
        self.key = key
        self.files: dict[str, FileKeys] = {}
        self.version = -1

    def sync(self, snapshot: Snapshot) -> None:
        """Bring the index to `snapshot`: read the files new since the last sync and the live rows of
        those whose DV changed; forget the files no longer live."""
        physical = snapshot.physical_names[self.key]
        for path in set(self.files) - set(snapshot.files):
            del self.files[path]
        for path, add in snapshot.files.items():
            dv = add.get("deletionVector")
            known = self.files.get(path)
            if known is None:
                self.files[path] = _read(snapshot, path, physical)
            elif known.dv != dv:
                known.marked, known.dv = snapshot.marks(path), dv
        self.version = snapshot.version

    def learn(self, path: str, keys: npt.NDArray[np.int64]) -> None:
        """The keys of a data file this process has just committed, in its row order: the next `sync`
        takes them as they are instead of reading the file back (a marked batch's file, at every batch)."""
        ordered, rows, distinct = _sorted(keys)
        self.files[path] = FileKeys(ordered, rows, NO_MARKS, None, distinct)

    def locate(self, keys: npt.ArrayLike) -> dict[str, npt.NDArray[np.int64]]:
        """The live rows holding `keys`, by file: {path: row positions}, only files with some.

        Silver holds each key live once (it is a MERGE's target by key), so a key found in one file is
        not looked for in the others, and the files are searched narrowest key range first: the files in
        key order take most of a batch's keys each in its own range, leaving the few of the pool's, whose
        files span the whole table. On a model of a 5M-row silver after 15 minutes of the steady bench (13
        files in key order, 16 in the pool), a batch of 2,000 keys at random took 5 ms searched in every
        file, nearly all of it in the pool's largest, and 2.4 ms so."""
        wanted = np.unique(np.asarray(keys, dtype=np.int64))
        located = {}
        for path, f in sorted(self.files.items(), key=lambda item: item[1].span):
            if not wanted.size:
                break
            rows, found = f.find(wanted)
            if rows.size:
                located[path] = rows
                wanted = wanted[~found]
        return located

    def rows(self) -> int:
        """The live rows the index holds."""
        return int(sum(f.keys.size - f.marked.count for f in self.files.values()))


def _read(snapshot: Snapshot, path: str, physical: str) -> FileKeys:
    """The keys of the live data file `path`, sorted, and the rows its DV marks."""
    import pyarrow.parquet as pq

    # one file's column read by ParquetFile, not read_table: its dataset took 0.9 ms a read against 0.26
    with pq.ParquetFile(data_path(snapshot.location, path)) as file:
        column = file.read(columns=[physical]).column(0)
    keys, rows, distinct = _sorted(column.to_numpy(zero_copy_only=False))
    return FileKeys(keys, rows, snapshot.marks(path), snapshot.files[path].get("deletionVector"), distinct)


def _sorted(values: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64] | None, bool]:
    """A file's keys in its row order as (the keys sorted, the row of each or None when they were in
    order already, whether no key is there twice)."""
    keys = np.asarray(values, dtype=np.int64)
    rows: npt.NDArray[np.int64] | None = None
    if keys.size > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
        rows = np.argsort(keys, kind="stable").astype(np.int64)
        keys = keys[rows]
    distinct = keys.size < 2 or bool(np.all(keys[1:] != keys[:-1]))
    return keys, rows, distinct


def table_bytes(snapshot: Snapshot) -> int:
    """The bytes of the table's live data files."""
    return int(sum(int(add.get("size") or 0) for add in snapshot.files.values()))


def touched_bytes(snapshot: Snapshot, rows: dict[str, Any]) -> int:
    """The bytes of the files `rows` (locate's answer) names: what a copy-on-write MERGE would rewrite."""
    return int(sum(int(snapshot.files[path].get("size") or 0) for path in rows))
