"""Print the first rows of every silver table of a binlake configuration (used by `make demo`)."""

from __future__ import annotations

import argparse

from binlake.config import load
from binlake.capture.context import Context


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config", required=True)
    args = parser.parse_args()
    ctx = Context(load(args.config))
    spark = ctx.session()
    for name in ctx.schemas():
        ref = ctx.target.silver(name)
        df = spark.read.format("delta").load(ref.location)
        print(f"\n{ref.name} ({df.count()} rows) at {ref.location}")
        df.show(5, truncate=40)


if __name__ == "__main__":
    main()
