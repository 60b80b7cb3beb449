"""Print the first rows of every silver table of a binlake configuration (used by `make demo`), by key,
and for a table `source.columns` names, which columns it captures."""

from __future__ import annotations

import argparse
import json

from binlake.capture.context import Context
from binlake.config import load


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-c", "--config", required=True)
    args = parser.parse_args()
    ctx = Context(load(args.config))
    spark = ctx.session()
    for name, schema in ctx.schemas().items():
        ref = ctx.target.silver(name)
        df = spark.read.format("delta").load(ref.location)
        print(f"\n{ref.name} ({df.count()} rows) at {ref.location}")
        if schema.choice:
            print(f"source.columns {json.dumps(schema.choice.to_dict())}: {name} captured as "
                  f"{', '.join(schema.names)}")
        df.orderBy(*schema.key).show(5, truncate=40)


if __name__ == "__main__":
    main()
