"""New special tokens train in the head too, not only in the input embedding (`common.with_lora`).

ReVISE starts `[eos]` as a copy of the end-of-turn token. On a model whose head is not tied to its embedding,
PEFT's list form of `trainable_token_indices` left the copy's head row frozen, so the two tokens kept equal
logits and `p([eos])` stalled at one half (seen on Qwen2.5-Coder-0.5B: 0.4999 after every attempt).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen2Config, Qwen2ForCausalLM

from veriloop.training.common import TrainSpec, plain_model, token_rows, with_lora

COPY, ORIGINAL = 63, 5


def tiny_model(tied: bool) -> Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = Qwen2Config(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=tied,
    )
    model = Qwen2ForCausalLM(config)
    with torch.no_grad():  # the new token starts as a copy of an old one, in the embedding and in the head
        model.get_input_embeddings().weight[COPY] = model.get_input_embeddings().weight[ORIGINAL]
        model.get_output_embeddings().weight[COPY] = model.get_output_embeddings().weight[ORIGINAL]
    return model


def test_an_untied_head_trains_the_new_rows_and_a_tied_one_the_embedding_only() -> None:
    assert token_rows(tiny_model(tied=False), [COPY]) == {"model.embed_tokens": [COPY], "lm_head": [COPY]}
    assert token_rows(tiny_model(tied=True), [COPY]) == {"model.embed_tokens": [COPY]}
    assert token_rows(tiny_model(tied=False), []) is None


@pytest.mark.parametrize("tied", [False, True])
def test_a_copied_token_learns_to_win_over_its_original(tied: bool, tmp_path: Path) -> None:
    model = tiny_model(tied)
    head_before = model.get_output_embeddings().weight.detach().clone()
    spec = TrainSpec(method="test", data=tmp_path, out=tmp_path, lora=True, lora_rank=4)
    adapted = with_lora(model, spec, "CAUSAL_LM", token_ids=[COPY])
    optimiser = torch.optim.AdamW([p for p in adapted.parameters() if p.requires_grad], lr=0.05)
    ids = torch.randint(0, 60, (4, 6))
    labels = torch.full_like(ids, -100)
    labels[:, -1] = COPY  # the last position should predict the copy (the loss shifts labels left by one)
    ids[:, -1] = COPY
    for _ in range(30):
        adapted(input_ids=ids, labels=labels).loss.backward()
        optimiser.step()
        optimiser.zero_grad()
    merged = plain_model(adapted)
    with torch.no_grad():
        probs = merged(input_ids=ids[:, :-1]).logits[:, -1].softmax(-1)
    assert probs[:, COPY].min() > 0.6, "the copy's head row is frozen: it cannot rise above its original"
    assert (probs[:, COPY] - probs[:, ORIGINAL]).min() > 0.3
    changed = (merged.get_output_embeddings().weight - head_before).abs().sum(dim=1).nonzero().flatten().tolist()
    if tied:
        assert COPY in changed
    else:
        assert changed == [COPY], "only the new token's head row may move (LoRA never targets the head)"


def test_a_loop_state_saved_for_other_trainable_weights_is_not_resumed(tmp_path: Path) -> None:
    """A rerun into the same folder after the trainable set changed (here: the head rows joined) starts again."""
    from veriloop.training.common import run_loop

    ids = torch.randint(0, 60, (2, 6))
    spec = TrainSpec(method="test", data=tmp_path, out=tmp_path, lora=True, lora_rank=4, steps=2, save_every=1)

    def train(model: Qwen2ForCausalLM, token_ids: list[int]) -> int:
        adapted = with_lora(model, spec, "CAUSAL_LM", token_ids=token_ids)
        return run_loop(
            adapted, spec, lambda _: (adapted(input_ids=ids, labels=ids).loss, {}), learning_rate=1e-3
        ).resumed_from

    assert train(tiny_model(tied=False), []) == 0
    assert (tmp_path / "loop_state.pt").is_file()
    assert train(tiny_model(tied=False), []) == 2  # the same layout resumes (here: already finished)
    assert train(tiny_model(tied=False), [COPY]) == 0  # new trainable rows: a fresh start, not a crash
