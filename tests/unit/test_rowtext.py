"""The native row encoding's text forms (binlake.source.rowtext, native/rowtext) against Python's own, value
for value: a DOUBLE's repr, a FLOAT's shortest single-precision text, a packed DECIMAL's digits. The row
images themselves are compared over real binlog events in tests/integration/test_row_decoding.py."""

from __future__ import annotations

import random
import struct
import subprocess
import sys

import pytest

from binlake.source import rowtext
from binlake.source.packed_decimal import read_decimal
from binlake.valuetypes import float32_text

native = pytest.importorskip("binlake.source._rowtext", reason="the native row encoding is not built here")


def _doubles(n: int) -> list[float]:
    rnd = random.Random(38)
    out = [0.1, -0.0, 0.0, 1e16, 1e15, 1e-5, 1.5e-5, 1e-4, 123.456, 9999999999999998.0, 5e-324, 2.2250738585072014e-308,
           1.7976931348623157e308, 1223383794756801.2, -637637799964508.2, 100.0, 1e22, 1e23]
    while len(out) < n:
        x = struct.unpack("<d", rnd.getrandbits(64).to_bytes(8, "little"))[0]
        if x == x and abs(x) != float("inf"):
            out.append(x)
        out.append(round(rnd.uniform(-1e6, 1e6), rnd.randint(0, 9)))
    return out


def test_a_double_is_python_s_repr() -> None:
    wrong = [x for x in _doubles(200_000) if native.float_text(x, False) != repr(x)]
    assert wrong == []


def test_a_float_is_the_shortest_single_precision_text() -> None:
    rnd = random.Random(39)
    values = [struct.unpack("<f", struct.pack("<f", x))[0] for x in _doubles(50_000) if abs(x) < 3.4e38]
    values += [struct.unpack("<f", rnd.getrandbits(32).to_bytes(4, "little"))[0] for _ in range(100_000)]
    values += [float(n) for n in range(0, 20_000_000, 1999)] + [3.4028234663852886e38, -1.1754943508222875e-38, 1234565.0]
    finite = [v for v in values if v == v and abs(v) != float("inf")]
    wrong = [v for v in finite if native.float_text(v, True) != float32_text(v)]
    assert wrong == []


def _packed(text: str, precision: int, scale: int) -> bytes:
    """MySQL's packed form of a DECIMAL(precision, scale) value (the inverse of read_decimal)."""
    sign = text.startswith("-")
    whole, _, frac = text.lstrip("-").partition(".")
    whole = whole.rjust(precision - scale, "0")[-(precision - scale):] if precision > scale else ""
    sizes = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]
    out = b""
    lead = len(whole) % 9
    if lead:
        out += int(whole[:lead]).to_bytes(sizes[lead], "big")
    for i in range(lead, len(whole), 9):
        out += int(whole[i:i + 9]).to_bytes(4, "big")
    for i in range(0, len(frac) - len(frac) % 9, 9):
        out += int(frac[i:i + 9]).to_bytes(4, "big")
    if len(frac) % 9:
        out += int(frac[len(frac) - len(frac) % 9:]).to_bytes(sizes[len(frac) % 9], "big")
    raw = bytearray(out)
    raw[0] |= 0x80
    if sign:
        raw = bytearray(b ^ 0xFF for b in raw)
    return bytes(raw)


@pytest.mark.parametrize(("precision", "scale"), [(10, 2), (65, 30), (5, 5), (20, 0), (12, 4), (38, 20), (1, 0), (9, 9), (18, 9)])
def test_a_decimal_is_python_s_text(precision: int, scale: int) -> None:
    rnd = random.Random(precision * 100 + scale)
    for _ in range(2000):
        digits = "".join(rnd.choice("0123456789") for _ in range(precision))
        text = ("-" if rnd.random() < 0.5 else "") + (digits[:precision - scale] or "0") + \
            ("." + digits[precision - scale:] if scale else "")
        data = _packed(text, precision, scale)
        expected = format(read_decimal(data, 0, precision, scale)[0], "f")
        assert native.decimal_text(data, precision, scale) == expected, text


def test_binlake_runs_on_its_python_path_without_the_extension() -> None:
    # as where it could not be built: the module is missing, and binlake imports and plans nothing natively
    code = ("import sys\n"
            "class Missing:\n"
            "    def find_spec(self, name, path=None, target=None):\n"
            "        if name == 'binlake.source._rowtext': raise ImportError(name)\n"
            "sys.meta_path.insert(0, Missing())\n"
            "from binlake.source import rowtext\n"
            "from binlake.capture import binlog_batches\n"
            "print(rowtext.available(), rowtext.compile_plan(None, []))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "None"]
    assert rowtext.available()
