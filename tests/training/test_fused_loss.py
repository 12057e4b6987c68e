"""The fused linear cross-entropy in training: the same loss and gradients as the logits path, and wired into SFT."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import torch

from veriloop.testing import tiny_causal_lm
from veriloop.training import losses
from veriloop.training.fused_loss import fused_causal_lm_loss, use_fused_loss
from veriloop.training.trl_trainers import _fused_sft_trainer


def batch() -> dict[str, torch.Tensor]:
    """Two rows, right-padded, with the prompt part of each ignored (completion-only SFT)."""
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 259, (2, 24), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 18:] = 0
    ids[1, 18:] = 0
    labels = ids.clone()
    labels[0, :10] = losses.IGNORE_INDEX
    labels[1, :6] = losses.IGNORE_INDEX
    labels[1, 18:] = losses.IGNORE_INDEX
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


def naive_loss(model: Any, inputs: dict[str, torch.Tensor], smoothing: float) -> torch.Tensor:
    logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
    return losses.label_smoothed_cross_entropy(logits[:, :-1], inputs["labels"][:, 1:], epsilon=smoothing)


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
def test_fused_loss_and_gradients_equal_the_logits_path_on_the_tiny_llama(smoothing: float) -> None:
    model, _ = tiny_causal_lm(seed=0)
    inputs = batch()
    naive = naive_loss(model, inputs, smoothing)
    naive.backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    fused = fused_causal_lm_loss(model, inputs, label_smoothing=smoothing)
    fused.backward()
    assert abs(fused.item() - naive.item()) < 1e-5
    for name, parameter in model.named_parameters():
        assert parameter.grad is not None
        torch.testing.assert_close(parameter.grad, expected[name], atol=1e-5, rtol=1e-4, msg=name)


def test_fused_loss_divides_by_the_trainers_token_count() -> None:
    model, _ = tiny_causal_lm(seed=0)
    inputs = batch()
    trained = int((inputs["labels"][:, 1:] != losses.IGNORE_INDEX).sum())
    with torch.no_grad():
        mean = fused_causal_lm_loss(model, inputs, label_smoothing=0.1)
        summed = fused_causal_lm_loss(model, inputs, label_smoothing=0.1, num_items_in_batch=2 * trained)
    assert abs(summed.item() - mean.item() / 2) < 1e-5


def test_fused_option_defaults_to_label_smoothing() -> None:
    assert use_fused_loss({}, 0.1) and not use_fused_loss({}, 0.0)
    assert use_fused_loss({"fused_ce": "true"}, 0.0) and not use_fused_loss({"fused_ce": "false"}, 0.1)


def test_sft_trainer_with_the_fused_loss_matches_trls_label_smoothing(tmp_path: Path) -> None:
    """TRL's own label-smoothed loss (full logits) and the fused trainer's loss agree on the same batch."""
    trl = importlib.import_module("trl")
    datasets = importlib.import_module("datasets")
    model, tokenizer = tiny_causal_lm(seed=0)
    rows = [
        {"prompt": "def add(a, b):\n", "completion": "    return a + b\n"},
        {"prompt": "def neg(x):\n", "completion": "    return -x\n"},
    ]
    config = trl.SFTConfig(
        output_dir=str(tmp_path / "sft"),
        max_steps=1,
        per_device_train_batch_size=2,
        use_cpu=True,
        bf16=False,
        report_to=[],
        completion_only_loss=True,
        label_smoothing_factor=0.1,
        disable_tqdm=True,
        dataloader_num_workers=0,
    )
    dataset = datasets.Dataset.from_list(rows)
    reference = trl.SFTTrainer(model=model, args=config, train_dataset=dataset, processing_class=tokenizer)
    inputs = next(iter(reference.get_train_dataloader()))
    assert bool((inputs["labels"] == losses.IGNORE_INDEX).any())  # the prompt tokens are not trained
    config.label_smoothing_factor = 0.0
    fused_trainer = _fused_sft_trainer(trl.SFTTrainer, 0.1)(
        model=model, args=config, train_dataset=dataset, processing_class=tokenizer
    )
    with torch.no_grad():
        expected = reference.compute_loss(model, dict(inputs))
        got = fused_trainer.compute_loss(model, dict(inputs))
    assert abs(got.item() - expected.item()) < 1e-5
    fused_trainer.train()
    assert fused_trainer.state.global_step == 1 and all(
        torch.isfinite(torch.tensor(entry["loss"])) for entry in fused_trainer.state.log_history if "loss" in entry
    )


def test_fused_loss_through_a_lora_wrapper_equals_the_logits_path() -> None:
    """LoRA trainers hand a PeftModel: the fused loss must run the adapted decoder, not the bare one."""
    peft = importlib.import_module("peft")
    model, _ = tiny_causal_lm(seed=0)
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules="all-linear", init_lora_weights=False))
    inputs = batch()
    naive = naive_loss(wrapped, inputs, 0.1)
    naive.backward()
    expected = {name: p.grad.clone() for name, p in wrapped.named_parameters() if p.grad is not None}
    assert expected and all("lora" in name for name in expected)
    wrapped.zero_grad()
    fused = fused_causal_lm_loss(wrapped, inputs, label_smoothing=0.1)
    fused.backward()
    assert abs(fused.item() - naive.item()) < 1e-5
    for name, grad in expected.items():
        torch.testing.assert_close(wrapped.get_parameter(name).grad, grad, atol=1e-5, rtol=1e-4, msg=name)


def test_fused_sequence_logps_equal_the_logits_path_with_gradients() -> None:
    """The preference loop's `fused_ce=true`: per-sequence log-probs and their gradients match."""
    from veriloop.training.common import Encoded
    from veriloop.training.fused_loss import fused_sequence_logps
    from veriloop.training.loops import _policy_logps

    model, _ = tiny_causal_lm(seed=0)
    inputs = batch()
    naive = losses.sequence_logps(model(input_ids=inputs["input_ids"]).logits, inputs["labels"])
    fused = fused_sequence_logps(model, {"input_ids": inputs["input_ids"], "labels": inputs["labels"]})
    torch.testing.assert_close(fused, naive, atol=1e-5, rtol=1e-5)
    weights = torch.tensor([1.0, -2.0])
    (naive * weights).sum().backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    (fused * weights).sum().backward()
    for name, parameter in model.named_parameters():
        # sums over ~20 tokens of the tiny llama's large logits: gradients reach ~75, so 1e-5 is relative to them
        scale = float(expected[name].abs().max())
        torch.testing.assert_close(parameter.grad, expected[name], atol=1e-5 * scale, rtol=1e-4, msg=name)
    items = [Encoded([5, 6, 7, 8, 9], [-100, -100, 7, 8, 9]), Encoded([5, 6, 7], [-100, 6, 7])]
    with torch.no_grad():
        torch.testing.assert_close(_policy_logps(model, items, 0, fused=True), _policy_logps(model, items, 0))


