//! binlake's native row encoding: the row images of a binlog row event, straight from its bytes to
//! each captured column's encoded text (the change rows' `_vals`, built into Arrow buffers in `Values`),
//! without a Python value in between. `binlake.source.rowtext` compiles a `Plan` per table shape and schema version and
//! falls back to the Python decoder for any shape or value the plan does not take: a plan answers
//! None rather than guess, and the Python path then decodes (or refuses) the event as before.

use pyo3::prelude::*;
use pyo3::types::PyBytes;

mod text;

#[derive(Clone, Copy)]
enum Decode {
    Int { size: usize, signed: bool },
    Year,
    Float,
    Double,
    Decimal { precision: usize, scale: usize },
    Bytes { prefix: usize },
    Fixed { size: usize }, // BIT: its bytes
    Enum { size: usize },
    Set { size: usize },
    Date,
    DateTime { fsp: usize },
    Timestamp { fsp: usize },
}

enum Encode {
    Skip,
    Plain,                  // integers, FLOAT, DOUBLE, DECIMAL, YEAR: their text as decoded
    Utf8,                   // text in a Unicode set stored as UTF-8
    Table(Vec<char>),       // text in a single-byte set: the server's 256 characters ('\u{fffe}': none)
    Base64 { pad: usize },  // binary strings; BINARY(n) padded with zero bytes to n
    Members(Vec<Option<String>>), // ENUM: a member's text by index (None: NULL); SET: members' texts
    Temporal { key: bool }, // DATE, DATETIME, TIMESTAMP: a key keeps a zero date's text
    Python(Py<PyAny>),      // binlake's own Python encoding of the value's bytes: text, or None for NULL
}

struct Column {
    decode: Decode,
    encode: Encode,
}

/// How to encode one table shape's row images for one schema version.
#[pyclass(frozen)]
struct Plan {
    columns: Vec<Column>,
    out: Vec<Option<usize>>,           // each captured column's table-map index (None: not in the event)
    key: Vec<usize>,                    // table-map indexes of the key columns
}

fn le(b: &[u8], p: usize, n: usize) -> Option<u64> {
    let s = b.get(p..p + n)?;
    Some(s.iter().rev().fold(0u64, |v, x| (v << 8) | *x as u64))
}

fn be(b: &[u8], p: usize, n: usize) -> Option<u64> {
    let s = b.get(p..p + n)?;
    Some(s.iter().fold(0u64, |v, x| (v << 8) | *x as u64))
}

fn signed(v: u64, n: usize) -> i64 {
    let bits = 8 * n as u32;
    if bits < 64 && v & (1 << (bits - 1)) != 0 {
        v as i64 - (1i64 << bits)
    } else {
        v as i64
    }
}

/// A DATETIME2/TIMESTAMP2 fraction of `fsp` digits at `p`: (microseconds as the Python decoder
/// computes them, the raw signed value, position after it).
fn fraction(b: &[u8], p: usize, fsp: usize) -> Option<(i64, i64, usize)> {
    let n = (fsp + 1) / 2;
    if n == 0 {
        return Some((0, 0, p));
    }
    let raw = signed(be(b, p, n)?, n);
    let mut us = raw;
    if fsp % 2 == 1 {
        us /= 10; // int(us / 10): toward zero
    }
    Some((us * 10i64.pow(6 - fsp as u32), raw, p + n))
}

/// The position after a value read as `decode` at `p`, stepped over without reading it.
fn skip(decode: Decode, b: &[u8], p: usize) -> Option<usize> {
    let size = match decode {
        Decode::Int { size, .. } | Decode::Fixed { size } | Decode::Enum { size } | Decode::Set { size } => size,
        Decode::Year => 1,
        Decode::Float => 4,
        Decode::Double => 8,
        Decode::Decimal { precision, scale } => text::decimal_size(precision, scale)?,
        Decode::Bytes { prefix } => prefix + le(b, p, prefix)? as usize,
        Decode::Date => 3,
        Decode::DateTime { fsp } => 5 + (fsp + 1) / 2,
        Decode::Timestamp { fsp } => 4 + (fsp + 1) / 2,
    };
    b.get(p..p + size)?;
    Some(p + size)
}

