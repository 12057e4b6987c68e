"""ReVISE's curriculum data: stage 1 (verify) and stage 2 (correct) rows from stored trajectories."""

from __future__ import annotations

from pathlib import Path

import pytest

from veriloop.agents.context import AgentContext
from veriloop.agents.revise import ReviseAgent, ReviseOptions
from veriloop.agents.revise.curriculum import balance, rows_from_runs, task_rows
from veriloop.agents.revise.prompts import EOS_TOKEN, REFINE_TOKEN, gold_segment
from veriloop.config import load_settings
from veriloop.records import Completion, ExecResult, ExecStatus, Message, Node, Prompt, Run, RunStatus, Task
from veriloop.sandbox import get_sandbox
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite
from veriloop.testing import ScriptedScoringBackend

TASK = Task(id="T/1", suite="t", prompt="def f():\n", entry_point="f", reference="def f():\n    return 1\n")
USER = [Message(role="user", content="write f")]


def attempt(node_id: str, text: str, passed: bool, *, parent: str | None = None, before: str = "") -> Node:
    messages = [*USER, Message(role="assistant", content=before)] if before else list(USER)
    return Node(
        id=node_id,
        run_id="r",
        task_id=TASK.id,
        parent_id=parent,
        role="refine" if parent else "generate",
        messages=messages,
        completion=Completion(text=text),
        code=text,
        exec_result=ExecResult(status=ExecStatus.PASSED if passed else ExecStatus.FAILED),
    )


def decision(node_id: str, parent: str, choice: str) -> Node:
    return Node(id=node_id, run_id="r", task_id=TASK.id, parent_id=parent, role="verify", metadata={"decision": choice})


WRONG = "```python\ndef f():\n    return 2"
RIGHT = "```python\ndef f():\n    return 1"
AFTER_WRONG = WRONG + "\n```" + REFINE_TOKEN


def tree() -> list[Node]:
    """a: wrong, refined into a fix; b: right; c: wrong, never refined; d: wrong, refined into another wrong one."""
    return [
        attempt("a", WRONG, False),
        decision("a.v", "a", REFINE_TOKEN),
        attempt("a.r", RIGHT, True, parent="a.v", before=AFTER_WRONG),
        attempt("b", RIGHT, True),
        decision("b.v", "b", EOS_TOKEN),
        attempt("c", WRONG, False),
        attempt("d", WRONG, False),
        decision("d.v", "d", REFINE_TOKEN),
        attempt("d.r", WRONG + "  # still", False, parent="d.v", before=AFTER_WRONG),
    ]


def test_stage_one_prefers_refine_after_wrong_and_eos_after_right() -> None:
    rows = {row["node_id"]: row for row in task_rows(tree(), TASK, 1)}
    assert set(rows) == {"a", "a.r", "b", "c", "d", "d.r"}
    for node_id in ("a", "c", "d", "d.r"):
        assert (rows[node_id]["chosen"], rows[node_id]["rejected"]) == (REFINE_TOKEN, EOS_TOKEN)
    for node_id in ("a.r", "b"):
        assert (rows[node_id]["chosen"], rows[node_id]["rejected"]) == (EOS_TOKEN, REFINE_TOKEN)
    assert rows["a"]["prefix"] == WRONG + "\n```"
    assert rows["a.r"]["prefix"] == AFTER_WRONG + RIGHT + "\n```"  # the turn up to and including the refinement
    assert rows["a.r"]["attempt"] == RIGHT + "\n```"  # the attempt alone, what anchor_weight trains on
    assert all(row["prefix"].endswith(row["attempt"]) for row in rows.values())
    assert rows["a"]["prompt"] == [{"role": "user", "content": "write f"}]


def test_stage_two_prefers_a_fix_its_own_refinement_or_the_reference() -> None:
    rows = task_rows(tree(), TASK, 2)
    by_node: dict[str, list[dict[str, object]]] = {}
    for row in rows:
        by_node.setdefault(str(row["node_id"]), []).append(row)
    [a] = by_node["a"]
    assert a["fix"] == "refinement" and a["chosen"] == REFINE_TOKEN + RIGHT + "\n```" + EOS_TOKEN
    assert a["rejected"] == EOS_TOKEN
    [c] = by_node["c"]
    assert c["fix"] == "reference" and c["chosen"] == REFINE_TOKEN + gold_segment(TASK.reference or "") + EOS_TOKEN
    first, second = by_node["d"]
    assert first["kind"] == "correct" and first["rejected"] == EOS_TOKEN
    assert second["kind"] == "correct_over_failed_refinement"
    assert second["rejected"] == REFINE_TOKEN + WRONG + "  # still\n```" + EOS_TOKEN
    [b] = by_node["b"]
    assert (b["chosen"], b["rejected"]) == (EOS_TOKEN, REFINE_TOKEN)
    with pytest.raises(ValueError):
        task_rows(tree(), TASK, 3)


