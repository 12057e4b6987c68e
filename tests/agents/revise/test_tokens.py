"""Decision tokens added to a tiny model (embedding resized, rows from words), saved, trained, served back."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

from veriloop.agents.revise.prompts import DECISION_TOKENS, EOS_TOKEN, REFINE_TOKEN
from veriloop.config import Settings, load_settings
from veriloop.llm.embedded import EmbeddedBackend, resolve_model
from veriloop.records import Message
from veriloop.store import TrajectoryStore
from veriloop.store.exports import write_rows
from veriloop.testing import tiny_causal_lm, tiny_model_folder
from veriloop.training.common import TrainSpec
from veriloop.training.revise import anchor_items, context_was_cut, encode_continuation, train_sft_dpo
from veriloop.training.special_tokens import add_special_tokens, has_tokens, prepare_model


def tiny_home(tmp_path: Path) -> Settings:
    folder = tiny_model_folder(tmp_path / "tiny")
    return load_settings(paths={"home": tmp_path / "home"}, llm={"model": str(folder)})


def stage_spec(
    data: Path,
    out: Path,
    folder: Path,
    *,
    steps: int,
    learning_rate: float,
    decision_tokens: Sequence[str] = (),
    anchor_weight: float = 0.0,
) -> TrainSpec:
    """A small LoRA stage on a tiny model whose decision tokens' rows train."""
    return TrainSpec(
        method="revise-stage1",
        data=data,
        out=out,
        model=str(folder),
        lora=True,
        lora_rank=4,
        steps=steps,
        batch_size=2,
        learning_rate=learning_rate,
        save_every=steps,
        options={
            "train_tokens": list(DECISION_TOKENS),
            "decision_tokens": list(decision_tokens),
            "anchor_weight": anchor_weight,
        },
    )


def test_tokens_are_added_and_the_embedding_resized() -> None:
    model, tokenizer = tiny_causal_lm()
    before = len(tokenizer)
    wrong_ids = tokenizer(" wrong", add_special_tokens=False).input_ids
    ids = add_special_tokens(model, tokenizer, {"[eos]": ("{eos_token}",), "[refine]": (" wrong",)})
    assert len(tokenizer) == before + 2 and sorted(ids.values()) == [before, before + 1]
    weight = model.get_input_embeddings().weight
    assert weight.shape[0] == before + 2 and model.get_output_embeddings().weight.shape[0] == before + 2
    assert torch.equal(weight[ids["[eos]"]], weight[tokenizer.eos_token_id])
    assert torch.allclose(weight[ids["[refine]"]], weight[wrong_ids].mean(dim=0))
    assert torch.allclose(
        model.get_output_embeddings().weight[ids["[refine]"]],
        model.get_output_embeddings().weight[wrong_ids].mean(dim=0),
    )
    assert tokenizer.tokenize("ab[refine]c") == ["a", "b", "[refine]", "c"]  # one token, never split
    assert add_special_tokens(model, tokenizer, {"[eos]": ("x",)}) == {"[eos]": ids["[eos]"]}  # already there
    assert len(tokenizer) == before + 2


async def test_prepared_model_is_a_checkpoint_the_backend_scores_with(tmp_path: Path) -> None:
    settings = tiny_home(tmp_path)
    folder, model_id = prepare_model(settings, DECISION_TOKENS)
    again, same_id = prepare_model(settings, DECISION_TOKENS)
    assert (again, same_id) == (folder, model_id)  # built and registered once
    assert resolve_model(f"checkpoint:{model_id}", settings) == folder
    served = load_settings(paths={"home": tmp_path / "home"}, llm={"model": f"checkpoint:{model_id}"})
    backend = EmbeddedBackend.from_settings(served)
    try:
        assert has_tokens(backend.tokenizer, list(DECISION_TOKENS))
        prefix = backend.render_chat([Message(role="user", content="hi")])
        assert prefix.endswith("<|im_start|>assistant\n")
        [scores] = await backend.next_token_logprobs([prefix + "x"], [EOS_TOKEN, REFINE_TOKEN])
        with torch.no_grad():
            logits = backend.model(input_ids=torch.tensor([backend.encode(prefix + "x")])).logits[0, -1]
        expected = torch.log_softmax(logits, dim=-1)[backend.tokenizer.convert_tokens_to_ids(EOS_TOKEN)]
        assert abs(scores[EOS_TOKEN] - float(expected)) < 1e-4 and scores[REFINE_TOKEN] < 0
    finally:
        backend.close()


def test_encode_continuation_trains_only_the_continuation() -> None:
    _, tokenizer = tiny_causal_lm()
    add_special_tokens(_, tokenizer, {"[eos]": ("{eos_token}",)})
    item = encode_continuation(tokenizer, [{"role": "user", "content": "q"}], "abc", "[eos]", 64)
    trained = [token for token, label in zip(item.input_ids, item.labels, strict=True) if label != -100]
    assert trained == [tokenizer.convert_tokens_to_ids("[eos]")]
    long = encode_continuation(tokenizer, "q" * 100, "abc", "[eos]xyz", 16)
    assert len(long.input_ids) == 16 and long.labels[:-1] == [-100] * 15  # only a too-long context loses its start
    assert long.labels[-1] == tokenizer.convert_tokens_to_ids("[eos]")  # ... and the decision is kept


