"""Every character set the server offers, through both capture paths, equal to the server's own text.

The snapshot's SELECT gets text the server converted to utf8mb4; the binlog carries the stored bytes,
which binlake decodes (`binlake.source.charsets`). Both must give what `CONVERT(col USING utf8mb4)`
gives. The first test checks the decoding of every character of every set against the running
server; the second captures text in every set in value columns (CHAR, VARCHAR, TEXT, ENUM, SET)
and in composite keys, through the snapshot and binlog inserts, updates, deletes and key changes,
and compares silver, read with delta-rs, with the source.
"""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from binlake.errors import UnconvertibleValueError
from binlake.source.charsets import candidates, decoder, server_text

from .capture import connect, run_once, silver_rows, write_config


def _character_sets(cur) -> dict[str, int]:  # type: ignore[no-untyped-def]
    cur.execute("SHOW CHARACTER SET")
    return {r[0]: int(r[3]) for r in cur.fetchall() if r[0] != "binary"}


def _characters(cur, charset: str, maxlen: int) -> dict[bytes, str]:  # type: ignore[no-untyped-def]
    """Every character of `charset`, as its bytes and the server's text; for the Unicode sets, a
    sample across the planes (their decoding is the standard codec's)."""
    if charset.startswith(("utf", "ucs")):
        sample = "aé€\u0800\uffee日本語한국" + ("" if charset == "ucs2" or maxlen < 4 else "😀\U0010fffd")
        cur.execute(f"SELECT HEX(CONVERT(%s USING {charset}))", (sample,))
        raw = bytes.fromhex(cur.fetchone()[0])
        return {raw: sample}
    return server_text(cur, charset, candidates(charset, maxlen))


def test_every_character_decodes_as_the_server_converts_it(dev_db) -> None:  # type: ignore[no-untyped-def]
    """Every valid byte sequence of every set, alone and run together (the multi-byte decoder must find
    each character's length), decodes to the server's text."""
    wrong: dict[str, list[str]] = {}
    with connect(dev_db.running_port()) as conn, conn.cursor() as cur:
        sets = _character_sets(cur)
        for charset, maxlen in sorted(sets.items()):
            decode = decoder(charset)
            chars = _characters(cur, charset, maxlen)
            bad = [f"{seq.hex()}: server {text!r}, binlake {decode(seq)!r}" for seq, text in chars.items()
                   if decode(seq) != text]
            seqs = list(chars)
            random.Random(charset).shuffle(seqs)
            for i in range(0, len(seqs), 200):
                run = seqs[i:i + 200]
                if decode(b"x".join(run)) != "x".join(chars[s] for s in run):
                    bad.append(f"the run of {len(run)} characters from {run[0].hex()}")
            if bad:
                wrong[charset] = bad[:5] + [f"... {len(bad)} in all"]
            assert len(chars) > (0 if charset.startswith(("utf", "ucs")) else 90), charset
    assert not wrong, wrong
    # the sets whose text the README says it decodes: a new server's set fails here until tables are made
    assert set(sets) <= {"armscii8", "ascii", "big5", "cp1250", "cp1251", "cp1256", "cp1257", "cp850", "cp852",
                         "cp866", "cp932", "dec8", "eucjpms", "euckr", "gb18030", "gb2312", "gbk", "geostd8",
                         "greek", "hebrew", "hp8", "keybcs2", "koi8r", "koi8u", "latin1", "latin2", "latin5",
                         "latin7", "macce", "macroman", "sjis", "swe7", "tis620", "ucs2", "ujis", "utf16",
                         "utf16le", "utf32", "utf8mb3", "utf8mb4"}


KEY_PARTS = 14  # character sets per key table (a key has at most 16 parts)


def _texts(cur, charset: str, maxlen: int, rnd: random.Random) -> list[bytes]:  # type: ignore[no-untyped-def]
    """Non-ASCII characters of `charset` as stored bytes, spread over the whole set, each one that
    the server converts to utf8mb4 and back to the same bytes (so it can be written as text)."""
    chars = _characters(cur, charset, maxlen)
    if charset.startswith(("utf", "ucs")):
        return [t.encode(UNICODE_CODECS.get(charset, "utf-8")) for t in next(iter(chars.values())) if not t.isascii()]
    seqs = [s for s, t in chars.items() if not t.isascii() and t != "\ufffd"]
    if not seqs:  # ascii: its own characters
        seqs = [s for s, t in chars.items() if t.isalnum()]
    return sorted(rnd.sample(seqs, min(len(seqs), 60)))


def _members(cur, charset: str, texts: list[bytes]) -> list[bytes]:  # type: ignore[no-untyped-def]
    """Three printable characters that differ under the set's default collation (ENUM and SET members
    must)."""
    out: list[bytes] = []
    for raw in texts:
        if _text(cur, charset, raw).isprintable() and all(_differ(cur, charset, raw, other) for other in out):
            out.append(raw)
        if len(out) == 3:
            return out
    raise AssertionError(f"fewer than three distinct characters in {charset}")


