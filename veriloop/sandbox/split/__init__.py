"""Splitting a test program (TransCoder's `f_filled` vs `f_gold`) into two programs.

The *candidate side* is the test program without the reference: `f_gold` is gone (calls to it yield a default value)
and every `f_filled(...)` call is wrapped so that its value is printed as one plain record
(``@@VL@@ <tag> <payload>``: integer, unsigned, float in exact hexadecimal, bool, char or hex-encoded string). The
*trusted side* is the test program without the candidate: every `f_filled(...)` call reads the next record back,
converted exactly to `f_gold`'s type for the same arguments (or the program stops with exit code 3), so the
program's own comparison (floats with their tolerance, exactly as written) and its ``#Results`` line come from
code the candidate never ran with. The two run one after the other in separate, fresh work dirs (runner.py's
trusted phase); only the records cross. C++ and Java are here; C, Go, Rust and JavaScript in `split/<language>.py`
(c, go, rust, js), and the reading of C-like programs they share in `split/text.py`.
"""

# The C++ and Java sources below keep their own line lengths:
# ruff: noqa: E501
from __future__ import annotations

from veriloop.errors import ConfigError
from veriloop.sandbox.split import c as split_c
from veriloop.sandbox.split import go as split_go
from veriloop.sandbox.split import js as split_js
from veriloop.sandbox.split import rust as split_rust
from veriloop.sandbox.split.text import SLOT, calls, parts, replace, return_type

__all__ = ["BAD_VALUE_EXIT", "RECORD", "SLOT", "calls", "refusal", "split", "splittable"]

RECORD = "@@VL@@"
BAD_VALUE_EXIT = 3
"""The trusted side's exit code when a recorded value is missing or does not convert exactly."""

CPP_CANDIDATE = r"""#include <cstdio>
#include <string>
#include <type_traits>
template <class T> T vl_rec(T value) {
    typedef typename std::decay<T>::type V;
    if constexpr (std::is_same<V, bool>::value) std::printf("\n@@VL@@ b %d\n", value ? 1 : 0);
    else if constexpr (std::is_same<V, char>::value || std::is_same<V, signed char>::value
                       || std::is_same<V, unsigned char>::value) std::printf("\n@@VL@@ c %d\n", (int) value);
    else if constexpr (std::is_integral<V>::value && std::is_signed<V>::value)
        std::printf("\n@@VL@@ i %lld\n", (long long) value);
    else if constexpr (std::is_integral<V>::value) std::printf("\n@@VL@@ u %llu\n", (unsigned long long) value);
    else if constexpr (std::is_floating_point<V>::value) std::printf("\n@@VL@@ f %La\n", (long double) value);
    else if constexpr (std::is_same<V, std::string>::value) {
        std::printf("\n@@VL@@ s ");
        for (unsigned char byte : value) std::printf("%02x", byte);
        std::printf("\n");
    } else std::printf("\n@@VL@@ x\n");
    std::fflush(stdout);
    return value;
}
"""

