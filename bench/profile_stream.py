"""Where a stream's decoding time goes: `python bench/profile_stream.py [mariadb|mysql]` (not part of
`make bench`).

Writes a burst of row changes (the stream section's: multi-row statements and PROFILE_SINGLES
single-row ones) to a `bench_profile.customer` table of PROFILE_ROWS rows, then, in this process:
1. the replication read alone (`read_changes`, every change counted, nothing encoded);
2. the binlog source's whole work for the burst (`binlog_source._rows` and `_batches`: the emit rule,
   each row's encoding, the Arrow batches), timed, then under cProfile;
3. that whole work again with the native row encoding off (BINLAKE_NATIVE=0's Python path) and with
   every table map parsed afresh, each way PROFILE_ROUNDS times (3), interleaved: CPU seconds per 1M
   changes, the median of each.
Prints CPU seconds per 1M changes of each and the top functions; writes bench/results/profile-stream.md.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402
import stream  # noqa: E402

DATABASE = "bench_profile"


def _work(source: harness.Source, start: tuple[str, int], stop: tuple[str, int], encode: bool) -> int:
    from binlake.capture.handover import Handover
    from binlake.offsets import BinlogPosition
    from binlake.source.binlog_reader import read_changes
    from binlake.source.catalog import load_schema
    from binlake.spark.binlog_source import _batches, _rows

    with source.connect() as conn:
        schema = load_schema(conn, DATABASE, "customer")
    schemas = {schema.name: schema}
    handover = Handover(schemas, {})
    handover.bind(None)
    params = {"host": "127.0.0.1", "port": source.port, "user": "root", "password": "", "tls": {"mode": "preferred"}}
    changes = read_changes(params, 6198, BinlogPosition(*start), BinlogPosition(*stop),
                           lambda d, t: f"{d}.{t}" in schemas, whole_events=encode)
    if not encode:
        return sum(1 for _ in changes)
    return sum(b.num_rows for b in _batches(_rows(changes, schemas, handover, None, None, lambda c: False)))


def timed(source: harness.Source, start: tuple[str, int], stop: tuple[str, int], encode: bool) -> tuple[int, float]:
    cpu = time.process_time()
    n = _work(source, start, stop, encode)
    return n, time.process_time() - cpu


def interleaved(source: harness.Source, start: tuple[str, int], stop: tuple[str, int]) -> dict[str, float]:
    """The whole work's CPU seconds: as it is, with the Python row encoding, and with that and no
    table map remembered; alternating, the median of each."""
    from binlake.source import binlog_types, rowtext

    native, limit = rowtext._rowtext, binlog_types._TableMaps.LIMIT
    ways = {"native rows, table maps remembered": (native, limit),
            "Python rows, table maps remembered": (None, limit),
            "Python rows, every table map parsed": (None, 0)}
    times: dict[str, list[float]] = {k: [] for k in ways}
    try:
        for _ in range(harness.env_int("PROFILE_ROUNDS", 3)):
            for label, (module, keep) in ways.items():
                rowtext._rowtext, binlog_types._TableMaps.LIMIT = module, keep
                binlog_types.TABLE_MAPS.parsed.clear()
                times[label].append(timed(source, start, stop, True)[1])
    finally:
        rowtext._rowtext, binlog_types._TableMaps.LIMIT = native, limit
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def main() -> int:
    server = sys.argv[1] if len(sys.argv) > 1 else "mariadb"
    rows = harness.env_int("PROFILE_ROWS", 200_000)
    changes = harness.env_int("PROFILE_CHANGES", 100_000)
    stream.SINGLES = harness.env_int("PROFILE_SINGLES", stream.SINGLES)
    source = harness.start_source(server, "profile")
    try:
        harness.create_customer(source, DATABASE, rows)
        stream_db, stream.DATABASE = stream.DATABASE, DATABASE
        try:
            written = stream.burst(source, rows, changes)
        finally:
            stream.DATABASE = stream_db
        start, stop = tuple(written["binlog_start"]), tuple(written["binlog_stop"])
        lines = [f"# Stream decoding profile ({server}, {written['changes']:,} changes, "
                 f"{written['single_row_statements']:,} single-row statements)", ""]
        for label, encode in (("replication read alone", False), ("the binlog source's whole work", True)):
            n, cpu = timed(source, start, stop, encode)  # type: ignore[arg-type]
            lines.append(f"- {label}: {n:,} changes, {cpu:.2f} CPU s, {cpu * 1e6 / n:.1f} CPU s per 1M changes")
        lines += ["", "Interleaved, CPU seconds per 1M changes (median of "
                  f"{harness.env_int('PROFILE_ROUNDS', 3)} rounds each):"]
        for label, cpu in interleaved(source, start, stop).items():  # type: ignore[arg-type]
            lines.append(f"- {label}: {cpu * 1e6 / written['changes']:.1f}")
        prof = cProfile.Profile()
        prof.enable()
        _work(source, start, stop, True)  # type: ignore[arg-type]
        prof.disable()
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(int(os.environ.get("PROFILE_TOP", "30")))
        lines += ["", "```", out.getvalue(), "```"]
        text = "\n".join(lines)
        print(text)
        harness.RESULTS.mkdir(parents=True, exist_ok=True)
        (harness.RESULTS / "profile-stream.md").write_text(text + "\n")
    finally:
        harness.stop_source(source)
    return 0


if __name__ == "__main__":
    sys.exit(main())
