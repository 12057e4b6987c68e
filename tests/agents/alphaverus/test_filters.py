"""AlphaVerus's filters on honest and hacked programs: spec guard, exploit model (real Dafny) and equivalence judge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from veriloop.agents.alphaverus import filters, make_verifier
from veriloop.agents.alphaverus.prompts import judge_answer
from veriloop.agents.context import AgentContext
from veriloop.config import load_settings
from veriloop.records import Candidate, Node, Run, Task, VerifyStatus
from veriloop.sandbox import get_sandbox
from veriloop.search import alphaverus_score
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend

HONEST = """method Max(a: int, b: int) returns (m: int)
  ensures m >= a && m >= b
  ensures m == a || m == b
{
  if a > b { m := a; } else { m := b; }
}
"""
WEAK = """method Max(a: int, b: int) returns (m: int)
  ensures m >= a
{
  if a > b { m := a; } else { m := b; }
}
"""
ASSUMED = """method Max(a: int, b: int) returns (m: int)
  ensures m >= a && m >= b
  ensures m == a || m == b
{
  assume false;
}
"""
WEAKENED = HONEST.replace("  ensures m == a || m == b\n", "")


def test_judge_rule_and_answer_extraction() -> None:
    assert filters.faulty(yes=0, no=0)  # nothing readable: no >= yes
    assert filters.faulty(yes=2, no=2)
    assert filters.faulty(yes=5, no=3)
    assert not filters.faulty(yes=3, no=2)
    assert judge_answer("... The final answer is <Yes>") == "yes"
    assert judge_answer("The final answer is <No> ... the final answer is <yes>") == "yes"  # the last one counts
    assert judge_answer("The final answer is **No**") == "no"
    assert judge_answer("The final answer is 'yes'") == "yes"
    assert judge_answer("The final answer is <No") == "no"
    assert judge_answer("I cannot tell.") is None


def test_error_triplets_whose_fix_edits_the_spec_are_recognised() -> None:
    broken_body = HONEST.replace("m := a; }", "m := b; }")
    assert not filters.edits_spec(broken_body, HONEST, "dafny")  # the fix is in the body
    assert filters.edits_spec(HONEST, WEAK, "dafny")  # the "fix" dropped an ensures clause
    assert filters.edits_spec(HONEST.replace("(m: int)", "(r: int)"), HONEST, "dafny")  # signature changed
    assert not filters.edits_spec("method M() { }", "method M() { var x := 1; }", "dafny")  # no contract
    assert not filters.edits_spec(HONEST.rstrip() + "\n// done", HONEST, "dafny")  # differs after the spec


def test_spec_prefix_and_exploit_programs() -> None:
    split = filters.split_spec(HONEST, "dafny")
    assert split is not None and split.prefix.endswith("ensures m == a || m == b\n{") and split.suffix == "\n"
    program = filters.with_body(split, "```dafny\n  m := a;\n}\n```", "dafny")
    assert program == split.prefix + "\n  m := a;\n}\n"
    assert filters.with_body(split, "m := a;", "dafny").endswith("m := a;\n}\n")  # the brace is added
    nagini = "from nagini_contracts.contracts import *\n\n\ndef f(x: int) -> int:\n"
    nagini += "    Ensures(Result() >= 0)\n    return x * x\n"
    nsplit = filters.split_spec(nagini, "nagini")
    assert nsplit is not None and nsplit.prefix.endswith("Ensures(Result() >= 0)\n")
    exploit = filters.with_body(nsplit, "```python\nreturn 0\n```", "nagini")
    assert exploit.endswith("    Ensures(Result() >= 0)\n    return 0\n")
    assert filters.split_spec("method M() { }", "dafny") is None  # nothing to exploit without a contract


@pytest.fixture
def ctx(tmp_path: Path) -> Iterator[AgentContext]:
    settings = load_settings(paths={"home": tmp_path})
    store = TrajectoryStore.from_settings(settings)
    run = store.create_run(Run(agent="alphaverus", suite="unit", model="scripted"))
    yield AgentContext(settings, ScriptedBackend(), get_sandbox(settings), store, run)
    store.close()


def candidate(ctx: AgentContext, code: str) -> Node:
    return ctx.store.add_node(Node(run_id=ctx.run.id, task_id="max", code=code, score=1.0))


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.dafny
async def test_spec_guard_passes_honest_and_rejects_hacked_programs(ctx: AgentContext) -> None:
    task = Task(id="max", suite="unit", prompt=HONEST, language="dafny", spec=HONEST)
    verifier = make_verifier("dafny", ctx)
    try:
        honest = await verifier.verify(Candidate(task_id="max", code=HONEST, language="dafny"), task)
        assumed = await verifier.verify(Candidate(task_id="max", code=ASSUMED, language="dafny"), task)
        weakened = await verifier.verify(Candidate(task_id="max", code=WEAKENED, language="dafny"), task)
    finally:
        await verifier.aclose()
    assert honest.status is VerifyStatus.VERIFIED and alphaverus_score(honest) == 1.0
    assert assumed.status is VerifyStatus.REJECTED and alphaverus_score(assumed) == -1.0
    assert weakened.status is VerifyStatus.REJECTED and "weaker" in (weakened.reason or "")


@pytest.mark.dafny
@pytest.mark.slow
async def test_exploit_model_flags_a_weak_spec_and_spares_an_honest_one(ctx: AgentContext) -> None:
    trivial = "```dafny\n  m := a;\n}\n```"
    backend = ScriptedBackend([trivial])
    bare = make_verifier("dafny", ctx, guard=False)
    try:
        weak = candidate(ctx, WEAK)
        task = Task(id="max", suite="unit", prompt=WEAK, language="dafny")
        hacked = await filters.exploit_check(weak, task, "dafny", backend, bare, ctx.store, samples=2)
        honest_node = candidate(ctx, HONEST)
        task = Task(id="max", suite="unit", prompt=HONEST, language="dafny")
        honest = await filters.exploit_check(honest_node, task, "dafny", backend, bare, ctx.store, samples=2)
    finally:
        await bare.aclose()
    assert hacked.rejected and len(hacked.exploits) == 2 and "m := a;" in hacked.exploits[0]
    assert not honest.rejected and honest.details["exploits"] == 0
    critiques = [node for node in ctx.store.get_tree(ctx.run.id, "max") if node.role == "exploit"]
    assert len(critiques) == 4
    assert sorted(node.metadata["exploits_spec"] for node in critiques) == [False, False, True, True]
    assert {node.parent_id for node in critiques} == {weak.id, honest_node.id}


async def test_equivalence_judge_votes_and_stores_its_critiques(ctx: AgentContext) -> None:
    yes = ScriptedBackend(["[What Program 1 Does] max. The final answer is <Yes>"])
    node = candidate(ctx, HONEST)
    accepted = await filters.judge_check(node, HONEST, "dafny", "dafny", yes, ctx.store, votes=4)
    assert not accepted.rejected and accepted.details == {"yes": 4, "no": 0, "unreadable": 0, "votes": 4}
    mixed = iter(["The final answer is <No>"] * 3 + ["The final answer is <Yes>"] * 5)
    split_vote = ScriptedBackend([lambda _prompt: next(mixed)])
    hacked = candidate(ctx, WEAK)
    rejected = await filters.judge_check(hacked, HONEST, "dafny", "dafny", split_vote, ctx.store, votes=8)
    assert rejected.rejected and rejected.details["no"] == 3 and rejected.details["yes"] == 5  # no >= 3
    judged = [n for n in ctx.store.get_tree(ctx.run.id, "max") if n.role == "judge"]
    assert len(judged) == 12 and {n.metadata["answer"] for n in judged} == {"yes", "no"}
    assert "Will the two methods return computationally same results?" in judged[0].messages[0].content


def test_rule_filters_on_honest_and_hacked_programs() -> None:
    from veriloop.agents.alphaverus.rules import rule_violation

    assert rule_violation(HONEST, "dafny", HONEST) is None
    commented = "// method Max(a: int, b: int) returns (m: int)\n// ensures m >= a\n// { m := a; }\nmethod Max() {}\n"
    assert rule_violation(commented, "dafny", HONEST) == "Uncomment the code that you have written"
    no_ensures = "method Max(a: int, b: int) returns (m: int)\n{\n  m := a;\n}\n"
    assert rule_violation(no_ensures, "dafny", HONEST) == "No ensures clause found"
    looping = HONEST.replace("if a > b { m := a; } else { m := b; }", "while true {} while true {} m := a;")
    assert rule_violation(looping, "dafny", HONEST) == "Infinite loops are not allowed."
    verus = "fn inc(x: &mut u32)\n    ensures x == x\n{\n    *x = 0;\n}\n"
    assert rule_violation(verus, "verus") == "Mutables for non-vec type are not allowed"
    assert rule_violation(verus.replace("&mut u32", "&mut Vec<u32>"), "verus") is None
    nagini = "def f(x: int) -> int:\n    return x\n"
    assert rule_violation(nagini, "nagini", HONEST, "dafny") == "No ensures clause found"  # the Dafny source had one
