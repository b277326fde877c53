//! Python literal parsing and formatting: the subset of `ast.literal_eval` / `str()` Magnum's API relies on.
//!
//! Magnum's JSON-PATCH accepts, for `replace` on `/labels`, `/health_status_reason`, `/node_labels` and
//! `/node_taints`, a string that the Python server runs through `ast.literal_eval` (python-magnumclient sends
//! `str(dict)`). [`parse`] is a small, bounded, panic-free version of that for values JSON can represent;
//! [`to_python_str`] is the inverse (Python `str()`), for error messages and label coercion.
//!
//! Positions in errors are 0-based character (not byte) offsets into the input.

use serde_json::{Map, Number, Value};

/// Maximum container nesting accepted by [`parse`].
pub const MAX_DEPTH: usize = 64;

/// Why a string is not an acceptable Python literal.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PyLiteralError {
    #[error("empty input: expected a Python literal")]
    Empty,
    #[error("source code string cannot contain null bytes")]
    NulByte,
    #[error("unexpected end of input at position {0}")]
    UnexpectedEnd(usize),
    #[error("malformed node or string at position {0}")]
    Malformed(usize),
    #[error("unterminated string literal starting at position {0}")]
    UnterminatedString(usize),
    #[error("invalid escape sequence at position {0}")]
    InvalidEscape(usize),
    #[error("invalid number literal at position {0}")]
    InvalidNumber(usize),
    #[error("integer literal at position {0} does not fit in 64 bits")]
    IntegerOutOfRange(usize),
    #[error("float literal at position {0} is out of range")]
    FloatOutOfRange(usize),
    #[error("set literal at position {0} is not supported (not representable in JSON)")]
    SetNotSupported(usize),
    #[error("dict key at position {0} must be a str, int, float, bool or None")]
    InvalidKey(usize),
    #[error("nesting deeper than {MAX_DEPTH} levels at position {0}")]
    TooDeep(usize),
}

use PyLiteralError as E;

/// Parse a Python literal into JSON. dict -> object, list/tuple -> array, str -> string, int -> number,
/// float -> number, True/False -> bool, None -> null.
///
/// Accepts surrounding whitespace, `#` comments, a bare top-level tuple (`1, 2`), `u`/`r`/`b` string prefixes
/// and adjacent-literal concatenation. Non-str dict keys become their Python `str()` (`{1: 'a'}` ->
/// `{"1": "a"}`); for duplicate keys the last value wins at the first key's position, like Python. Rejected:
/// names, calls, operators (so complex numbers like `1+2j`), sets, ints outside i64/u64, inf/nan, `\N{...}`
/// escapes, lone surrogates, and nesting deeper than [`MAX_DEPTH`].
pub fn parse(input: &str) -> Result<Value, PyLiteralError> {
    if input.contains('\0') {
        return Err(E::NulByte);
    }
    let mut p = Parser {
        s: input.chars().collect(),
        pos: 0,
    };
    p.skip_ws();
    if p.peek().is_none() {
        return Err(E::Empty);
    }
    let first = p.value(0)?;
    p.skip_ws();
    let v = if p.eat(',') {
        p.seq(vec![first], None, 1)?
    } else {
        first
    };
    p.skip_ws();
    if p.peek().is_some() {
        Err(E::Malformed(p.pos))
    } else {
        Ok(v)
    }
}

/// Python `str()` of the JSON value: top-level strings are raw (no quotes); inside containers strings use Python
/// `repr`, bool -> True/False, null -> None, ints as ints, floats like Python `repr`, dicts as `{'a': 1}`, lists as
/// `[1, 2]`. Non-printable characters are escaped like `repr` does (printability is approximated without the
/// Unicode database, so a few unassigned code points print raw where Python would escape them).
pub fn to_python_str(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::String(s) => out.push_str(s),
        other => write_repr(other, &mut out),
    }
    out
}

