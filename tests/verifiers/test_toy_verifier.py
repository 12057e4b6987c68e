"""CONTRIBUTING.md's "Add a verifier" recipe, followed from this folder alone: a toy verifier for a toy language,
its target descriptor and guard dialect beside it (one file), and one registry line. Then `veriloop verify
--verifier toy` runs it, the spec guard enforces the toy's own spec clauses, task files and the judge API name it,
a run's provenance records the toy's own version, and AlphaVerus takes `toy` as its target, with the toy's fence
and prompt fragments in its prompts. Nothing in `veriloop/` names the toy, and nothing here lists the other
verifiers (`test_verifier_recipe.py` runs the recipe's own sketch).

The toy language: a `proc` with typed parameters and one named result, `pre`/`post` clauses (Python
expressions), one assignment to the result as its body, `end`. The toy verifier checks the body on every input
in a small range (bounded checking, no tool to install) and believes `assume` lines, which is why its guard
dialect forbids them.
"""

from __future__ import annotations

import ast
import itertools
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.records import Candidate, Diagnostic, Task, VerifyResult, VerifyStatus
from veriloop.verifiers import VERIFIERS, semantic
from veriloop.verifiers.guard import Dialect
from veriloop.verifiers.spec import Contract
from veriloop.verifiers.target import VerifierTarget, hash_comments

# --------------------------------------------------------------------------- the toy verifier's one file

PROC = re.compile(r"^proc\s+(?P<name>\w+)\((?P<params>[^)]*)\)\s*->\s*\((?P<result>\w+)\s*:\s*(?P<type>\w+)\)\s*$")
RANGE = range(-6, 7)
SAFE = (
    ast.Expression,
    ast.BoolOp,
    ast.BinOp,
    ast.UnaryOp,
    ast.Compare,
    ast.IfExp,
    ast.Name,
    ast.Load,
    ast.Constant,
    ast.boolop,
    ast.operator,
    ast.unaryop,
    ast.cmpop,
)


def toy_contracts(code: str) -> list[Contract]:
    """The toy's spec clause syntax: `pre EXPR` and `post EXPR` lines under `proc NAME(x: int) -> (r: int)`."""
    found: list[Contract] = []
    current: Contract | None = None
    for number, line in enumerate(code.splitlines(), 1):
        text = hash_comments(line).strip()
        header = PROC.match(text)
        if header:
            params = dict(p.split(":") for p in header["params"].replace(" ", "").split(",") if p)
            current = Contract(header["name"], "proc", params=params, returns={header["result"]: header["type"]})
            current.header = (number, number)
            found.append(current)
        elif current is None or not text:
            continue
        elif text == "end":
            current = None
        elif text.startswith(("pre ", "post ")):
            keyword, _, clause = text.partition(" ")
            (current.requires if keyword == "pre" else current.ensures).append(clause.strip())
        else:
            current.body = (current.body[0] if current.body else number, number)
    return found


TOY_DIALECT = Dialect(
    "toy",
    escapes=((r"^\s*assume\b", "assume is not allowed"),),
    contracts=toy_contracts,
    translate=semantic.python_term,
    probe_kinds=(),
    decls=lambda code: [],
    strip=hash_comments,
    layout="indent",
)
TOY = VerifierTarget(
    "toy",
    language="toy",
    title="Toy (pre/post procs)",
    fence="toy",
    dialect=TOY_DIALECT,
    ensures=r"(?m)^\s*post\b",
    comments=hash_comments,
    declarations=r"^proc\b",
    exploit_kinds=("proc",),
    shape="End every proc with the line `end`.",
    exploit_example=("proc id(x: int) -> (r: int)\n  post r == r", "  r = 0"),
    suite="alphaverus-dafny2toy",
)


def _value(expr: str, env: dict[str, int]) -> Any:
    tree = ast.parse(expr, mode="eval")
    if not all(isinstance(node, SAFE) for node in ast.walk(tree)):
        raise SyntaxError(f"not a toy expression: {expr}")
    return eval(compile(tree, "<toy>", "eval"), {"__builtins__": {}}, dict(env))  # the AST was checked above


