"""The split of a Go test program (see `split`): a type switch on `any` records the candidate's value and converts
the recorded one exactly to `f_gold`'s return type on the trusted side."""

# The Go sources below keep their own line lengths:
# ruff: noqa: E501
from __future__ import annotations

import re

from veriloop.errors import ConfigError
from veriloop.sandbox.split.text import matching, parts, replace

KINDS = {
    *("int", "int8", "int16", "int32", "int64", "uint", "uint8", "uint16", "uint32", "uint64", "uintptr"),
    *("byte", "rune", "float32", "float64", "bool", "string"),
}
USES = {
    "fmt": "fmt.Sprint",
    "os": "os.Exit",
    "math": "math.Abs",
    "sort": "sort.Ints",
    "strings": "strings.Contains",
    "strconv": "strconv.Itoa",
    "unsafe": "unsafe.Sizeof(0)",
    "bytes": "bytes.Equal",
    "math/bits": "bits.Len",
    "math/rand": "rand.Intn",
    "unicode": "unicode.IsDigit",
    "container/heap": "heap.Init",
    "container/list": "list.New",
}
"""An exported name of each package the test programs import: the candidate side, which lacks `f_gold`, keeps every
import used (Go refuses to build a program with an unused import)."""

CANDIDATE_IMPORTS = 'import (\n\tvl_fmt "fmt"\n\tvl_os "os"\n\tvl_strconv "strconv"\n)\n'
CANDIDATE = r"""
func vlRec[T any](v T) T {
	text := "x"
	switch x := any(v).(type) {
	case bool:
		text = "b 0"
		if x {
			text = "b 1"
		}
	case int:
		text = "i " + vl_strconv.FormatInt(int64(x), 10)
	case int8:
		text = "i " + vl_strconv.FormatInt(int64(x), 10)
	case int16:
		text = "i " + vl_strconv.FormatInt(int64(x), 10)
	case int32:
		text = "i " + vl_strconv.FormatInt(int64(x), 10)
	case int64:
		text = "i " + vl_strconv.FormatInt(x, 10)
	case uint:
		text = "u " + vl_strconv.FormatUint(uint64(x), 10)
	case uint8:
		text = "u " + vl_strconv.FormatUint(uint64(x), 10)
	case uint16:
		text = "u " + vl_strconv.FormatUint(uint64(x), 10)
	case uint32:
		text = "u " + vl_strconv.FormatUint(uint64(x), 10)
	case uint64:
		text = "u " + vl_strconv.FormatUint(x, 10)
	case uintptr:
		text = "u " + vl_strconv.FormatUint(uint64(x), 10)
	case float32:
		text = "f " + vl_strconv.FormatFloat(float64(x), 'x', -1, 64)
	case float64:
		text = "f " + vl_strconv.FormatFloat(x, 'x', -1, 64)
	case string:
		text = vl_fmt.Sprintf("s %x", x)
	}
	vl_os.Stdout.WriteString("\n@@VL@@ " + text + "\n")
	return v
}
"""

TRUSTED_IMPORTS = 'import (\n\tvl_bufio "bufio"\n\tvl_fmt "fmt"\n\tvl_math "math"\n\tvl_os "os"\n\tvl_strconv "strconv"\n\tvl_strings "strings"\n)\n'
TRUSTED = r"""
var vlIn = vl_bufio.NewReaderSize(vl_os.Stdin, 1<<16)
var vlCalls = 0

func vlFail(why string) {
	vl_fmt.Fprintf(vl_os.Stderr, "call %d of f_filled: %s\n", vlCalls, why)
	vl_os.Exit(3)
}

func vlNext() (string, string) {
	vlCalls++
	for {
		line, err := vlIn.ReadString('\n')
		line = vl_strings.TrimRight(line, "\r\n")
		if vl_strings.HasPrefix(line, "@@VL@@ ") && len(line) >= 8 && (len(line) == 8 || line[8] == ' ') {
			if len(line) > 9 {
				return line[7:8], line[9:]
			}
			return line[7:8], ""
		}
		if err != nil {
			vlFail("the candidate's program recorded no value")
		}
	}
}

func vlSigned(low int64, high int64) int64 {
	tag, text := vlNext()
	switch tag {
	case "i":
		v, err := vl_strconv.ParseInt(text, 10, 64)
		if err != nil || v < low || v > high {
			vlFail("not an integer in range")
		}
		return v
	case "u":
		v, err := vl_strconv.ParseUint(text, 10, 64)
		if err != nil || v > uint64(high) {
			vlFail("not an integer in range")
		}
		return int64(v)
	}
	vlFail("a value of another type than the reference's")
	return 0
}

func vlUnsigned(high uint64) uint64 {
	tag, text := vlNext()
	if tag != "i" && tag != "u" {
		vlFail("a value of another type than the reference's")
	}
	v, err := vl_strconv.ParseUint(text, 10, 64)
	if err != nil || v > high {
		vlFail("not an unsigned integer in range")
	}
	return v
}

func vlFloat() float64 {
	tag, text := vlNext()
	if tag != "f" {
		vlFail("a value of another type than the reference's")
	}
	v, err := vl_strconv.ParseFloat(text, 64)
	if err != nil {
		vlFail("a malformed float")
	}
	return v
}

func vlTake[T any](_ ...any) T {
	var zero T
	var out any
	switch any(zero).(type) {
	case int:
		out = int(vlSigned(vl_math.MinInt, vl_math.MaxInt))
	case int8:
		out = int8(vlSigned(vl_math.MinInt8, vl_math.MaxInt8))
	case int16:
		out = int16(vlSigned(vl_math.MinInt16, vl_math.MaxInt16))
	case int32:
		out = int32(vlSigned(vl_math.MinInt32, vl_math.MaxInt32))
	case int64:
		out = vlSigned(vl_math.MinInt64, vl_math.MaxInt64)
	case uint:
		out = uint(vlUnsigned(vl_math.MaxUint))
	case uint8:
		out = uint8(vlUnsigned(vl_math.MaxUint8))
	case uint16:
		out = uint16(vlUnsigned(vl_math.MaxUint16))
	case uint32:
		out = uint32(vlUnsigned(vl_math.MaxUint32))
	case uint64:
		out = vlUnsigned(vl_math.MaxUint64)
	case uintptr:
		out = uintptr(vlUnsigned(uint64(^uintptr(0))))
	case float64:
		out = vlFloat()
	case float32:
		d := vlFloat()
		f := float32(d)
		if d == d && float64(f) != d {
			vlFail("a float that does not fit the type exactly")
		}
		out = f
	case bool:
		tag, text := vlNext()
		if tag != "b" || (text != "0" && text != "1") {
			vlFail("not a boolean")
		}
		out = text == "1"
	case string:
		tag, text := vlNext()
		if tag != "s" || len(text)%2 != 0 {
			vlFail("not a string")
		}
		bytes := make([]byte, len(text)/2)
		for i := range bytes {
			b, err := vl_strconv.ParseUint(text[2*i:2*i+2], 16, 8)
			if err != nil {
				vlFail("a malformed string")
			}
			bytes[i] = byte(b)
		}
		out = string(bytes)
	default:
		vlFail("a value of a type the trusted judge does not support")
	}
	return out.(T)
}
"""

