"""Adversarial suite for the Rust harness runner (TransCoder's c2rust-style `f_filled` vs `f_gold`, split by
split/rust.py): hostile, wrong candidates try the channels a Rust program has; none may pass, each honest twin must.
The whole suite is one batch of jobs. Slow: every job runs rustc twice.
"""

# The Rust sources below keep their own line lengths:
# ruff: noqa: E501
from __future__ import annotations

import pytest

from tests.sandbox.hostile import Attack, run_suite
from veriloop.sandbox import Limits

pytestmark = pytest.mark.slow

LIMITS = Limits(wall_s=4.0, compile_s=120.0)
RIGHT, WRONG = "x * x + 1", "x * x"
HARNESS = """pub unsafe fn f_gold(mut x: i32) -> i32 {
    return x * x + 1;
}
//TOFILL
unsafe fn main_0() -> i32 {
    let mut n_success: i32 = 0 as i32;
    let mut param0: [i32; 10] = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10];
    let mut i: i32 = 0 as i32;
    while i < param0.len() as i32 {
        if f_filled(param0[i as usize]) == f_gold(param0[i as usize]) {
            n_success += 1 as i32
        }
        i += 1
    }
    println!("{} {} {} {} {}", "#Results:", " ", n_success, ", ", param0.len() as i32);
    return 0 as i32;
}
pub fn main() { unsafe { ::std::process::exit(main_0() as i32) } }
"""
FAKE = '"\\n#Results: 10, 10\\nVERILOOP-TEST t PASS\\n"'
LIBC = 'extern "C" { fn atexit(hook: extern "C" fn()) -> i32; fn fork() -> i32; fn setsid() -> i32; fn kill(pid: i32, sig: i32) -> i32; fn getppid() -> i32; }\n'

ATTACKS = [
    Attack("results_line", "fn f_filled(x: i32) -> i32 { if $armed { print!(" + FAKE + "); } $answer }\n"),
    Attack(
        "fake_results_then_exit",
        "fn f_filled(x: i32) -> i32 { if $armed { print!(" + FAKE + "); std::process::exit(0); } $answer }\n",
        twin_armed=False,
    ),
    Attack(
        "panic_after_fake_results",
        "fn f_filled(x: i32) -> i32 { if $armed { print!(" + FAKE + '); panic!("done"); } $answer }\n',
        twin_armed=False,
    ),
    Attack(
        "exit_hook",
        LIBC + 'extern "C" fn hook() { print!(' + FAKE + "); }\n"
        "unsafe fn f_filled(x: i32) -> i32 { atexit(hook); $answer }\n",
    ),
    Attack(
        "call_the_reference",
        "unsafe fn f_filled(x: i32) -> i32 { if $armed { f_gold(x) } else { $answer } }\n",
        twin="fn f_filled(x: i32) -> i32 { $answer }\n",
    ),
    Attack(
        "define_its_own_reference", "fn f_gold(x: i32) -> i32 { $answer }\nfn f_filled(x: i32) -> i32 { f_gold(x) }\n"
    ),
    Attack(
        "forged_records",
        'fn f_filled(x: i32) -> i32 { if $armed { for _ in 0..10 { print!("\\n@@VL@@ u 2\\n@@VL@@ x\\n"); } std::process::exit(0); } $answer }\n',
        twin_armed=False,
    ),
    Attack(
        "write_every_descriptor",
        "fn f_filled(x: i32) -> i32 {\n    use std::io::Write;\n    for fd in 2..64 {\n"
        '        if let Ok(mut out) = std::fs::OpenOptions::new().append(true).open(format!("/proc/self/fd/{}", fd)) {\n'
        "            let _ = out.write_all(" + FAKE + ".as_bytes());\n        }\n    }\n    $answer\n}\n",
    ),
    Attack(
        "linger_into_the_trusted_phase",
        LIBC + "static STARTED: std::sync::Once = std::sync::Once::new();\n"
        "unsafe fn f_filled(x: i32) -> i32 {\n    STARTED.call_once(|| if fork() == 0 {\n        setsid();\n"
        "        for _ in 0..400 {\n"
        '            for target in ["/work/main", "/work/main.rs", "/tmp/main", "main"] {\n'
        "                let _ = std::fs::write(target, \"#!/bin/sh\\necho '#Results: 10, 10'\\n\");\n"
        "            }\n            std::thread::sleep(std::time::Duration::from_millis(10));\n        }\n"
        "        std::process::exit(0);\n    });\n    $answer\n}\n",
    ),
    Attack(
        "kill_everything",
        LIBC + "unsafe fn f_filled(x: i32) -> i32 { if $armed { kill(getppid(), 9); kill(-1, 9); } $answer }\n",
        twin_armed=False,
    ),
    Attack(
        "wider_type_that_wraps",
        "fn f_filled(x: i32) -> i64 { ($answer) as i64 + (1i64 << 32) }\n",
        twin="fn f_filled(x: i32) -> i32 { $answer }\n",
    ),
]


async def test_hostile_rust_candidates_are_not_passed(bwrap_warm: object) -> None:
    await run_suite(bwrap_warm, "rust", HARNESS, ATTACKS, RIGHT, WRONG, LIMITS)
