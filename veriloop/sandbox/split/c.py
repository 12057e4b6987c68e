"""The split of a C test program (see `split`): C11 `_Generic` picks the recorder for the candidate's value and the
exact conversion to `f_gold`'s return type on the trusted side."""

# The C sources below keep their own line lengths:
# ruff: noqa: E501
from __future__ import annotations

import re

from veriloop.errors import ConfigError
from veriloop.sandbox.split.text import parts, replace, return_type

MODIFIERS = {"static", "inline", "extern"}
SCALAR = re.compile(r"^(?:(?:unsigned|signed|short|long|int|char|bool|_Bool|float|double)\s*)+$")
STRING = re.compile(r"^(?:const\s+)?char\s*\*$")

CANDIDATE = r"""#include <stdio.h>
#define VL_INT(name, type, fmt, cast) static type name(type v) { printf("\n@@VL@@ " fmt "\n", (cast) v); fflush(stdout); return v; }
VL_INT(vl_rec_b, _Bool, "b %d", int)
VL_INT(vl_rec_c, char, "c %d", int)
VL_INT(vl_rec_sc, signed char, "i %d", int)
VL_INT(vl_rec_uc, unsigned char, "u %u", unsigned)
VL_INT(vl_rec_h, short, "i %d", int)
VL_INT(vl_rec_uh, unsigned short, "u %u", unsigned)
VL_INT(vl_rec_i, int, "i %d", int)
VL_INT(vl_rec_u, unsigned, "u %u", unsigned)
VL_INT(vl_rec_l, long, "i %ld", long)
VL_INT(vl_rec_ul, unsigned long, "u %lu", unsigned long)
VL_INT(vl_rec_ll, long long, "i %lld", long long)
VL_INT(vl_rec_ull, unsigned long long, "u %llu", unsigned long long)
VL_INT(vl_rec_f, float, "f %La", long double)
VL_INT(vl_rec_d, double, "f %La", long double)
VL_INT(vl_rec_ld, long double, "f %La", long double)
static const char *vl_rec_cs(const char *v) {
    if (!v) printf("\n@@VL@@ n\n");
    else {
        printf("\n@@VL@@ s ");
        for (const unsigned char *byte = (const unsigned char *) v; *byte; byte++) printf("%02x", *byte);
        printf("\n");
    }
    fflush(stdout);
    return v;
}
static char *vl_rec_s(char *v) { vl_rec_cs(v); return v; }
#define vl_rec(v) _Generic((v), _Bool: vl_rec_b, char: vl_rec_c, signed char: vl_rec_sc, unsigned char: vl_rec_uc, \
    short: vl_rec_h, unsigned short: vl_rec_uh, int: vl_rec_i, unsigned: vl_rec_u, long: vl_rec_l, unsigned long: vl_rec_ul, \
    long long: vl_rec_ll, unsigned long long: vl_rec_ull, float: vl_rec_f, double: vl_rec_d, long double: vl_rec_ld, \
    char *: vl_rec_s, const char *: vl_rec_cs)(v)
"""

