//! The text forms binlake's Python encoding gives (`binlake.schema.Column.encode`), written without
//! Python: a float's `repr`, FLOAT's shortest single-precision text, a packed DECIMAL's digits, dates
//! and times, and base64.

use std::fmt::Write;

/// Python's `repr(float)`: the shortest digits that read back as `x`, in fixed notation when the
/// decimal point falls within 16 digits (then with at least one fraction digit), else `d.ddde+XX`.
pub fn float_repr(x: f64, out: &mut String) {
    if x.is_nan() {
        out.push_str("nan");
        return;
    }
    if x.is_infinite() {
        out.push_str(if x < 0.0 { "-inf" } else { "inf" });
        return;
    }
    if x == 0.0 {
        out.push_str(if x.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    // the fewest digits that read back as `x` ("-1.2345e-5", "1e16"); of those, Python takes the
    // correctly rounded ones, which the shortest search need not give (1223383794756801.2, not .3)
    let mut s = format!("{:e}", x);
    let count = s.split('e').next().unwrap_or("").chars().filter(|c| c.is_ascii_digit()).count();
    let rounded = format!("{:.*e}", count.saturating_sub(1), x);
    if rounded.parse::<f64>().is_ok_and(|y| y == x) {
        s = rounded;
    }
    let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    if negative {
        out.push('-');
    }
    let decpt = exp + 1; // digits before the decimal point
    if decpt <= -4 || decpt > 16 {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    } else if decpt <= 0 {
        out.push_str("0.");
        for _ in 0..(-decpt) {
            out.push('0');
        }
        out.push_str(&digits);
    } else if decpt as usize >= digits.len() {
        out.push_str(&digits);
        for _ in 0..(decpt as usize - digits.len()) {
            out.push('0');
        }
        out.push_str(".0");
    } else {
        out.push_str(&digits[..decpt as usize]);
        out.push('.');
        out.push_str(&digits[decpt as usize..]);
    }
}

/// `binlake.valuetypes.float32_text`: the first of 6 to 9 significant digits whose text reads back as
/// the same single-precision value, as Python's `repr` of the double that text reads as.
pub fn float32_text(v: f32, out: &mut String) {
    let exact = v as f64;
    if exact.is_finite() {
        for digits in 6..=9usize {
            let text = format!("{:.*e}", digits - 1, exact);
            if let Ok(y) = text.parse::<f64>() {
                if (y as f32).to_bits() == v.to_bits() {
                    float_repr(y, out);
                    return;
                }
            }
        }
    }
    float_repr(exact, out);
}

const COMPRESSED: [usize; 10] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4];

/// The bytes a packed DECIMAL(precision, scale) takes.
pub fn decimal_size(precision: usize, scale: usize) -> Option<usize> {
    let integral = precision.checked_sub(scale)?;
    Some(COMPRESSED[integral % 9] + 4 * (integral / 9) + 4 * (scale / 9) + COMPRESSED[scale % 9])
}

/// A packed DECIMAL(precision, scale) at `b[p..]`, as `format(Decimal(text), 'f')` gives it: the sign,
/// the integral digits without leading zeros (at least one), the scale's fraction digits. Returns
/// the position after it; None for bytes that are no DECIMAL of that size.
pub fn decimal(b: &[u8], p: usize, precision: usize, scale: usize, out: &mut String) -> Option<usize> {
    if scale > precision {
        return None;
    }
    let integral = precision - scale;
    let (whole_int, whole_frac) = (integral / 9, scale / 9);
    let (left_int, left_frac) = (integral % 9, scale % 9);
    let size = COMPRESSED[left_int] + 4 * whole_int + 4 * whole_frac + COMPRESSED[left_frac];
    let raw = b.get(p..p + size)?;
    if raw.is_empty() {
        return None;
    }
    let negative = raw[0] & 0x80 == 0;
    let mask: i64 = if negative { -1 } else { 0 };
    let mut at = 0usize;
    let mut group = |n: usize| -> i64 {
        let mut v: i64 = 0;
        for (j, byte) in raw[at..at + n].iter().enumerate() {
            let byte = if at + j == 0 { byte ^ 0x80 } else { *byte };
            v = (v << 8) | byte as i64;
        }
        if v & (1 << (8 * n - 1)) != 0 {
            v -= 1 << (8 * n); // signed, as int.from_bytes(..., signed=True)
        }
        at += n;
        v ^ mask
    };
    let mut int_digits = String::new();
    if COMPRESSED[left_int] > 0 {
        let v = group(COMPRESSED[left_int]);
        if v < 0 || v >= 10i64.pow(left_int as u32) {
            return None;
        }
        let _ = write!(int_digits, "{}", v);
    }
    for _ in 0..whole_int {
        let v = group(4);
        if !(0..1_000_000_000).contains(&v) {
            return None;
        }
        let _ = write!(int_digits, "{:09}", v);
    }
    let mut frac_digits = String::new();
    for _ in 0..whole_frac {
        let v = group(4);
        if !(0..1_000_000_000).contains(&v) {
            return None;
        }
        let _ = write!(frac_digits, "{:09}", v);
    }
    if COMPRESSED[left_frac] > 0 {
        let v = group(COMPRESSED[left_frac]);
        if v < 0 || v >= 10i64.pow(left_frac as u32) {
            return None;
        }
        let _ = write!(frac_digits, "{:0width$}", v, width = left_frac);
    }
    if negative {
        out.push('-');
    }
    let trimmed = int_digits.trim_start_matches('0');
    out.push_str(if trimmed.is_empty() { "0" } else { trimmed });
    if !frac_digits.is_empty() {
        out.push('.');
        out.push_str(&frac_digits);
    }
    Some(p + size)
}

pub fn days_in_month(y: i64, m: i64) -> i64 {
    match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if (y % 4 == 0 && y % 100 != 0) || y % 400 == 0 => 29,
        _ => 28,
    }
}

/// A date Python's `datetime.date` accepts.
pub fn valid_date(y: i64, m: i64, d: i64) -> bool {
    (1..=9999).contains(&y) && (1..=12).contains(&m) && d >= 1 && d <= days_in_month(y, m)
}

/// The civil date of a day count from 1970-01-01.
pub fn civil(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    (yoe + era * 400 + if m <= 2 { 1 } else { 0 }, m, d)
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding, as `base64.b64encode`.
pub fn base64(data: &[u8], out: &mut String) {
    for chunk in data.chunks(3) {
        let n = chunk.len();
        let v = (chunk[0] as u32) << 16 | (*chunk.get(1).unwrap_or(&0) as u32) << 8 | *chunk.get(2).unwrap_or(&0) as u32;
        out.push(B64[(v >> 18) as usize & 63] as char);
        out.push(B64[(v >> 12) as usize & 63] as char);
        out.push(if n > 1 { B64[(v >> 6) as usize & 63] as char } else { '=' });
        out.push(if n > 2 { B64[v as usize & 63] as char } else { '=' });
    }
}
