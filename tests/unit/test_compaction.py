"""The order bronze's compaction writes a tier's rows in (binlake.lake.compaction._in_seq_order): `_seq`
order, whichever order its files come in and whether or not each file is in order itself."""

from __future__ import annotations

import random
from decimal import Decimal

import pyarrow as pa

from binlake.lake.compaction import _in_seq_order

SEQ = pa.decimal128(38, 0)


def _file(seqs: list[int]) -> pa.Table:
    return pa.table({"_seq": pa.array([Decimal(10**20 + s) for s in seqs], SEQ), "v": pa.array(seqs, pa.int64())})


def test_files_of_runs_in_any_order_come_out_in_seq_order() -> None:
    rng = random.Random(3)
    runs = [list(range(start, start + 50)) for start in range(0, 1000, 50)]
    rng.shuffle(runs)
    rows = _in_seq_order([_file(r) for r in runs] + [_file([])])
    assert rows.column("v").to_pylist() == list(range(1000))


def test_a_file_out_of_order_is_sorted_whole() -> None:
    # Spark's write of a replayed batch keeps no order, and files may then overlap
    shuffled = list(range(100, 200))
    random.Random(5).shuffle(shuffled)
    rows = _in_seq_order([_file(list(range(0, 100))), _file(shuffled), _file(list(range(150, 160)))])
    assert rows.column("v").to_pylist() == sorted(list(range(200)) + list(range(150, 160)))
