"""ReVISE's stage trainer: which rows each step sees (the reference pass covers exactly these), and how a row's
decision tokens weigh in its SFT loss."""

from __future__ import annotations

import torch

from veriloop.training.revise import decision_weighted_nll, step_batches


def test_steps_walk_one_shuffle_without_repeats_until_it_wraps() -> None:
    batches = step_batches(count=10, steps=3, batch_size=3, seed=0)
    flat = [index for batch in batches for index in batch]
    assert [len(batch) for batch in batches] == [3, 3, 3]
    assert len(set(flat)) == 9  # nine distinct rows before the walk wraps
    assert step_batches(count=10, steps=3, batch_size=3, seed=0) == batches  # seeded


def test_few_steps_visit_few_rows_and_many_steps_visit_all() -> None:
    assert len({i for batch in step_batches(130, 6, 4, seed=1) for i in batch}) == 24
    assert {i for batch in step_batches(7, 5, 4, seed=1) for i in batch} == set(range(7))


def test_a_batch_larger_than_the_rows_takes_each_row_once() -> None:
    assert [sorted(batch) for batch in step_batches(3, 2, 8, seed=0)] == [[0, 1, 2], [0, 1, 2]]


def _nll(logps: list[list[float]], trained: list[list[bool]], decisions: list[list[bool]]) -> torch.Tensor:
    return decision_weighted_nll(torch.tensor(logps), torch.tensor(trained), torch.tensor(decisions))


def test_without_decision_tokens_the_sft_loss_is_the_plain_per_token_mean() -> None:
    loss = _nll([[-1.0, -3.0, -9.0]], [[True, True, False]], [[False, False, False]])
    assert torch.allclose(loss, torch.tensor([2.0]))  # the untrained (padding) position is ignored


def test_a_decision_weighs_the_same_beside_a_long_fix_as_alone() -> None:
    """`[refine]` opening a 99-token fix moves the loss as much as a lone `[eos]` does (not 1/100 of it)."""
    fix = [-0.5] * 99
    logps = torch.tensor([[-2.0, *fix], [-2.0] + [0.0] * 99], requires_grad=True)
    trained = torch.tensor([[True] * 100, [True] + [False] * 99])
    decisions = torch.zeros(2, 100, dtype=torch.bool)
    decisions[:, 0] = True
    loss = decision_weighted_nll(logps, trained, decisions)
    assert torch.allclose(loss, torch.tensor([2.5, 2.0]))
    loss.sum().backward()
    assert logps.grad is not None
    assert logps.grad[0, 0] == logps.grad[1, 0] == -1.0
    assert torch.allclose(logps.grad[0, 1:], torch.full((99,), -1 / 99))


def test_two_decisions_in_a_row_share_the_decision_weight() -> None:
    """In `[refine] fix [eos]` both decisions form one mean, the fix another."""
    loss = _nll([[-1.0, -0.2, -0.4, -3.0]], [[True] * 4], [[True, False, False, True]])
    assert torch.allclose(loss, torch.tensor([2.0 + 0.3]))
