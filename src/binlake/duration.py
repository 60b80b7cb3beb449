"""A length of time as a setting writes it: a whole number and a unit, `7d`, `12h`, `30m`, `90s`.

A setting of this kind keeps the text it was given (`binlake config show` prints `7d`, not
604800); `seconds` reads it. `OPTIONAL_DURATION` also takes `off`, which `seconds` reads as None.
"""

from __future__ import annotations

import re

from binlake.config_values import TEXT, Kind

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
OFF = "off"
_WRITTEN = re.compile(r"\s*([0-9]+)\s*([smhd])\s*")


def seconds(text: str) -> int | None:
    """The seconds of `text` (`90s`, `30m`, `12h`, `7d`), None for `off`; ValueError for anything else,
    a length of no time included."""
    if text.strip().lower() == OFF:
        return None
    found = _WRITTEN.fullmatch(text)
    if found is None or int(found.group(1)) == 0:
        raise ValueError(text)
    return int(found.group(1)) * UNITS[found.group(2)]


def _duration(text: str) -> str:
    if seconds(text) is None:
        raise ValueError(text)
    return text.strip()


def _optional_duration(text: str) -> str:
    seconds(text)
    return text.strip().lower() if text.strip().lower() == OFF else text.strip()


DURATION = Kind("a length of time: a whole number above 0 and s, m, h or d, like 7d, 12h, 30m or 90s",
                lambda v: _duration(TEXT.file(v)), _duration)
# YAML reads a bare `off` as False: the text as written is what counts (binlake.config_values)
OPTIONAL_DURATION = Kind("a length of time: a whole number above 0 and s, m, h or d, like 7d, 12h, 30m or 90s; "
                         "or off", lambda v: _optional_duration(TEXT.file(v)), _optional_duration)
