"""Issue 32's acceptance: one task file mixing a C++ harness task, a stdin/stdout task, Python asserts and a task
naming a formal verifier runs under `veriloop run direct` and `veriloop run mucode`, and every check is made by the
task's own verifier (`agents.common.check`), seen in the stored nodes: a C++ verdict from the compiled harness's
per-case lines, a stdin/stdout verdict from the cases, the formal verifier's own verdict for its task.

A scripted model answers by a phrase of each prompt; the sandbox (bubblewrap, g++) and the SQLite store are real.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from veriloop.cli import main
from veriloop.config import Settings, load_settings
from veriloop.records import Candidate, Diagnostic, ExecStatus, Prompt, Task, VerifyResult, VerifyStatus
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend
from veriloop.verifiers import VERIFIERS
from veriloop.verifiers.target import VerifierTarget

CPP_HARNESS = """#include <iostream>
int f_gold(int x) { return 2 * x; }
//TOFILL
int main() {
    int cases[] = {1, 3, 4};
    for (int i = 0; i < 3; i++) {
        bool ok = f_filled(cases[i]) == f_gold(cases[i]);
        std::cout << "VERILOOP-TEST case" << i << (ok ? " PASS" : " FAIL got another value") << std::endl;
    }
}
"""

TRIPLE_HARNESS = CPP_HARNESS.replace("return 2 * x", "return 3 * x")

ROWS: list[dict[str, Any]] = [
    {
        "id": "twice",
        "language": "cpp",
        "prompt": "Write `int f_filled(int x)` returning twice x.",
        "tests": CPP_HARNESS,
    },
    {
        "id": "thrice",
        "language": "cpp",
        "prompt": "Write `int f_filled(int x)` returning x times three.",
        "tests": TRIPLE_HARNESS,
    },
    {
        "id": "double",
        "prompt": "Read an integer and print it doubled.",
        "cases": [{"stdin": "2\n", "stdout": "4\n", "public": True}, {"stdin": "21", "stdout": "42"}],
    },
    {
        "id": "add",
        "prompt": "Write add(a, b) returning the sum.",
        "entry_point": "add",
        "tests": "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n",
    },
    {"id": "proof", "language": "qed", "prompt": "Prove the claim.", "verifier": "qed", "spec": "claim"},
]

ANSWERS = {
    "returning twice x": "```cpp\nint f_filled(int x) { return 2 * x; }\n```",
    "x times three": "```cpp\nint f_filled(int x) { return 2 * x; }\n```",  # wrong: the harness must say so
    "doubled": '```python\nif __name__ == "__main__":\n    print(int(input()) * 2)\n```',
    "add(a, b)": "```python\ndef add(a, b):\n    return a + b\n```",
    "Prove the claim": "```qed\nQED\n```",
}


def solver(prompt: Prompt) -> str:
    """The answer for the task a conversation is about (its first turn names it; a repair turn is feedback)."""
    text = prompt if isinstance(prompt, str) else "\n".join(message.content for message in prompt)
    for phrase, reply in ANSWERS.items():
        if phrase in text:
            return reply
    return "```python\npass\n```"


class QedVerifier:
    """A formal verifier for a one-word language: verified when the program says QED. It stands for Dafny (not
    installed here): what matters is that the task's `verifier` field, not the method, picks the judge."""

    name = "qed"
    target = VerifierTarget("qed", language="qed", title="QED", fence="qed")
    calls: ClassVar[list[str]] = []

    @classmethod
    def from_settings(cls, settings: Settings) -> QedVerifier:
        return cls()

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        return "qed 1"

    async def version(self) -> str:
        return "qed 1"

    def options(self) -> dict[str, Any]:
        return {}

    async def check(self, code: str) -> VerifyResult:
        return await self.verify(
            Candidate(task_id="probe", code=code, language="qed"), Task(id="probe", suite="x", prompt="")
        )

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        type(self).calls.append(task.id)
        if "QED" in candidate.code:
            return VerifyResult(status=VerifyStatus.VERIFIED, verified=1, score=1.0, tool="qed", version="qed 1")
        return VerifyResult(
            status=VerifyStatus.FAILED,
            errors=1,
            diagnostics=[Diagnostic(message="no QED")],
            tool="qed",
            version="qed 1",
        )

    async def aclose(self) -> None:
        return None


@pytest.fixture
def qed_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(VERIFIERS, "_entries", dict(VERIFIERS))
    VERIFIERS.register("qed", f"{__name__}:QedVerifier")
    QedVerifier.calls = []
    yield


