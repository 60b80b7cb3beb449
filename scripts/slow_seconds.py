"""Write tests/slow_seconds.json, the seconds each slow test takes, from a junit report of a run
(`pytest --junitxml=FILE`) that ran them: tests/conftest.py spreads the slow tests over the days of
its rotation by these. A MySQL time is counted as MariaDB's (divided by 1.7) when MariaDB's is missing.

    python scripts/slow_seconds.py junit.xml [more.xml ...]
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

TABLE = Path(__file__).resolve().parent.parent / "tests" / "slow_seconds.json"
MYSQL_FACTOR = 1.7


def measured(reports: list[str]) -> dict[str, float]:
    """Seconds by node id without the server, MariaDB's first."""
    found: dict[str, float] = {}
    for report in reports:
        for case in ET.parse(report).iter("testcase"):
            if case.find("skipped") is not None:
                continue
            node = case.get("classname", "").replace(".", "/") + ".py::" + case.get("name", "")
            seconds = float(case.get("time", 0))
            # keyed as tests/conftest.py keys them: every occurrence of the server's name taken out
            if "[mariadb" in node:
                found[node.replace("mariadb", "")] = seconds
            elif "[mysql" in node:
                found.setdefault(node.replace("mysql", ""), seconds / MYSQL_FACTOR)
    return found


def main(reports: list[str]) -> None:
    table = json.loads(TABLE.read_text())
    seen = measured(reports)
    updated = {name: round(seen.get(name, seconds)) for name, seconds in table.items()}
    TABLE.write_text(json.dumps(updated, indent=0, sort_keys=True) + "\n")
    print(f"{sum(name in seen for name in table)} of {len(table)} slow tests measured; {TABLE} written")


if __name__ == "__main__":
    main(sys.argv[1:])