def test_a_long_continuation_is_cut_at_its_end_and_never_shortens_the_context() -> None:
    """The decision's context must not depend on what follows it: a lone decision and a decision opening a long
    fix see the same tokens before them (else the cut context itself becomes a cue for the label)."""
    _, tokenizer = tiny_causal_lm()
    add_special_tokens(_, tokenizer, {"[eos]": ("{eos_token}",), "[refine]": ("fix",)})
    question = [{"role": "user", "content": "q?"}]
    lone = encode_continuation(tokenizer, question, "the attempt", "[eos]", 96)
    fix = encode_continuation(tokenizer, question, "the attempt", "[refine]" + " fixed code" * 80 + "[eos]", 96)
    context = lone.labels.count(-100)
    assert fix.input_ids[:context] == lone.input_ids[:context] and fix.labels.count(-100) == context
    assert len(fix.input_ids) == 96 and fix.labels[context] == tokenizer.convert_tokens_to_ids("[refine]")
    assert not context_was_cut(lone, 96) and context_was_cut(encode_continuation(tokenizer, "q" * 200, "", "x", 96), 96)


def test_a_stage_trains_the_decision_and_registers_the_checkpoint(tmp_path: Path) -> None:
    settings = tiny_home(tmp_path)
    folder, _ = prepare_model(settings, DECISION_TOKENS)
    question = [{"role": "user", "content": "q"}]
    rows: list[dict[str, Any]] = [
        {"prompt": question, "prefix": "right", "chosen": EOS_TOKEN, "rejected": REFINE_TOKEN},
        {"prompt": question, "prefix": "wrong", "chosen": REFINE_TOKEN + "ok" + EOS_TOKEN, "rejected": EOS_TOKEN},
    ]
    data = write_rows(rows, tmp_path / "rows.jsonl", "jsonl")
    spec = stage_spec(data, tmp_path / "out", folder, steps=3, learning_rate=1e-2)
    result = train_sft_dpo(spec, settings)
    assert result.model_id is not None and result.steps == 3
    assert result.metrics["loss_last"] < result.metrics["loss_first"]
    from transformers import AutoModelForCausalLM

    trained: Any = AutoModelForCausalLM.from_pretrained(result.path)
    start: Any = AutoModelForCausalLM.from_pretrained(folder)
    [eos_id] = [start.config.vocab_size - 2]
    assert trained.config.vocab_size == start.config.vocab_size
    assert not torch.equal(trained.get_input_embeddings().weight[eos_id], start.get_input_embeddings().weight[eos_id])
    with TrajectoryStore.from_settings(settings) as store:
        assert store.get_model(result.model_id).method == "revise-stage1"


def decision_mass(model: Any, tokenizer: Any, prefix: str) -> tuple[float, float]:
    """(p([eos]) + p([refine]) over the vocabulary, p([eos]) among the two) as the next token after `prefix`."""
    text = tokenizer.apply_chat_template([{"role": "user", "content": "q"}], add_generation_prompt=True, tokenize=False)
    ids = tokenizer(text + prefix, add_special_tokens=False, return_tensors="pt").input_ids
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), dim=-1)
    eos, refine = (tokenizer.convert_tokens_to_ids(token) for token in (EOS_TOKEN, REFINE_TOKEN))
    p_eos, p_refine = float(logps[eos].exp()), float(logps[refine].exp())
    return p_eos + p_refine, p_eos / (p_eos + p_refine)


