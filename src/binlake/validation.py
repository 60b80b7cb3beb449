"""`binlake check`: is the source set up for lock-free snapshot + binlog handover?"""

from __future__ import annotations

from binlake.config import Config


def check(cfg: Config) -> list[str]:
    raise NotImplementedError
