"""Configuration values as written: each setting has a declared type, and a value is read by it.

A value comes as text (an environment variable, `--set`) or as YAML (the file). Text is read by the
declared type alone, as Flink CDC and Debezium read every option: `--set source.username=no` is the
user 'no', `BINLAKE_SOURCE_HOSTNAME=null` the host 'null', and `0x1F` is no port (YAML would have
made them False, None and 31). An empty text leaves an optional setting unset.

In the file, YAML types a plain scalar before binlake sees it. Numbers keep YAML's reading. For a
text setting binlake takes the scalar as written instead: `username: no` is the user 'no',
`password: 0123` the password '0123', `password:` the empty one. A boolean or a number where text is
declared is never what was meant (the user would only be told to quote it), and Flink and Debezium
users expect a text option to hold the text they wrote. Only YAML's null (`~`, `null`, nothing) keeps
its meaning for an optional setting: unset.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class _Plain:
    """A plain scalar YAML typed (null, boolean, number, date): its value, and its text as written."""

    value: Any
    text: str


class Loader(yaml.SafeLoader):
    """YAML's safe loader, keeping the text of every scalar it types (see _Plain)."""


def _keeps_text(tag: str) -> None:
    construct_typed = Loader.yaml_constructors[tag]

    def construct(loader: yaml.SafeLoader, node: yaml.Node) -> _Plain:
        return _Plain(construct_typed(loader, node), str(node.value))
    Loader.add_constructor(tag, construct)


for _tag in ("null", "bool", "int", "float", "timestamp"):
    _keeps_text(f"tag:yaml.org,2002:{_tag}")


def _each(v: Any, scalar: Callable[[_Plain], Any]) -> Any:
    """`v` with each plain scalar YAML typed replaced by `scalar` of it (mapping keys as written)."""
    if isinstance(v, _Plain):
        return scalar(v)
    if isinstance(v, list):
        return [_each(x, scalar) for x in v]
    if isinstance(v, dict):
        return {written(k): _each(x, scalar) for k, x in v.items()}
    return v


def typed(v: Any) -> Any:
    """`v` as YAML typed it."""
    return _each(v, lambda plain: plain.value)


def written(v: Any) -> Any:
    """`v` with each scalar as written."""
    return _each(v, lambda plain: plain.text)


@dataclass(frozen=True)
class Kind:
    """A setting's declared type: `file` reads a value from the YAML file (plain scalars as _Plain),
    `text` one given as text. Both raise ValueError(`needs`) for a value that is not one of it."""

    needs: str
    file: Callable[[Any], Any]
    text: Callable[[str], Any]

    def from_file(self, value: Any) -> Any:
        return self._read(self.file, value)

    def from_text(self, text: str) -> Any:
        return self._read(self.text, text)

    def _read(self, reader: Callable[[Any], Any], value: Any) -> Any:
        try:
            return reader(value)
        except (TypeError, ValueError):
            raise ValueError(self.needs) from None


def _scalar_text(v: Any) -> str:
    v = written(v)
    if isinstance(v, (list, dict)) or v is None:
        raise TypeError
    return str(v)


def _opt_scalar_text(v: Any) -> str | None:
    return None if typed(v) is None else _scalar_text(v)


_DIGITS = re.compile(r"\s*[+-]?[0-9]+\s*")


def _int_text(text: str) -> int:
    if not _DIGITS.fullmatch(text):
        raise ValueError
    return int(text)


def _int_value(v: Any) -> int:
    v = typed(v)
    if isinstance(v, str):
        return _int_text(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError
    return v


def _text_list(v: Any) -> list[str]:
    v = written(v)
    if isinstance(v, str):
        return [p.strip() for p in v.split(",") if p.strip()]
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return list(v)
    raise TypeError


def _yaml_text(text: str) -> Any:
    try:
        return yaml.load(text, Loader=Loader)
    except yaml.YAMLError:
        raise ValueError from None


def _list_text(text: str) -> list[str]:
    return _text_list(_yaml_text(text) if text.lstrip().startswith("[") else text)


def _chunk_keys_value(v: Any) -> dict[str, list[str]]:
    if not isinstance(v, dict):
        raise TypeError
    return {str(written(k)): _text_list(cols) for k, cols in v.items()}


def _columns_value(v: Any) -> dict[str, dict[str, list[str]]]:
    if not isinstance(v, dict):
        raise TypeError
    out: dict[str, dict[str, list[str]]] = {}
    for table, lists in v.items():
        if not isinstance(lists, dict) or not lists or any(written(k) not in ("include", "exclude") for k in lists):
            raise TypeError
        out[str(written(table))] = {str(written(k)): _text_list(cols) for k, cols in lists.items()}
    return out


def _row_filters_value(v: Any) -> dict[str, str]:
    if not isinstance(v, dict):
        raise TypeError
    out = {str(written(k)): _scalar_text(p).strip() for k, p in v.items()}
    if not all(out.values()):
        raise ValueError
    return out


TEXT = Kind("text", _scalar_text, str)
OPTIONAL_TEXT = Kind("text", _opt_scalar_text, lambda t: t or None)
WHOLE = Kind("a whole number in decimal digits", _int_value, _int_text)
OPTIONAL_WHOLE = Kind("a whole number in decimal digits, or nothing", lambda v: None if typed(v) is None else _int_value(v),
                      lambda t: _int_text(t) if t.strip() else None)
TEXT_LIST = Kind("a list of strings (or one comma-separated string)", _text_list, _list_text)
CHUNK_KEYS = Kind("a mapping of 'db.table' to a list of columns, like {shop.log: [ts, seq]}", _chunk_keys_value,
                  lambda t: _chunk_keys_value(_yaml_text(t)))
ROW_FILTERS = Kind("a mapping of 'db.table' to one SQL predicate, like {shop.orders: 'tenant_id = 7'}",
                   _row_filters_value, lambda t: _row_filters_value(_yaml_text(t)) if t.strip() else {})
COLUMNS = Kind("a mapping of 'db.table' to {include: [columns]} or {exclude: [columns]}, like "
               "{shop.customers: {exclude: [ssn]}}", _columns_value,
               lambda t: _columns_value(_yaml_text(t)) if t.strip() else {})


def choice(*allowed: str) -> Kind:
    def check(text: str) -> str:
        if text not in allowed:
            raise ValueError
        return text
    return Kind(" or ".join(repr(a) for a in allowed), lambda v: check(_scalar_text(v)), check)