def check_proc(contract: Contract, lines: list[str]) -> str | None:
    """The first input (within RANGE) on which the proc breaks its postcondition, as a message; None when none."""
    assert contract.body is not None
    body = [hash_comments(line).strip() for line in lines[contract.body[0] - 1 : contract.body[1]]]
    assumed = [line.removeprefix("assume ") for line in body if line.startswith("assume ")]
    [result] = contract.returns
    assignment = next(line for line in body if line.startswith(f"{result} = "))
    for values in itertools.product(RANGE, repeat=len(contract.params)):
        env = dict(zip(contract.params, values, strict=True))
        if not all(_value(c, env) for c in [*contract.requires, *assumed]):
            continue
        env[result] = _value(assignment.partition("=")[2].strip(), env)
        for clause in contract.ensures:
            if not _value(clause, env):
                return f"postcondition `{clause}` fails for {env}"
    return None


class ToyVerifier:
    """Bounded checking of toy procs: every input in RANGE that meets the precondition meets the postcondition."""

    name = "toy"
    target = TOY

    def __init__(self, command: str = "toy") -> None:
        self.command = command

    @classmethod
    def from_settings(cls, settings: Settings) -> ToyVerifier:
        return cls(settings.verifiers.command("toy"))

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        return "0.1"

    async def version(self) -> str:
        return "0.1"

    def options(self) -> dict[str, Any]:
        return {"range": [RANGE.start, RANGE.stop]}

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        return await self.check(candidate.code)

    async def check(self, code: str) -> VerifyResult:
        diagnostics = []
        try:
            contracts = toy_contracts(code)
            if not contracts or any(c.body is None for c in contracts):
                raise SyntaxError("a toy program is one or more procs with a body")
            for contract in contracts:
                failure = check_proc(contract, code.splitlines())
                if failure:
                    diagnostics.append(Diagnostic(kind="postcondition", message=failure, line=contract.header[0]))
        except (SyntaxError, StopIteration, ValueError, NameError, TypeError, ZeroDivisionError) as exc:
            error = Diagnostic(kind="syntax", message=str(exc) or "no assignment to the result")
            return VerifyResult(status=VerifyStatus.SYNTAX_ERROR, errors=1, diagnostics=[error], score=-1.0, tool="toy")
        verified, errors = len(contracts) - len(diagnostics), len(diagnostics)
        status = VerifyStatus.FAILED if errors else VerifyStatus.VERIFIED
        score = 1.0 if not errors else verified / (verified + errors)
        return VerifyResult(
            status=status,
            verified=verified,
            errors=errors,
            diagnostics=diagnostics,
            score=score,
            tool="toy",
            version="0.1",
        )

    async def aclose(self) -> None:
        return None


