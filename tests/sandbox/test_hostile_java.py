"""Adversarial suite for the Java harness runner (TransCoder's `f_filled` vs `f_gold`): the candidate's side only
records values; the trusted side, built and run afterwards in a fresh work dir, compares them. Hostile, wrong
candidates try every channel; none may pass, each honest twin must. Slow: every job compiles two programs.
"""

# The Java sources below keep their own line lengths:
# ruff: noqa: E501
from __future__ import annotations

import asyncio

import pytest

from tests.sandbox.hostile import Attack, assert_not_passed, assert_passed
from veriloop.sandbox import Limits
from veriloop.sandbox import languages as langs

pytestmark = pytest.mark.slow

LIMITS = Limits(wall_s=8.0, compile_s=120.0, memory_mb=1024)
RIGHT, WRONG = "x * x + 1", "x * x"
HARNESS = """import java.util. *;
import java.util.stream.*;
import java.lang.*;
public class HOSTILE_CHECK{
static int f_gold ( int x ) {
  return x * x + 1 ;
}


//TOFILL

public static void main(String args[]) {
    int n_success = 0;
    List<Integer> param0 = new ArrayList<>();
    for (int v = 1; v <= 10; v++) param0.add(v);
    for(int i = 0; i < param0.size(); ++i)
    {
        if(f_filled(param0.get(i)) == f_gold(param0.get(i)))
        {
            n_success+=1;
        }
    }
    System.out.println("\\n#Results:" + n_success + ", " + param0.size());
}
}
"""
FLOAT_HARNESS = """import java.util. *;
public class HOSTILE_FLOAT{
static double f_gold ( double x ) {
  return x / 3.0 ;
}
//TOFILL
public static void main(String args[]) {
    int n_success = 0;
    double[] param0 = {1.5, 2.0, 7.25, 100.0, 0.001};
    for(int i = 0; i < param0.length; ++i)
    {
        if(Math.abs(1 - (0.0000001 + Math.abs(f_gold(param0[i])) )/ (Math.abs(f_filled(param0[i])) + 0.0000001)) < 0.001)
        {
            n_success+=1;
        }
    }
    System.out.println("\\n#Results:" + n_success + ", " + param0.length);
}
}
"""
STRING_HARNESS = """import java.util. *;
public class HOSTILE_STRING{
static String f_gold ( String s ) {
  return new StringBuilder(s).reverse().toString();
}
//TOFILL
public static void main(String args[]) {
    int n_success = 0;
    List<String> param0 = Arrays.asList("abc", "", "xyz", "héllo", "a b");
    for(int i = 0; i < param0.size(); ++i)
    {
        if(f_filled(param0.get(i)).equals(f_gold(param0.get(i))))
        {
            n_success+=1;
        }
    }
    System.out.println("\\n#Results:" + n_success + ", " + param0.size());
}
}
"""

