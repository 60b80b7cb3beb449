"""Run by test_s3_lake.py under spark-submit: binlake's storage layer on the s3a:// folder given as the
first argument, through the Hadoop FileSystem of this Spark session. Prints what each call found, as
one JSON object."""

from __future__ import annotations

import json
import sys
import threading

from pyspark.sql import SparkSession

from binlake.lake.storage import HadoopLocation, location

spark = SparkSession.builder.getOrCreate()
root = location(sys.argv[1], lambda: spark)
assert isinstance(root, HadoopLocation)
f = root / "start.json"
found: dict[str, object] = {"before": f.exists()}
f.write_text("one")
f.write_text("two")
found["replaced"] = f.read_text()
once = root / "intents" / "db__t"
found["first"] = once.create_text("first")
found["second"] = once.create_text("second")
found["kept"] = once.read_text()
# racing first writes: on each name exactly one of 6 writers started together wins
wins: dict[str, list[int]] = {}


def race(n: int, barrier: threading.Barrier, name: str) -> None:
    target = root / "race" / name
    barrier.wait()
    if target.create_text(str(n)):
        wins.setdefault(name, []).append(n)


for i in range(5):
    barrier = threading.Barrier(6)
    writers = [threading.Thread(target=race, args=(n, barrier, f"n{i}")) for n in range(6)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
found["race"] = [len(wins.get(f"n{i}", [])) == 1 and (root / "race" / f"n{i}").read_text() == str(wins[f"n{i}"][0])
                 for i in range(5)]
found["names"] = [p.name for p in root.iterdir()]
found["is_dir"] = (root / "intents").is_dir()
once.unlink()
found["unlinked"] = not once.exists()
root.remove_tree()
found["removed"] = not f.exists()
print("STORAGE " + json.dumps(found))
spark.stop()