def test_decisions_trained_among_themselves_learn_the_choice_without_a_loss_on_lifting_them(tmp_path: Path) -> None:
    """Stage-1 rows trained with `decision_tokens` learn [eos] against [refine] (the decision as the agent reads
    it) from a loss about the choice alone; over the full vocabulary the loss starts many nats up and is lowered
    by lifting both tokens everywhere, which is how a real model came to write them (and their source words)
    into its code (`test_fused_loss`: a choice's gradient reaches no other head row)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    settings = tiny_home(tmp_path)
    folder, _ = prepare_model(settings, DECISION_TOKENS)
    question = [{"role": "user", "content": "q"}]
    rows: list[dict[str, Any]] = [
        {"prompt": question, "prefix": "right", "chosen": EOS_TOKEN, "rejected": REFINE_TOKEN},
        {"prompt": question, "prefix": "wrong", "chosen": REFINE_TOKEN, "rejected": EOS_TOKEN},
    ]
    data = write_rows(rows, tmp_path / "rows.jsonl", "jsonl")
    tokenizer: Any = AutoTokenizer.from_pretrained(folder)
    start: Any = AutoModelForCausalLM.from_pretrained(folder)
    mass_before = max(decision_mass(start, tokenizer, prefix)[0] for prefix in ("right", "wrong"))
    trained: dict[str, Any] = {}
    first: dict[str, float] = {}
    for label, decisions in (("among", list(DECISION_TOKENS)), ("vocabulary", [])):
        spec = stage_spec(data, tmp_path / label, folder, steps=6, learning_rate=1e-3, decision_tokens=decisions)
        result = train_sft_dpo(spec, settings)
        first[label] = result.metrics["loss_first"]
        trained[label] = AutoModelForCausalLM.from_pretrained(result.path)
    among = {prefix: decision_mass(trained["among"], tokenizer, prefix)[1] for prefix in ("right", "wrong")}
    assert among["right"] > 0.5 > among["wrong"]  # the choice is learned, as the agent reads it
    assert mass_before < 1e-3  # new tokens start far below the vocabulary's likely tokens ...
    assert first["vocabulary"] > 5.0  # ... so over the vocabulary the loss demands lifting them by many nats
    assert first["among"] < 2.0  # among themselves it is about the choice alone (log 2 at a tie)


def continuation_logp(model: Any, tokenizer: Any, before: str, text: str) -> float:
    """log p(text | the question, then `before`), summed over the text's tokens."""
    item = encode_continuation(tokenizer, [{"role": "user", "content": "q"}], before, text, 256)
    ids = torch.tensor([item.input_ids])
    with torch.no_grad():
        logps = torch.log_softmax(model(input_ids=ids).logits[0, :-1].float(), dim=-1)
    labels = torch.tensor(item.labels[1:])
    trained = labels != -100
    return float(logps[trained].gather(-1, labels[trained].unsqueeze(-1)).sum())


def test_anchor_items_are_the_right_attempts_code_after_their_context() -> None:
    _, tokenizer = tiny_causal_lm()
    question = [{"role": "user", "content": "q"}]
    rows: list[dict[str, Any]] = [
        {"prompt": question, "prefix": "say: right code", "attempt": "right code", "passed": True},
        {"prompt": question, "prefix": "say: wrong code", "attempt": "wrong code", "passed": False},
        {"prompt": question, "prefix": "say: moved", "attempt": "elsewhere", "passed": True},  # not its prefix's end
        {"prompt": question, "prefix": "say: old row", "passed": True},  # made before rows kept the attempt
    ]
    items = anchor_items(tokenizer, rows, 64)
    assert list(items) == [0]
    trained = [token for token, label in zip(items[0].input_ids, items[0].labels, strict=True) if label != -100]
    assert tokenizer.decode(trained) == "right code"


def test_the_anchor_holds_the_right_attempts_code_while_the_decision_trains(tmp_path: Path) -> None:
    """With anchor_weight, a stage also raises log p(right attempt | its context); without, it does not aim to."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from veriloop.errors import ConfigError

    settings = tiny_home(tmp_path)
    folder, _ = prepare_model(settings, DECISION_TOKENS)
    question = [{"role": "user", "content": "q"}]
    rows: list[dict[str, Any]] = [
        {"prompt": question, "prefix": "say: right", "attempt": "right", "passed": True}
        | {"chosen": EOS_TOKEN, "rejected": REFINE_TOKEN},
        {"prompt": question, "prefix": "say: wrong", "attempt": "wrong", "passed": False}
        | {"chosen": REFINE_TOKEN, "rejected": EOS_TOKEN},
    ]
    data = write_rows(rows, tmp_path / "rows.jsonl", "jsonl")
    tokenizer: Any = AutoTokenizer.from_pretrained(folder)
    logp: dict[float, float] = {}
    for weight in (0.0, 1.0):
        spec = stage_spec(
            data,
            tmp_path / f"w{weight}",
            folder,
            steps=6,
            learning_rate=1e-2,
            decision_tokens=DECISION_TOKENS,
            anchor_weight=weight,
        )
        result = train_sft_dpo(spec, settings)
        assert result.metrics["anchored_rows"] == (1 if weight else 0)
        logp[weight] = continuation_logp(AutoModelForCausalLM.from_pretrained(result.path), tokenizer, "say: ", "right")
    assert logp[1.0] > logp[0.0] + 1.0
    without = [{key: value for key, value in row.items() if key != "attempt"} for row in rows]
    bare = write_rows(without, tmp_path / "bare.jsonl", "jsonl")
    spec = stage_spec(bare, tmp_path / "bare", folder, steps=1, learning_rate=1e-2, anchor_weight=1.0)
    with pytest.raises(ConfigError, match="anchor_weight needs rows that keep their `attempt`"):
        train_sft_dpo(spec, settings)
    none_right = write_rows([row | {"passed": False} for row in rows], tmp_path / "wrong.jsonl", "jsonl")
    spec = stage_spec(none_right, tmp_path / "wrong", folder, steps=1, learning_rate=1e-2, anchor_weight=1.0)
    assert train_sft_dpo(spec, settings).metrics["anchored_rows"] == 0  # nothing right to anchor: trains without
