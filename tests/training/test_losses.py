"""Each loss against a direct computation from its formula, and the identities between them."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from veriloop.training import losses

torch.manual_seed(0)


def _logps(n: int = 6) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return tuple(-torch.rand(n, dtype=torch.float64) * 50 for _ in range(4))  # type: ignore[return-value]


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_dpo_matches_its_formula_with_and_without_label_smoothing() -> None:
    pc, pr, rc, rr = _logps()
    for beta, eps in ((0.1, 0.0), (0.5, 0.3)):
        got = losses.dpo_loss(pc, pr, rc, rr, beta=beta, label_smoothing=eps)
        for i in range(len(pc)):
            h = float((pc[i] - rc[i]) - (pr[i] - rr[i]))
            want = -(1 - eps) * math.log(_sigmoid(beta * h)) - eps * math.log(_sigmoid(-beta * h))
            assert got[i].item() == pytest.approx(want, rel=1e-9)


def test_dpo_is_log2_at_the_reference() -> None:
    pc, pr, _, _ = _logps()
    assert torch.allclose(losses.dpo_loss(pc, pr, pc, pr), torch.full_like(pc, math.log(2)))


def test_dpo_refuses_label_smoothing_of_half_or_more() -> None:
    pc, pr, rc, rr = _logps()
    with pytest.raises(ValueError, match="label_smoothing"):
        losses.dpo_loss(pc, pr, rc, rr, label_smoothing=0.5)


def test_ipo_matches_its_formula() -> None:
    pc, pr, rc, rr = _logps()
    got = losses.ipo_loss(pc, pr, rc, rr, beta=0.2)
    for i in range(len(pc)):
        h = float((pc[i] - rc[i]) - (pr[i] - rr[i]))
        assert got[i].item() == pytest.approx((h - 1 / 0.4) ** 2, rel=1e-9)


def test_epa_matches_its_softmax_formula_with_masked_negatives() -> None:
    pos = torch.randn(4, dtype=torch.float64)
    strong = torch.randn(4, 3, dtype=torch.float64)
    weak = torch.randn(4, 5, dtype=torch.float64)
    smask = torch.tensor([[1, 1, 1], [1, 0, 0], [1, 1, 0], [0, 1, 1]], dtype=torch.bool)
    wmask = torch.rand(4, 5) > 0.3
    beta = 0.7
    got = losses.epa_loss(pos, strong, beta=beta, strong_mask=smask, weak_logratios=weak, weak_mask=wmask)
    for i in range(4):
        terms = [math.exp(beta * pos[i].item())]
        terms += [math.exp(beta * strong[i, k].item()) for k in range(3) if smask[i, k]]
        terms += [math.exp(beta * weak[i, k].item()) for k in range(5) if wmask[i, k]]
        assert got[i].item() == pytest.approx(-math.log(terms[0] / sum(terms)), rel=1e-9)


def test_epa_with_one_negative_is_its_pairwise_form_and_dpo() -> None:
    pc, pr, rc, rr = _logps()
    epa = losses.epa_loss(pc - rc, (pr - rr).unsqueeze(-1), beta=0.1)
    pairwise = -F.logsigmoid(0.1 * ((pc - rc) - (pr - rr)))
    assert torch.allclose(epa, pairwise)
    assert torch.allclose(epa, losses.dpo_loss(pc, pr, rc, rr, beta=0.1))


def test_more_negatives_raise_the_epa_loss() -> None:
    pos, strong = torch.zeros(2), torch.zeros(2, 1)
    one = losses.epa_loss(pos, strong)
    more = losses.epa_loss(pos, strong, weak_logratios=torch.zeros(2, 4))
    assert torch.allclose(one, torch.full((2,), math.log(2))) and torch.allclose(more, torch.full((2,), math.log(6)))


def test_ns_dpo_weights_follow_the_discount_and_average_one() -> None:
    t = torch.tensor([99, 98, 90, 50])
    raw = losses.ns_dpo_weights(t, current_time=100, gamma=0.9, normalise=False)
    assert torch.allclose(
        raw.double(), torch.tensor([0.9 ** (100 - x - 1) for x in (99, 98, 90, 50)], dtype=torch.float64)
    )
    normed = losses.ns_dpo_weights(t, current_time=100, gamma=0.9)
    assert normed.mean().item() == pytest.approx(1.0)
    assert torch.allclose(normed, raw * 4 / raw.sum())


def test_ns_dpo_matches_its_formula_and_gamma_one_is_dpo() -> None:
    pc, pr, rc, rr = _logps(5)
    t = torch.tensor([10, 40, 70, 90, 99])
    got = losses.ns_dpo_loss(pc, pr, rc, rr, t, current_time=100, beta=0.1, gamma=0.95)
    w = torch.tensor([0.95 ** (100 - x - 1) for x in t.tolist()], dtype=torch.float64)
    w = w * 5 / w.sum()
    assert torch.allclose(got, w * losses.dpo_loss(pc, pr, rc, rr, beta=0.1))
    same = losses.ns_dpo_loss(pc, pr, rc, rr, t, current_time=100, beta=0.1, gamma=1.0)
    assert torch.allclose(same, losses.dpo_loss(pc, pr, rc, rr, beta=0.1))


def test_label_smoothed_ce_matches_the_formula_and_pytorch() -> None:
    logits = torch.randn(2, 5, 11, dtype=torch.float64)
    labels = torch.randint(0, 11, (2, 5))
    labels[0, :2] = losses.IGNORE_INDEX
    eps = 0.1
    got = losses.label_smoothed_cross_entropy(logits, labels, epsilon=eps)
    total, count = 0.0, 0
    for b in range(2):
        for t in range(5):
            y = int(labels[b, t])
            if y == losses.IGNORE_INDEX:
                continue
            z = logits[b, t]
            lse = torch.logsumexp(z, 0).item()
            total += (1 - eps) * (lse - z[y].item()) + eps * (lse - z.mean().item())
            count += 1
    assert got.item() == pytest.approx(total / count, rel=1e-6)
    torch_ls = F.cross_entropy(logits.reshape(-1, 11), labels.reshape(-1), label_smoothing=eps, ignore_index=-100)
    assert got.item() == pytest.approx(torch_ls.item(), rel=1e-6)


def test_label_smoothing_zero_is_plain_cross_entropy() -> None:
    logits = torch.randn(3, 4, 7)
    labels = torch.randint(0, 7, (3, 4))
    got = losses.label_smoothed_cross_entropy(logits, labels, epsilon=0.0)
    assert got.item() == pytest.approx(F.cross_entropy(logits.reshape(-1, 7), labels.reshape(-1)).item(), rel=1e-6)


def test_label_smoothed_ce_of_all_ignored_is_zero() -> None:
    labels = torch.full((1, 3), losses.IGNORE_INDEX)
    assert losses.label_smoothed_cross_entropy(torch.randn(1, 3, 5), labels).item() == 0.0


def test_sequence_logps_sum_the_response_tokens() -> None:
    logits = torch.randn(1, 4, 6, dtype=torch.float64)
    labels = torch.tensor([[losses.IGNORE_INDEX, 2, 5, losses.IGNORE_INDEX]])
    lp = torch.log_softmax(logits, -1)
    want = lp[0, 0, 2] + lp[0, 1, 5]
    assert losses.sequence_logps(logits, labels).item() == pytest.approx(want.item())


def test_bradley_terry_with_l2_matches_its_formula() -> None:
    rc, rr = torch.randn(8, dtype=torch.float64), torch.randn(8, dtype=torch.float64)
    got = losses.bradley_terry_loss(rc, rr, l2=1e-2)
    want = sum(-math.log(_sigmoid(float(a - b))) for a, b in zip(rc, rr, strict=True)) / 8
    want += 1e-2 * (sum(float(x) ** 2 for x in rc) + sum(float(x) ** 2 for x in rr)) / 16
    assert got.item() == pytest.approx(want, rel=1e-9)


def test_bce_reward_loss_matches_its_formula() -> None:
    r = torch.randn(5, dtype=torch.float64)
    y = torch.tensor([1, 0, 1, 1, 0])
    want = (
        -sum(
            math.log(_sigmoid(float(x))) if int(lab) else math.log(1 - _sigmoid(float(x)))
            for x, lab in zip(r, y, strict=True)
        )
        / 5
    )
    assert losses.bce_reward_loss(r, y).item() == pytest.approx(want, rel=1e-9)


def test_qrm_pair_loss_matches_its_formula() -> None:
    sc, sr = torch.randn(3, 6, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    mc, mr = torch.rand(3, 6) > 0.3, torch.rand(3, 6) > 0.3
    mc[:, 0] = mr[:, 0] = True
    got = losses.qrm_pair_loss(sc, mc, sr, mr, beta=0.2, gamma=2.0)
    for i in range(3):
        s_c = sc[i][mc[i]].mean().item()
        s_r = sr[i][mr[i]].mean().item()
        assert got[i].item() == pytest.approx(-math.log(_sigmoid(0.2 * (s_c - s_r) - 2.0)), rel=1e-9)


def test_qrm_token_rewards_rescore_eos_and_divide_by_std() -> None:
    scores = torch.tensor([[1.0, 2.0, 3.0, 9.0], [4.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]], dtype=torch.bool)
    got = losses.qrm_token_rewards(scores, mask)
    raw = torch.tensor([[1.0, 2.0, 2.0, 0.0], [4.0, 2.0, 0.0, 0.0]], dtype=torch.float64)
    std = raw[mask].std()
    assert torch.allclose(got, raw / (std + 1e-6))


def test_reinforce_loss_matches_its_formula_and_its_gradient() -> None:
    logps = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    rewards = torch.randn(2, 3, dtype=torch.float64)
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]], dtype=torch.bool)
    loss = losses.reinforce_loss(logps, rewards, mask)
    assert loss.item() == pytest.approx(-(rewards * logps * mask)[mask].sum().item() / 5)
    (grad,) = torch.autograd.grad(loss, logps)
    assert torch.allclose(grad, -(rewards * mask) / 5)