def _differ(cur, charset: str, a: bytes, b: bytes) -> bool:  # type: ignore[no-untyped-def]
    cur.execute(f"SELECT {_literal(charset, a)} <> {_literal(charset, b)}")
    return bool(cur.fetchone()[0])


def _text(cur, charset: str, raw: bytes) -> str:  # type: ignore[no-untyped-def]
    cur.execute(f"SELECT CONVERT({_literal(charset, raw)} USING utf8mb4)")
    return str(cur.fetchone()[0])


UNICODE_CODECS = {"utf16": "utf-16-be", "utf16le": "utf-16-le", "utf32": "utf-32-be", "ucs2": "utf-16-be"}


def _ascii(charset: str, text: str) -> bytes:
    """ASCII text as `charset` stores it (two or four bytes a character in the UTF-16 and UTF-32 sets)."""
    return text.encode(UNICODE_CODECS.get(charset, "ascii"))


def _literal(charset: str, raw: bytes) -> str:
    return f"_{charset} x'{raw.hex()}'" if raw else "''"


@pytest.mark.slow  # over a minute a server; the decoding itself is checked on both servers above
def test_text_in_every_character_set_through_snapshot_and_binlog(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    port = dev_db.running_port()
    rnd = random.Random(20)
    with connect(port, database) as conn, conn.cursor() as cur:
        sets = sorted(_character_sets(cur).items())
        texts = {cs: _texts(cur, cs, maxlen, rnd) for cs, maxlen in sets}
        # ENUM and SET members are written as text; the server converts them to the column's set
        members = {cs: _members(cur, cs, texts[cs]) for cs in texts}
        member_text = {cs: [_text(cur, cs, raw) for raw in members[cs]] for cs in texts}
        names = [cs for cs, _ in sets]
        # one wide table of value columns, one column family per set
        cols = []
        for cs in names:
            listed = ", ".join(conn.escape(t) for t in member_text[cs])
            cols += [f"c_{cs} CHAR(6) CHARACTER SET {cs}", f"v_{cs} VARCHAR(80) CHARACTER SET {cs}",
                     f"t_{cs} TEXT CHARACTER SET {cs}", f"e_{cs} ENUM({listed}) CHARACTER SET {cs}",
                     f"s_{cs} SET({listed}) CHARACTER SET {cs}"]
        cur.execute(f"CREATE TABLE vals (id INT PRIMARY KEY, {', '.join(cols)}) ROW_FORMAT=DYNAMIC")
        # composite keys of text in up to 14 sets each
        groups = [names[i:i + KEY_PARTS] for i in range(0, len(names), KEY_PARTS)]
        for g, group in enumerate(groups):
            parts = ", ".join(f"k_{cs} VARCHAR(6) CHARACTER SET {cs} NOT NULL" for cs in group)
            cur.execute(f"CREATE TABLE keys{g} ({parts}, n INT, PRIMARY KEY ({', '.join('k_' + cs for cs in group)}))")

        def value_cells(i: int) -> list[str]:
            out = []
            for cs in names:
                t = texts[cs]
                pick = [t[(i * 7 + j) % len(t)] for j in range(len(t))]
                out += [_literal(cs, b"".join(pick[:3])), _literal(cs, b"".join(pick[:12]) + _ascii(cs, " ")),
                        _literal(cs, b"".join(pick)), _literal(cs, members[cs][i % 3]),
                        _literal(cs, _ascii(cs, ",").join(sorted({members[cs][i % 3], members[cs][(i + 1) % 3]})))]
            return out

        columns = [f"{p}_{cs}" for cs in names for p in "cvtes"]

        def key_row(group: list[str], i: int) -> str:
            return ", ".join(_literal(cs, texts[cs][(i * 5) % len(texts[cs])] + _ascii(cs, str(i)))
                             for cs in group) + f", {i}"

        for i in range(1, 7):
            cur.execute(f"INSERT INTO vals VALUES ({i}, {', '.join(value_cells(i))})")
            for g, group in enumerate(groups):
                cur.execute(f"INSERT INTO keys{g} VALUES ({key_row(group, i)})")

    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\..*"], tmp_path / "lake", "6200-6204",
                            chunk_size=3)
    cfg = run_once(cfg_path)

    with connect(port, database) as conn, conn.cursor() as cur:
        for i in range(7, 10):  # inserts
            cur.execute(f"INSERT INTO vals VALUES ({i}, {', '.join(value_cells(i))})")
            for g, group in enumerate(groups):
                cur.execute(f"INSERT INTO keys{g} VALUES ({key_row(group, i)})")
        for i, j in ((1, 11), (8, 12)):  # updates, of a snapshot row and of a streamed one
            sets = ", ".join(f"{c} = {v}" for c, v in zip(columns, value_cells(j)))
            cur.execute(f"UPDATE vals SET {sets} WHERE id = {i}")
        cur.execute("DELETE FROM vals WHERE id IN (2, 9)")
        for g, group in enumerate(groups):
            first = group[0]
            cur.execute(f"UPDATE keys{g} SET k_{first} = {_literal(first, texts[first][-1])} WHERE n = 3")  # key change
            cur.execute(f"UPDATE keys{g} SET n = 30 WHERE n = 7")
            cur.execute(f"DELETE FROM keys{g} WHERE n IN (4, 8)")
    run_once(cfg_path)

    with connect(port, database) as conn, conn.cursor() as cur:
        for table in ["vals", *(f"keys{g}" for g in range(len(groups)))]:
            cur.execute(f"SELECT * FROM {table}")
            names_ = [d[0] for d in cur.description]
            source = sorted((dict(zip(names_, r)) for r in cur.fetchall()), key=repr)
            got = sorted(({k: v for k, v in r.items() if k in names_} for r in silver_rows(cfg, f"{database}.{table}")),
                         key=repr)
            assert len(got) == len(source), table
            diffs = [f"{k}: source {a[k]!r} silver {b[k]!r}" for a, b in zip(source, got) for k in names_ if a[k] != b[k]]
            assert not diffs, (table, diffs[:10])


