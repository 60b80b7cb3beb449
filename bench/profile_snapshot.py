"""Where a snapshot's time goes: `python bench/profile_snapshot.py` (not part of `make bench`).

1. cProfile of one chunk read in-process (binlake.source.chunk_reader.read_chunk, then the JSON encoding the
   Spark data source applies to each row): the Python decode/encode cost per row.
2. One snapshot run in-process with each step of binlake.capture.snapshot.read_group/finish_chunks timed:
   the Delta reads and writes per group of chunks against the rows they carry.

Uses the benchmark's MariaDB and a `bench_profile.customer` table of PROFILE_ROWS rows (default 150,000:
about one group of 16 chunks of 8096 rows plus a small second group). Writes bench/results/profile.md.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent))

import harness  # noqa: E402

DATABASE = "bench_profile"


def profile_chunk(params: dict[str, Any], schema: Any, split: Any) -> tuple[float, int, str]:
    from binlake.source.chunk_reader import read_chunk

    read_chunk(params, schema, split, 6190)  # warm the buffer pool and the connection path
    began = time.monotonic()
    result = read_chunk(params, schema, split, 6190)
    [json.dumps(r, ensure_ascii=False) for r in result.rows]
    plain = time.monotonic() - began
    prof = cProfile.Profile()
    prof.enable()
    result = read_chunk(params, schema, split, 6190)
    [json.dumps(r, ensure_ascii=False) for r in result.rows]
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(12)
    return plain, len(result.rows), out.getvalue()


def timed_steps() -> tuple[dict[str, list[float]], Callable[[], None]]:
    """Wrap the pipeline's Delta steps with timers; returns the timings and an undo function."""
    from binlake.lake import bronze, silver
    from binlake.capture import snapshot as snapshot_step
    from binlake.lake import split_state as state

    timings: dict[str, list[float]] = defaultdict(list)
    patched: list[tuple[Any, str, Any]] = []

    def wrap(module: Any, name: str, label: str) -> None:
        original = getattr(module, name)

        def timed(*a: Any, **kw: Any) -> Any:
            t = time.monotonic()
            try:
                return original(*a, **kw)
            finally:
                timings[label].append(time.monotonic() - t)
        setattr(module, name, timed)
        patched.append((module, name, original))

    steps = [
        (bronze, "chunk_marks", "Delta read: chunks landed before a crash, their HW and row count"),
        (bronze, "append_chunks", "reads the chunks from MariaDB + Delta append, observing their HW and row counts"),
        (silver, "apply", "MERGE into silver, anti-join on bronze"),
        (silver, "insert_snapshot", "insert-only MERGE of landed chunks into silver"),
        (state, "record", "append to the split state"),
        (state, "add_planned", "append planned splits"),
        (snapshot_step, "read_group", "the whole group"),
        (bronze, "ensure_table", "create if missing"),
        (silver, "ensure_table", "create if missing"),
        (state, "planned", "Delta read: table numbers and where planning resumes"),
        (state, "groups", "Delta read: unfinished groups and chunk counts"),
        (state, "load", "Delta read"),
    ]
    for module, name, what in steps:
        wrap(module, name, f"{module.__name__.rsplit('.', 1)[-1]}.{name} ({what})")

    def undo() -> None:
        for module, name, original in patched:
            setattr(module, name, original)
    return timings, undo


def main() -> int:
    rows = harness.env_int("PROFILE_ROWS", 150_000)
    source = harness.start_source()
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [f"# Where the snapshot's time goes ({rows:,} rows, {stamp}, load average {os.getloadavg()[0]:.1f})", ""]
    try:
        harness.create_customer(source, DATABASE, rows)
        cfg_path, _lake = harness.write_config("profile", source, [rf"{DATABASE}\.customer"])
        from binlake import config
        from binlake.capture.context import Context
        from binlake.capture.plan import plan
        from binlake.capture.snapshot import snapshot
        from binlake.capture.chunking import plan_ranges
        from binlake.source.connection import connect
        from binlake.source.catalog import load_schema
        from binlake.splits import Split

        cfg = config.load(cfg_path)
        params = cfg.connection()
        conn = connect(params)
        schema = load_schema(conn, DATABASE, "customer")
        start, end = next(iter(plan_ranges(conn, schema, cfg.chunk_size, None)))
        conn.close()
        plain, n, stats = profile_chunk(params, schema, Split(schema.name, 1, 0, start, end, 16))
        lines += ["## One chunk read in-process", "",
                  f"read_chunk + JSON encoding of {n:,} rows: {plain:.3f} s = {n / plain:,.0f} rows/s "
                  "on one core (no profiler).", "", "```", stats.strip(), "```", ""]

        timings, undo = timed_steps()
        os.environ.setdefault("BINLAKE_DRIVER_MEMORY", "2g")
        t0 = time.monotonic()
        ctx = Context(cfg)
        ctx.session()
        t1 = time.monotonic()
        plan(cfg, ctx)
        t2 = time.monotonic()
        snapshot(cfg, None, ctx)
        t3 = time.monotonic()
        undo()
        lines += ["## One snapshot in-process, by step", "",
                  f"Spark session start {t1 - t0:.1f} s, plan {t2 - t1:.1f} s, snapshot {t3 - t2:.1f} s "
                  f"({rows / (t3 - t2):,.0f} rows/s).", "",
                  "| step | calls | total s | mean s |", "|---|---|---|---|"]
        for label, values in timings.items():
            lines.append(f"| {label} | {len(values)} | {sum(values):.1f} | {sum(values) / len(values):.1f} |")
        ctx.session().stop()
    finally:
        source.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
        harness.stop_source(source)
    harness.RESULTS.mkdir(parents=True, exist_ok=True)
    out = harness.RESULTS / "profile.md"
    out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