@pytest.fixture(autouse=True)
def toy_registered(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setattr(VERIFIERS, "_entries", dict(VERIFIERS))  # this test's registrations end with it
    VERIFIERS.register("toy", f"{__name__}:ToyVerifier")  # the recipe's one registry line
    yield


# --------------------------------------------------------------------------- the toy in use

ABS = """proc absolute(x: int) -> (y: int)
  pre x > -100
  post y >= 0
  post y == x or y == -x
  y = x if x >= 0 else -x
end
"""
SPEC = ABS.replace("  y = x if x >= 0 else -x\n", "  y = 0\n")
DAFNY_ABS = """method Abs(x: int) returns (y: int)
  requires x > -100
  ensures y >= 0
  ensures y == x || y == -x
{
  if x < 0 { y := -x; } else { y := x; }
}
"""


def _verify(tmp_path: Path, code: str, *flags: str) -> dict[str, Any]:
    from veriloop.cli import app

    program, spec = tmp_path / "candidate.toy", tmp_path / "spec.toy"
    program.write_text(code)
    spec.write_text(SPEC)
    argv = [
        "--home",
        str(tmp_path),
        "verify",
        str(program),
        "--verifier",
        "toy",
        "--spec",
        str(spec),
        "--no-cache",
        *flags,
    ]
    result = CliRunner().invoke(app, [*argv, "--json"])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    payload: dict[str, Any] = json.loads(result.stdout)
    assert result.exit_code == (0 if payload["status"] == "verified" else 1)
    return payload


def test_veriloop_verify_runs_the_toy_and_its_guard(tmp_path: Path) -> None:
    assert _verify(tmp_path, ABS)["status"] == "verified"
    wrong = _verify(tmp_path, ABS.replace("else -x", "else x"))
    assert wrong["status"] == "failed" and "fails for" in wrong["diagnostics"][0]["message"]
    # the guard reads the toy's spec clauses through its dialect: a weakened `post` is caught by Z3 ...
    weaker = _verify(tmp_path, SPEC.replace("  post y == x or y == -x\n", ""))
    assert weaker["status"] == "rejected" and weaker["reason"].startswith("absolute:"), weaker
    # ... as are a trivial postcondition, a stronger precondition and the toy's escape, which the tool believes
    trivial = _verify(tmp_path, ABS.replace("post y >= 0", "post True"))
    assert trivial["status"] == "rejected" and "trivial postcondition" in trivial["reason"]
    stronger = _verify(tmp_path, ABS.replace("pre x > -100", "pre x > 0"))
    assert stronger["status"] == "rejected" and "precondition" in stronger["reason"]
    escape = SPEC.replace("  y = 0\n", "  assume x == 0\n  y = 0\n")
    assert _verify(tmp_path, escape, "--no-guard")["status"] == "verified"  # the hole the guard closes
    assert _verify(tmp_path, escape)["reason"] == "assume is not allowed"


def test_the_toy_reads_its_command_from_the_generic_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    from veriloop.config import load_settings
    from veriloop.verifiers import get_verifier

    monkeypatch.setenv("VERILOOP_VERIFIERS__COMMANDS__TOY", "/opt/toy/bin/toy")
    monkeypatch.setenv("VERILOOP_VERIFIERS__DAFNY", "/opt/dafny/dafny")
    settings = load_settings()
    verifier = get_verifier(settings, "toy", guard=False)
    assert isinstance(verifier, ToyVerifier) and verifier.command == "/opt/toy/bin/toy"
    assert settings.verifiers.command("dafny") == "/opt/dafny/dafny"  # the existing names keep working
    monkeypatch.setenv("VERILOOP_VERIFIERS__COMMANDS__DAFNY", "dafny")
    with pytest.raises(ConfigError, match=r"set verifiers\.dafny, not verifiers\.commands\.dafny"):
        load_settings()  # one place per command


def test_alphaverus_takes_the_toy_as_its_target() -> None:
    from veriloop.agents.alphaverus.filters import split_spec, with_body
    from veriloop.agents.alphaverus.problem import program_text
    from veriloop.agents.alphaverus.prompts import exploit_messages, explore_messages
    from veriloop.agents.alphaverus.rules import rule_violation
    from veriloop.agents.alphaverus.state import AlphaVerusOptions

    assert AlphaVerusOptions(target="toy").target == "toy"
    with pytest.raises(ValueError, match=r"unknown verifier 'coq'; registered: (\w+, )*toy\b"):
        AlphaVerusOptions(target="coq")
    [system, ask] = explore_messages(DAFNY_ABS, "dafny", "toy", "translate", [])
    assert "expert in Toy (pre/post procs)" in system.content
    assert "```dafny\nmethod Abs" in ask.content and "End every proc with the line `end`." in ask.content
    assert program_text(f"Here:\n{ABS}", "toy") == ABS.strip("\n")  # no fence: cut at the first `proc`
    assert program_text(f"```toy\n{ABS}```", "toy") == ABS.strip("\n")
    assert rule_violation(ABS.replace("post", "# post"), "toy", DAFNY_ABS, "dafny") == "No ensures clause found"
    assert rule_violation(ABS, "toy", DAFNY_ABS, "dafny") is None
    split = split_spec(ABS, "toy")
    assert split is not None and split.prefix.endswith("post y == x or y == -x\n") and split.suffix == "end"
    [exploit_system, exploit_user] = exploit_messages(split.prefix, "toy", [])
    assert "proc absolute" in exploit_user.content and "proc id" not in exploit_user.content
    assert "```toy\nproc id(x: int) -> (r: int)\n  post r == r\n```" in exploit_system.content
    assert with_body(split, "```toy\ny = 0\n```", "toy") == SPEC.rstrip("\n")


async def test_an_alphaverus_round_into_the_toy(tmp_path: Path) -> None:
    """The self-improving loop, Dafny to toy: exploration, the exploit model and the judge, the solved pool."""
    from veriloop.agents.alphaverus import AlphaVerusAgent, AlphaVerusOptions
    from veriloop.agents.alphaverus.pools import SOLVED
    from veriloop.agents.context import AgentContext
    from veriloop.config import load_settings
    from veriloop.records import Prompt, Run
    from veriloop.sandbox import get_sandbox
    from veriloop.store import TrajectoryStore
    from veriloop.testing import ScriptedBackend, prompt_text

    def reply(prompt: Prompt) -> str:
        text = prompt_text(prompt)
        if "Write a trivial program" in text:
            return "```toy\n  y = 0\n```"
        if "Program 1:" in text:
            return "The final answer is <Yes>"
        return f"```toy\n{ABS}```\n"

    settings = load_settings(paths={"home": tmp_path})
    store = TrajectoryStore.from_settings(settings)
    run = store.create_run(Run(agent="alphaverus", suite="unit-toy", model="scripted"))
    backend, sandbox = ScriptedBackend([reply]), get_sandbox(settings)
    ctx = AgentContext(settings, backend, sandbox, store, run)
    task = Task(
        id="abs",
        suite="unit-toy",
        prompt=DAFNY_ABS,
        language="toy",
        metadata={"mode": "translate", "verifier": "toy", "source": DAFNY_ABS},
    )
    options = AlphaVerusOptions(infill="whole", explore_samples=1, exploit_samples=1, judge_votes=1)
    try:
        [attempt] = await AlphaVerusAgent(options).run_suite([task], ctx)
    finally:
        await sandbox.aclose()
    assert attempt.status == "passed"
    node = store.get_node(attempt.best_node_id or "")
    assert node.verify_result is not None and node.verify_result.tool == "toy"
    [exploit] = [n for n in store.get_tree(run.id, "abs") if n.role == "exploit"]
    assert exploit.code == SPEC.rstrip("\n") and not exploit.metadata["exploits_spec"]  # `y = 0` fails x = 3
    [pair] = store.list_exemplars(kind=SOLVED, language="toy")
    assert pair.payload["target"] == ABS.strip("\n")
    asks = [prompt_text(p) for p, _ in backend.requests]
    assert any("Toy (pre/post procs)" in ask and "End every proc" in ask for ask in asks)
    [exploit_prompt] = [p for p, _ in backend.requests if "Write a trivial program" in prompt_text(p)]
    assert not isinstance(exploit_prompt, str) and "```toy\nproc absolute(" in exploit_prompt[-1].content
    assert "```toy\nproc id(x: int)" in exploit_prompt[0].content  # the toy's exploit example, in its fence
    store.close()


def test_run_alphaverus_with_target_toy_on_a_task_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI end to end: a task file whose rows name the toy verifier, `--target toy`, a scripted model."""
    from veriloop.cli import main
    from veriloop.config import load_settings
    from veriloop.store import TrajectoryStore

    row = {
        "id": "abs",
        "prompt": DAFNY_ABS,
        "language": "toy",
        "verifier": "toy",
        "mode": "translate",
        "source": DAFNY_ABS,
        "source_language": "dafny",
    }
    tasks = tmp_path / "toy.jsonl"
    tasks.write_text(json.dumps(row) + "\n")
    home = ["--home", str(tmp_path), "--backend", "scripted"]
    flags = ["--explore-samples", "1", "--width", "1", "--depth", "1", "--exploit-samples", "0", "--judge-votes", "0"]
    code = main([*home, "run", "alphaverus", "--target", "toy", "--suite", str(tasks), *flags, "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0 and report["agent"] == "alphaverus"
    [attempt] = report["attempts"]
    assert attempt["status"] == "failed"  # the scripted model echoes the prompt: Dafny is no toy program
    with TrajectoryStore.from_settings(load_settings(paths={"home": tmp_path})) as store:
        nodes = store.get_tree(report["run_id"], attempt["task_id"])
    assert nodes and all(n.verify_result is not None and n.verify_result.tool == "toy" for n in nodes)
    assert "Convert this to Toy (pre/post procs) code" in nodes[0].messages[-1].content
    row["verifier"] = "coq"
    tasks.write_text(json.dumps(row) + "\n")
    assert main([*home, "run", "alphaverus", "--suite", str(tasks), *flags]) != 0
    assert "unknown verifier 'coq'" in capsys.readouterr().err


@pytest.mark.dafny
def test_the_toy_gets_a_translation_suite_and_a_default_suite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`alphaverus-dafny2toy` needs no suite line: the Dafny sources, to be written in the descriptor's language;
    and `run alphaverus --target toy` runs it when no --suite is given (the descriptor names it)."""
    from veriloop.cli import main
    from veriloop.config import load_settings
    from veriloop.tasks import load_suite

    suite = load_suite(TOY.suite or "", load_settings(paths={"home": tmp_path, "data_dir": None}))
    assert suite.name == "alphaverus-dafny2toy" and suite.tasks
    assert all(task.language == "toy" and task.metadata["verifier"] == "toy" for task in suite.tasks)
    monkeypatch.delenv("VERILOOP_PATHS__DATA_DIR", raising=False)  # the bundled subset: no first-load scan
    flags = ["--limit", "1", "--explore-samples", "1", "--width", "1", "--depth", "1", "--exploit-samples", "0"]
    argv = ["--home", str(tmp_path), "--backend", "scripted", "run", "alphaverus", "--target", "toy", *flags]
    assert main([*argv, "--judge-votes", "0", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["suite"] == "alphaverus-dafny2toy" and len(report["attempts"]) == 1


async def test_the_judge_api_judges_a_toy_proof(tmp_path: Path) -> None:
    """`POST /api/judge`'s judge finds the toy through its descriptor, like dafny: honest verified, forged rejected."""
    from veriloop.config import load_settings
    from veriloop.judge.engine import Judge, JudgeCandidate, RewardOptions

    judge = Judge(load_settings(paths={"home": tmp_path}), security=False)
    honest = JudgeCandidate(language="toy", code=ABS, spec=SPEC, verifier="toy")
    escape = SPEC.replace("  y = 0\n", "  assume x == 0\n  y = 0\n")
    forged = JudgeCandidate(language="toy", code=escape, spec=SPEC, verifier="toy")
    try:
        verdicts = await judge.judge_many([honest, forged], RewardOptions())
    finally:
        await judge.aclose()
    assert [v.status for v in verdicts] == ["verified", "rejected"]
    with pytest.raises(ValueError, match="unknown verifier 'coq'"):
        JudgeCandidate(language="toy", code=ABS, spec=SPEC, verifier="coq")


def test_a_run_over_toy_tasks_records_the_toys_own_version(tmp_path: Path) -> None:
    """Provenance asks the registered class (`installed_version`), so the toy's version is the toy's, not Nagini's."""
    from veriloop.agents import provenance
    from veriloop.config import load_settings

    task = Task(id="abs", suite="unit-toy", prompt="", language="toy", spec=SPEC, metadata={"verifier": "toy"})
    settings = load_settings(paths={"home": tmp_path})
    assert provenance.verifier_versions(settings, [task]) == {"toy": "0.1"}


class UncheckedToy:
    """The toy without `check`, which the guard's probes call: a verifier with a dialect that cannot be guarded."""

    name = "toy"
    target = TOY

    @classmethod
    def from_settings(cls, settings: Settings) -> UncheckedToy:
        return cls()

    @classmethod
    def installed_version(cls, settings: Settings) -> str:
        return "0.1"

    async def version(self) -> str:
        return "0.1"

    def options(self) -> dict[str, Any]:
        return {}

    async def verify(self, candidate: Candidate, task: Task) -> VerifyResult:
        return await ToyVerifier().check(candidate.code)

    async def aclose(self) -> None:
        return None


def test_a_verifier_with_a_dialect_but_no_check_is_refused_not_left_unguarded() -> None:
    from veriloop.config import load_settings
    from veriloop.verifiers import get_verifier

    VERIFIERS.register("unchecked-toy", f"{__name__}:UncheckedToy")
    with pytest.raises(ConfigError, match="'toy' names a guard dialect, so it must follow FormalVerifier"):
        get_verifier(load_settings(), "unchecked-toy")
    assert isinstance(get_verifier(load_settings(), "unchecked-toy", guard=False), UncheckedToy)  # only when asked
