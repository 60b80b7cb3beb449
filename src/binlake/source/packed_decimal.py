"""MySQL's packed DECIMAL: the binary form of a DECIMAL value in row events (`binlake.source.rowcodec`)
and inside binary JSON (`binlake.source.mysql_json`)."""

from __future__ import annotations

import decimal

_COMPRESSED = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]  # bytes of a DECIMAL's leftover digits


def decimal_size(precision: int, scale: int) -> int:
    """The bytes a packed DECIMAL(precision, scale) takes."""
    integral = precision - scale
    return (_COMPRESSED[integral % 9] + 4 * (integral // 9) + 4 * (scale // 9) + _COMPRESSED[scale % 9])


def read_decimal(b: bytes, p: int, precision: int, scale: int) -> tuple[decimal.Decimal, int]:
    """MySQL's packed DECIMAL: groups of 9 digits in 4 big-endian bytes, the leftover digits in fewer,
    the sign in the first bit and negative numbers stored complemented."""
    integral = precision - scale
    whole_int, whole_frac = integral // 9, scale // 9
    left_int, left_frac = integral - whole_int * 9, scale - whole_frac * 9
    size = decimal_size(precision, scale)
    raw = bytearray(b[p:p + size])
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    mask = -1 if negative else 0
    text = "-" if negative else ""
    at = 0

    def group(n: int) -> int:
        nonlocal at
        v = int.from_bytes(raw[at:at + n], "big", signed=True) ^ mask
        at += n
        return v

    if _COMPRESSED[left_int]:
        text += str(group(_COMPRESSED[left_int]))
    for _ in range(whole_int):
        text += f"{group(4):09d}"
    text += "."
    for _ in range(whole_frac):
        text += f"{group(4):09d}"
    if _COMPRESSED[left_frac]:
        text += f"{group(_COMPRESSED[left_frac]):0{left_frac}d}"
    return decimal.Decimal(text), p + size