fn write_repr(v: &Value, out: &mut String) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => out.push_str(&float_repr(f)),
            _ => out.push_str(&n.to_string()),
        },
        Value::String(s) => repr_str(s, out),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                out.push_str(if i > 0 { ", " } else { "" });
                write_repr(item, out);
            }
            out.push(']');
        }
        Value::Object(map) => {
            out.push('{');
            for (i, (k, item)) in map.iter().enumerate() {
                out.push_str(if i > 0 { ", " } else { "" });
                repr_str(k, out);
                out.push_str(": ");
                write_repr(item, out);
            }
            out.push('}');
        }
    }
}

/// Python `repr(float)`: shortest round-trip digits (ties to even), scientific when the exponent is < -4 or >= 16.
fn float_repr(f: f64) -> String {
    if !f.is_finite() {
        return f.to_string().to_lowercase(); // nan, inf, -inf (never from serde_json)
    }
    let split = |s: String| {
        let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
        (m.replace('.', ""), e.parse::<i32>().unwrap_or(0))
    };
    let (mut digits, mut exp) = split(format!("{:e}", f.abs()));
    // Rust's shortest form breaks exact ties upwards; Python (like Rust's fixed precision) rounds half to even.
    let even = format!("{:.*e}", digits.len().saturating_sub(1), f.abs());
    if even.parse::<f64>() == Ok(f.abs()) {
        (digits, exp) = split(even);
    }
    let sign = if f.is_sign_negative() { "-" } else { "" };
    if !(-4..16).contains(&exp) {
        let (head, tail) = digits.split_at(1.min(digits.len()));
        let dot = if tail.is_empty() { "" } else { "." };
        let esign = if exp < 0 { '-' } else { '+' };
        return format!("{sign}{head}{dot}{tail}e{esign}{:02}", exp.unsigned_abs());
    }
    let Ok(int_len) = usize::try_from(exp).map(|e| e + 1) else {
        return format!(
            "{sign}0.{}{digits}",
            "0".repeat(exp.unsigned_abs() as usize - 1)
        );
    };
    match (digits.get(..int_len), digits.get(int_len..)) {
        (Some(int), Some(frac)) if !frac.is_empty() => format!("{sign}{int}.{frac}"),
        _ => format!(
            "{sign}{digits}{}.0",
            "0".repeat(int_len.saturating_sub(digits.len()))
        ),
    }
}