def test_a_value_binlake_cannot_convert_stops_with_one_line_and_lands_nothing(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """MariaDB stores a UTF-16 surrogate (bytes ED A0 80) in a utf8mb4 column when the client sends it
    as binary: no character, so no text for silver. The binlog's batch holding it, and then the
    snapshot's chunk holding it, stop the run with one line (exit code 2) naming the table, the column
    and the key, never the value, and write nothing of the batch or chunk."""
    if dev_db.server != "mariadb":
        pytest.skip("MySQL refuses to store the surrogate")
    port = dev_db.running_port()
    with connect(port, database, sql_mode="") as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(10) CHARACTER SET utf8mb4)")
        cur.execute("INSERT INTO t VALUES (1, 'good'), (2, 'fine')")
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.t"], tmp_path / "lake", "6210-6214")
    cfg = run_once(cfg_path)
    with connect(port, database, sql_mode="", character_set_client="binary") as conn, conn.cursor() as cur:
        cur.execute("BEGIN")
        cur.execute("INSERT INTO t VALUES (3, 'ok')")
        cur.execute("INSERT INTO t VALUES (4, x'eda080')")
        cur.execute("UPDATE t SET v = 'changed' WHERE id = 1")
        cur.execute("COMMIT")
    with pytest.raises(UnconvertibleValueError) as raised:
        run_once(cfg_path)
    message = str(raised.value)
    assert raised.value.exit_code == 2 and "\n" not in message
    assert f"captured table {database}.t: column v (varchar(10), utf8mb4) of the row with key id=4" in message
    assert "nothing of this batch was written" in message and "eda080" not in message.lower()
    assert sorted((r["id"], r["v"]) for r in silver_rows(cfg, f"{database}.t")) == [(1, "good"), (2, "fine")]

    # the same row met by a snapshot, through the command line: exit code 2 and one line on stderr
    cfg_path = write_config(tmp_path / "again.yml", port, [f"{database}\\.t"], tmp_path / "lake2", "6215-6219",
                            chunk_size=2)
    done = subprocess.run([str(Path(sys.executable).with_name("binlake")), "run", "-c", str(cfg_path),
                           "--until-caught-up"], capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 2, done.stderr[-2000:]
    lines = done.stderr.strip().splitlines()
    assert lines[-1].startswith(f"binlake: captured table {database}.t: a text value in chunk {database}.t#"), lines[-3:]
    assert "nothing of this chunk was written" in lines[-1]
    assert not any("Traceback" in line for line in lines)


def test_a_column_converted_to_another_character_set_is_decoded_in_its_new_one(dev_db, database, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """ALTER TABLE ... CONVERT TO CHARACTER SET changes the bytes the binlog carries for the same text:
    rows after it decode in the new set, rows before it in the old."""
    port = dev_db.running_port()
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE t (id INT PRIMARY KEY, v VARCHAR(20), t TEXT) CHARACTER SET latin1")
        cur.execute("INSERT INTO t VALUES (1, 'café', 'ça')")
    cfg_path = write_config(tmp_path / "binlake.yml", port, [f"{database}\\.t"], tmp_path / "lake", "6220-6224")
    cfg = run_once(cfg_path)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("INSERT INTO t VALUES (2, 'naïve', 'Ärger')")
        cur.execute("ALTER TABLE t CONVERT TO CHARACTER SET ucs2")
        cur.execute("INSERT INTO t VALUES (3, 'Übermaß €', 'ŝ')")
        cur.execute("UPDATE t SET v = 'déjà vu' WHERE id = 1")
        cur.execute("ALTER TABLE t CONVERT TO CHARACTER SET utf8mb4")
        cur.execute("INSERT INTO t VALUES (4, '日本 😀', 'ü')")
    run_once(cfg_path)
    with connect(port, database) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, v, t FROM t")
        source = sorted(cur.fetchall())
    assert sorted((r["id"], r["v"], r["t"]) for r in silver_rows(cfg, f"{database}.t")) == source