fn zero_date_key(text: &str, timestamp: bool, out: &mut String) {
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    out.push_str(&whole[..whole.len().min(19)]);
    out.push('.');
    let f: String = fraction.chars().take(6).collect();
    out.push_str(&f);
    for _ in f.len()..6 {
        out.push('0');
    }
    if timestamp {
        out.push_str("+00:00");
    }
}

impl Plan {
    /// One image at `p`: each column's encoded text into `buf` (ranges in `vals`, None for NULL) when
    /// `encode`, the key columns' stored bytes into `raw`. The position after it, or None.
    #[allow(clippy::too_many_arguments)]
    fn image(&self, py: Python<'_>, b: &[u8], mut p: usize, encode: bool, buf: &mut String,
             vals: &mut [Option<(usize, usize)>], raw: &mut [Option<(usize, usize)>]) -> Option<usize> {
        let n = self.columns.len();
        let nulls = b.get(p..p + (n + 7) / 8)?;
        p += (n + 7) / 8;
        buf.clear();
        for (i, c) in self.columns.iter().enumerate() {
            vals[i] = None;
            raw[i] = None;
            if nulls[i / 8] >> (i % 8) & 1 == 1 {
                continue;
            }
            if matches!(c.encode, Encode::Skip) {
                p = skip(c.decode, b, p)?; // a column the schema leaves out: stepped over, never read
                continue;
            }
            let start = p;
            let at = buf.len();
            let wanted = encode && !matches!(c.encode, Encode::Skip);
            let null = match c.decode {
                Decode::Int { size, signed: s } => {
                    let v = le(b, p, size)?;
                    p += size;
                    if wanted {
                        if s { push_int(buf, signed(v, size)) } else { push_uint(buf, v) }
                    }
                    false
                }
                Decode::Year => {
                    let v = *b.get(p)? as i64 + 1900;
                    p += 1;
                    if wanted {
                        push_int(buf, if v == 1900 { 0 } else { v });
                    }
                    false
                }
                Decode::Float => {
                    let v = f32::from_le_bytes(b.get(p..p + 4)?.try_into().ok()?);
                    p += 4;
                    if wanted {
                        text::float32_text(v, buf);
                    }
                    false
                }
                Decode::Double => {
                    let v = f64::from_le_bytes(b.get(p..p + 8)?.try_into().ok()?);
                    p += 8;
                    if wanted {
                        text::float_repr(v, buf);
                    }
                    false
                }
                Decode::Decimal { precision, scale } => {
                    p = text::decimal(b, p, precision, scale, buf)?;
                    if !wanted {
                        buf.truncate(at);
                    }
                    false
                }
                Decode::Bytes { prefix } => {
                    let len = le(b, p, prefix)? as usize;
                    p += prefix;
                    let v = b.get(p..p + len)?;
                    p += len;
                    wanted && !self.bytes(py, &c.encode, v, buf)?
                }
                Decode::Fixed { size } => {
                    let v = b.get(p..p + size)?;
                    p += size;
                    wanted && !self.bytes(py, &c.encode, v, buf)?
                }
                Decode::Enum { size } => {
                    let k = le(b, p, size)? as usize;
                    p += size;
                    match &c.encode {
                        Encode::Members(m) if wanted && m.is_empty() => true, // no members known: NULL
                        Encode::Members(m) if wanted => match m.get(k)? {
                            Some(t) => {
                                buf.push_str(t);
                                false
                            }
                            None => true,
                        },
                        _ => false,
                    }
                }
                Decode::Set { size } => {
                    let k = le(b, p, size)?;
                    p += size;
                    if let (true, Encode::Members(m)) = (wanted, &c.encode) {
                        let chosen: Vec<&str> = m.iter().enumerate()
                            .filter(|(j, _)| *j < 64 && k >> j & 1 == 1)
                            .filter_map(|(_, s)| s.as_deref()).collect();
                        buf.push_str(&chosen.join(","));
                    }
                    false
                }
                Decode::Date => {
                    let k = le(b, p, 3)? as i64;
                    p += 3;
                    let (y, mo, d) = (k >> 9, (k >> 5) & 15, k & 31);
                    let key = matches!(c.encode, Encode::Temporal { key: true });
                    if y == 0 || mo == 0 || d == 0 {
                        if wanted && key {
                            push_date(buf, y, mo, d);
                            buf.truncate(at + 10); // the text's first ten characters (zero_date_key)
                        }
                        !key
                    } else {
                        if !text::valid_date(y, mo, d) {
                            return None;
                        }
                        if wanted {
                            push_date(buf, y, mo, d);
                        }
                        false
                    }
                }
                Decode::DateTime { fsp } => {
                    let k = be(b, p, 5)? as i64;
                    p += 5;
                    let ym = (k >> 22) & 0x1FFFF;
                    let (y, mo, d) = (ym / 13, ym % 13, (k >> 17) & 31);
                    let (h, mi, s) = ((k >> 12) & 31, (k >> 6) & 63, k & 63);
                    let (us, raw_fraction, after) = fraction(b, p, fsp)?;
                    p = after;
                    let key = matches!(c.encode, Encode::Temporal { key: true });
                    if text::valid_date(y, mo, d) && h < 24 && mi < 60 && s < 60 {
                        if us > 999_999 {
                            return None;
                        }
                        if wanted {
                            push_datetime(buf, y, mo, d, h, mi, s, us.max(0));
                        }
                        false
                    } else {
                        if wanted && key {
                            let mut t = format!("{:04}-{:02}-{:02} {:02}:{:02}:{:02}", y, mo, d, h, mi, s);
                            if fsp > 0 {
                                let f = if fsp % 2 == 1 { raw_fraction.div_euclid(10) } else { raw_fraction };
                                t.push_str(&format!(".{:06}", f * 10i64.pow(6 - fsp as u32)));
                            }
                            zero_date_key(&t, false, buf);
                        }
                        !key
                    }
                }
                Decode::Timestamp { fsp } => {
                    let secs = signed(be(b, p, 4)?, 4);
                    p += 4;
                    let (us, _, after) = fraction(b, p, fsp)?;
                    p = after;
                    if us > 999_999 {
                        return None;
                    }
                    let us = us.max(0);
                    let key = matches!(c.encode, Encode::Temporal { key: true });
                    if secs * 1_000_000 + us < 1_000_000 {
                        if wanted && key {
                            zero_date_key("0000-00-00 00:00:00", true, buf);
                        }
                        !key
                    } else {
                        if wanted {
                            let (y, mo, d) = text::civil(secs.div_euclid(86_400));
                            let t = secs.rem_euclid(86_400);
                            push_datetime(buf, y, mo, d, t / 3600, t / 60 % 60, t % 60, us);
                            buf.push_str("+00:00");
                        }
                        false
                    }
                }
            };
            if key_column(&self.key, i) {
                raw[i] = Some((start, p));
            }
            if wanted {
                if null {
                    buf.truncate(at);
                } else {
                    vals[i] = Some((at, buf.len()));
                }
            }
        }
        Some(p)
    }