ATTACKS = [
    Attack(
        "results_line",
        """
static int f_filled(int x) {
    if ($armed) System.out.println("\\n#Results:10, 10");
    return $answer;
}
""",
    ),
    Attack(
        "verdict_lines",
        """
static int f_filled(int x) {
    if ($armed) System.out.println("\\nVERILOOP-TEST case_" + x + " PASS");
    return $answer;
}
""",
    ),
    Attack(
        "fake_results_then_exit",
        """
static int f_filled(int x) {
    if ($armed) { System.out.println("\\n#Results:10, 10"); System.exit(0); }
    return $answer;
}
""",
        twin_armed=False,
    ),
    Attack(
        "static_initializer",
        """
static { if ($armed) { System.out.println("#Results:10, 10"); Runtime.getRuntime().halt(0); } }
static int f_filled(int x) { return $answer; }
""",
        twin_armed=False,
    ),
    Attack(
        "shutdown_hook",
        """
static { Runtime.getRuntime().addShutdownHook(new Thread(() -> System.out.println("\\n#Results:10, 10"))); }
static int f_filled(int x) { return $answer; }
""",
    ),
    Attack(
        "call_the_reference",
        """
static int f_filled(int x) { return f_gold(x); }
""",
        twin_armed=False,
        twin="static int f_filled(int x) { return $answer; }\n",
    ),
    Attack(
        "define_its_own_reference",
        """
static int f_gold(int x) { return $answer; }
static int f_filled(int x) { return f_gold(x); }
""",
    ),
    Attack(
        "find_the_reference_by_reflection",
        """
static int f_filled(int x) {
    try {
        for (Class<?> c : new Class<?>[] {Class.forName("HOSTILE_CHECK")}) {
            for (java.lang.reflect.Method m : c.getDeclaredMethods()) {
                if (m.getName().equals("f_gold")) return (Integer) m.invoke(null, x);
            }
        }
    } catch (Exception e) {
    }
    return $answer;
}
""",
    ),
    Attack(
        "silence_stdout",
        """
static {
    if ($armed) {
        System.setOut(new java.io.PrintStream(java.io.OutputStream.nullOutputStream()));
        System.err.println("#Results:10, 10");
    }
}
static int f_filled(int x) { return $answer; }
""",
        twin_armed=False,
    ),
    Attack(
        "read_the_sources_for_the_reference",
        """
static boolean leaked() {
    for (String path : new String[] {"HOSTILE_CHECK.java", "/work/HOSTILE_CHECK.java", "/proc/self/cmdline"}) {
        try {
            String text = new String(java.nio.file.Files.readAllBytes(java.nio.file.Paths.get(path)));
            if (text.contains("x * x " + "+ 1 ;")) return true;
        } catch (Exception e) {
        }
    }
    return false;
}
static int f_filled(int x) { return leaked() ? x * x + 1 : $answer; }
""",
    ),
    Attack(
        "daemon_thread_printing_results",
        """
static {
    Thread t = new Thread(() -> {
        for (int i = 0; i < 1000; i++) {
            System.out.println("\\n#Results:10, 10");
            try { Thread.sleep(1); } catch (InterruptedException e) { }
        }
    });
    t.setDaemon(true);
    t.start();
}
static int f_filled(int x) { return $answer; }
""",
    ),
    Attack(
        "write_every_descriptor",
        """
static {
    for (int fd = 2; fd < 64; fd++) {
        try (java.io.FileOutputStream out = new java.io.FileOutputStream("/proc/self/fd/" + fd, true)) {
            out.write("\\n#Results:10, 10\\nVERILOOP-TEST t PASS\\n".getBytes());
        } catch (Exception e) {
        }
    }
}
static int f_filled(int x) { return $answer; }
""",
    ),
    Attack(
        "plant_classes_for_the_trusted_run",
        """
static {
    try {
        java.nio.file.Files.createDirectories(java.nio.file.Paths.get("/work/javafx/util"));
        String fake = "public class HOSTILE_CHECK { public static void main(String[] a) { System.out.println(\\"#Results:10, 10\\"); } }";
        for (String path : new String[] {"/work/javafx/util/Pair.java", "/tmp/HOSTILE_CHECK.java", "/work/.hotspotrc",
                                         "/work/HOSTILE_CHECK.java"}) {
            java.nio.file.Files.write(java.nio.file.Paths.get(path), fake.getBytes());
        }
    } catch (Exception e) {
    }
}
static int f_filled(int x) { return $answer; }
""",
    ),
    Attack(
        "linger_into_the_trusted_phase",
        """
static {
    try {
        new ProcessBuilder("/bin/sh", "-c",
            "for i in $$(seq 300); do echo '#Results:10, 10' > /work/HOSTILE_CHECK.class; sleep 0.01; done")
            .start();
    } catch (Exception e) {
    }
}
static int f_filled(int x) { return $answer; }
""",
    ),
    Attack(
        "huge_output",
        """
static int f_filled(int x) {
    if ($armed) { String line = "#Results:10, 10\\n".repeat(1 << 16); for (int i = 0; i < 8; i++) System.out.print(line); }
    return $answer;
}
""",
        twin_armed=False,
    ),
    Attack(
        "sleep_past_the_limit",
        """
static int f_filled(int x) {
    if ($armed) { try { Thread.sleep(60000); } catch (InterruptedException e) { } }
    return $answer;
}
""",
        twin_armed=False,
        slow=True,
    ),
    Attack(
        "halt_after_fake_results",
        """
static int f_filled(int x) {
    if ($armed) { System.out.println("\\n#Results:10, 10"); System.out.flush(); Runtime.getRuntime().halt(0); }
    return $answer;
}
""",
        twin_armed=False,
    ),
    Attack(
        "kill_everything",
        """
static int f_filled(int x) {
    if ($armed) ProcessHandle.allProcesses().forEach(p -> { if (p.pid() != ProcessHandle.current().pid()) p.destroyForcibly(); });
    return $answer;
}
""",
    ),
    Attack(
        "wider_type_that_wraps",
        """
static long f_filled(int x) { return (long) ($answer) + ($armed ? (1L << 32) : 0L); }
""",
        twin_armed=False,
    ),
    Attack(
        "forged_records",
        """
static int f_filled(int x) {
    if ($armed) { for (int i = 0; i < 10; i++) System.out.println("\\n@@VL@@ b 1\\n@@VL@@ x"); Runtime.getRuntime().halt(0); }
    return $answer;
}
""",
        twin_armed=False,
    ),
    Attack(
        "throw_after_fake_results",
        """
static int f_filled(int x) {
    if ($armed) { System.out.println("\\n#Results:10, 10"); throw new IllegalStateException("x"); }
    return $answer;
}
""",
        twin_armed=False,
    ),
]

