"""Delta's deletion vectors (DVs), as binlake writes and reads them: the rows of a data file marked
deleted, so that a change replaces a row without rewriting its file (Delta's merge-on-read). The
commits that carry them are `binlake.lake.delta_commit`'s.

The format (Delta's PROTOCOL.md, "Deletion Vector Format"), checked against delta-spark 4.4, which
reads these DVs, and delta-rs, which reads them too:

- a DV is a set of row positions (0-based, in the data file's row order) as a RoaringBitmapArray:
  the magic number 1681511377, then the 64-bit "portable" Roaring format (a 64-bit bucket count;
  for each bucket, in ascending order, its 32-bit high key and the standard serialization of a
  32-bit Roaring bitmap of the low halves); all little-endian. Written here with array and bitmap
  containers (no run containers, which are optional); read with all three.
- a DV file (`deletion_vector_<uuid>.bin` in the table's folder) is a version byte 1, then for each
  DV its size (4 bytes), its bytes and their CRC-32 (4 bytes), big-endian. A descriptor's `offset`
  points at the size. Its `pathOrInlineDv` is an optional prefix (a folder) and the UUID in Z85.
- a DV may instead be inline in the log (`storageType` "i": the bitmap bytes in Z85, no CRC).

Worked example: positions {3, 4, 7, 11, 18, 29} serialize to 44 bytes: the magic (4), one bucket
(8), its key 0 (4), then the 32-bit bitmap: cookie 12346 and one container (8), the container's key 0
and cardinality-1 5 (4), its offset 16 (4), and six 16-bit values (12). The protocol's own inline
example of these positions is in an older layout (big-endian, with the magic number 1681511376 of
Delta's "native" format): delta-spark 4.4 refuses it ("Unexpected RoaringBitmapArray magic number").

Beside these DVs, delta-rs 1.6 keeps working on the table: its append, MERGE and DELETE honour them
(rewriting a file drops its marked rows), its checkpoint keeps them, and its vacuum keeps the DV
files live adds use, but only in its default ("lite") mode: `vacuum(full=True)` deletes every DV
file, live ones too, and Spark can then no longer read the table. Its `to_pyarrow_table` and
`to_pyarrow_dataset` refuse a table with the feature; its SQL engine (`QueryBuilder`) and `scan`
read it; `count()` ignores the DVs. (The MERGE, the checkpoint and the lite vacuum are in this
module's tests; the rest was seen by hand with delta-rs 1.6.6.)
"""

from __future__ import annotations

import threading
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import unquote, urlparse

import numpy as np
import numpy.typing as npt

from binlake.errors import RuntimeFailure

# row positions, sorted and distinct
Positions = npt.NDArray[np.uint64]
StorageType = Literal["u", "i", "p"]

MAGIC = 1681511377  # RoaringBitmapArray, portable 64-bit format
FILE_VERSION = 1
_NO_RUNS, _RUNS = 12346, 12347  # a 32-bit bitmap's cookie: without run containers, with some
_ARRAY_MOST = 4096  # an array container's most values; a container with more is a bitmap
_CHUNK_BYTES = 8192  # a container's 65,536 rows, a bit each
_OFFSETS_FROM = 4  # a bitmap with run containers has an offset header from this many containers on
Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"
_Z85_VALUE = {c: i for i, c in enumerate(Z85)}


class CorruptDeletionVector(RuntimeFailure):
    """A DV's bytes are not what its descriptor says (size, checksum, cardinality, format)."""


# -- the bitmap ------------------------------------------------------------------------------------


def positions(values: Iterable[int] | npt.ArrayLike) -> Positions:
    """`values` as sorted distinct row positions (negative ones refused); an array of them already so
    is returned as it is (a DV's rows pass here at each step of a batch's commit)."""
    if isinstance(values, np.ndarray) and values.dtype == np.uint64 and values.ndim == 1 and (
            values.size < 2 or bool((values[1:] > values[:-1]).all())):
        return values
    array = np.asarray(values if not isinstance(values, (set, frozenset)) else sorted(values))
    if array.size and array.dtype.kind not in "iu":
        raise ValueError(f"row positions are integers, not {array.dtype}")
    if array.size and array.dtype.kind == "i" and array.min() < 0:
        raise ValueError(f"a row position is negative: {int(array.min())}")
    # sorted, then its repeats dropped: numpy 2's np.unique hashes, ten times slower on these; a stable
    # sort (timsort here) takes a DV's sorted rows and a batch's new ones as two runs, in linear time
    array = np.sort(array.astype(np.uint64).ravel(), kind="stable")
    return array[np.concatenate([[True], array[1:] != array[:-1]])] if array.size else array


