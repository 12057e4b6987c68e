"""Shared by the hints tests: a constraint matcher with no model behind it, and pruning against a real verifier."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from veriloop.agents.alphaverus import make_verifier
from veriloop.agents.alphaverus.hints import HintsProblem
from veriloop.agents.alphaverus.houdini import Pool, Pruning, prune
from veriloop.agents.context import AgentContext
from veriloop.config import load_settings
from veriloop.records import Constraint, Node, Run
from veriloop.sandbox import get_sandbox
from veriloop.store import TrajectoryStore
from veriloop.testing import ScriptedBackend
from veriloop.verifiers import Verifier

RealPrune = Callable[[str, Callable[[Verifier], HintsProblem], Callable[[HintsProblem], Pool], int], Awaitable[Pruning]]


@pytest.fixture(scope="session")
def accepts() -> Callable[[Constraint, str], bool]:
    """Whether a constraint's matcher takes `text` whole and may end there (llguidance over a byte-level
    tokenizer, built in memory: no model needed)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from veriloop.llm.constraints import ConstraintEngine

    vocab = {"<|im_end|>": 0, **{symbol: i + 1 for i, symbol in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    tokenizer: Any = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>")  # type: ignore[no-untyped-call]
    engine = ConstraintEngine(tokenizer, len(vocab))

    def check(constraint: Constraint, text: str) -> bool:
        matcher = engine.matcher(constraint)
        tokens = tokenizer.encode(text, add_special_tokens=False)
        return all(matcher.advance(token) for token in tokens) and matcher.accepting

    return check


@pytest.fixture
def prune_with_real(tmp_path: Path) -> RealPrune:
    """Houdini pruning with the named verifier as a run would make it (guarded, over a fresh store): the problem
    and the candidate pool are built from the verifier and the problem."""

    async def pruned(
        target: str,
        make_problem: Callable[[Verifier], HintsProblem],
        make_pool: Callable[[HintsProblem], Pool],
        max_steps: int,
    ) -> Pruning:
        settings = load_settings(paths={"home": tmp_path})
        with TrajectoryStore.from_settings(settings) as store:
            run = store.create_run(Run(agent="alphaverus", suite="unit", model="scripted"))
            ctx = AgentContext(settings, ScriptedBackend(), get_sandbox(settings), store, run)
            verifier = make_verifier(target, ctx)
            try:
                problem = make_problem(verifier)
                parent = store.add_node(Node(run_id=run.id, task_id=problem.task.id, code=problem.base, score=0.1))
                return await prune(problem, make_pool(problem), parent, store, search_id="s", max_steps=max_steps)
            finally:
                await verifier.aclose()

    return pruned