@pytest.mark.parametrize("adapted", [False, True])
def test_labelled_token_logps_equal_the_full_logits_with_gradients(adapted: bool) -> None:
    """ReVISE's stage loss: per-token log-probs from the head run at trained positions only, in chunks
    recomputed on backward, equal the full-logits path, gradients included (LoRA and trainable token rows too)."""
    from veriloop.training.fused_loss import labelled_token_logps

    model: Any
    model, _ = tiny_causal_lm(seed=0)
    if adapted:
        peft = importlib.import_module("peft")
        config = peft.LoraConfig(
            r=4, target_modules="all-linear", trainable_token_indices=[5, 7], init_lora_weights=False
        )
        model = peft.get_peft_model(model, config)
    inputs = batch()
    inputs["labels"][0, 12] = 5  # a trainable token row is a label
    logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits
    naive, naive_mask = losses.token_logps(logits, inputs["labels"])
    weights = torch.linspace(-1.0, 2.0, naive.shape[1])
    (naive * weights).sum().backward()
    expected = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    assert expected
    model.zero_grad()
    got, mask = labelled_token_logps(model, inputs, chunk_tokens=5)
    assert torch.equal(mask, naive_mask)
    torch.testing.assert_close(got, naive, atol=1e-5, rtol=1e-5)
    (got * weights).sum().backward()
    for name, grad in expected.items():  # gradients reach ~100 here: float32 summation order shows at 1e-5
        torch.testing.assert_close(model.get_parameter(name).grad, grad, atol=2e-4, rtol=1e-4, msg=name)
    with torch.no_grad():
        torch.testing.assert_close(labelled_token_logps(model, inputs)[0], naive.detach(), atol=1e-5, rtol=1e-5)


def test_labels_among_choices_are_scored_against_the_choices_only() -> None:
    """ReVISE's decisions are read as the likelier of [eos]/[refine]: a label that is one of `choices` gets its
    log-prob among them (a two-way softmax of their logits), every other label keeps the full vocabulary, and the
    gradient of a choice reaches no other token's head row."""
    from veriloop.training.fused_loss import labelled_token_logps

    model: Any
    model, _ = tiny_causal_lm(seed=0)
    inputs = batch()
    inputs["labels"][0, 12] = 5
    inputs["labels"][1, 6] = 7
    logits = model(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"]).logits.detach()
    naive, mask = losses.token_logps(logits, inputs["labels"])
    got, got_mask = labelled_token_logps(model, inputs, chunk_tokens=3, choices=[7, 5])
    assert torch.equal(got_mask, mask)
    two_way = torch.log_softmax(logits[:, :, [5, 7]].float(), dim=-1)
    torch.testing.assert_close(got[0, 11], two_way[0, 11, 0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got[1, 5], two_way[1, 5, 1], atol=1e-5, rtol=1e-5)
    assert float(got[0, 11].detach()) > float(naive[0, 11])  # likelier among two than among all
    others = mask.clone()
    others[0, 11] = others[1, 5] = False
    torch.testing.assert_close(got[others], naive[others], atol=1e-5, rtol=1e-5)

    model.zero_grad()
    only_choices = torch.zeros_like(got)
    only_choices[0, 11] = only_choices[1, 5] = 1.0
    (got * only_choices).sum().backward()
    head = model.get_output_embeddings().weight.grad
    assert head is not None and float(head[[5, 7]].abs().sum()) > 0
    untouched = [row for row in range(head.shape[0]) if row not in (5, 7)]
    assert float(head[untouched].abs().max()) == 0.0