    /// A value's bytes encoded into `buf`: Some(false) for NULL (a Python encoding's None).
    fn bytes(&self, py: Python<'_>, encode: &Encode, v: &[u8], buf: &mut String) -> Option<bool> {
        match encode {
            Encode::Python(f) => {
                let out = f.call1(py, (PyBytes::new(py, v),)).ok()?;
                if out.is_none(py) {
                    return Some(false);
                }
                let text: String = out.extract(py).ok()?;
                buf.push_str(&text);
            }
            Encode::Utf8 => {
                let s = std::str::from_utf8(v).ok()?;
                buf.push_str(s);
            }
            Encode::Table(table) => {
                for x in v {
                    let c = table[*x as usize];
                    if c == '\u{fffe}' {
                        return None;
                    }
                    buf.push(c);
                }
            }
            Encode::Base64 { pad } => {
                if v.len() < *pad {
                    let mut padded = v.to_vec();
                    padded.resize(*pad, 0);
                    text::base64(&padded, buf);
                } else {
                    text::base64(v, buf);
                }
            }
            _ => return None,
        }
        Some(true)
    }

    /// The captured columns' texts of the image last decoded with `encode`, as one row of `values`.
    fn push_row(&self, buf: &str, vals: &[Option<(usize, usize)>], values: &mut Values) {
        for index in &self.out {
            match index.and_then(|i| vals[i]) {
                Some((a, b)) => values.push_value(Some(&buf[a..b])),
                None => values.push_value(None),
            }
        }
        values.end_row(true);
    }