/// Python `repr(str)`: single quotes unless the text has `'` and no `"`.
fn repr_str(s: &str, out: &mut String) {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => out.extend(['\\', c]),
            c if !is_printable(c) => match u32::from(c) {
                u @ ..0x100 => out.push_str(&format!("\\x{u:02x}")),
                u @ ..0x10000 => out.push_str(&format!("\\u{u:04x}")),
                u => out.push_str(&format!("\\U{u:08x}")),
            },
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Approximation of Python's `str.isprintable` (Cc, Cf, Co, Zl, Zp, Zs but space, noncharacters, empty planes).
fn is_printable(c: char) -> bool {
    let u = u32::from(c);
    !(u < 0x20
        || (u & 0xfffe) == 0xfffe
        || matches!(u, 0x7f..=0xa0 | 0xad | 0x600..=0x605 | 0x61c | 0x6dd | 0x70f | 0x1680 | 0x180e
            | 0x2000..=0x200f | 0x2028..=0x202f | 0x205f..=0x2064 | 0x2066..=0x206f | 0x3000
            | 0xe000..=0xf8ff | 0xfdd0..=0xfdef | 0xfeff | 0xfff9..=0xfffb | 0x323b0..=0xe00ff | 0xe01f0..))
}

/// Escapes that stand for one fixed character: `\` + `ESCAPE_FROM[i]` means `ESCAPE_TO[i]` (all ASCII).
const ESCAPE_FROM: &str = "\\'\"abfnrtv";
const ESCAPE_TO: &str = "\\'\"\x07\x08\x0c\n\r\t\x0b";

struct Parser {
    s: Vec<char>,
    pos: usize,
}

impl Parser {
    fn peek(&self) -> Option<char> {
        self.peek_at(0)
    }

    fn peek_at(&self, k: usize) -> Option<char> {
        self.s.get(self.pos + k).copied()
    }

    fn eat(&mut self, c: char) -> bool {
        let hit = self.peek() == Some(c);
        self.pos += usize::from(hit);
        hit
    }

    fn unexpected(&self) -> E {
        match self.peek() {
            None => E::UnexpectedEnd(self.pos),
            Some(_) => E::Malformed(self.pos),
        }
    }

    fn take_while(&mut self, mut f: impl FnMut(char) -> bool) -> String {
        let start = self.pos;
        while self.peek().is_some_and(&mut f) {
            self.pos += 1;
        }
        self.s[start..self.pos].iter().collect()
    }

    /// Whitespace, newlines, `#` comments and backslash line continuations.
    fn skip_ws(&mut self) {
        loop {
            match (self.peek(), self.peek_at(1)) {
                (Some(' ' | '\t' | '\n' | '\r' | '\x0c'), _) => self.pos += 1,
                (Some('\\'), Some('\n' | '\r')) => self.pos += 2,
                (Some('#'), _) => {
                    self.take_while(|c| c != '\n' && c != '\r');
                }
                _ => return,
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<Value, E> {
        self.skip_ws();
        let start = self.pos;
        let Some(c) = self.peek() else {
            return Err(E::UnexpectedEnd(start));
        };
        if matches!(c, '[' | '(' | '{') && depth >= MAX_DEPTH {
            return Err(E::TooDeep(start));
        }
        match c {
            '[' => {
                self.pos += 1;
                self.seq(Vec::new(), Some(']'), depth + 1)
            }
            '(' => self.paren(depth + 1),
            '{' => self.dict(depth + 1),
            '+' | '-' => {
                self.pos += 1;
                self.skip_ws();
                if !self.at_number() {
                    return Err(E::Malformed(start));
                }
                self.number(c == '-', start)
            }
            _ if self.at_number() => self.number(false, start),
            '\'' | '"' => self.strings(),
            _ if self.prefix_len().is_some() => self.strings(),
            c if c.is_alphabetic() || c == '_' => {
                let name = self.take_while(|c| c.is_alphanumeric() || c == '_');
                match name.as_str() {
                    "True" => Ok(Value::Bool(true)),
                    "False" => Ok(Value::Bool(false)),
                    "None" => Ok(Value::Null),
                    _ => Err(E::Malformed(start)),
                }
            }
            _ => Err(E::Malformed(start)),
        }
    }

    /// Comma-separated items up to `close` (`None`: end of input), trailing comma allowed, appended to `out`
    /// (the items already read, each followed by its comma).
    fn seq(&mut self, mut out: Vec<Value>, close: Option<char>, depth: usize) -> Result<Value, E> {
        let closed = |p: &mut Self| match close {
            Some(c) => p.eat(c),
            None => p.peek().is_none(),
        };
        loop {
            self.skip_ws();
            if closed(self) {
                return Ok(Value::Array(out));
            }
            out.push(self.value(depth)?);
            self.skip_ws();
            if !self.eat(',') {
                return if closed(self) {
                    Ok(Value::Array(out))
                } else {
                    Err(self.unexpected())
                };
            }
        }
    }

    /// `()` empty tuple, `(x)` just x, `(x,)` / `(x, y)` tuple.
    fn paren(&mut self, depth: usize) -> Result<Value, E> {
        self.pos += 1;
        self.skip_ws();
        if self.eat(')') {
            return Ok(Value::Array(Vec::new()));
        }
        let first = self.value(depth)?;
        self.skip_ws();
        if self.eat(')') {
            Ok(first)
        } else if self.eat(',') {
            self.seq(vec![first], Some(')'), depth)
        } else {
            Err(self.unexpected())
        }
    }

    fn dict(&mut self, depth: usize) -> Result<Value, E> {
        let open = self.pos;
        self.pos += 1;
        let mut map = Map::new();
        loop {
            self.skip_ws();
            if self.eat('}') {
                return Ok(Value::Object(map));
            }
            let key_pos = self.pos;
            let key = self.value(depth)?;
            self.skip_ws();
            if !self.eat(':') {
                let set = map.is_empty() && matches!(self.peek(), Some(',' | '}'));
                return Err(if set {
                    E::SetNotSupported(open)
                } else {
                    self.unexpected()
                });
            }
            let key = match key {
                Value::String(s) => s,
                Value::Array(_) | Value::Object(_) => return Err(E::InvalidKey(key_pos)),
                scalar => to_python_str(&scalar),
            };
            let val = self.value(depth)?;
            map.insert(key, val);
            self.skip_ws();
            if !self.eat(',') {
                return if self.eat('}') {
                    Ok(Value::Object(map))
                } else {
                    Err(self.unexpected())
                };
            }
        }
    }

    fn at_number(&self) -> bool {
        let digit = |c: Option<char>| c.is_some_and(|c| c.is_ascii_digit());
        digit(self.peek()) || (self.peek() == Some('.') && digit(self.peek_at(1)))
    }

    fn number(&mut self, neg: bool, start: usize) -> Result<Value, E> {
        let bad = E::InvalidNumber(start);
        let mut prev = ' ';
        let token = self.take_while(|c| {
            let keep = c.is_alphanumeric()
                || c == '_'
                || c == '.'
                || (matches!(c, '+' | '-') && prev == 'e');
            prev = c.to_ascii_lowercase();
            keep
        });
        let lower = token.to_ascii_lowercase();
        let radix = ["0x", "0o", "0b"]
            .iter()
            .zip([16, 8, 2])
            .find(|(p, _)| lower.starts_with(**p));
        let (digits, radix) = match radix {
            Some((_, radix)) => {
                let body = &lower[2..];
                (body.strip_prefix('_').unwrap_or(body), radix)
            }
            None => (lower.as_str(), 10),
        };
        let (mantissa, exp) = match digits.split_once('e') {
            Some((m, e)) if radix == 10 => (m, Some(e.strip_prefix(['+', '-']).unwrap_or(e))),
            _ => (digits, None),
        };
        let (int, frac) = mantissa
            .split_once('.')
            .map_or((mantissa, None), |(i, f)| (i, Some(f)));
        let ok_part = |s: &str| s.is_empty() || valid_digits(s, radix);
        let valid = match (frac, exp) {
            (None, None) => {
                valid_digits(int, radix)
                    && (radix != 10
                        || int.trim_start_matches(['0', '_']).is_empty()
                        || !int.starts_with('0'))
            }
            _ => {
                radix == 10
                    && ok_part(int)
                    && frac.is_none_or(ok_part)
                    && !(int.is_empty() && frac.unwrap_or("").is_empty())
                    && exp.is_none_or(|e| valid_digits(e, 10))
            }
        };
        if !valid {
            return Err(bad);
        }
        if frac.is_some() || exp.is_some() {
            let f: f64 = lower.replace('_', "").parse().map_err(|_| bad)?;
            return Number::from_f64(if neg { -f } else { f })
                .map(Value::Number)
                .ok_or(E::FloatOutOfRange(start));
        }
        let n = u64::from_str_radix(&digits.replace('_', ""), radix)
            .map_err(|_| E::IntegerOutOfRange(start))?;
        if !neg {
            return Ok(Value::from(n));
        }
        0i64.checked_sub_unsigned(n)
            .map(Value::from)
            .ok_or(E::IntegerOutOfRange(start))
    }

    /// Length of a valid string prefix (`u`, `r`, `b`, `br`, `rb`, any case) directly followed by a quote.
    fn prefix_len(&self) -> Option<usize> {
        let quote_at = |k: usize| matches!(self.peek_at(k), Some('\'' | '"'));
        let lower = |k: usize| self.peek_at(k).map(|c| c.to_ascii_lowercase());
        match (lower(0), lower(1)) {
            (Some('u' | 'r' | 'b'), _) if quote_at(1) => Some(1),
            (Some('b'), Some('r')) | (Some('r'), Some('b')) if quote_at(2) => Some(2),
            _ => None,
        }
    }

    /// One or more adjacent string literals, concatenated.
    fn strings(&mut self) -> Result<Value, E> {
        let mut out = String::new();
        let mut kind: Option<bool> = None;
        loop {
            let lit_pos = self.pos;
            let plen = self.prefix_len().unwrap_or(0);
            let prefix: String = self.s[self.pos..self.pos + plen].iter().collect();
            let prefix = prefix.to_ascii_lowercase();
            let bytes = prefix.contains('b');
            if kind.is_some_and(|k| k != bytes) {
                return Err(E::Malformed(lit_pos)); // cannot mix bytes and nonbytes literals
            }
            kind = Some(bytes);
            self.pos += plen;
            self.literal(lit_pos, prefix.contains('r'), bytes, &mut out)?;
            self.skip_ws();
            if !matches!(self.peek(), Some('\'' | '"')) && self.prefix_len().is_none() {
                return Ok(Value::String(out));
            }
        }
    }

    /// One quoted literal (cursor on its opening quote; its prefix began at `start`), appended to `out`.
    fn literal(&mut self, start: usize, raw: bool, bytes: bool, out: &mut String) -> Result<(), E> {
        let Some(q) = self.peek() else {
            return Err(E::UnexpectedEnd(self.pos));
        };
        let triple = self.peek_at(1) == Some(q) && self.peek_at(2) == Some(q);
        self.pos += if triple { 3 } else { 1 };
        loop {
            let Some(c) = self.peek() else {
                return Err(E::UnterminatedString(start));
            };
            let here = self.pos;
            self.pos += 1;
            if bytes && !c.is_ascii() {
                return Err(E::Malformed(here)); // bytes can only contain ASCII literal characters
            }
            match c {
                _ if c == q
                    && (!triple || (self.peek() == Some(q) && self.peek_at(1) == Some(q))) =>
                {
                    self.pos += if triple { 2 } else { 0 };
                    return Ok(());
                }
                '\n' | '\r' if !triple => return Err(E::UnterminatedString(start)),
                '\r' => {
                    self.eat('\n');
                    out.push('\n');
                }
                '\\' => {
                    let Some(e) = self.peek() else {
                        return Err(E::UnterminatedString(start));
                    };
                    self.pos += 1;
                    if raw {
                        out.extend(['\\', e]);
                    } else {
                        self.escape(e, here, bytes, out)?;
                    }
                }
                c => out.push(c),
            }
        }
    }

    /// The escape `\e` (cursor just past `e`), which started at `here`.
    fn escape(&mut self, e: char, here: usize, bytes: bool, out: &mut String) -> Result<(), E> {
        let bad = E::InvalidEscape(here);
        if let Some(c) = ESCAPE_FROM.find(e).and_then(|i| ESCAPE_TO.chars().nth(i)) {
            out.push(c);
            return Ok(());
        }
        let code = match e {
            '\n' => return Ok(()), // line continuation
            '\r' => {
                self.eat('\n');
                return Ok(());
            }
            '0'..='7' => {
                let more = self
                    .take_while(|c| c.is_digit(8))
                    .chars()
                    .take(2)
                    .collect::<String>();
                self.pos = here + 2 + more.len();
                let v = u32::from_str_radix(&format!("{e}{more}"), 8).map_err(|_| bad.clone())?;
                if bytes { v & 0xff } else { v } // Python wraps b'\777' to 0xff
            }
            'x' => self.hex(2).ok_or(bad.clone())?,
            'u' if !bytes => self.hex(4).ok_or(bad.clone())?,
            'U' if !bytes => self.hex(8).ok_or(bad.clone())?,
            'N' if !bytes => return Err(bad), // \N{name} needs the Unicode name database
            other => {
                out.extend(['\\', other]); // unknown escapes are kept verbatim
                return Ok(());
            }
        };
        out.push(char::from_u32(code).ok_or(bad)?);
        Ok(())
    }

    /// Exactly `n` hex digits.
    fn hex(&mut self, n: usize) -> Option<u32> {
        let digits: String = self.s.get(self.pos..self.pos + n)?.iter().collect();
        self.pos += n;
        if !digits.chars().all(|c| c.is_ascii_hexdigit()) {
            return None;
        }
        u32::from_str_radix(&digits, 16).ok()
    }
}

/// Non-empty digits of `radix`, underscores only singly between digits.
fn valid_digits(s: &str, radix: u32) -> bool {
    let ok_chars = s.chars().all(|c| c == '_' || c.is_digit(radix));
    ok_chars && !s.is_empty() && !s.starts_with('_') && !s.ends_with('_') && !s.contains("__")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    /// `python | python ==> json`: each input parses to exactly that JSON (key order and int/float kind included).
    const PARSES: &str = r#"
{'kube_tag': 'v1.30', 'a': 'b'} ==> {"kube_tag": "v1.30", "a": "b"}
{'k':'v','k2':'v2'} ==> {"k": "v", "k2": "v2"}
  {'a': 1}   ==> {"a": 1}
{'a': 1, 'b': 2, 'a': 3} ==> {"a": 3, "b": 2}
{1: 'a'} ==> {"1": "a"}
{True: 1, False: 2, None: 3} ==> {"True": 1, "False": 2, "None": 3}
{1.5: 0, -1: 1, 1e16: 2, 0x10: 3, 2.0: 4} ==> {"1.5": 0, "-1": 1, "1e+16": 2, "16": 3, "2.0": 4}
{'a' 'b': 1,} ==> {"ab": 1}
{} ==> {}
[True, False, None] ==> [true, false, null]
[1, 2,] | (1, 2) | 1, 2 | [1, 2] # comment ==> [1, 2]
(1,) ==> [1]
() | [] ==> []
(1) ==> 1
((('a'))) ==> "a"
'a', ==> ["a"]
[[1, [2]], {'a': (3,)}, ()] ==> [[1, [2]], {"a": [3]}, []]
'x' | u'x' | b'x' ==> "x"
"it's" ==> "it's"
'''a'b''' ==> "a'b"
"""x"y""" ==> "x\"y"
'' ==> ""
Rb'\n' ==> "\\n"
r'\n\'' ==> "\\n\\'"
'a' 'b' | 'a'"b" ==> "ab"
'a' "b" '''c''' r'\d' ==> "abc\\d"
'\n\t\r\\\'\"\a\b\f\v' ==> "\n\t\r\\'\"\u0007\b\f\u000b"
'\x41\u00e9\U0001F600\101\0\7\1234' ==> "Aé😀A\u0000\u0007S4"
'\777' ==> "ǿ"
'\d\w' ==> "\\d\\w"
b'\u1234' ==> "\\u1234"
b'\x41\101' ==> "AA"
b'\777' ==> "ÿ"
42 ==> 42
-7 | - 7 ==> -7
+7 ==> 7
-0 | 00 | 0_0 ==> 0
1_000_000 ==> 1000000
0xFF | 0x_f_f ==> 255
0o17 ==> 15
0B101 ==> 5
18446744073709551615 ==> 18446744073709551615
-9223372036854775808 ==> -9223372036854775808
1.5 | 01.5 ==> 1.5
.5 ==> 0.5
1. ==> 1.0
1e3 ==> 1000.0
-2.5e-3 ==> -0.0025
1_0.2_5E+0_1 ==> 102.5
1.e2 ==> 100.0
0e0 ==> 0.0
-0.0 ==> -0.0
"#;

    /// `python | python ==> error (Debug form)`.
    const REJECTS: &str = r#"
 ==> Empty
foo | len('a') | __import__('os') | a.b | x=1 | true | null | inf | -inf | nan ==> Malformed(0)
float('nan') | --1 | -True | -'a' | - | -(1) | f'x' | ur'x' ==> Malformed(0)
[1, foo] | [1] x | 'a' b'c' ==> Malformed(4)
1+2 | 1+2j | {**a} | [*a] | [,] | {:1} ==> Malformed(1)
-1-2j | b'é' ==> Malformed(2)
[1,,2] | [1 2] | (1 2) ==> Malformed(3)
{'a' 1} ==> Malformed(5)
{'a': 1 'b': 2} ==> Malformed(8)
[1, 2 | {'a': ==> UnexpectedEnd(5)
{'a': 1, ==> UnexpectedEnd(8)
( ==> UnexpectedEnd(1)
'a', ( ==> UnexpectedEnd(6)
'abc | '''abc'' ==> UnterminatedString(0)
[r'abc\'] ==> UnterminatedString(1)
'\x4' | '\xzz' | '\x+1' | '\u12' | '\uD800' | '\U00110000' | '\N{DASH}' ==> InvalidEscape(1)
'a\x' ==> InvalidEscape(2)
1j | 2.5J | 01 | -01 | 1__0 | 1_ | 0x | 0x_ | 0b102 | 0xg | 0o8 | 1abc ==> InvalidNumber(0)
1.2.3 | 1_.5 | 1._5 | 0x1.5 | 1e | 1e+ ==> InvalidNumber(0)
18446744073709551616 | -9223372036854775809 | 0xffffffffffffffffff ==> IntegerOutOfRange(0)
99999999999999999999999999999999999999999999999999999999999 ==> IntegerOutOfRange(0)
1e999 | -1e999 ==> FloatOutOfRange(0)
{1, 2} ==> SetNotSupported(0)
[{'a'}] ==> SetNotSupported(1)
{[1]: 2} | {{}: 2} ==> InvalidKey(1)
{'x': 1, (1,): 2} ==> InvalidKey(9)
"#;

    /// `json ==> python str()`.
    const FORMATS: &str = r#"
"raw 'top' level" ==> raw 'top' level
{"a": 1, "b": [1, 2]} ==> {'a': 1, 'b': [1, 2]}
{"kube_tag": "v1.30"} ==> {'kube_tag': 'v1.30'}
[true, false, null, {}, []] ==> [True, False, None, {}, []]
{"x": {"y": [{}]}} ==> {'x': {'y': [{}]}}
["it's", "say \"hi\"", "both ' \""] ==> ["it's", 'say "hi"', 'both \' "']
["a\nb\t\r\\\u0001\u007f\u00a0é\u200b😀\ue000\udb80\udc00"] ==> ['a\nb\t\r\\\x01\x7f\xa0é\u200b😀\ue000\U000f0000']
5 ==> 5
-3 ==> -3
18446744073709551615 ==> 18446744073709551615
true ==> True
null ==> None
[1.0, 1.5, 1e16, 0.1, 1e-5, 1.5e-7, 0.0001, 1e15, 2.5e16, -0.0] ==> [1.0, 1.5, 1e+16, 0.1, 1e-05, 1.5e-07, 0.0001, 1000000000000000.0, 2.5e+16, -0.0]
"#;

    /// Lines `input | input ... ==> expected`.
    fn table(t: &str) -> impl Iterator<Item = (&str, &str)> {
        let lines = t.lines().filter(|l| !l.is_empty());
        let lines = lines.map(|l| {
            l.split_once(" ==> ")
                .unwrap_or_else(|| panic!("bad table line {l:?}"))
        });
        lines.flat_map(|(srcs, want)| srcs.split(" | ").map(move |src| (src, want)))
    }

    fn json(s: &str) -> Value {
        serde_json::from_str(s).unwrap_or_else(|e| panic!("bad JSON in test table {s:?}: {e}"))
    }

    #[test]
    fn parses_table() {
        for (src, want) in table(PARSES) {
            let got = parse(src).map(|v| v.to_string());
            assert_eq!(got, Ok(json(want).to_string()), "{src}");
        }
    }

    #[test]
    fn rejects_table() {
        for (src, want) in table(REJECTS) {
            assert_eq!(
                parse(src).map_err(|e| format!("{e:?}")),
                Err(want.to_string()),
                "{src}"
            );
        }
    }

    #[test]
    fn formats_table() {
        for (src, want) in table(FORMATS) {
            assert_eq!(to_python_str(&json(src)), want, "{src}");
        }
        let floats = [
            (1e100, "1e+100"),
            (-123456789.125, "-123456789.125"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
            (1056769467311817.2, "1056769467311817.2"), // exact ties round to even, as in Python
            (-2648652672304.6562, "-2648652672304.6562"),
            (216466296007990.62, "216466296007990.62"),
        ];
        for (f, want) in floats {
            assert_eq!(to_python_str(&json!(f)), want);
        }
    }

    #[test]
    fn whitespace_newlines_and_messages() {
        assert_eq!(parse("  \t{'a': 1}\n  "), Ok(json!({"a": 1})));
        assert_eq!(
            parse("{\n 'a': 1,  # c\n 'b': '''x\r\ny''',\n}"),
            Ok(json!({"a": 1, "b": "x\ny"}))
        );
        assert_eq!(
            parse("['a\\\nb', 'c\\\r\nd', r'e\\\nf']"),
            Ok(json!(["ab", "cd", "e\\\nf"]))
        );
        assert_eq!(parse("['a\nb']"), Err(E::UnterminatedString(1)));
        assert_eq!(parse(" \n\t "), Err(E::Empty));
        assert_eq!(parse("# only a comment"), Err(E::Empty));
        assert_eq!(parse("'a\0'"), Err(E::NulByte));
        let msg = |s: &str| parse(s).map_err(|e| e.to_string());
        assert_eq!(
            msg("[1, foo]"),
            Err("malformed node or string at position 4".into())
        );
        assert_eq!(
            msg("[1, 2"),
            Err("unexpected end of input at position 5".into())
        );
        assert_eq!(
            msg("{1}"),
            Err("set literal at position 0 is not supported (not representable in JSON)".into())
        );
    }

    #[test]
    fn depth_limit() {
        let nest = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        assert!(parse(&nest(MAX_DEPTH)).is_ok());
        assert_eq!(parse(&nest(MAX_DEPTH + 1)), Err(E::TooDeep(MAX_DEPTH)));
        assert_eq!(parse(&"[".repeat(200_000)), Err(E::TooDeep(MAX_DEPTH)));
        assert_eq!(
            parse(&"({'a': ".repeat(100_000)),
            Err(E::TooDeep(MAX_DEPTH / 2 * 7))
        );
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        use proptest::num::f64 as pf;
        let float = (pf::POSITIVE | pf::NEGATIVE | pf::NORMAL | pf::SUBNORMAL | pf::ZERO)
            .prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number));
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            any::<u64>().prop_map(Value::from),
            float,
            any::<String>().prop_map(Value::String),
            "[a-z'\"\\\\ \n\r\t\0]{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            let entry = (any::<String>(), inner.clone());
            prop_oneof![
                prop::collection::vec(inner, 0..6).prop_map(Value::Array),
                prop::collection::vec(entry, 0..6)
                    .prop_map(|kv| Value::Object(kv.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        #[test]
        fn never_panics_on_strings(s in any::<String>()) {
            let _ = parse(&s);
        }

        #[test]
        fn never_panics_on_bytes(b in prop::collection::vec(any::<u8>(), 0..256)) {
            let _ = parse(&String::from_utf8_lossy(&b));
        }

        #[test]
        fn never_panics_on_python_like_text(s in "[\\[\\](){},:'\"\\\\#0-9a-fA-FxobjrunNU_.+\\- \n]{0,48}") {
            if let Ok(v) = parse(&s) {
                let _ = to_python_str(&v);
            }
        }

        #[test]
        fn round_trips_through_python_str(v in arb_json()) {
            let wrapped = json!([v.clone()]);
            prop_assert_eq!(parse(&to_python_str(&wrapped)), Ok(wrapped));
            if v.is_object() || v.is_array() {
                // Value equality compares floats numerically (and objects key-order-insensitively).
                prop_assert_eq!(parse(&to_python_str(&v)).map(|p| p.to_string()), Ok(v.to_string()));
            }
        }

        #[test]
        fn float_repr_round_trips(f in any::<f64>().prop_filter("finite", |f| f.is_finite())) {
            let s = float_repr(f);
            prop_assert!(s.contains('.') || s.contains('e'), "{}", s);
            prop_assert!(s.trim_start_matches('-').starts_with(|c: char| c.is_ascii_digit()), "{}", s);
            prop_assert_eq!(s.parse::<f64>().ok(), Some(f));
        }
    }
}