class Marks:
    """The rows of one data file a DV marks, as a bitset (`bits`, read-only: row r is bit r % 8 of byte
    r // 8, in whole chunks of 65,536 rows), with the rows of its sparse chunks also sorted (`sparse`). A marked batch unites a few
    thousand new rows with every marked file's DV and writes each whole again, a million rows and more
    at every batch on a 5M-row silver under random updates. Roaring's containers are chunks of 65,536
    rows: one of more than 4,096 marked is a bitmap container, the bitset's 8,192 bytes of it as they
    are; one of fewer is an array container, its rows' low 16 bits, which the sorted rows of the sparse
    chunks are. Held as the sorted rows alone, each batch's union copied 8 bytes per marked row and made
    each bitmap container anew: a third of silver's apply.

    Worked example: rows {3, 4, 11} are bits 0b00011000 and 0b00001000, count 3; united with {4, 9} they
    are 0b00011000 and 0b00001010, count 4 (one new), all in chunk 0, which is sparse: {3, 4, 9, 11}."""

    __slots__ = ("bits", "count", "sparse")

    def __init__(self, bits: npt.NDArray[np.uint8], count: int, sparse: Positions) -> None:
        bits.flags.writeable = sparse.flags.writeable = False
        self.bits, self.count, self.sparse = bits, count, sparse

    @classmethod
    def of(cls, rows: Iterable[int] | npt.ArrayLike) -> Marks:
        """The marks of the row positions `rows`, a data file's: fewer than 2^32 (Parquet's row groups
        count their rows in 64 bits, but no writer makes a file of four billion rows; a bitset that wide
        would take 512 MB)."""
        rows = positions(rows)
        if rows.size and rows[-1] >> np.uint64(32):
            raise ValueError(f"row position {int(rows[-1])} is past the 2^32 rows of a data file taken here")
        return NO_MARKS.united(rows)[0]

    @property
    def nbytes(self) -> int:
        return int(self.bits.nbytes + self.sparse.nbytes)

    def rows(self) -> Positions:
        """The marked rows, sorted."""
        return np.flatnonzero(np.unpackbits(self.bits, bitorder="little")).astype(np.uint64)

    def holds(self, rows: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
        """Which of the row positions `rows` are marked."""
        rows = np.asarray(rows).astype(np.uint64, copy=False)
        byte = (rows >> np.uint64(3)).astype(np.intp)
        inside = byte < self.bits.size
        held = np.zeros(rows.size, np.bool_)
        held[inside] = (self.bits[byte[inside]] >> (rows[inside] & np.uint64(7)).astype(np.uint8)) & 1 == 1
        return held

    def united(self, rows: Iterable[int] | npt.ArrayLike) -> tuple[Marks, int]:
        """These marks with the row positions `rows`', and how many of those were not marked yet (none:
        these marks themselves)."""
        rows = positions(rows)
        fresh = rows[~self.holds(rows)]
        if not fresh.size:
            return self, 0
        byte = (fresh >> np.uint64(3)).astype(np.intp)
        size = max(self.bits.size, int(byte[-1]) + 1)
        bits = np.zeros(size + -size % _CHUNK_BYTES, np.uint8)  # whole chunks: `_chunks` is then a view
        bits[:self.bits.size] = self.bits
        starts = np.flatnonzero(np.concatenate([[True], byte[1:] != byte[:-1]]))
        # the rows of one byte are distinct bits, so their sum is their union
        bits[byte[starts]] |= np.add.reduceat(np.left_shift(1, fresh & np.uint64(7)).astype(np.uint8), starts)
        # the new rows put among the sparse chunks' in their places; those of a chunk now dense taken out
        sparse = np.insert(self.sparse, np.searchsorted(self.sparse, fresh), fresh)
        touched = np.unique(fresh >> np.uint64(16)).astype(np.intp)
        counts = np.bitwise_count(_chunks(bits)[0][touched].view("<u8")).sum(axis=1, dtype=np.int64)
        dense = touched[counts > _ARRAY_MOST]
        if dense.size:
            sparse = sparse[~np.isin((sparse >> np.uint64(16)).astype(np.intp), dense)]
        return Marks(bits, self.count + int(fresh.size), sparse), int(fresh.size)

    def unmarked(self, records: int) -> npt.NDArray[np.bool_]:
        """Which of a file's `records` rows are not marked."""
        return ~np.unpackbits(self.bits, count=records, bitorder="little").view(np.bool_)


def _chunks(bits: npt.NDArray[np.uint8]) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.int64]]:
    """A Marks' bitset `bits` as its chunks of 65,536 rows (8,192 bytes each, a view), and how many rows
    of each are set."""
    chunks = bits.reshape(-1, _CHUNK_BYTES)
    return chunks, np.bitwise_count(chunks.view("<u8")).sum(axis=1, dtype=np.int64)