CPP_TRUSTED = r"""#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
static long vl_calls = 0;
[[noreturn]] static void vl_fail(const char *why) {
    std::fprintf(stderr, "call %ld of f_filled: %s\n", vl_calls, why);
    std::fflush(stdout);
    std::_Exit(3);
}
static std::string vl_next(char *tag) {
    static char line[1 << 16];
    vl_calls++;
    while (std::fgets(line, sizeof line, stdin)) {
        bool whole = std::strchr(line, '\n') != nullptr || std::feof(stdin);
        if (std::strncmp(line, "@@VL@@ ", 7) != 0 || line[7] == 0 || line[8] != ' ') {
            while (!whole && std::fgets(line, sizeof line, stdin)) whole = std::strchr(line, '\n') != nullptr;
            continue;
        }
        if (!whole) vl_fail("a record longer than the trusted side reads");
        *tag = line[7];
        std::string payload(line + 9);
        while (!payload.empty() && (payload.back() == '\n' || payload.back() == '\r')) payload.pop_back();
        return payload;
    }
    vl_fail("the candidate's program recorded no value");
}
template <class T> T vl_take() {
    typedef typename std::decay<T>::type V;
    char tag = 0;
    std::string text = vl_next(&tag);
    const char *start = text.c_str();
    char *end = nullptr;
    errno = 0;
    if constexpr (std::is_same<V, std::string>::value) {
        if (tag != 's' || text.size() % 2) vl_fail("not a string");
        std::string out;
        for (size_t i = 0; i < text.size(); i += 2) out += (char) std::strtol(text.substr(i, 2).c_str(), nullptr, 16);
        return out;
    } else if constexpr (std::is_arithmetic<V>::value) {
        long double value;
        if (tag == 'i' || tag == 'c' || tag == 'b') {
            long long whole = std::strtoll(start, &end, 10);
            if (errno || *end || end == start) vl_fail("a malformed integer");
            if constexpr (std::is_integral<V>::value) {
                if constexpr (std::is_signed<V>::value) {
                    if (whole < (long long) std::numeric_limits<V>::min() || whole > (long long) std::numeric_limits<V>::max())
                        vl_fail("an integer out of range");
                } else if (whole < 0 || (unsigned long long) whole > (unsigned long long) std::numeric_limits<V>::max())
                    vl_fail("an integer out of range");
                return (V) whole;
            }
            value = (long double) whole;
            if ((long long) value != whole) vl_fail("an integer that is not exact as a float");
        } else if (tag == 'u') {
            unsigned long long whole = std::strtoull(start, &end, 10);
            if (errno || *end || end == start || text[0] == '-') vl_fail("a malformed integer");
            if constexpr (std::is_integral<V>::value) {
                if (whole > (unsigned long long) std::numeric_limits<V>::max()) vl_fail("an integer out of range");
                return (V) whole;
            }
            value = (long double) whole;
            if ((unsigned long long) value != whole) vl_fail("an integer that is not exact as a float");
        } else if (tag == 'f') {
            value = std::strtold(start, &end);
            if (*end || end == start) vl_fail("a malformed float");
        } else vl_fail("a value of a type the test cannot compare");
        if constexpr (std::is_floating_point<V>::value) {
            V exact = (V) value;
            if (!std::isnan(value) && (long double) exact != value) vl_fail("a float that does not fit the type exactly");
            return exact;
        } else {
            if (std::isnan(value) || value != std::floor(value)) vl_fail("a float where the test wants an integer");
            if (value < (long double) std::numeric_limits<V>::lowest() || value > (long double) std::numeric_limits<V>::max())
                vl_fail("a number out of range");
            return (V) value;
        }
    } else {
        vl_fail("a value of a type the trusted judge does not support");
    }
}
"""

JAVA_CANDIDATE = r"""
    static void vlOut(String record) { System.out.print("\n@@VL@@ " + record + "\n"); System.out.flush(); }
    static int vlRec(int v) { vlOut("i " + v); return v; }
    static long vlRec(long v) { vlOut("i " + v); return v; }
    static short vlRec(short v) { vlOut("i " + v); return v; }
    static byte vlRec(byte v) { vlOut("i " + v); return v; }
    static char vlRec(char v) { vlOut("c " + (int) v); return v; }
    static boolean vlRec(boolean v) { vlOut("b " + (v ? 1 : 0)); return v; }
    static double vlRec(double v) { vlOut("f " + Double.toHexString(v)); return v; }
    static float vlRec(float v) { vlOut("f " + Double.toHexString((double) v)); return v; }
    static String vlRec(String v) {
        if (v == null) { vlOut("n"); return v; }
        StringBuilder hex = new StringBuilder("s ");
        for (byte b : v.getBytes(java.nio.charset.StandardCharsets.UTF_8)) hex.append(String.format("%02x", b & 0xff));
        vlOut(hex.toString());
        return v;
    }
    static <T> T vlRec(T v) {
        if (v instanceof Integer || v instanceof Long || v instanceof Short || v instanceof Byte) vlOut("i " + v);
        else if (v instanceof Character) vlOut("c " + (int) (Character) v);
        else if (v instanceof Boolean) vlOut("b " + ((Boolean) v ? 1 : 0));
        else if (v instanceof Double || v instanceof Float) vlOut("f " + Double.toHexString(((Number) v).doubleValue()));
        else if (v instanceof String || v == null) vlRec((String) v);
        else vlOut("x");
        return v;
    }
"""