    /// `append`'s work; on None `values` may hold part of the event (the caller takes it back).
    fn append_rows(&self, py: Python<'_>, data: &[u8], pairs: bool, values: &mut Values) -> Option<Vec<bool>> {
        let n = self.columns.len();
        let mut buf = String::with_capacity(256);
        let mut vals = vec![None; n];
        let mut raw = vec![None; n];
        let mut before_raw = vec![None; n];
        let (mut after, mut after_vals) = (String::with_capacity(256), vec![None; n]);
        let mut changed = Vec::new();
        let mut p = 0usize;
        while p < data.len() {
            if !pairs {
                p = self.image(py, data, p, true, &mut buf, &mut vals, &mut raw)?;
                self.push_row(&buf, &vals, values);
                changed.push(false);
                continue;
            }
            let before_at = p;
            p = self.image(py, data, p, false, &mut buf, &mut vals, &mut before_raw)?;
            p = self.image(py, data, p, true, &mut after, &mut after_vals, &mut raw)?;
            let same = self.key.iter().all(|&i| match (before_raw[i], raw[i]) {
                (None, None) => true,
                (Some((a, b)), Some((c, d))) => data[a..b] == data[c..d],
                _ => false,
            });
            if !same {
                self.image(py, data, before_at, true, &mut buf, &mut vals, &mut before_raw)?;
                self.push_row(&buf, &vals, values);
            }
            self.push_row(&after, &after_vals, values);
            changed.push(!same);
        }
        Some(changed)
    }
}

fn key_column(key: &[usize], i: usize) -> bool {
    key.contains(&i)
}

fn push_int(buf: &mut String, v: i64) {
    use std::fmt::Write;
    let _ = write!(buf, "{}", v);
}

fn push_uint(buf: &mut String, v: u64) {
    use std::fmt::Write;
    let _ = write!(buf, "{}", v);
}

fn push_date(buf: &mut String, y: i64, mo: i64, d: i64) {
    use std::fmt::Write;
    let _ = write!(buf, "{:04}-{:02}-{:02}", y, mo, d);
}

#[allow(clippy::too_many_arguments)]
fn push_datetime(buf: &mut String, y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64, us: i64) {
    use std::fmt::Write;
    let _ = write!(buf, "{:04}-{:02}-{:02} {:02}:{:02}:{:02}.{:06}", y, mo, d, h, mi, s, us);
}

type ColumnSpec = (String, i64, i64, String, i64, Option<String>, Option<Vec<Option<String>>>, Option<Py<PyAny>>);

