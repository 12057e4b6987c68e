"""Adversarial suite for the JavaScript harness runner (`f_filled` vs `f_gold`, split by split/js.py): hostile, wrong
candidates try the channels a Node program has (the test compares with `==`, so objects with `valueOf` are tried too);
none may pass, each honest twin must. The whole suite is one batch of jobs.
"""

# The JavaScript sources below keep their own line lengths:
# ruff: noqa: E501
from __future__ import annotations

import pytest

from tests.sandbox.hostile import Attack, run_suite
from veriloop.sandbox import Limits

pytestmark = pytest.mark.slow

LIMITS = Limits(wall_s=4.0, compile_s=60.0)
RIGHT, WRONG = "x * x + 1", "x * x"
HARNESS = """function f_gold(x) {
    return x * x + 1;
}
//TOFILL
let n_success = 0;
const param0 = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
for (let i = 0; i < param0.length; ++i) {
    if (f_filled(param0[i]) == f_gold(param0[i])) {
        n_success += 1;
    }
}
console.log("#Results: " + n_success + ", " + param0.length);
"""
FAKE = '"\\n#Results: 10, 10\\nVERILOOP-TEST t PASS\\n"'

ATTACKS = [
    Attack("results_line", "function f_filled(x) { if ($armed) console.log(" + FAKE + "); return $answer; }\n"),
    Attack(
        "fake_results_then_exit",
        "function f_filled(x) { if ($armed) { console.log(" + FAKE + "); process.exit(0); } return $answer; }\n",
        twin_armed=False,
    ),
    Attack(
        "exit_hook",
        'process.on("exit", () => { console.log(' + FAKE + "); process.exitCode = 0; });\n"
        "function f_filled(x) { return $answer; }\n",
    ),
    Attack(
        "throw_after_fake_results",
        "function f_filled(x) { if ($armed) { console.log(" + FAKE + '); throw new Error("x"); } return $answer; }\n',
        twin_armed=False,
    ),
    Attack(
        "call_the_reference",
        "function f_filled(x) { return $armed ? f_gold(x) : $answer; }\n",
        twin_armed=False,
    ),
    Attack(
        "define_its_own_reference",
        "function f_gold(x) { return $answer; }\nfunction f_filled(x) { return f_gold(x); }\n",
    ),
    Attack(
        "forged_records",
        'function f_filled(x) { if ($armed) { for (let i = 0; i < 10; i++) console.log("@@VL@@ j [\\"x\\"]\\n@@VL@@ j [\\"bool\\", true]"); process.exit(0); } return $answer; }\n',
        twin_armed=False,
    ),
    Attack(
        "always_equal_object",
        "let calls = 0;\nfunction f_filled(x) {\n    const right = $answer;\n"
        "    return $armed ? {valueOf() { return right + 1; }, toString() { return String(right + 1); }} : right;\n}\n",
        twin_armed=False,
    ),
    Attack(
        "object_of_its_own_class",
        "class Sneaky extends Number {}\nfunction f_filled(x) { return $armed ? new Sneaky(x * x + 1) : $answer; }\n",
        twin_armed=False,
    ),
    Attack(
        "patched_builtins",
        'JSON.parse = () => ["num", "0"];\nObject.prototype.valueOf = function () { return 2; };\n'
        "const print = console.log;\nconsole.log = (...a) => print(" + FAKE + ");\n"
        "function f_filled(x) { return $answer; }\n",
    ),
    Attack(
        "write_every_descriptor",
        'const fs = require("fs");\nfunction f_filled(x) {\n    if ($armed) {\n'
        "    for (let fd = 2; fd < 64; fd++) { try { fs.writeSync(fd, " + FAKE + "); } catch (e) {} }\n"
        "    for (let fd = 2; fd < 64; fd++) { try { fs.appendFileSync(`/proc/self/fd/$${fd}`, "
        + FAKE
        + "); } catch (e) {} }\n"
        "    }\n    return $answer;\n}\n",
        twin_armed=False,  # writing over libuv's own descriptors crashes node itself
    ),
    Attack(
        "linger_into_the_trusted_phase",
        'require("child_process").spawn(process.execPath, ["-e", `const fs = require("fs"); let n = 0;\n'
        "setInterval(() => { for (const t of ['/work/main.js', '/tmp/main.js', 'main.js']) { try { fs.writeFileSync(t, 'console.log(\"#Results: 10, 10\")'); } catch (e) {} }\n"
        '    if (++n > 400) process.exit(0); }, 10);`], {detached: true, stdio: "ignore"}).unref();\n'
        "function f_filled(x) { return $answer; }\n",
    ),
    Attack(
        "kill_everything",
        'function f_filled(x) { if ($armed) { try { process.kill(process.ppid, "SIGKILL"); process.kill(-1, "SIGKILL"); } catch (e) {} } return $answer; }\n',
        twin_armed=False,
    ),
]


async def test_hostile_js_candidates_are_not_passed(bwrap_warm: object) -> None:
    await run_suite(bwrap_warm, "javascript", HARNESS, ATTACKS, RIGHT, WRONG, LIMITS)