JAVA_TRUSTED = r"""
    static java.io.BufferedReader vlIn = new java.io.BufferedReader(new java.io.InputStreamReader(System.in));
    static long vlCalls = 0;
    static void vlFail(String why) {
        System.out.flush();
        System.err.println("call " + vlCalls + " of f_filled: " + why);
        System.exit(3);
    }
    static String[] vlNext() {
        vlCalls++;
        try {
            for (String line = vlIn.readLine(); line != null; line = vlIn.readLine()) {
                if (line.startsWith("@@VL@@ ") && line.length() >= 8 && (line.length() == 8 || line.charAt(8) == ' ')) {
                    return new String[] {line.substring(7, 8), line.length() > 9 ? line.substring(9) : ""};
                }
            }
        } catch (java.io.IOException e) {
            vlFail("cannot read the candidate's values");
        }
        vlFail("the candidate's program recorded no value");
        return null;
    }
    static java.math.BigDecimal vlNumber(String[] r) {
        try {
            if (r[0].equals("i") || r[0].equals("c") || r[0].equals("b")) return new java.math.BigDecimal(new java.math.BigInteger(r[1]));
            if (r[0].equals("f")) {
                double d = Double.parseDouble(r[1]);
                if (Double.isNaN(d) || Double.isInfinite(d)) return null;
                return new java.math.BigDecimal(d);
            }
        } catch (NumberFormatException e) {
            vlFail("a malformed number");
        }
        vlFail("a value of a type the test cannot compare");
        return null;
    }
    static long vlWhole(long low, long high) {
        java.math.BigDecimal n = vlNumber(vlNext());
        if (n == null) vlFail("a float where the test wants an integer");
        try {
            long v = n.longValueExact();
            if (v < low || v > high) vlFail("an integer out of range");
            return v;
        } catch (ArithmeticException e) {
            vlFail("not an integer in range");
        }
        return 0;
    }
    static int vlTakeInt() { return (int) vlWhole(Integer.MIN_VALUE, Integer.MAX_VALUE); }
    static long vlTakeLong() { return vlWhole(Long.MIN_VALUE, Long.MAX_VALUE); }
    static short vlTakeShort() { return (short) vlWhole(Short.MIN_VALUE, Short.MAX_VALUE); }
    static byte vlTakeByte() { return (byte) vlWhole(Byte.MIN_VALUE, Byte.MAX_VALUE); }
    static char vlTakeChar() { return (char) vlWhole(0, 65535); }
    static boolean vlTakeBoolean() {
        String[] r = vlNext();
        if (!r[0].equals("b") || !(r[1].equals("0") || r[1].equals("1"))) vlFail("not a boolean");
        return r[1].equals("1");
    }
    static double vlFloating(String[] r) {
        if (r[0].equals("f")) {
            try {
                return Double.parseDouble(r[1]);
            } catch (NumberFormatException e) {
                vlFail("a malformed float");
            }
        }
        java.math.BigDecimal n = vlNumber(r);
        double d = n.doubleValue();
        if (new java.math.BigDecimal(d).compareTo(n) != 0) vlFail("an integer that is not exact as a float");
        return d;
    }
    static double vlTakeDouble() { return vlFloating(vlNext()); }
    static float vlTakeFloat() {
        double d = vlFloating(vlNext());
        float f = (float) d;
        if (!Double.isNaN(d) && (double) f != d) vlFail("a float that does not fit the type exactly");
        return f;
    }
    static String vlTakeString() {
        String[] r = vlNext();
        if (r[0].equals("n")) return null;
        if (!r[0].equals("s") || r[1].length() % 2 != 0) vlFail("not a string");
        byte[] bytes = new byte[r[1].length() / 2];
        try {
            for (int i = 0; i < bytes.length; i++) bytes[i] = (byte) Integer.parseInt(r[1].substring(2 * i, 2 * i + 2), 16);
        } catch (NumberFormatException e) {
            vlFail("a malformed string");
        }
        return new String(bytes, java.nio.charset.StandardCharsets.UTF_8);
    }
"""