TRUSTED = r"""#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
static long vl_calls = 0;
static char vl_tag;
static char vl_line[1 << 16];
static char *vl_text;
static _Noreturn void vl_fail(const char *why) {
    fprintf(stderr, "call %ld of f_filled: %s\n", vl_calls, why);
    fflush(stdout);
    _Exit(3);
}
static void vl_next(void) {
    vl_calls++;
    while (fgets(vl_line, sizeof vl_line, stdin)) {
        int whole = strchr(vl_line, '\n') != NULL || feof(stdin);
        if (strncmp(vl_line, "@@VL@@ ", 7) != 0 || vl_line[7] == 0 || (vl_line[8] != ' ' && vl_line[8] != '\n')) {
            while (!whole && fgets(vl_line, sizeof vl_line, stdin)) whole = strchr(vl_line, '\n') != NULL;
            continue;
        }
        if (!whole) vl_fail("a record longer than the trusted side reads");
        vl_tag = vl_line[7];
        vl_text = vl_line[8] == ' ' ? vl_line + 9 : vl_line + 8;
        vl_text[strcspn(vl_text, "\r\n")] = 0;
        return;
    }
    vl_fail("the candidate's program recorded no value");
}
static long long vl_signed(long long low, long long high) {
    char *end = NULL;
    vl_next();
    errno = 0;
    if (vl_tag == 'i' || vl_tag == 'c' || vl_tag == 'b') {
        long long whole = strtoll(vl_text, &end, 10);
        if (errno || *end || end == vl_text) vl_fail("a malformed integer");
        if (whole < low || whole > high) vl_fail("an integer out of range");
        return whole;
    }
    if (vl_tag == 'u') {
        unsigned long long whole = strtoull(vl_text, &end, 10);
        if (errno || *end || end == vl_text || vl_text[0] == '-') vl_fail("a malformed integer");
        if (whole > (unsigned long long) high) vl_fail("an integer out of range");
        return (long long) whole;
    }
    if (vl_tag == 'f') {
        long double value = strtold(vl_text, &end);
        if (*end || end == vl_text) vl_fail("a malformed float");
        if (isnan(value) || value != floorl(value)) vl_fail("a float where the test wants an integer");
        if (value < (long double) low || value > (long double) high) vl_fail("a number out of range");
        return (long long) value;
    }
    vl_fail("a value of a type the test cannot compare");
}
static unsigned long long vl_unsigned(unsigned long long high) {
    char *end = NULL;
    vl_next();
    errno = 0;
    if (vl_tag == 'i' || vl_tag == 'c' || vl_tag == 'b' || vl_tag == 'u') {
        if (vl_text[0] == '-') vl_fail("a negative integer where the test wants an unsigned one");
        unsigned long long whole = strtoull(vl_text, &end, 10);
        if (errno || *end || end == vl_text) vl_fail("a malformed integer");
        if (whole > high) vl_fail("an integer out of range");
        return whole;
    }
    if (vl_tag == 'f') {
        long double value = strtold(vl_text, &end);
        if (*end || end == vl_text) vl_fail("a malformed float");
        if (isnan(value) || value != floorl(value) || value < 0 || value > (long double) high) vl_fail("a float where the test wants an unsigned integer");
        return (unsigned long long) value;
    }
    vl_fail("a value of a type the test cannot compare");
}
static long double vl_real(void) {
    char *end = NULL;
    vl_next();
    errno = 0;
    if (vl_tag == 'f') {
        long double value = strtold(vl_text, &end);
        if (*end || end == vl_text) vl_fail("a malformed float");
        return value;
    }
    if (vl_tag == 'i' || vl_tag == 'c' || vl_tag == 'b') {
        long long whole = strtoll(vl_text, &end, 10);
        if (errno || *end || end == vl_text) vl_fail("a malformed integer");
        if ((long long) (long double) whole != whole) vl_fail("an integer that is not exact as a float");
        return (long double) whole;
    }
    if (vl_tag == 'u') {
        unsigned long long whole = strtoull(vl_text, &end, 10);
        if (errno || *end || end == vl_text || vl_text[0] == '-') vl_fail("a malformed integer");
        if ((unsigned long long) (long double) whole != whole) vl_fail("an integer that is not exact as a float");
        return (long double) whole;
    }
    vl_fail("a value of a type the test cannot compare");
}
static _Bool vl_take_b(void) { return (_Bool) vl_signed(0, 1); }
static char vl_take_c(void) { return (char) vl_signed(CHAR_MIN, CHAR_MAX); }
static signed char vl_take_sc(void) { return (signed char) vl_signed(SCHAR_MIN, SCHAR_MAX); }
static unsigned char vl_take_uc(void) { return (unsigned char) vl_unsigned(UCHAR_MAX); }
static short vl_take_h(void) { return (short) vl_signed(SHRT_MIN, SHRT_MAX); }
static unsigned short vl_take_uh(void) { return (unsigned short) vl_unsigned(USHRT_MAX); }
static int vl_take_i(void) { return (int) vl_signed(INT_MIN, INT_MAX); }
static unsigned vl_take_u(void) { return (unsigned) vl_unsigned(UINT_MAX); }
static long vl_take_l(void) { return (long) vl_signed(LONG_MIN, LONG_MAX); }
static unsigned long vl_take_ul(void) { return (unsigned long) vl_unsigned(ULONG_MAX); }
static long long vl_take_ll(void) { return vl_signed(LLONG_MIN, LLONG_MAX); }
static unsigned long long vl_take_ull(void) { return vl_unsigned(ULLONG_MAX); }
static float vl_take_f(void) {
    long double value = vl_real();
    float exact = (float) value;
    if (!isnan(value) && (long double) exact != value) vl_fail("a float that does not fit the type exactly");
    return exact;
}
static double vl_take_d(void) {
    long double value = vl_real();
    double exact = (double) value;
    if (!isnan(value) && (long double) exact != value) vl_fail("a float that does not fit the type exactly");
    return exact;
}
static long double vl_take_ld(void) { return vl_real(); }
static char *vl_take_s(void) {
    vl_next();
    if (vl_tag == 'n') return NULL;
    size_t size = strlen(vl_text);
    if (vl_tag != 's' || size % 2) vl_fail("not a string");
    char *out = malloc(size / 2 + 1);
    if (!out) vl_fail("out of memory");
    for (size_t i = 0; i < size / 2; i++) {
        char pair[3] = {vl_text[2 * i], vl_text[2 * i + 1], 0};
        char *end = NULL;
        long byte = strtol(pair, &end, 16);
        if (*end || byte == 0) vl_fail("a malformed string");
        out[i] = (char) byte;
    }
    out[size / 2] = 0;
    return out;
}
#define vl_take() _Generic((vl_gold_t) 0, _Bool: vl_take_b, char: vl_take_c, signed char: vl_take_sc, unsigned char: vl_take_uc, \
    short: vl_take_h, unsigned short: vl_take_uh, int: vl_take_i, unsigned: vl_take_u, long: vl_take_l, unsigned long: vl_take_ul, \
    long long: vl_take_ll, unsigned long long: vl_take_ull, float: vl_take_f, double: vl_take_d, long double: vl_take_ld, \
    char *: vl_take_s, const char *: vl_take_s)()
"""