fn column(py: Python<'_>, spec: &ColumnSpec) -> PyResult<Column> {
    let (decode, a, b, encode, e, table, members, function) = spec;
    let (a, b) = (*a as usize, *b);
    let bad = || pyo3::exceptions::PyValueError::new_err(format!("no native form for {decode}/{encode}"));
    let decode = match decode.as_str() {
        "int" if [1, 2, 3, 4, 8].contains(&a) => Decode::Int { size: a, signed: b != 0 },
        "year" => Decode::Year,
        "float" => Decode::Float,
        "double" => Decode::Double,
        "decimal" => Decode::Decimal { precision: a, scale: b as usize },
        "bytes" if (1..=4).contains(&a) => Decode::Bytes { prefix: a },
        "fixed" if (1..=8).contains(&a) => Decode::Fixed { size: a },
        "enum" if (1..=2).contains(&a) => Decode::Enum { size: a },
        "set" if (1..=8).contains(&a) => Decode::Set { size: a },
        "date" => Decode::Date,
        "datetime" if a <= 6 => Decode::DateTime { fsp: a },
        "timestamp" if a <= 6 => Decode::Timestamp { fsp: a },
        _ => return Err(bad()),
    };
    let encode = match encode.as_str() {
        "skip" => Encode::Skip,
        "plain" => Encode::Plain,
        "text" => match table {
            None => Encode::Utf8,
            Some(t) if t.chars().count() == 256 => Encode::Table(t.chars().collect()),
            Some(_) => return Err(bad()),
        },
        "base64" => Encode::Base64 { pad: *e as usize },
        "members" => Encode::Members(members.clone().unwrap_or_default()),
        "temporal" => Encode::Temporal { key: *e != 0 },
        "python" => match function {
            Some(f) => Encode::Python(f.clone_ref(py)),
            None => return Err(bad()),
        },
        _ => return Err(bad()),
    };
    Ok(Column { decode, encode })
}

#[pymethods]
impl Plan {
    /// `columns`: per table-map column, (decode, a, b, encode, e, table, members, function) -- see
    /// `binlake.source.rowtext`; `out`: each captured column's name and its table-map index (None:
    /// not in the event, NULL); `key`: the key columns' table-map indexes.
    #[new]
    fn new(py: Python<'_>, columns: Vec<ColumnSpec>, out: Vec<(String, Option<usize>)>, key: Vec<usize>)
        -> PyResult<Self> {
        let columns = columns.iter().map(|c| column(py, c)).collect::<PyResult<Vec<_>>>()?;
        if out.iter().any(|(_, index)| index.is_some_and(|i| i >= columns.len())) {
            return Err(pyo3::exceptions::PyValueError::new_err("column index out of range"));
        }
        let prefixes = out.into_iter().map(|(_, index)| index).collect();
        if key.iter().any(|i| *i >= columns.len()) {
            return Err(pyo3::exceptions::PyValueError::new_err("key index out of range"));
        }
        Ok(Plan { columns, out: prefixes, key })
    }

    /// Every row of `data` appended to `values` as rows of captured columns' texts: for an insert or
    /// a delete (`pairs` false) one row each; for an update (before, after) pairs, the after image,
    /// preceded by the before image where the key changed. Per pair (or row), whether its key changed;
    /// None, with nothing appended, when the bytes do not decode under this plan.
    fn append(&self, py: Python<'_>, data: &[u8], pairs: bool, mut values: PyRefMut<'_, Values>) -> Option<Vec<bool>> {
        let mark = values.mark();
        let out = self.append_rows(py, data, pairs, &mut values);
        if out.is_none() {
            values.rewind(mark);
        }
        out
    }
}

/// Rows of encoded values (a NULL row: no values, as a schema marker's), built as the buffers of an
/// Arrow `list<string>` array and handed over a batch of rows at a time (`take`).
#[pyclass]
#[derive(Default)]
struct Values {
    data: Vec<u8>,
    offsets: Vec<i32>, // each value's start in `data`, then the end
    valid: Vec<bool>,
    rows: Vec<i32>, // each row's first value, then the end
    row_valid: Vec<bool>,
}

fn bitmap(bits: &[bool]) -> Vec<u8> {
    let mut out = vec![0u8; (bits.len() + 7) / 8];
    for (i, b) in bits.iter().enumerate() {
        if *b {
            out[i / 8] |= 1 << (i % 8);
        }
    }
    out
}

fn le_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

impl Values {
    fn push_value(&mut self, v: Option<&str>) {
        if let Some(t) = v {
            self.data.extend_from_slice(t.as_bytes());
        }
        self.valid.push(v.is_some());
        self.offsets.push(self.data.len() as i32);
    }

