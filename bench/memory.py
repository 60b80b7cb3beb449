"""Memory: peak resident memory of the whole `binlake snapshot` process tree at 1x and 5x rows.

A snapshot whose memory grows with the table would fail on a big one; `growth` = large / small should
stay near 1. The small run reuses the snapshot section's figure when that section ran at the same size
in the same benchmark run.
"""

from __future__ import annotations

import time
from typing import Any

from harness import Source, env_int
from snapshot import TABLE, measure_snapshot

DATABASE = "bench_memory"


def run(source: Source, rows: int, snapshot_figures: dict[str, Any] | None) -> dict[str, Any]:
    began = time.monotonic()
    small_rows = env_int("BENCH_MEMORY_ROWS", rows)
    large_rows = 5 * small_rows
    if snapshot_figures is not None and snapshot_figures.get("rows") == small_rows:
        small = {"rows": small_rows, "peak_rss_mb": snapshot_figures["peak_rss_mb"],
                 "peak_rss_parts_mb": snapshot_figures["peak_rss_parts_mb"],
                 "peak_pss_mb": snapshot_figures["peak_pss_mb"],
                 "rows_per_s": snapshot_figures["rows_per_s"], "wall_s": snapshot_figures["wall_s"],
                 "in_process_rows_per_s": snapshot_figures.get("in_process_rows_per_s"), "from": "snapshot section"}
    else:
        small = measure_snapshot(source, DATABASE, small_rows, "memory-small").figures
    large = measure_snapshot(source, DATABASE, large_rows, "memory-large").figures
    source.execute(f"DROP DATABASE IF EXISTS {DATABASE}")
    return {
        "table": f"{TABLE} (TPC-DS customer shape)",
        "rows_small": small_rows,
        "rows_large": large_rows,
        "peak_rss_mb_small": small["peak_rss_mb"],
        "peak_rss_mb_large": large["peak_rss_mb"],
        "growth": round(large["peak_rss_mb"] / small["peak_rss_mb"], 3),
        "peak_pss_mb_small": small["peak_pss_mb"],
        "peak_pss_mb_large": large["peak_pss_mb"],
        "growth_pss": round(large["peak_pss_mb"] / small["peak_pss_mb"], 3),
        "parts_small_mb": small["peak_rss_parts_mb"],
        "parts_large_mb": large["peak_rss_parts_mb"],
        "rows_per_s_small": small["rows_per_s"],
        "rows_per_s_large": large["rows_per_s"],
        "in_process_rows_per_s_small": small.get("in_process_rows_per_s"),
        "in_process_rows_per_s_large": large.get("in_process_rows_per_s"),
        "wall_s_small": small["wall_s"],
        "wall_s_large": large["wall_s"],
        "section_s": round(time.monotonic() - began, 1),
    }
