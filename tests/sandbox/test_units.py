"""Fast checks of the pieces around the runner: status precedence, cgroup detection, settings, refusal, CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veriloop.cli.app import app
from veriloop.config import load_settings
from veriloop.errors import ConfigError, SandboxError
from veriloop.records import ExecStatus
from veriloop.sandbox import Job, get_sandbox, simple_job
from veriloop.sandbox.base import assemble, parse_runner_output
from veriloop.sandbox.cgroups import Cgroups, read_membership, read_mounts
from veriloop.sandbox.inside.harness_py import count_tests
from veriloop.sandbox.process import ProcessSandbox


def step(**overrides: Any) -> dict[str, Any]:
    base = {
        "name": "run",
        "kind": "run",
        "exit_code": 0,
        "signal": None,
        "stdout": "",
        "stderr": "",
        "truncated": False,
        "timed_out": False,
        "output_limit": False,
        "wall_s": 0.1,
        "cpu_s": 0.05,
        "max_rss_kb": 2048,
        "flags": [],
    }
    return {**base, **overrides}


JOB = simple_job(["/bin/true"])


@pytest.mark.parametrize(
    ("steps", "oom", "status"),
    [
        ([step()], 0, ExecStatus.PASSED),
        ([step(exit_code=3)], 0, ExecStatus.RUNTIME_ERROR),
        ([step(exit_code=None, signal=9, timed_out=True)], 1, ExecStatus.TIMEOUT),
        ([step(exit_code=None, signal=24)], 0, ExecStatus.TIMEOUT),
        ([step(exit_code=None, signal=9)], 1, ExecStatus.MEMORY_LIMIT),
        ([step(exit_code=1, flags=["memory_error"])], 0, ExecStatus.MEMORY_LIMIT),
        ([step(exit_code=None, signal=9, output_limit=True, truncated=True)], 0, ExecStatus.OUTPUT_LIMIT),
        ([step(kind="compile", exit_code=1, stderr="error: x")], 0, ExecStatus.COMPILE_ERROR),
        ([step(exit_code=1, flags=["syntax_error"])], 0, ExecStatus.COMPILE_ERROR),
        ([step(exit_code=127, flags=["start_error"])], 0, ExecStatus.INFRA_ERROR),
    ],
)
def test_status_precedence(steps: list[dict[str, Any]], oom: int, status: ExecStatus) -> None:
    result = assemble(JOB, {"steps": steps, "results": None, "error": None}, sandbox="t", version="1", oom_kills=oom)
    assert result.status is status


def test_runner_error_is_infra_not_a_program_failure() -> None:
    result = assemble(JOB, {"steps": [], "error": "runner could not prepare the job"}, sandbox="t", version="1")
    assert result.status is ExecStatus.INFRA_ERROR
    assert parse_runner_output("garbage\nmore garbage") is None
    assert parse_runner_output('noise\n{"steps": []}\n') == {"steps": []}


def test_compile_error_shows_the_compiler_message() -> None:
    steps = [step(kind="compile", exit_code=1, stderr="main.c:1: error"), step(exit_code=0, stdout="x")]
    result = assemble(JOB, {"steps": steps, "error": None}, sandbox="t", version="1")
    assert result.stderr == "main.c:1: error"


MOUNTINFO_V1 = """31 23 0:28 / /sys/fs/cgroup rw - tmpfs tmpfs rw
35 31 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw"""


def test_cgroup_v1_paths_follow_membership() -> None:
    mounts = read_mounts(MOUNTINFO_V1)
    assert {m.version for m in mounts} == {1, 2}
    groups = Cgroups.detect(MOUNTINFO_V1, "8:pids:/\n4:memory:/process_api/abc\n0::/\n")
    assert groups.version == 1
    assert groups.bases == [Path("/sys/fs/cgroup/memory/process_api/abc"), Path("/sys/fs/cgroup/pids")]


def test_cgroup_v2_without_delegated_controllers_fails_clearly(tmp_path: Path) -> None:
    base = tmp_path / "service"
    base.mkdir()
    (base / "cgroup.controllers").write_text("cpu io\n")
    mountinfo = f"30 23 0:27 / {tmp_path} rw - cgroup2 cgroup2 rw"
    with pytest.raises(SandboxError, match="memory and pids"):
        Cgroups.detect(mountinfo, "0::/service\n")
    (base / "cgroup.controllers").write_text("cpu io memory pids\n")
    groups = Cgroups.detect(mountinfo, "0::/service\n")
    assert groups.version == 2 and groups.bases == [base]
    assert read_membership("0::/service\n") == {"": "/service"}


def test_no_cgroups_at_all_is_a_clear_error() -> None:
    with pytest.raises(SandboxError, match="no usable cgroup"):
        Cgroups.detect("", "")


def test_job_file_names_stay_inside_the_work_dir() -> None:
    with pytest.raises(ConfigError):
        Job(files={"../escape": "x"}, steps=[{"argv": ["true"]}])  # type: ignore[list-item]
    with pytest.raises(ConfigError):
        Job(files={"/etc/passwd": "x"}, steps=[{"argv": ["true"]}])  # type: ignore[list-item]


def test_environment_is_clean_unless_listed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VERILOOP_TEST_PASSED_IN", "yes")
    monkeypatch.setenv("VERILOOP_TEST_HIDDEN", "no")
    env = simple_job(["x"], pass_env=["VERILOOP_TEST_PASSED_IN"]).environment()
    assert env["VERILOOP_TEST_PASSED_IN"] == "yes" and "VERILOOP_TEST_HIDDEN" not in env
    assert env["TZ"] == "UTC" and env["PYTHONHASHSEED"] == "0" and env["OMP_NUM_THREADS"] == "1"


def test_count_tests_matches_the_harness() -> None:
    assert count_tests("def check(candidate):\n    assert candidate(1)\n    x = 1\n    assert candidate(x)\n", "f") == 2
    assert count_tests("assert f(1) == 1\nassert f(2) == 2\nimport math\n") == 2


def test_process_backend_refuses_without_allow_unsafe() -> None:
    with pytest.raises(SandboxError, match="NO isolation"):
        ProcessSandbox(allow_unsafe=False)
    with pytest.raises(SandboxError, match="allow_unsafe"):
        get_sandbox(load_settings(None), "process")


def test_default_backend_is_bwrap() -> None:
    assert load_settings(None).sandbox.backend == "bwrap"


@pytest.mark.bwrap
def test_cli_exec_json(tmp_path: Path) -> None:
    program = tmp_path / "p.py"
    program.write_text("print(input().upper())\n")
    stdin = tmp_path / "in.txt"
    stdin.write_text("hello\n")
    result = CliRunner().invoke(app, ["exec", str(program), "--lang", "python", "--stdin", str(stdin), "--json"])
    assert result.exit_code == 0, result.output
    payload = json.loads(result.output)
    assert payload["status"] == "passed" and payload["stdout"] == "HELLO\n" and payload["sandbox"] == "bwrap"
    for key in ("exit_code", "stderr", "wall_s", "cpu_s", "max_rss_mb", "truncated"):
        assert key in payload
    program.write_text("raise SystemExit(2)\n")
    failed = CliRunner().invoke(app, ["exec", str(program), "--lang", "python", "--json"])
    assert failed.exit_code == 1 and json.loads(failed.output)["status"] == "runtime_error"


@pytest.mark.bwrap
def test_cli_exec_tests_and_refusal(tmp_path: Path) -> None:
    program = tmp_path / "s.py"
    program.write_text("def add(a, b):\n    return a + b\n")
    tests = tmp_path / "t.py"
    tests.write_text("assert add(1, 2) == 3\nassert add(2, 2) == 5\n")
    result = CliRunner().invoke(app, ["exec", str(program), "--lang", "python", "--tests", str(tests), "--json"])
    payload = json.loads(result.output)
    assert payload["status"] == "failed" and [t["passed"] for t in payload["tests"]] == [True, False]
    refused = CliRunner().invoke(app, ["exec", str(program), "--lang", "python", "--sandbox", "process"])
    assert refused.exit_code != 0
    assert isinstance(refused.exception, SandboxError)


def _run_bpf(program: bytes, arch: int, number: int) -> int:
    """Evaluate the runner's classic-BPF filter (only the instructions it uses) on one syscall."""
    import struct

    data = {0: number, 4: arch}
    pc, accumulator = 0, 0
    while True:
        code, jt, jf, k = struct.unpack_from("=HBBI", program, pc * 8)
        pc += 1
        if code == 0x20:  # load word at offset k of seccomp_data
            accumulator = data[k]
        elif code == 0x15:  # jump if equal
            pc += jt if accumulator == k else jf
        elif code == 0x06:  # return
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