FLOAT_ATTACKS = [
    Attack(
        "not_a_number", "static double f_filled(double x) { return $armed ? Double.NaN : $answer; }\n", twin_armed=False
    ),
    Attack(
        "just_outside_the_tolerance",
        "static double f_filled(double x) { return ($answer) * ($armed ? 1.01 : 1.000001); }\n",
        twin_armed=False,
    ),
]
STRING_ATTACKS = [
    Attack(
        "null_or_lookalike",
        """
static String f_filled(String s) {
    if ($armed) return s.length() % 2 == 0 ? null : new StringBuilder(s).reverse().toString() + "\\u200b";
    return $answer;
}
""",
        twin_armed=False,
    ),
]


def _ids(attacks: list[Attack]) -> list[object]:
    return [pytest.param(a, id=a.name, marks=[pytest.mark.slow] if a.slow else []) for a in attacks]


async def _check(sandbox: object, attack: Attack, harness: str, right: str, wrong: str) -> None:
    if not langs.available("java", sandbox.toolchain):  # type: ignore[attr-defined]
        pytest.skip("the JDK is not installed here (scripts/setup-sandbox.sh installs it)")
    toolchain = sandbox.toolchain  # type: ignore[attr-defined]
    hostile = langs.harness_job("java", toolchain, attack.hostile(wrong, "true"), harness, limits=LIMITS)
    honest = langs.harness_job("java", toolchain, attack.honest(right, "true", "false"), harness, limits=LIMITS)
    bad, good = await asyncio.gather(sandbox.run(hostile), sandbox.run(honest))  # type: ignore[attr-defined]
    assert_not_passed(bad)
    assert_passed(good)


@pytest.mark.parametrize("attack", _ids(ATTACKS))
async def test_hostile_java_candidate_is_not_passed(bwrap_warm: object, attack: Attack) -> None:
    await _check(bwrap_warm, attack, HARNESS, RIGHT, WRONG)


@pytest.mark.parametrize("attack", _ids(FLOAT_ATTACKS))
async def test_hostile_java_float_candidate_is_not_passed(bwrap_warm: object, attack: Attack) -> None:
    await _check(bwrap_warm, attack, FLOAT_HARNESS, "x / 3.0", "x / 3.0")


@pytest.mark.parametrize("attack", _ids(STRING_ATTACKS))
async def test_hostile_java_string_candidate_is_not_passed(bwrap_warm: object, attack: Attack) -> None:
    await _check(bwrap_warm, attack, STRING_HARNESS, "new StringBuilder(s).reverse().toString()", "s")