    fn end_row(&mut self, valid: bool) {
        self.rows.push(self.valid.len() as i32);
        self.row_valid.push(valid);
    }

    fn mark(&self) -> (usize, usize, usize) {
        (self.data.len(), self.valid.len(), self.row_valid.len())
    }

    fn rewind(&mut self, (data, vals, rows): (usize, usize, usize)) {
        self.data.truncate(data);
        self.valid.truncate(vals);
        self.offsets.truncate(vals + 1);
        self.row_valid.truncate(rows);
        self.rows.truncate(rows + 1);
    }
}

type Taken<'py> = (usize, Bound<'py, PyBytes>, Bound<'py, PyBytes>, Bound<'py, PyBytes>, usize, Bound<'py, PyBytes>,
                   Bound<'py, PyBytes>, usize);

#[pymethods]
impl Values {
    #[new]
    fn new() -> Self {
        Values { offsets: vec![0], rows: vec![0], ..Default::default() }
    }

    /// One row of texts (None: NULL), or None: a row without values.
    #[pyo3(signature = (row))]
    fn push(&mut self, row: Option<Vec<Option<String>>>) {
        let valid = row.is_some();
        for v in row.unwrap_or_default() {
            self.push_value(v.as_deref());
        }
        self.end_row(valid);
    }

    fn __len__(&self) -> usize {
        self.row_valid.len()
    }

    /// The bytes of text held.
    fn nbytes(&self) -> usize {
        self.data.len()
    }

    /// The first `k` rows' buffers, which leave this builder: (values, their validity bitmap, offsets,
    /// text, NULL values, rows' validity bitmap, rows' offsets, NULL rows).
    fn take<'py>(&mut self, py: Python<'py>, k: usize) -> PyResult<Taken<'py>> {
        if k > self.row_valid.len() {
            return Err(pyo3::exceptions::PyValueError::new_err("fewer rows held"));
        }
        let nv = self.rows[k] as usize;
        let nb = self.offsets[nv] as usize;
        let taken = (
            nv,
            PyBytes::new(py, &bitmap(&self.valid[..nv])),
            PyBytes::new(py, &le_bytes(&self.offsets[..=nv])),
            PyBytes::new(py, &self.data[..nb]),
            self.valid[..nv].iter().filter(|v| !**v).count(),
            PyBytes::new(py, &bitmap(&self.row_valid[..k])),
            PyBytes::new(py, &le_bytes(&self.rows[..=k])),
            self.row_valid[..k].iter().filter(|v| !**v).count(),
        );
        self.data.drain(..nb);
        self.valid.drain(..nv);
        self.offsets.drain(..nv);
        self.offsets.iter_mut().for_each(|o| *o -= nb as i32);
        self.row_valid.drain(..k);
        self.rows.drain(..k);
        self.rows.iter_mut().for_each(|r| *r -= nv as i32);
        Ok(taken)
    }
}

/// Python's text of a value as binlake encodes it (for the tests against Python's own): a DOUBLE's
/// `repr`, or with `single` a FLOAT's shortest single-precision text.
#[pyfunction]
fn float_text(x: f64, single: bool) -> String {
    let mut out = String::new();
    if single { text::float32_text(x as f32, &mut out) } else { text::float_repr(x, &mut out) }
    out
}

/// A packed DECIMAL's text (for the tests against Python's own), or None.
#[pyfunction]
fn decimal_text(data: &[u8], precision: usize, scale: usize) -> Option<String> {
    let mut out = String::new();
    text::decimal(data, 0, precision, scale, &mut out).map(|_| out)
}

#[pymodule]
fn _rowtext(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Plan>()?;
    m.add_class::<Values>()?;
    m.add_function(wrap_pyfunction!(float_text, m)?)?;
    m.add_function(wrap_pyfunction!(decimal_text, m)?)?;
    Ok(())
}