def kind_of(gold: str) -> str:
    """`f_gold`'s return type, if the split supports it (numbers, bool, char and C strings)."""
    kind = return_type(gold, MODIFIERS)
    if kind == "void":
        raise ConfigError("the trusted judge does not support test programs whose f_gold returns void")
    if not (SCALAR.match(kind) or STRING.match(kind)):
        raise ConfigError(f"the trusted judge does not support test programs whose f_gold returns {kind}")
    return kind


def split(code: str, harness: str) -> tuple[str, str]:
    """(candidate side, trusted side): each `f_filled(...)` call records its value / takes the recorded one."""
    before, gold, after = parts(harness)
    kind = kind_of(gold)
    typedef = f"typedef {kind} vl_gold_t;"
    candidate_main = replace(after, "f_filled", lambda args: f"vl_rec(f_filled({args}))")
    default = '((vl_gold_t) "")' if STRING.match(kind) else "((vl_gold_t) 0)"  # a test may strcmp it
    candidate_main = replace(candidate_main, "f_gold", lambda args: default)
    candidate = f"{CANDIDATE}\n{before}\n{typedef}\n\n{code}\n\n{candidate_main}\n"
    trusted_main = replace(after, "f_filled", lambda args: "vl_take()")
    trusted = f"{TRUSTED}\n{before}\n{gold}\n{typedef}\n\n{trusted_main}\n"
    return candidate, trusted