def test_balance_repeats_the_rarer_verdict() -> None:
    rows = [{"passed": False, "i": i} for i in range(10)] + [{"passed": True, "i": 10}]
    balanced = balance(rows, max_factor=4)
    assert sum(row["passed"] for row in balanced) == 4 and len(balanced) == 14
    assert balance(rows[:3]) == rows[:3]  # one verdict only: nothing to balance


@pytest.mark.bwrap
async def test_rows_from_a_stored_run(tmp_path: Path) -> None:
    """The graph stores what the builder reads: a wrong first attempt refined into a right one."""
    settings = load_settings(paths={"home": tmp_path})
    task = load_suite("humaneval", settings).select(ids=["HumanEval/53"]).tasks[0]
    wrong = "```python\ndef add(x: int, y: int):\n    return x - y\n```\n"
    right = "```python\ndef add(x: int, y: int):\n    return x + y\n```\n"

    def reply(prompt: Prompt) -> str:
        return right if isinstance(prompt, str) and prompt.endswith(REFINE_TOKEN) else wrong

    def scorer(prompt: str, tokens: object) -> dict[str, float]:
        good = "x + y" in prompt.rsplit(REFINE_TOKEN, 1)[-1]
        return {EOS_TOKEN: -0.1 if good else -3.0, REFINE_TOKEN: -3.0 if good else -0.1}

    store = TrajectoryStore.from_settings(settings)
    store.upsert_tasks([task])
    run = store.create_run(Run(agent="revise", suite="humaneval", model="scripted", status=RunStatus.RUNNING))
    sandbox = get_sandbox(settings)
    try:
        ctx = AgentContext(settings, ScriptedScoringBackend([reply], scorer=scorer), sandbox, store, run)
        await ReviseAgent(ReviseOptions(samples=1, checkpoint=False)).solve(task, ctx)
    finally:
        await sandbox.aclose()
    stage1 = rows_from_runs(store, [run.id], {task.id: task}, 1)
    stage2 = rows_from_runs(store, [run.id], {task.id: task}, 2)
    unknown = rows_from_runs(store, [run.id], {}, 1)
    store.close()
    assert sorted((row["passed"], row["chosen"]) for row in stage1) == [(False, REFINE_TOKEN), (True, EOS_TOKEN)]
    [fix] = [row for row in stage2 if not row["passed"]]
    assert fix["fix"] == "refinement" and "x + y" in fix["chosen"] and fix["chosen"].endswith(EOS_TOKEN)
    assert unknown == []  # tasks the caller does not name give no rows


def test_a_stage_folder_changes_with_every_setting_that_changes_the_weights(tmp_path: Path) -> None:
    """A stage resumes its folder's saved state; a rerun with another loss or other hyperparameters must not
    pick up weights trained with the old ones (it once evaluated stale checkpoints as the new ones)."""
    from dataclasses import replace

    from veriloop.agents.revise.curriculum import CurriculumSpec, stage_folder

    spec = CurriculumSpec(base="m0", out=tmp_path)
    rows = [{"prefix": "p", "chosen": EOS_TOKEN, "rejected": REFINE_TOKEN, "passed": True}]
    folder = stage_folder(spec, "m0", 1, rows)
    assert folder.parent == tmp_path and folder.name.startswith("stage1-")
    assert stage_folder(CurriculumSpec(base="m0", out=tmp_path), "m0", 1, list(rows)) == folder
    assert stage_folder(replace(spec, options={"run_id": "another"}), "m0", 1, rows) == folder  # a label only
    assert stage_folder(replace(spec, threads=2), "m0", 1, rows) == folder  # speed only
    changed = [
        replace(spec, options={"decision_tokens": []}),
        replace(spec, learning_rate=3e-4),
        replace(spec, steps=(8, 20)),
        replace(spec, batch_size=8),
        replace(spec, lora_rank=8),
        replace(spec, max_length=384),
        replace(spec, seed=1),
        replace(spec, dpo_weight=0.2),
        replace(spec, beta=0.2),
        replace(spec, anchor_weight=0.0),
    ]
    names = {stage_folder(other, "m0", 1, rows) for other in changed}
    assert folder not in names and len(names) == len(changed)
    assert stage_folder(spec, "m1", 1, rows) != folder
    assert stage_folder(spec, "m0", 2, rows) != folder
    assert stage_folder(spec, "m0", 1, [{**rows[0], "rejected": "[refine]x[eos]"}]) != folder


def test_a_stage_trains_under_the_curriculum_threads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The stage's trainer is called directly, so the curriculum applies `threads` itself (and restores them)."""
    import torch

    from veriloop.agents.revise.curriculum import CurriculumSpec, train_stage
    from veriloop.training import revise

    seen: list[int] = []
    monkeypatch.setattr(revise, "train_sft_dpo", lambda spec, settings, progress: seen.append(torch.get_num_threads()))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        rows = [{"prefix": "p", "chosen": EOS_TOKEN, "rejected": REFINE_TOKEN, "passed": True}]
        spec = CurriculumSpec("m0", tmp_path, threads=2)
        train_stage(load_settings(paths={"home": tmp_path}), rows, "m0", 1, spec, None)
        assert seen == [2] and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)