NO_MARKS = Marks(np.zeros(0, np.uint8), 0, np.empty(0, np.uint64))


def serialize(rows: Iterable[int] | npt.ArrayLike | Marks) -> bytes:
    """The RoaringBitmapArray of `rows` (marks, or row positions; portable format, with Delta's magic)."""
    if isinstance(rows, Marks):  # one bucket: a data file's rows are fewer than 2^32 (see Marks.of)
        buckets = [(0, _marked32(rows))] if rows.count else []
    else:
        rows = positions(rows)
        if rows.size and rows[-1] >> np.uint64(63):  # Delta keeps a bucket key's top bit 0 (Java reads it signed)
            raise ValueError(f"row position {int(rows[-1])} is past Delta's largest")
        keys, starts, _ = _groups((rows >> np.uint64(32)).astype(np.uint32))
        buckets = [(key, _serialize32(rows[begin:end])) for key, begin, end in zip(keys, starts, [*starts[1:], rows.size])]
    parts = [np.array([MAGIC], "<u4").tobytes(), np.array([len(buckets)], "<u8").tobytes()]
    for key, data in buckets:
        parts += [np.array([key], "<u4").tobytes(), data]
    return b"".join(parts)


def _groups(keys: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """The distinct values of the sorted `keys`, where each one's run starts, and its length."""
    starts = np.flatnonzero(np.concatenate([[True], keys[1:] != keys[:-1]])) if keys.size else np.empty(0, np.intp)
    return keys[starts], starts, np.diff(np.append(starts, keys.size))


def _serialize32(rows: Positions) -> bytes:
    """The 32-bit Roaring bitmap of the sorted distinct positions `rows` (one bucket's: their low 32
    bits), its containers found by a search for their bounds."""
    first, last = int(rows[0] >> np.uint64(16)) & 0xFFFF, int(rows[-1] >> np.uint64(16)) & 0xFFFF
    base = int(rows[0]) & ~0xFFFFFFFF
    bounds = np.searchsorted(rows, (base + (np.arange(first, last + 2, dtype=np.uint64) << np.uint64(16))))
    counts = np.diff(bounds)
    held = np.flatnonzero(counts)
    keys, starts, counts = np.arange(first, last + 1)[held], bounds[:-1][held], counts[held]
    bodies = []
    for key, start, count in zip(keys.tolist(), starts.tolist(), counts.tolist()):
        if count <= _ARRAY_MOST:
            bodies.append(rows[start:start + count].astype("<u2").tobytes())  # the low 16 bits (a cast wraps)
        else:
            bits = np.zeros(1 << 16, np.bool_)
            bits[rows[start:start + count].astype(np.uint16)] = True
            bodies.append(np.packbits(bits, bitorder="little").tobytes())  # 1,024 little-endian words
    return _bitmap32(keys, counts, bodies)


def _marked32(marks: Marks) -> bytes:
    """The 32-bit Roaring bitmap of `marks` (bucket 0): its bitmap containers the bitset's chunks as they
    are, its array containers the sorted rows of its sparse chunks."""
    chunks, counts = _chunks(marks.bits)
    keys = np.flatnonzero(counts)
    counts = counts[keys]
    sparse = keys[counts <= _ARRAY_MOST].astype(np.uint64) << np.uint64(16)
    bounds = np.searchsorted(marks.sparse, sparse).tolist()
    bodies, array = [], 0
    for key, count in zip(keys.tolist(), counts.tolist()):
        if count > _ARRAY_MOST:
            bodies.append(chunks[key].tobytes())  # 1,024 little-endian words
        else:
            at = bounds[array]
            bodies.append(marks.sparse[at:at + count].astype("<u2").tobytes())  # the low 16 bits (a cast wraps)
            array += 1
    return _bitmap32(keys, counts, bodies)


def _bitmap32(keys: npt.NDArray[Any], counts: npt.NDArray[np.int64], bodies: list[bytes]) -> bytes:
    """The standard serialization of a 32-bit Roaring bitmap of the containers at the 16-bit `keys`,
    holding `counts` values each, whose bodies are `bodies` (no run containers)."""
    sizes = np.where(counts > _ARRAY_MOST, 8192, 2 * counts).astype(np.int64)
    header = 8 + 8 * len(keys)
    offsets = header + np.concatenate([[0], np.cumsum(sizes[:-1], dtype=np.int64)])
    described = np.empty(2 * len(keys), "<u2")
    described[0::2], described[1::2] = keys, counts - 1
    return b"".join([np.array([_NO_RUNS, len(keys)], "<u4").tobytes(), described.tobytes(),
                     offsets.astype("<u4").tobytes(), *bodies])


def deserialize(data: bytes) -> Positions:
    """The row positions of the RoaringBitmapArray `data` (portable format, with Delta's magic)."""
    if len(data) < 12 or int.from_bytes(data[:4], "little") != MAGIC:
        raise CorruptDeletionVector(f"a deletion vector does not start with the magic number {MAGIC} "
                                    f"(of the portable RoaringBitmapArray format)")
    buckets, at, out = int.from_bytes(data[4:12], "little"), 12, []
    for _ in range(buckets):
        key = int.from_bytes(data[at:at + 4], "little")
        low, at = _deserialize32(data, at + 4)
        out.append(low.astype(np.uint64) | np.uint64(key << 32))
    if at != len(data):
        raise CorruptDeletionVector(f"a deletion vector has {len(data) - at} bytes after its {buckets} buckets")
    return np.concatenate(out) if out else np.empty(0, np.uint64)


def _deserialize32(data: bytes, at: int) -> tuple[npt.NDArray[np.uint32], int]:
    """The values of the 32-bit Roaring bitmap serialized at `at` of `data`, and where it ends."""
    cookie = int.from_bytes(data[at:at + 4], "little")
    if cookie == _NO_RUNS:
        count, runs, at = int.from_bytes(data[at + 4:at + 8], "little"), b"", at + 8
    elif cookie & 0xFFFF == _RUNS:
        count = (cookie >> 16) + 1
        runs, at = data[at + 4:at + 4 + (count + 7) // 8], at + 4 + (count + 7) // 8
    else:
        raise CorruptDeletionVector(f"a deletion vector's 32-bit bitmap has the unknown cookie {cookie}")
    described = np.frombuffer(data, "<u2", 2 * count, at).astype(np.uint32)
    at += 4 * count + (4 * count if not runs or count >= _OFFSETS_FROM else 0)  # the offsets are not needed
    values = []
    for i in range(count):
        key, cardinality = described[2 * i] << np.uint32(16), int(described[2 * i + 1]) + 1
        if runs and runs[i // 8] >> (i % 8) & 1:
            n = int.from_bytes(data[at:at + 2], "little")
            pairs = np.frombuffer(data, "<u2", 2 * n, at + 2).astype(np.uint32)
            low = np.concatenate([np.arange(s, s + length + 1, dtype=np.uint32)
                                  for s, length in zip(pairs[0::2], pairs[1::2])]) if n else pairs
            at += 2 + 4 * n
        elif cardinality <= _ARRAY_MOST:
            low, at = np.frombuffer(data, "<u2", cardinality, at).astype(np.uint32), at + 2 * cardinality
        else:
            bits = np.unpackbits(np.frombuffer(data, np.uint8, 8192, at), bitorder="little")
            low, at = np.flatnonzero(bits).astype(np.uint32), at + 8192
        values.append(low | key)
    return (np.concatenate(values) if values else np.empty(0, np.uint32)), at


# -- where a DV is kept ----------------------------------------------------------------------------


def z85_encode(data: bytes) -> str:
    """`data` in Z85, padded with zero bytes to a multiple of 4 as Delta pads an inline DV."""
    data += b"\0" * (-len(data) % 4)
    out = []
    for word in np.frombuffer(data, ">u4").tolist():
        out.append("".join(Z85[word // 85 ** p % 85] for p in (4, 3, 2, 1, 0)))
    return "".join(out)


def z85_decode(text: str, size: int | None = None) -> bytes:
    """The bytes the Z85 `text` encodes, the first `size` of them when given (an inline DV's padding)."""
    if len(text) % 5:
        raise CorruptDeletionVector(f"Z85 text has {len(text)} characters, not a multiple of 5")
    out = bytearray()
    for at in range(0, len(text), 5):
        word = 0
        for c in text[at:at + 5]:
            word = word * 85 + _Z85_VALUE[c]
        out += word.to_bytes(4, "big")
    return bytes(out[:size] if size is not None else out)


@dataclass(frozen=True)
class Descriptor:
    """An add or remove action's `deletionVector`: where a DV is and how many rows it marks."""

    storage_type: StorageType
    path_or_inline_dv: str
    size_in_bytes: int
    cardinality: int
    offset: int | None = None

    def __post_init__(self) -> None:
        if self.storage_type not in ("u", "i", "p"):
            raise ValueError(f"a deletion vector's storageType is 'u', 'i' or 'p', not {self.storage_type!r}")
        if self.storage_type == "i" and self.offset is not None:
            raise ValueError("an inline deletion vector has no offset")
        if self.storage_type == "u" and len(self.path_or_inline_dv) < 20:
            raise ValueError(f"a 'u' deletion vector's path ends in a 20-character Z85 UUID: {self.path_or_inline_dv!r}")

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Descriptor:
        return cls(d["storageType"], d["pathOrInlineDv"], int(d["sizeInBytes"]), int(d["cardinality"]),
                   None if d.get("offset") is None else int(d["offset"]))

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"storageType": self.storage_type, "pathOrInlineDv": self.path_or_inline_dv}
        if self.offset is not None:
            d["offset"] = self.offset
        return {**d, "sizeInBytes": self.size_in_bytes, "cardinality": self.cardinality}

    @property
    def unique_id(self) -> str:
        return self.storage_type + self.path_or_inline_dv + ("" if self.offset is None else f"@{self.offset}")

    def file(self, location: str | Path) -> Path | None:
        """The file holding this DV in the table at `location` (None for an inline one)."""
        if self.storage_type == "i":
            return None
        if self.storage_type == "p":
            return Path(unquote(urlparse(self.path_or_inline_dv).path))
        prefix, encoded = self.path_or_inline_dv[:-20], self.path_or_inline_dv[-20:]
        return Path(location) / prefix / f"deletion_vector_{uuid.UUID(bytes=z85_decode(encoded))}.bin"


def write_file(location: str | Path, bitmaps: Sequence[Marks | Iterable[int] | npt.ArrayLike],
               prefix: str = "") -> list[Descriptor]:
    """Write the DVs of `bitmaps` (marks, or row positions, each) to one new DV file of the table at
    `location` (in its folder `prefix`, if one is given): a descriptor for each."""
    file_id = prefix + z85_encode(uuid.uuid4().bytes)
    descriptors, parts, at = [], [bytes([FILE_VERSION])], 1
    kept = [given if isinstance(given, Marks) else Marks.of(given) for given in bitmaps]
    for marks, data in zip(kept, map(serialize, kept)):
        parts += [len(data).to_bytes(4, "big"), data, zlib.crc32(data).to_bytes(4, "big")]
        descriptors.append(Descriptor("u", file_id, len(data), marks.count, at))
        at += 8 + len(data)
    if descriptors:
        target = descriptors[0].file(location)
        assert target is not None
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "xb") as f:
            f.write(b"".join(parts))
        for descriptor, marks in zip(descriptors, kept):
            _DECODED.put(_held(location, descriptor), marks)  # the next read of each (the key index's) is not decoded again
    return descriptors


def inline(rows: Marks | Iterable[int] | npt.ArrayLike) -> Descriptor:
    """The descriptor of a DV kept inline in the log: its bytes in Z85 (no file, no checksum)."""
    marks = rows if isinstance(rows, Marks) else Marks.of(rows)
    data = serialize(marks)
    return Descriptor("i", z85_encode(data), len(data), marks.count)


def read_marks(location: str | Path, descriptor: Descriptor | Mapping[str, Any]) -> Marks:
    """The rows the DV `descriptor` marks, in the table at `location`; its size, checksum and
    cardinality checked. A DV is never written twice at one place, so the last few read are kept
    decoded: a batch's commit, the key index and compaction each read a file's DV."""
    dv = descriptor if isinstance(descriptor, Descriptor) else Descriptor.from_dict(descriptor)
    held = _DECODED.get(_held(location, dv))
    if held is None:
        held = Marks.of(_read(location, dv))
        _DECODED.put(_held(location, dv), held)
    return held


def _held(location: str | Path, dv: Descriptor) -> tuple[str, str, str, int | None, int, int]:
    return str(location), dv.storage_type, dv.path_or_inline_dv, dv.offset, dv.size_in_bytes, dv.cardinality


class _Decoded:
    """The DVs read last, decoded, up to `most` bytes of them (the oldest read go first). The bytes held
    are counted as DVs come and go: summed over them at every read, they took 18% of the stream's Python
    samples on a 5M-row silver, whose many small DVs fit in the bytes allowed."""

    def __init__(self, most: int) -> None:
        self.most, self.nbytes = most, 0
        self.rows: OrderedDict[tuple[str, str, str, int | None, int, int], Marks] = OrderedDict()
        self.lock = threading.Lock()

    def get(self, key: tuple[str, str, str, int | None, int, int]) -> Marks | None:
        with self.lock:
            held = self.rows.get(key)
            if held is not None:
                self.rows.move_to_end(key)
            return held

    def put(self, key: tuple[str, str, str, int | None, int, int], marks: Marks) -> None:
        with self.lock:
            old = self.rows.pop(key, None)
            self.nbytes += marks.nbytes - (0 if old is None else old.nbytes)
            self.rows[key] = marks
            while len(self.rows) > 1 and self.nbytes > self.most:
                self.nbytes -= self.rows.popitem(last=False)[1].nbytes

    def clear(self) -> None:
        with self.lock:
            self.rows.clear()
            self.nbytes = 0


# the DVs read last, kept decoded (see read_marks)
_DECODED = _Decoded(64 * 1024 * 1024)


def _read(location: str | Path, dv: Descriptor) -> Positions:
    path = dv.file(location)
    if path is None:
        data = z85_decode(dv.path_or_inline_dv, dv.size_in_bytes)
    else:
        with open(path, "rb") as f:
            if f.read(1) != bytes([FILE_VERSION]):
                raise CorruptDeletionVector(f"{path} is not a version {FILE_VERSION} deletion vector file")
            f.seek(dv.offset or 0)
            head = f.read(4 + dv.size_in_bytes + 4)
        size, data, crc = int.from_bytes(head[:4], "big"), head[4:-4], int.from_bytes(head[-4:], "big")
        if size != dv.size_in_bytes or len(head) != 8 + size:
            raise CorruptDeletionVector(f"{path} at {dv.offset} holds {size} bytes, not {dv.size_in_bytes}")
        if zlib.crc32(data) != crc:
            raise CorruptDeletionVector(f"{path} at {dv.offset}: the checksum does not match the bytes")
    rows = deserialize(data)
    if rows.size != dv.cardinality:
        raise CorruptDeletionVector(f"a deletion vector marks {rows.size} rows, its descriptor says {dv.cardinality}")
    return rows