def _run(
    method: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    rows: list[dict[str, Any]] = ROWS,
) -> Any:
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    monkeypatch.setattr(ScriptedBackend, "from_settings", classmethod(lambda cls, s: cls([solver])))
    home = tmp_path / "home"
    code = main(["--home", str(home), "--backend", "scripted", "run", method, "--suite", str(path), "--json"])
    out = capsys.readouterr()
    assert code == 0, out.err
    return json.loads(out.out), load_settings(paths={"home": home})


@pytest.mark.bwrap
@pytest.mark.parametrize("method", ["direct", "mucode"])
def test_a_mixed_task_file_is_judged_by_each_tasks_verifier(
    method: str,
    qed_registered: None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    report, settings = _run(method, tmp_path, monkeypatch, capsys)
    status = {attempt["task_id"].split("/")[-1]: attempt["status"] for attempt in report["attempts"]}
    assert status == {"twice": "passed", "thrice": "failed", "double": "passed", "add": "passed", "proof": "passed"}
    with TrajectoryStore.from_settings(settings) as store:
        nodes = store.list_nodes(report["run_id"])
        judged = {node.task_id.split("/")[-1]: node for node in nodes if node.code is not None}
        for name in ("twice", "thrice", "double", "add"):  # the tests verifier's verdicts: their executions
            node = judged[name]
            assert node.verify_result is None and node.exec_result is not None and node.exec_result.tests, name
        twice, thrice = judged["twice"].exec_result, judged["thrice"].exec_result
        assert twice is not None and [t.name for t in twice.tests] == ["case0", "case1", "case2"]
        assert thrice is not None and [t.passed for t in thrice.tests] == [False, False, False]
        assert thrice.status is ExecStatus.FAILED  # compiled and run by the harness, not a Python syntax error
        double = judged["double"].exec_result
        assert double is not None and double.passed and len(double.tests) in (1, 2)  # public, or every case
        proof = judged["proof"]
        assert proof.exec_result is None and proof.verify_result is not None and proof.verify_result.tool == "qed"
        prompts = [node.messages[0].content for node in nodes if node.messages]
        assert any("```cpp" in text and "f_gold" not in text for text in prompts)  # asked for C++, reference unshown
    assert QedVerifier.calls and set(QedVerifier.calls) == {"mixed/proof"}


@pytest.mark.slow
@pytest.mark.model
@pytest.mark.bwrap
@pytest.mark.parametrize(("method", "flags"), [("direct", []), ("mucode", ["--turns", "1", "--max-tokens", "96"])])
def test_the_embedded_model_on_a_mixed_task_file(
    method: str,
    flags: list[str],
    qed_registered: None,
    tmp_path: Path,
    scratch_model_home: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The real model's replies, whatever they say, are judged by each task's own verifier."""
    path = tmp_path / "mixed.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    args = ["--home", str(scratch_model_home), "run", method, *flags, "--suite", str(path), "--json"]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert len(report["attempts"]) == len(ROWS) and all(a["status"] in ("passed", "failed") for a in report["attempts"])
    with TrajectoryStore.from_settings(load_settings(paths={"home": scratch_model_home})) as store:
        nodes = [node for node in store.list_nodes(report["run_id"]) if node.code is not None]
    assert {node.task_id for node in nodes} == {f"mixed/{row['id']}" for row in ROWS}
    for node in nodes:
        if node.task_id == "mixed/proof":
            assert node.verify_result is not None and node.verify_result.tool == "qed"
        else:
            assert node.exec_result is not None and node.verify_result is None, node.task_id


@pytest.mark.bwrap
def test_one_run_reads_its_suite_once_and_opens_the_store_once(
    qed_registered: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`veriloop run` creates, executes and reports a run on one store and one reading of the suite."""
    from veriloop.agents import runner

    loads: list[str] = []
    opened: list[str] = []
    real_load, real_open = runner.load_suite, TrajectoryStore.from_settings

    def counted_load(name: str, settings: Settings) -> Any:
        loads.append(name)
        return real_load(name, settings)

    def counted_open(settings: Settings) -> TrajectoryStore:
        opened.append("store")
        return real_open(settings)

    monkeypatch.setattr(runner, "load_suite", counted_load)
    monkeypatch.setattr(TrajectoryStore, "from_settings", staticmethod(counted_open))
    report, _ = _run("direct", tmp_path, monkeypatch, capsys, rows=ROWS[2:])  # no C++: runs without g++ too
    assert len(report["attempts"]) == 3
    assert len(loads) == 1 and len(opened) == 1