def test_keyring_filter_denies_exactly_the_keyring_syscalls() -> None:
    from veriloop.sandbox.inside.runner import seccomp_program

    program = seccomp_program("x86_64")
    assert program is not None and len(program) % 8 == 0
    allow, deny = 0x7FFF0000, 0x00050001
    x86_64, i386 = 0xC000003E, 0x40000003
    for number in (248, 249, 250, 0x40000000 | 250):  # add_key, request_key, keyctl, and keyctl through x32
        assert _run_bpf(program, x86_64, number) == deny
    for number in (0, 1, 57, 59, 231, 251, 247):  # read, write, fork, execve, exit_group, neighbours
        assert _run_bpf(program, x86_64, number) == allow
    assert _run_bpf(program, i386, 288) == deny and _run_bpf(program, i386, 3) == allow
    assert _run_bpf(program, 0xC00000B7, 219) == allow  # another architecture's numbers are not x86_64's
    arm64 = seccomp_program("aarch64")
    assert arm64 is not None and _run_bpf(arm64, 0xC00000B7, 219) == deny
    assert seccomp_program("sparc64") is None


def test_python_results_are_json_lines_and_a_torn_line_is_ignored() -> None:
    from veriloop.records import ExecResult
    from veriloop.sandbox.checks import judge
    from veriloop.sandbox.job import Checks

    job = Job(steps=[{"argv": ["x"]}], checks=Checks(kind="python_asserts", expected_tests=2))  # type: ignore[list-item]
    lines = '{"name": "t1", "passed": true, "message": ""}\n{"name": "t2", "passed": false, "message": "no"}\n'
    finished = ExecResult(status=ExecStatus.PASSED)
    judge(job, [step(exit_code=1)], lines + '{"complete": true}\n', finished)
    assert finished.status is ExecStatus.FAILED and [t.passed for t in finished.tests] == [True, False]
    cut = ExecResult(status=ExecStatus.PASSED)
    judge(job, [step(exit_code=None, signal=9)], lines + '{"comple', cut)  # died while writing: incomplete
    assert cut.status is ExecStatus.RUNTIME_ERROR and [t.passed for t in cut.tests] == [True, False]
