"""Where a stream's decoding time goes: `python bench/profile_stream.py [mariadb|mysql]` (not part of
`make bench`).

Writes a burst of row changes (the stream section's: multi-row statements and PROFILE_SINGLES
single-row ones) to a `bench_profile.customer` table of PROFILE_ROWS rows, or with PROFILE_SHAPE=steady
the steady section's writes (its writer's 20-key statements, a transaction each, unpaced) to its table
of PROFILE_ROWS rows, then, in this process:
1. the replication read alone (`read_changes`, every change counted, nothing encoded);
2. the binlog source's whole work for the burst (`binlog_batches._rows` and `_batches`: the emit rule,
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
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from binlake.memory import tune  # noqa: E402

tune()  # as in binlake's own processes, before pyarrow is imported (binlake.memory)

import decode  # noqa: E402
import harness  # noqa: E402
import steady  # noqa: E402
import stream  # noqa: E402

DATABASE = "bench_profile"


Work = Callable[[tuple[str, int], tuple[str, int], bool], int]


def timed(work: Work, start: tuple[str, int], stop: tuple[str, int], encode: bool) -> tuple[int, float]:
    cpu = time.process_time()
    n = work(start, stop, encode)
    return n, time.process_time() - cpu


def interleaved(work: Work, start: tuple[str, int], stop: tuple[str, int]) -> dict[str, float]:
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
                times[label].append(timed(work, start, stop, True)[1])
    finally:
        rowtext._rowtext, binlog_types._TableMaps.LIMIT = native, limit
    return {k: sorted(v)[len(v) // 2] for k, v in times.items()}


def burst(source: harness.Source, rows: int, changes: int) -> dict[str, Any]:
    """The stream section's burst of `changes` changes to a `customer` table of `rows` rows."""
    harness.create_customer(source, DATABASE, rows)
    stream_db, stream.DATABASE = stream.DATABASE, DATABASE
    try:
        return stream.burst(source, rows, changes)
    finally:
        stream.DATABASE = stream_db


def steady_changes(source: harness.Source, rows: int, changes: int) -> dict[str, Any]:
    """The steady section's writes, unpaced: `changes` rows changed by its writer's 20-key statements,
    each its own transaction (4% inserts and deletes), in its table of `rows` rows."""
    steady.create_table(source, rows)
    source.execute("FLUSH BINARY LOGS")
    start = source.position()
    writer = steady.Writer.unpaced(source, rows, max(1, changes // steady.STATEMENT_ROWS))
    writer.run()  # in this thread, as fast as the server takes them
    if writer.error is not None:
        raise writer.error
    return {"changes": sum(writer.changes.values()), "binlog_start": list(start),
            "binlog_stop": list(source.position())}


def main() -> int:
    server = sys.argv[1] if len(sys.argv) > 1 else "mariadb"
    rows = harness.env_int("PROFILE_ROWS", 200_000)
    changes = harness.env_int("PROFILE_CHANGES", 100_000)
    stream.SINGLES = harness.env_int("PROFILE_SINGLES", stream.SINGLES)
    source = harness.start_source(server, "profile")
    try:
        if os.environ.get("PROFILE_SHAPE", "burst") == "steady":
            (database, table), written = (steady.DATABASE, steady.TABLE), steady_changes(source, rows, changes)
            shape = f"{written['changes']:,} changes in {steady.STATEMENT_ROWS}-row statements, a transaction each"
        else:
            (database, table), written = (DATABASE, "customer"), burst(source, rows, changes)
            shape = (f"{written['changes']:,} changes, {written['single_row_statements']:,} "
                     "single-row statements")
        start, stop = tuple(written["binlog_start"]), tuple(written["binlog_stop"])
        work = decode.reader(source, database, table)
        lines = [f"# Stream decoding profile ({server}, {shape})", ""]
        for label, encode in (("replication read alone", False), ("the binlog source's whole work", True)):
            n, cpu = timed(work, start, stop, encode)  # type: ignore[arg-type]
            lines.append(f"- {label}: {n:,} changes, {cpu:.2f} CPU s, {cpu * 1e6 / n:.1f} CPU s per 1M changes")
        lines += ["", "Interleaved, CPU seconds per 1M changes (median of "
                  f"{harness.env_int('PROFILE_ROUNDS', 3)} rounds each):"]
        for label, cpu in interleaved(work, start, stop).items():  # type: ignore[arg-type]
            lines.append(f"- {label}: {cpu * 1e6 / written['changes']:.1f}")
        prof = cProfile.Profile()
        prof.enable()
        work(start, stop, True)  # type: ignore[arg-type]
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
