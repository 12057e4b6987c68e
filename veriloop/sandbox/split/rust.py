"""The split of a Rust test program (see `split`): a trait records the candidate's value, another converts the
recorded one exactly to `f_gold`'s return type on the trusted side."""

# The Rust sources below keep their own line lengths:
# ruff: noqa: E501
from __future__ import annotations

import re

from veriloop.errors import ConfigError
from veriloop.sandbox.split.text import matching, parts, replace

KINDS = {
    *("i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16", "u32", "u64", "u128", "usize"),
    *("f32", "f64", "bool", "char", "String"),
}

CANDIDATE = r"""
trait VlRecord {
    fn vl_record(&self) -> String;
}
macro_rules! vl_record_ints {
    ($tag:literal, $($t:ty),*) => { $(impl VlRecord for $t { fn vl_record(&self) -> String { format!("{} {}", $tag, self) } })* };
}
vl_record_ints!("i", i8, i16, i32, i64, i128, isize);
vl_record_ints!("u", u8, u16, u32, u64, u128, usize);
impl VlRecord for f64 { fn vl_record(&self) -> String { format!("f {:016x}", self.to_bits()) } }
impl VlRecord for f32 { fn vl_record(&self) -> String { format!("f {:016x}", (*self as f64).to_bits()) } }
impl VlRecord for bool { fn vl_record(&self) -> String { format!("b {}", *self as u8) } }
impl VlRecord for char { fn vl_record(&self) -> String { format!("c {}", *self as u32) } }
impl VlRecord for String { fn vl_record(&self) -> String { self.as_str().vl_record() } }
impl VlRecord for &str {
    fn vl_record(&self) -> String { format!("s {}", self.bytes().map(|b| format!("{:02x}", b)).collect::<String>()) }
}
fn vl_rec<T: VlRecord>(value: T) -> T {
    use std::io::Write;
    let mut out = std::io::stdout();
    let _ = write!(out, "\n@@VL@@ {}\n", value.vl_record());
    let _ = out.flush();
    value
}
"""

TRUSTED = r"""
static VL_CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
static VL_LINES: std::sync::Mutex<Option<std::vec::IntoIter<String>>> = std::sync::Mutex::new(None);
fn vl_fail(why: &str) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    eprintln!("call {} of f_filled: {}", VL_CALLS.load(std::sync::atomic::Ordering::SeqCst), why);
    std::process::exit(3)
}
fn vl_next() -> (String, String) {
    use std::io::Read;
    VL_CALLS.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let mut lines = VL_LINES.lock().unwrap_or_else(|e| e.into_inner());
    if lines.is_none() {
        let mut raw = Vec::new();
        let _ = std::io::stdin().read_to_end(&mut raw);
        let text = String::from_utf8_lossy(&raw).into_owned();
        *lines = Some(text.lines().map(|l| l.to_string()).collect::<Vec<_>>().into_iter());
    }
    for line in lines.as_mut().unwrap() {
        let line = line.trim_end_matches('\r');
        if line.len() >= 8 && line.starts_with("@@VL@@ ") && line.is_char_boundary(8) && (line.len() == 8 || line[8..].starts_with(' ')) {
            return (line[7..8].to_string(), line.get(9..).unwrap_or("").to_string());
        }
    }
    drop(lines);
    vl_fail("the candidate's program recorded no value")
}
trait VlTake: Sized {
    fn vl_from(tag: &str, text: &str) -> Option<Self>;
}
macro_rules! vl_take_ints {
    ($($t:ty),*) => { $(impl VlTake for $t {
        fn vl_from(tag: &str, text: &str) -> Option<Self> {
            if text.starts_with('+') { return None; }
            match tag {
                "i" => text.parse::<i128>().ok().and_then(|v| <$t>::try_from(v).ok()),
                "u" => text.parse::<u128>().ok().and_then(|v| <$t>::try_from(v).ok()),
                _ => None,
            }
        }
    })* };
}
vl_take_ints!(i8, i16, i32, i64, i128, isize, u8, u16, u32, u64, u128, usize);
fn vl_float(tag: &str, text: &str) -> Option<f64> {
    if tag != "f" || text.len() != 16 { return None; }
    u64::from_str_radix(text, 16).ok().map(f64::from_bits)
}
impl VlTake for f64 { fn vl_from(tag: &str, text: &str) -> Option<Self> { vl_float(tag, text) } }
impl VlTake for f32 {
    fn vl_from(tag: &str, text: &str) -> Option<Self> {
        let d = vl_float(tag, text)?;
        let f = d as f32;
        if d.is_nan() || f as f64 == d { Some(f) } else { None }
    }
}
impl VlTake for bool {
    fn vl_from(tag: &str, text: &str) -> Option<Self> {
        match (tag, text) { ("b", "0") => Some(false), ("b", "1") => Some(true), _ => None }
    }
}
impl VlTake for char {
    fn vl_from(tag: &str, text: &str) -> Option<Self> {
        if tag != "c" || text.starts_with('+') { return None; }
        text.parse::<u32>().ok().and_then(char::from_u32)
    }
}
impl VlTake for String {
    fn vl_from(tag: &str, text: &str) -> Option<Self> {
        if tag != "s" || text.len() % 2 != 0 || !text.is_ascii() { return None; }
        let bytes: Option<Vec<u8>> = (0..text.len() / 2).map(|i| u8::from_str_radix(&text[2 * i..2 * i + 2], 16).ok()).collect();
        String::from_utf8(bytes?).ok()
    }
}
fn vl_take<T: VlTake>() -> T {
    let (tag, text) = vl_next();
    T::vl_from(&tag, &text).unwrap_or_else(|| vl_fail("a value that does not convert exactly to the reference's type"))
}
"""


def kind_of(gold: str) -> str:
    """`f_gold`'s return type (after `->`), if the split supports it."""
    head = gold.split("{", 1)[0]
    name = re.search(r"\bf_gold\s*\(", head)
    if name is None:
        raise ConfigError("cannot read the signature of `f_gold`")
    rest = head[matching(head, name.end() - 1) + 1 :]
    rest = re.split(r"\bwhere\b", rest)[0].strip()
    if not rest.startswith("->"):
        raise ConfigError("the trusted judge does not support test programs whose f_gold returns nothing")
    kind = rest[2:].strip()
    if kind not in KINDS:
        raise ConfigError(f"the trusted judge does not support test programs whose f_gold returns {kind}")
    return kind


def split(code: str, harness: str) -> tuple[str, str]:
    """(candidate side, trusted side): each `f_filled(...)` call records its value / takes the recorded one."""
    before, gold, after = parts(harness)
    kind = kind_of(gold)
    candidate_main = replace(after, "f_filled", lambda args: f"vl_rec(f_filled({args}))")
    candidate_main = replace(candidate_main, "f_gold", lambda args: f"<{kind}>::default()")
    candidate = f"{before}\n{CANDIDATE}\n{code}\n\n{candidate_main}\n"
    trusted_main = replace(after, "f_filled", lambda args: f"vl_take::<{kind}>()")
    trusted = f"{before}\n{gold}\n{TRUSTED}\n{trusted_main}\n"
    return candidate, trusted
