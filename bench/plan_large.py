"""A large table end to end: planning time, total snapshot time and peak memory of the whole
process tree (driver, JVM, Python workers), for a table of several million rows.

    .venv/bin/python bench/plan_large.py [--rows 5000000] [--sparse]

`--sparse` spaces the keys 2000 apart, so the even split strategy does not apply and every boundary
is asked of the database (the uneven strategy, the one a 10^8-row string or composite key gets).
Two timed runs of the real CLI on fresh lakes: `binlake plan` alone, then `binlake run
--until-caught-up`, in which reading interleaves with planning. The table is kept for the next run
(`DROP DATABASE bench_large` on the benchmark server removes it). Not part of the test suite.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import CUSTOMER_DDL, WORK, customer_select, run_cli, start_source, write_config  # noqa: E402

DATABASE = "bench_large"
TABLE = "customer"


def load(source, rows: int, sparse: bool) -> float:  # type: ignore[no-untyped-def]
    began = time.monotonic()
    source.execute(f"DROP DATABASE IF EXISTS `{DATABASE}`", f"CREATE DATABASE `{DATABASE}`")
    source.execute(CUSTOMER_DDL.format(table=TABLE), database=DATABASE)
    step = 500_000
    for lo in range(0, rows, step):
        n = min(step, rows - lo)
        key = f"((seq + {lo}) * 2000)" if sparse else f"(seq + {lo})"
        source.execute(f"INSERT INTO {TABLE} {customer_select(key, f'seq_1_to_{n}')}", database=DATABASE,
                       log_bin=False)
    source.execute(f"ANALYZE TABLE {TABLE}", database=DATABASE, log_bin=False)
    return time.monotonic() - began


def planned(text: str) -> tuple[int, float]:
    m = re.search(r"planned \S+: (\d+) splits in ([\d.]+)s", text)
    if not m:
        raise RuntimeError("no 'planned ...' line in the log")
    return int(m.group(1)), float(m.group(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=5_000_000)
    parser.add_argument("--sparse", action="store_true", help="keys 2000 apart: the uneven strategy")
    args = parser.parse_args()
    source = start_source()
    name = "plan-large-sparse" if args.sparse else "plan-large"
    try:
        have = source.scalar(f"SELECT COUNT(*) FROM `{DATABASE}`.`{TABLE}`")
        first = source.scalar(f"SELECT MIN(c_customer_sk) + 1 < MAX(c_customer_sk) / {args.rows} FROM `{DATABASE}`.`{TABLE}`")
    except Exception:  # no such table yet
        have, first = None, None
    load_s = 0.0
    if have != args.rows or bool(first) != args.sparse:
        load_s = load(source, args.rows, args.sparse)
    tables = [rf"{DATABASE}\.{TABLE}"]

    cfg, _ = write_config(name + "-plan", source, tables)
    alone = run_cli(["plan", "-c", str(cfg)], WORK / name / "plan.log").check()
    splits, plan_s = planned(alone.output)
    print(json.dumps({"rows": args.rows, "splits": splits, "plan_s": plan_s, "plan_cli_wall_s": round(alone.wall_s, 1),
                      "plan_peak_rss_mb": alone.peak_rss_mb, "plan_peak_rss_parts_mb": alone.peak_rss_parts}),
          flush=True)

    cfg, _ = write_config(name + "-run", source, tables)
    full = run_cli(["run", "-c", str(cfg), "--until-caught-up"], WORK / name / "run.log").check()
    _, plan_in_run_s = planned(full.output)
    figures = {
        "rows": args.rows,
        "strategy": "uneven (a boundary query per chunk)" if args.sparse else "even (arithmetic)",
        "table_load_s": round(load_s, 1),
        "splits": splits,
        "plan_s": plan_s,
        "plan_cli_wall_s": round(alone.wall_s, 1),
        "plan_peak_rss_mb": alone.peak_rss_mb,
        "run_wall_s": round(full.wall_s, 1),
        "run_rows_per_s": round(args.rows / full.wall_s),
        "planning_inside_run_s": plan_in_run_s,
        "run_peak_rss_mb": full.peak_rss_mb,
        "run_peak_rss_parts_mb": full.peak_rss_parts,
    }
    out = WORK / name / "figures.json"
    out.write_text(json.dumps(figures, indent=2))
    print(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
