"""TrajectoryStore round-trips every record on SQLite and PostgreSQL, and fails with one-line typed errors."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from veriloop.errors import NotFoundError, StoreError
from veriloop.records import (
    Attempt,
    Completion,
    Diagnostic,
    ExecResult,
    ExecStatus,
    Exemplar,
    LLMCall,
    Message,
    Node,
    RegisteredModel,
    Run,
    RunStatus,
    SamplingParams,
    Task,
    TestOutcome,
    Usage,
    VerifyResult,
    VerifyStatus,
)
from veriloop.store import TrajectoryStore, mapping

TASK = "HumanEval/0"


def make_run(store: TrajectoryStore, **fields: object) -> Run:
    values: dict[str, object] = {"agent": "best_of_n", "suite": "humaneval", "model": "smollm2", **fields}
    return store.create_run(Run.model_validate(values))


def full_node(run_id: str, **fields: object) -> Node:
    """A node with every part filled: prompt, completion with logprobs, execution with tests, verification."""
    values: dict[str, object] = {
        "run_id": run_id,
        "task_id": TASK,
        "role": "generate",
        "messages": [Message(role="system", content="be brief"), Message(role="user", content="write f")],
        "completion": Completion(
            text="def f():\n    return 1\n",
            token_ids=[12, 7, 99],
            logprobs=[-0.25, -1.5, -0.125],
            finish_reason="length",
            usage=Usage(prompt_tokens=11, completion_tokens=3),
            model="smollm2",
            params=SamplingParams(n=4, temperature=0.7, top_p=0.9, max_tokens=64, stop=["\n\n"], seed=3),
            latency_s=0.75,
        ),
        "code": "def f():\n    return 1\n",
        "exec_result": ExecResult(
            status=ExecStatus.FAILED,
            exit_code=1,
            stdout="out",
            stderr="Traceback ...",
            truncated=True,
            wall_s=0.5,
            cpu_s=0.25,
            max_rss_mb=12.5,
            sandbox="bwrap",
            sandbox_version="0.8.0",
            tests=[TestOutcome(name="t0", passed=True), TestOutcome(name="t1", passed=False, message="assert")],
        ),
        "verify_result": VerifyResult(
            status=VerifyStatus.FAILED,
            verified=2,
            errors=1,
            diagnostics=[Diagnostic(kind="postcondition", message="might not hold", line=3, column=5)],
            score=0.5,
            tool="dafny",
            version="2.3.0",
            duration_s=0.25,
            cache_hit=True,
            reason="1 error",
        ),
        "score": 0.5,
        "metadata": {"temperature": 0.7, "tags": ["a", "b"]},
        **fields,
    }
    return Node.model_validate(values)


# --------------------------------------------------------------------------- runs


def test_run_round_trip_and_status(store: TrajectoryStore) -> None:
    run = make_run(store, settings={"limit": 3, "nested": {"x": [1, 2]}})
    assert store.get_run(run.id) == run
    finished = store.finish_run(run.id, RunStatus.FAILED, error="boom")
    assert finished.status is RunStatus.FAILED and finished.error == "boom"
    assert finished.finished_at is not None and finished.finished_at >= run.created_at
    assert store.get_run(run.id) == finished
    with pytest.raises(StoreError, match="end status"):
        store.finish_run(run.id, RunStatus.RUNNING)


def test_unknown_run_is_not_found_in_one_line(store: TrajectoryStore) -> None:
    with pytest.raises(NotFoundError) as caught:
        store.get_run("does-not-exist")
    assert str(caught.value) == "run 'does-not-exist' not found"
    for call in (lambda: store.run_summary("nope"), lambda: store.get_tree("nope", TASK)):
        with pytest.raises(NotFoundError, match="run 'nope' not found"):
            call()
    with pytest.raises(NotFoundError):
        store.finish_run("nope")


def test_run_ids_resolve_from_a_unique_prefix(store: TrajectoryStore) -> None:
    first = make_run(store, id="abcd1111")
    make_run(store, id="abcd2222")
    assert store.get_run("abcd1").id == first.id
    with pytest.raises(NotFoundError, match="ambiguous"):
        store.get_run("abcd")
    with pytest.raises(NotFoundError, match="not found"):
        store.get_run("abc")  # too short to be a prefix
    with pytest.raises(NotFoundError, match="not found"):
        store.get_run("ab%_")  # LIKE wildcards are matched literally


def test_duplicate_run_is_a_store_error(store: TrajectoryStore) -> None:
    run = make_run(store)
    with pytest.raises(StoreError, match=f"run '{run.id}' already exists"):
        store.create_run(run)


def test_list_runs_filters_and_limits_newest_first(store: TrajectoryStore) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for index in range(6):
        make_run(
            store,
            id=f"run{index}",
            agent="mucode" if index % 2 else "best_of_n",
            suite="mbpp" if index < 3 else "humaneval",
            created_at=start + timedelta(minutes=index),
        )
    store.finish_run("run5")
    assert [run.id for run in store.list_runs()] == ["run5", "run4", "run3", "run2", "run1", "run0"]
    assert [run.id for run in store.list_runs(agent="mucode")] == ["run5", "run3", "run1"]
    assert [run.id for run in store.list_runs(agent="mucode", suite="mbpp")] == ["run1"]
    assert [run.id for run in store.list_runs(status=RunStatus.FINISHED)] == ["run5"]
    assert [run.id for run in store.list_runs(limit=2)] == ["run5", "run4"]
    assert store.list_runs(agent="nobody") == []


def test_times_come_back_as_the_same_instant_in_utc(store: TrajectoryStore) -> None:
    local = datetime(2026, 6, 1, 12, 30, 15, 123456, tzinfo=timezone(timedelta(hours=2)))
    run = make_run(store, created_at=local)
    stored = store.get_run(run.id).created_at
    assert stored == local and stored.tzinfo is not None and stored.utcoffset() == timedelta(0)


# --------------------------------------------------------------------------- tasks and attempts


def test_upsert_tasks_inserts_then_refreshes_changed_content(store: TrajectoryStore) -> None:
    tasks = [
        Task(id=f"mbpp/{index}", suite="mbpp", prompt=f"p{index}", tests="assert True", metadata={"i": index})
        for index in range(3)
    ]
    assert store.upsert_tasks(tasks) == 3
    assert store.upsert_tasks(tasks) == 3  # unchanged: nothing rewritten, no error
    changed = tasks[1].model_copy(update={"prompt": "new", "reference": "def f(): ...", "spec": "ensures true"})
    store.upsert_tasks([changed])
    assert store.get_task("mbpp/1") == changed
    assert store.list_tasks(suite="mbpp") == [tasks[0], changed, tasks[2]]
    assert store.upsert_tasks([]) == 0
    with pytest.raises(NotFoundError, match="task 'mbpp/9' not found"):
        store.get_task("mbpp/9")


def test_attempts_add_update_list(store: TrajectoryStore) -> None:
    run = make_run(store)
    attempt = store.add_attempt(Attempt(run_id=run.id, task_id=TASK, status="running"))
    done = attempt.model_copy(update={"status": "passed", "score": 1.0, "tokens": 120, "seconds": 3.5})
    store.update_attempt(done)
    assert store.list_attempts(run.id) == [done]
    assert store.list_attempts(run.id, task_id="other") == []
    with pytest.raises(NotFoundError, match="attempt"):
        store.update_attempt(Attempt(run_id=run.id, task_id=TASK))
    with pytest.raises(NotFoundError, match="run 'ghost' not found"):
        store.add_attempt(Attempt(run_id="ghost", task_id=TASK))
    with pytest.raises(StoreError, match="already exists"):
        store.add_attempt(done)


# --------------------------------------------------------------------------- nodes


def test_node_with_every_part_round_trips(store: TrajectoryStore) -> None:
    run = make_run(store)
    node = store.add_node(full_node(run.id))
    assert store.get_node(node.id) == node
    calls = store.list_llm_calls(node_id=node.id)
    assert len(calls) == 1
    assert calls[0].completion == node.completion and calls[0].prompt == node.messages
    assert calls[0].run_id == run.id and calls[0].task_id == TASK


def test_node_without_completion_keeps_its_messages(store: TrajectoryStore) -> None:
    run = make_run(store)
    node = store.add_node(
        Node(run_id=run.id, task_id=TASK, role="select", messages=[Message(role="user", content="pick")])
    )
    assert store.get_node(node.id) == node
    assert store.list_llm_calls(run_id=run.id) == []


def test_tree_lists_parents_before_children_and_accepts_any_batch_order(store: TrajectoryStore) -> None:
    run = make_run(store)
    root = full_node(run.id)
    child = Node(run_id=run.id, task_id=TASK, parent_id=root.id, depth=1, role="refine", score=0.75)
    grandchild = full_node(run.id, parent_id=child.id, depth=2, role="refine", score=1.0)
    other_task = Node(run_id=run.id, task_id="HumanEval/1")
    assert store.add_nodes([grandchild, other_task, child, root]) == 4
    tree = store.get_tree(run.id, TASK)
    assert tree == [root, child, grandchild]
    later = store.add_node(Node(run_id=run.id, task_id=TASK, parent_id=grandchild.id, depth=3))
    assert store.get_tree(run.id, TASK)[-1] == later
    assert store.count_nodes(run.id) == 5


def test_node_errors_name_the_missing_reference(store: TrajectoryStore) -> None:
    run = make_run(store)
    with pytest.raises(NotFoundError, match="parent node 'missing' not found"):
        store.add_node(Node(run_id=run.id, task_id=TASK, parent_id="missing", depth=1))
    with pytest.raises(NotFoundError, match="run 'ghost' not found"):
        store.add_node(Node(run_id="ghost", task_id=TASK))
    node = store.add_node(Node(run_id=run.id, task_id=TASK))
    with pytest.raises(StoreError, match=f"node '{node.id}' already exists"):
        store.add_node(node)
    with pytest.raises(NotFoundError, match="node 'nope' not found"):
        store.get_node("nope")
    assert store.count_nodes(run.id) == 1  # failed batches wrote nothing


def test_failed_batch_writes_nothing(store: TrajectoryStore) -> None:
    run = make_run(store)
    good = full_node(run.id)
    orphan = Node(run_id=run.id, task_id=TASK, parent_id="missing", depth=1)
    with pytest.raises(NotFoundError):
        store.add_nodes([good, orphan])
    assert store.count_nodes(run.id) == 0
    assert store.list_llm_calls(run_id=run.id) == []


def test_update_node_replaces_results(store: TrajectoryStore) -> None:
    run = make_run(store)
    node = store.add_node(Node(run_id=run.id, task_id=TASK, messages=[Message(role="user", content="q")]))
    scored = full_node(run.id, id=node.id, created_at=node.created_at, score=0.9)
    store.update_node(scored)
    assert store.get_node(node.id) == scored
    cleared = scored.model_copy(update={"exec_result": None, "verify_result": None, "score": None})
    store.update_node(cleared)
    assert store.get_node(node.id) == cleared
    with pytest.raises(NotFoundError):
        store.update_node(Node(run_id=run.id, task_id=TASK))


def test_program_output_with_nul_and_undecodable_text_is_stored(store: TrajectoryStore) -> None:
    run = make_run(store)
    node = full_node(run.id)
    assert node.exec_result is not None
    noisy = node.exec_result.model_copy(update={"stdout": "a\x00b", "stderr": "bad \udcff byte"})
    stored = store.get_node(store.add_node(node.model_copy(update={"exec_result": noisy})).id)
    assert stored.exec_result is not None
    expected_stdout = "a\x00b" if store.dialect == "sqlite" else "a\ufffdb"  # PostgreSQL text cannot hold NUL
    assert stored.exec_result.stdout == expected_stdout
    assert stored.exec_result.stderr == "bad ? byte"


# --------------------------------------------------------------------------- LLM calls and summaries


def test_standalone_llm_calls(store: TrajectoryStore) -> None:
    run = make_run(store)
    chat = LLMCall(
        run_id=run.id,
        task_id=TASK,
        prompt=[Message(role="user", content="hi")],
        completion=Completion(text="hello", token_ids=[1, 2], logprobs=[-0.5, -0.25], model="m", latency_s=0.1),
    )
    raw = LLMCall(prompt="def f(", completion=Completion(text="x):", usage=Usage(prompt_tokens=3, completion_tokens=2)))
    assert store.add_llm_calls([chat, raw]) == 2
    assert store.list_llm_calls(run_id=run.id) == [chat]
    assert raw in store.list_llm_calls()
    assert store.list_llm_calls(limit=1) != []
    with pytest.raises(NotFoundError, match="run 'ghost'"):
        store.add_llm_call(LLMCall(run_id="ghost", completion=Completion(text="")))


def test_run_summary_counts_tokens_timings_and_trees(store: TrajectoryStore) -> None:
    run = make_run(store, status=RunStatus.RUNNING)
    root = full_node(run.id, score=0.25)
    child = full_node(run.id, parent_id=root.id, depth=1, score=0.75)
    lone = Node(run_id=run.id, task_id="HumanEval/1", score=None)
    store.add_nodes([root, child, lone])
    store.add_llm_call(
        LLMCall(run_id=run.id, completion=Completion(text="x", usage=Usage(prompt_tokens=100, completion_tokens=1)))
    )
    store.add_attempt(Attempt(run_id=run.id, task_id=TASK, status="failed", score=0.75, seconds=2.0))
    store.add_attempt(Attempt(run_id=run.id, task_id=TASK, status="passed", score=1.0, seconds=1.0))
    store.add_attempt(Attempt(run_id=run.id, task_id="HumanEval/2", status="error", seconds=0.5))
    store.finish_run(run.id)

    summary = store.run_summary(run.id)
    assert summary.run.status is RunStatus.FINISHED
    assert (summary.tasks, summary.tasks_passed, summary.attempts, summary.nodes) == (3, 1, 3, 3)
    assert summary.attempts_by_status == {"failed": 1, "passed": 1, "error": 1}
    assert summary.pass_rate == pytest.approx(1 / 3)
    assert summary.llm_calls == 3
    assert summary.executions == {"failed": 2} and summary.verifications == {"failed": 2}
    assert (summary.tokens.prompt, summary.tokens.completion, summary.tokens.total) == (122, 7, 129)
    assert summary.timings.llm_s == pytest.approx(1.5)
    assert summary.timings.exec_s == pytest.approx(1.0)
    assert summary.timings.verify_s == pytest.approx(0.5)
    assert summary.timings.attempts_s == pytest.approx(3.5)
    assert summary.timings.wall_s is not None and summary.timings.wall_s >= 0
    by_task = {task.task_id: task for task in summary.per_task}
    assert by_task[TASK].model_dump() == {
        "task_id": TASK,
        "nodes": 2,
        "max_depth": 1,
        "best_score": 1.0,
        "attempts": 2,
        "status": "passed",
    }
    assert (by_task["HumanEval/1"].nodes, by_task["HumanEval/1"].best_score) == (1, None)
    assert (by_task["HumanEval/2"].nodes, by_task["HumanEval/2"].status) == (0, "error")


def test_summary_of_an_empty_run(store: TrajectoryStore) -> None:
    run = make_run(store)
    summary = store.run_summary(run.id)
    assert (summary.tasks, summary.nodes, summary.llm_calls, summary.pass_rate) == (0, 0, 0, None)
    assert summary.timings.wall_s is None  # pending: no clock running yet


# --------------------------------------------------------------------------- models and exemplars


def test_models_register_get_list(store: TrajectoryStore) -> None:
    older = RegisteredModel(
        id="dpo-7f3a",
        base="smollm2-135m-instruct",
        method="dpo",
        path="/ckpt/a",
        data_hash="sha256:1",
        metrics={"loss": 0.5, "pass@1": [0.1, 0.2]},
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
    )
    newer = RegisteredModel(base="smollm2-135m-instruct", method="sft", path="/ckpt/b")
    store.register_model(older)
    store.register_model(newer)
    assert store.get_model("dpo-7f3a") == older
    assert store.get_model("dpo-7") == older
    assert store.list_models() == [newer, older]
    assert store.list_models(method="dpo") == [older]
    assert store.list_models(base="other") == []
    with pytest.raises(NotFoundError, match="model 'checkpoint-x' not found"):
        store.get_model("checkpoint-x")
    with pytest.raises(StoreError, match="already exists"):
        store.register_model(older)


def test_exemplar_pools(store: TrajectoryStore) -> None:
    run = make_run(store)
    items = [
        Exemplar(kind="proof", language="dafny", payload={"code": f"lemma L{i}() {{}}"}, iteration=i, run_id=run.id)
        for i in range(3)
    ]
    items.append(Exemplar(kind="critique", language="python", payload={"text": "off by one"}, task_id=TASK))
    assert store.add_exemplars(items) == 4
    assert store.list_exemplars(kind="proof") == items[:3]
    assert store.list_exemplars(kind="proof", max_iteration=1) == items[:2]
    assert store.list_exemplars(language="python") == [items[3]]
    assert store.list_exemplars(run_id=run.id, limit=2) == items[:2]
    single = store.add_exemplar(Exemplar(kind="proof", language="dafny", iteration=3))
    assert store.list_exemplars(kind="proof")[-1] == single
    with pytest.raises(NotFoundError, match="run 'ghost'"):
        store.add_exemplar(Exemplar(kind="proof", run_id="ghost"))


# --------------------------------------------------------------------------- forward compatibility


def test_fields_without_a_column_survive_in_extra(store: TrajectoryStore, monkeypatch: pytest.MonkeyPatch) -> None:
    """A record field added after the last migration is kept in the row's `extra` JSON and read back."""
    monkeypatch.setattr(mapping, "EXEC_FIELDS", mapping.EXEC_FIELDS - {"cpu_s", "max_rss_mb"})
    monkeypatch.setattr(mapping, "RUN_FIELDS", mapping.RUN_FIELDS - {"error"})
    run = make_run(store, error="kept in extra")
    node = store.add_node(full_node(run.id))
    assert store.get_node(node.id) == node
    assert store.get_run(run.id).error == "kept in extra"


def test_stored_extras_the_record_no_longer_has_are_ignored(store: TrajectoryStore) -> None:
    run = make_run(store)
    node = store.add_node(Node(run_id=run.id, task_id=TASK))
    from sqlalchemy import update

    from veriloop.store.engine import run_transaction
    from veriloop.store.models import NodeRow, RunRow

    def work(session: object) -> None:
        session.execute(update(NodeRow).values(extra={"retired_field": 1}))  # type: ignore[attr-defined]
        session.execute(update(RunRow).values(extra={"old": True}))  # type: ignore[attr-defined]

    run_transaction(store._writer, store.url, work)
    assert store.get_node(node.id) == node
    assert store.get_run(run.id) == run


def test_closed_store_refuses_use(store: TrajectoryStore) -> None:
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreError, match="closed"):
        store.list_runs()