IMPORT_BLOCK = re.compile(r"^import\s*\((.*?)\)", re.DOTALL | re.MULTILINE)
IMPORT_LINE = re.compile(r"^import\s+((?:[A-Za-z_.]\w*\s+)?\"[^\"]+\")", re.MULTILINE)
IMPORT_SPEC = re.compile(r"(?:([A-Za-z_.]\w*)\s+)?\"([^\"]+)\"")


def kind_of(gold: str) -> str:
    """`f_gold`'s result type: one unnamed result of a basic type."""
    head = gold.split("{", 1)[0]
    name = re.search(r"\bf_gold\s*\(", head)
    if name is None:
        raise ConfigError("cannot read the signature of `f_gold`")
    kind = head[matching(head, name.end() - 1) + 1 :].strip()
    if kind.startswith("(") and kind.endswith(")"):
        kind = kind[1:-1].strip()
    if not kind:
        raise ConfigError("the trusted judge does not support test programs whose f_gold returns nothing")
    if kind not in KINDS:
        raise ConfigError(f"the trusted judge does not support test programs whose f_gold returns {kind}")
    return kind


def _imports(before: str) -> list[tuple[str | None, str]]:
    specs = [spec for block in IMPORT_BLOCK.findall(before) for spec in IMPORT_SPEC.findall(block)]
    specs += [spec for line in IMPORT_LINE.findall(before) for spec in IMPORT_SPEC.findall(line)]
    return [(alias or None, path) for alias, path in specs]


def _uses(before: str) -> str:
    """`var _ = pkg.Name` for every import, so that removing `f_gold` leaves none unused."""
    lines = []
    for alias, path in _imports(before):
        if alias in ("_", "."):
            continue
        if path not in USES:
            raise ConfigError(f"the trusted judge does not split Go test programs that import {path!r}")
        use = USES[path]
        if alias is not None:
            use = alias + use[use.index(".") :]
        lines.append(f"var _ = {use}")
    return "\n".join(lines)


def _with_imports(before: str, imports: str) -> str:
    package = re.search(r"^package\s+main\b.*$", before, re.MULTILINE)
    if package is None:
        raise ConfigError("the Go test program has no `package main` before f_gold")
    return f"{before[: package.end()]}\n{imports}{before[package.end() :]}"


def split(code: str, harness: str) -> tuple[str, str]:
    """(candidate side, trusted side): each `f_filled(...)` call records its value / takes the recorded one."""
    before, gold, after = parts(harness)
    kind = kind_of(gold)
    uses = _uses(before)
    candidate_main = replace(after, "f_filled", lambda args: f"vlRec(f_filled({args}))")
    candidate_main = replace(candidate_main, "f_gold", lambda args: f"(*new({kind}))")
    candidate = f"{_with_imports(before, CANDIDATE_IMPORTS)}\n{uses}\n{CANDIDATE}\n{code}\n\n{candidate_main}\n"
    trusted_main = replace(after, "f_filled", lambda args: f"vlTake[{kind}]({args})")
    trusted = f"{_with_imports(before, TRUSTED_IMPORTS)}\n{gold}\n{TRUSTED}\n{trusted_main}\n"
    return candidate, trusted