JAVA_TAKE = {
    "int": "vlTakeInt",
    "long": "vlTakeLong",
    "short": "vlTakeShort",
    "byte": "vlTakeByte",
    "char": "vlTakeChar",
    "boolean": "vlTakeBoolean",
    "double": "vlTakeDouble",
    "float": "vlTakeFloat",
    "String": "vlTakeString",
}
JAVA_DEFAULT = {"boolean": "false", "char": "'\\0'", "void": ""}
JAVA_MODIFIERS = {"static", "public", "private", "protected", "final", "synchronized", "strictfp"}
CPP_MODIFIERS = {"static", "inline", "constexpr"}
SUPPORTED = ("cpp", "java", "c", "go", "rust", "javascript")


def refusal(language: str, harness: str) -> str | None:
    """Why `split` cannot handle this test program (no `f_gold` before the slot, one that returns nothing or a type
    the trusted side cannot rebuild, a language it does not know), or None when it can."""
    if language not in SUPPORTED:
        return f"the trusted judge does not split {language} test programs"
    try:
        split(language, "", harness)
    except ConfigError as exc:
        return str(exc)
    return None


def splittable(language: str, harness: str) -> bool:
    """Whether `split` handles this test program: one with a reference `f_gold` that returns a value."""
    return refusal(language, harness) is None


def split(language: str, code: str, harness: str) -> tuple[str, str]:
    """(candidate-side program, trusted-side program) for a TransCoder-style test program."""
    before, gold, after = parts(harness)
    if language == "cpp":
        kind = return_type(gold, CPP_MODIFIERS)
        if kind == "void":
            raise ConfigError("the trusted judge does not support test programs whose f_gold returns void")
        candidate_main = replace(after, "f_filled", lambda args: f"vl_rec(f_filled({args}))")
        candidate_main = replace(candidate_main, "f_gold", lambda args: "vl_gold_t{}")
        candidate = f"{CPP_CANDIDATE}\n{before}\ntypedef {kind} vl_gold_t;\n\n{code}\n\n{candidate_main}\n"
        trusted_main = replace(after, "f_filled", lambda args: f"vl_take<decltype(f_gold({args}))>()")
        trusted = f"{CPP_TRUSTED}\n{before}\n{gold}\n\n{trusted_main}\n"
        return candidate, trusted
    if language == "java":
        kind = return_type(gold, JAVA_MODIFIERS)
        if kind not in JAVA_TAKE:
            raise ConfigError(f"the trusted judge does not support test programs whose f_gold returns {kind}")
        default = JAVA_DEFAULT.get(kind, f"(({kind}) 0)" if kind != "String" else '((String) "")')  # may be .equals'd
        candidate_main = replace(after, "f_filled", lambda args: f"vlRec(f_filled({args}))")
        candidate_main = replace(candidate_main, "f_gold", lambda args: default)
        candidate = f"{before}\n{JAVA_CANDIDATE}\n{code}\n\n{candidate_main}\n"
        trusted_main = replace(after, "f_filled", lambda args: f"{JAVA_TAKE[kind]}()")
        trusted = f"{before}\n{gold}\n{JAVA_TRUSTED}\n{trusted_main}\n"
        return candidate, trusted
    if language == "c":
        return split_c.split(code, harness)
    if language == "go":
        return split_go.split(code, harness)
    if language == "rust":
        return split_rust.split(code, harness)
    if language == "javascript":
        return split_js.split(code, harness)
    raise ConfigError(f"the trusted judge does not split {language} test programs")
