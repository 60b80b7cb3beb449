"""A data file's keys as the key index holds them (binlake.lake.key_index.FileKeys): a batch's keys
found at the rows a plain scan of the file finds them, whatever the file's order, repeats and marks."""

from __future__ import annotations

import numpy as np
import pytest

from binlake.lake.deletion_vectors import Marks
from binlake.lake.key_index import FileKeys, KeyIndex


def _held(file_keys: np.ndarray, marked: np.ndarray) -> FileKeys:
    """The file whose row i holds `file_keys[i]`, as the index's `_read` keeps it."""
    rows = None
    keys = file_keys.astype(np.int64)
    if keys.size > 1 and not bool(np.all(keys[1:] >= keys[:-1])):
        rows = np.argsort(keys, kind="stable").astype(np.int64)
        keys = keys[rows]
    distinct = keys.size < 2 or bool(np.all(keys[1:] != keys[:-1]))
    return FileKeys(keys, rows, Marks.of(marked), None, distinct)


def _scanned(file_keys: np.ndarray, marked: np.ndarray, wanted: np.ndarray) -> list[int]:
    """The live rows holding a wanted key, by a scan of every row."""
    dead = set(marked.tolist())
    return sorted(i for i, k in enumerate(file_keys.tolist()) if k in set(wanted.tolist()) and i not in dead)


@pytest.mark.parametrize("order", ["sorted", "shuffled", "repeats"])
def test_a_batch_finds_the_live_rows_a_scan_of_the_file_finds(order: str) -> None:
    rng = np.random.default_rng(7)
    for _ in range(200):
        lo = int(rng.integers(0, 1000))
        file_keys = np.arange(lo, lo + int(rng.integers(0, 300)), dtype=np.int64)
        if order == "repeats" and file_keys.size:  # a key in the file twice, its older row marked or not
            file_keys = np.sort(np.concatenate([file_keys, rng.choice(file_keys, file_keys.size // 4)]))
        if order != "sorted":
            file_keys = rng.permutation(file_keys)
        marked = rng.choice(file_keys.size, int(rng.integers(0, file_keys.size + 1)), replace=False) \
            if file_keys.size else np.empty(0, np.int64)
        # keys before, inside and after the file's range, its least and greatest among them
        wanted = np.unique(rng.integers(lo - 200, lo + 500, int(rng.integers(0, 100))))
        if file_keys.size:
            wanted = np.unique(np.concatenate([wanted, [file_keys.min(), file_keys.max()]]))
        rows, found = _held(file_keys, marked).find(wanted)
        assert sorted(rows.tolist()) == _scanned(file_keys, marked, wanted)
        live = {int(file_keys[r]) for r in _scanned(file_keys, marked, wanted)}
        assert wanted[found].tolist() == sorted(live)


def test_the_live_mask_leaves_out_the_marked_rows_in_key_order() -> None:
    file_keys = np.array([30, 10, 20, 40], dtype=np.int64)  # rows 0..3
    held = _held(file_keys, np.array([0, 3]))  # keys 30 and 40 marked
    assert held.keys[held.live].tolist() == [10, 20]
    assert held.unmarked(np.array([0, 1, 2, 3])).tolist() == [False, True, True, False]


def test_a_batch_s_keys_are_found_in_whichever_file_holds_them_live() -> None:
    """A table as the stream leaves it: files in key ranges, and pool files at keys anywhere, a key's
    older rows marked wherever it moved. Each wanted key is found at its one live row, whichever file
    the search reaches first."""
    rng = np.random.default_rng(11)
    for _ in range(50):
        keys = np.arange(0, 3000, dtype=np.int64)
        where = {int(k): (f"r{k // 1000}", int(k) % 1000) for k in keys}  # key -> (file, row): its live row
        files: dict[str, list[int]] = {f"r{i}": list(range(i * 1000, (i + 1) * 1000)) for i in range(3)}
        dead: dict[str, set[int]] = {p: set() for p in files}
        for j in range(int(rng.integers(1, 6))):  # pool files, each moving keys at random into it
            moved = sorted(set(rng.choice(keys, int(rng.integers(1, 400))).tolist()))
            name = f"p{j}"
            files[name], dead[name] = moved, set()
            for row, k in enumerate(moved):
                old_file, old_row = where[k]
                dead[old_file].add(old_row)
                where[k] = (name, row)
        index = KeyIndex("id")
        for name, held in files.items():
            index.files[name] = _held(np.array(held, np.int64), np.array(sorted(dead[name]), np.int64))
        wanted = np.unique(rng.integers(-10, 3010, int(rng.integers(0, 500))))
        located = index.locate(wanted)
        expected: dict[str, list[int]] = {}
        for k in wanted.tolist():
            if k in where:
                name, row = where[k]
                expected.setdefault(name, []).append(row)
        assert {p: sorted(r.tolist()) for p, r in located.items()} == {p: sorted(r) for p, r in expected.items()}
