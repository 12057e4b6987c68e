"""The split of a JavaScript test program (see `split`): the candidate's value crosses as a tagged JSON record
(numbers as the bits of their float64, so -0, NaN and the infinities are exact; bigints, strings, booleans, null,
undefined, arrays and plain objects); the trusted side rebuilds it from those records alone, so no getter, `valueOf`,
`toString` or prototype of the candidate's reaches the test's comparison."""

# The JavaScript sources below keep their own line lengths:
# ruff: noqa: E501
from __future__ import annotations

from veriloop.sandbox.split.text import parts, replace

CANDIDATE = r"""
const vlFs = require("fs");
function vlEncode(v, depth) {
    if (depth > 64) return ["x", "too deep"];
    if (v === null) return ["null"];
    switch (typeof v) {
        case "undefined": return ["undef"];
        case "boolean": return ["bool", v];
        case "number": {
            const view = new DataView(new ArrayBuffer(8));
            view.setFloat64(0, v);
            return ["num", view.getBigUint64(0).toString(16)];
        }
        case "bigint": return ["big", v.toString()];
        case "string": return ["str", v];
        case "object":
            if (Array.isArray(v)) return ["arr", Array.from(v, (x) => vlEncode(x, depth + 1))];
            if (Object.getPrototypeOf(v) === Object.prototype || Object.getPrototypeOf(v) === null)
                return ["obj", Object.keys(v).map((k) => [k, vlEncode(v[k], depth + 1)])];
    }
    return ["x", Object.prototype.toString.call(v)];
}
function vlRec(v) {
    vlFs.writeSync(1, "\n@@VL@@ j " + JSON.stringify(vlEncode(v, 0)) + "\n");
    return v;
}
"""

TRUSTED = r"""
const vlFs = require("fs");
let vlLines = null;
let vlCalls = 0;
function vlFail(why) {
    vlFs.writeSync(2, "call " + vlCalls + " of f_filled: " + why + "\n");
    process.exit(3);
}
function vlDecode(v, depth) {
    if (!Array.isArray(v) || typeof v[0] !== "string" || depth > 64) vlFail("a malformed value");
    const [tag, body] = v;
    if (tag === "null" && v.length === 1) return null;
    if (tag === "undef" && v.length === 1) return undefined;
    if (v.length !== 2) vlFail("a malformed value");
    if (tag === "bool" && typeof body === "boolean") return body;
    if (tag === "num" && typeof body === "string" && /^[0-9a-f]{1,16}$/.test(body)) {
        const view = new DataView(new ArrayBuffer(8));
        view.setBigUint64(0, BigInt("0x" + body));
        return view.getFloat64(0);
    }
    if (tag === "big" && typeof body === "string" && /^-?[0-9]+$/.test(body)) return BigInt(body);
    if (tag === "str" && typeof body === "string") return body;
    if (tag === "arr" && Array.isArray(body)) return body.map((x) => vlDecode(x, depth + 1));
    if (tag === "obj" && Array.isArray(body)) {
        const out = {};
        for (const pair of body) {
            if (!Array.isArray(pair) || pair.length !== 2 || typeof pair[0] !== "string") vlFail("a malformed object");
            Object.defineProperty(out, pair[0], {value: vlDecode(pair[1], depth + 1), enumerable: true, writable: true, configurable: true});
        }
        return out;
    }
    if (tag === "x") vlFail("a value the test cannot compare: " + String(body).slice(0, 200));
    vlFail("a malformed value");
}
function vlTake() {
    vlCalls++;
    if (vlLines === null) {
        let text = "";
        try { text = vlFs.readFileSync(0, "utf8"); } catch (e) { text = ""; }
        vlLines = text.split("\n").filter((line) => line.startsWith("@@VL@@ j ")).reverse();
    }
    if (vlLines.length === 0) vlFail("the candidate's program recorded no value");
    let parsed;
    try { parsed = JSON.parse(vlLines.pop().slice(9)); } catch (e) { vlFail("a malformed record"); }
    return vlDecode(parsed, 0);
}
"""


def split(code: str, harness: str) -> tuple[str, str]:
    """(candidate side, trusted side): each `f_filled(...)` call records its value / takes the recorded one."""
    before, gold, after = parts(harness)
    candidate_main = replace(after, "f_filled", lambda args: f"vlRec(f_filled({args}))")
    candidate_main = replace(candidate_main, "f_gold", lambda args: "undefined")
    candidate = f"{before}\n{CANDIDATE}\n{code}\n\n{candidate_main}\n"
    trusted_main = replace(after, "f_filled", lambda args: f"vlTake({args})")
    trusted = f"{before}\n{gold}\n{TRUSTED}\n{trusted_main}\n"
    return candidate, trusted
