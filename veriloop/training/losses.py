"""Preference, reward and SFT losses as plain tensor functions, each with the equation it computes.

They take per-sequence (or per-token) quantities that a trainer already has (summed log-probs of a
response under the policy and the reference, reward scores), so every formula is testable on random
tensors without a model. Per-example losses come back unreduced unless the docstring says otherwise,
so trainers can weight, mask or log them before taking the mean.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

IGNORE_INDEX = -100
"""Label value that marks a position as not trained on (prompt tokens, padding), as in PyTorch and HF."""


def preference_margin(
    policy_chosen: Tensor, policy_rejected: Tensor, ref_chosen: Tensor, ref_rejected: Tensor
) -> Tensor:
    """h = [log pi(y_w|x) - log pi_ref(y_w|x)] - [log pi(y_l|x) - log pi_ref(y_l|x)], per example."""
    return (policy_chosen - ref_chosen) - (policy_rejected - ref_rejected)


def dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    *,
    beta: float = 0.1,
    label_smoothing: float = 0.0,
) -> Tensor:
    """DPO, sigmoid form (Rafailov et al. 2023), with cDPO's conservative label smoothing eps:

        L_i = -(1 - eps) * log sigma(beta * h_i) - eps * log sigma(-beta * h_i)

    where h_i is `preference_margin`. eps = 0 is plain DPO; eps > 0 treats each label as flipped with
    probability eps (used with 0.3 by the reward-augmented recipes for Qwen2 and Gemma-2).
    """
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5), not {label_smoothing}")
    logits = beta * preference_margin(policy_chosen, policy_rejected, ref_chosen, ref_rejected)
    return -(1.0 - label_smoothing) * F.logsigmoid(logits) - label_smoothing * F.logsigmoid(-logits)


def ipo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    *,
    beta: float = 0.1,
) -> Tensor:
    """IPO (Azar et al. 2023): a squared loss that regresses the margin to a finite target,

        L_i = (h_i - 1 / (2 * beta))^2

    so the policy cannot push the margin to infinity on deterministic preferences as DPO can.
    """
    return (preference_margin(policy_chosen, policy_rejected, ref_chosen, ref_rejected) - 1.0 / (2.0 * beta)) ** 2


def epa_loss(
    positive_logratio: Tensor,
    strong_logratios: Tensor,
    *,
    beta: float = 0.1,
    strong_mask: Tensor | None = None,
    weak_logratios: Tensor | None = None,
    weak_mask: Tensor | None = None,
) -> Tensor:
    """EPA, Energy Preference Alignment (Hong et al., ICML 2025), an InfoNCE over several negatives:

        r(x, y) = beta * [log pi(y|x) - log pi_ref(y|x)]
        L(x) = -log [ exp r(x, y+) / ( exp r(x, y+) + sum_{y in S-(x)} exp r(x, y) + sum_{y in W-(x)} exp r(x, y) ) ]

    S- are strong negatives (the rejected responses of x), W- weak ones (responses never preferred
    under x, e.g. other prompts' responses scored under x). Shapes: positive [B], strong [B, K],
    weak [B, W]; masks (True = present) let prompts have different numbers of negatives. With one
    strong negative and no weak ones this is exactly DPO: -log sigma(r+ - r-).
    """
    logits = [beta * positive_logratio.unsqueeze(-1)]
    strong = beta * strong_logratios
    if strong_mask is not None:
        strong = strong.masked_fill(~strong_mask.bool(), float("-inf"))
    logits.append(strong)
    if weak_logratios is not None:
        weak = beta * weak_logratios
        if weak_mask is not None:
            weak = weak.masked_fill(~weak_mask.bool(), float("-inf"))
        logits.append(weak)
    everything = torch.cat(logits, dim=-1)
    return torch.logsumexp(everything, dim=-1) - everything[..., 0]


def ns_dpo_weights(timesteps: Tensor, *, current_time: float, gamma: float = 0.95, normalise: bool = True) -> Tensor:
    """NS-DPO's per-example discount (Son et al., ICML 2025): w_i = gamma^(T - t_i - 1).

    With `normalise`, the weights are rescaled to average 1 over the batch (w_i * B / sum_j w_j), so
    the discount changes how examples share the gradient but not its overall scale. The reference code
    normalises to sum 1 and then takes a mean, which is the same up to the constant factor 1/B; averaging
    to 1 keeps gamma = 1 equal to DPO exactly.
    """
    exponent = current_time - timesteps.to(torch.float64) - 1.0
    weights = torch.pow(torch.tensor(gamma, dtype=torch.float64), exponent)
    if normalise:
        weights = weights * weights.numel() / weights.sum()
    return weights.to(torch.get_default_dtype())


def ns_dpo_loss(
    policy_chosen: Tensor,
    policy_rejected: Tensor,
    ref_chosen: Tensor,
    ref_rejected: Tensor,
    timesteps: Tensor,
    *,
    current_time: float,
    beta: float = 0.1,
    gamma: float = 0.95,
    normalise: bool = True,
) -> Tensor:
    """NS-DPO (Son et al., ICML 2025): DPO with older preferences discounted,

        w_i = gamma^(T - t_i - 1),  w~_i = w_i * B / sum_j w_j,  L_i = -w~_i * log sigma(beta * h_i)

    t_i is the pair's timestamp (an integer step, e.g. the export's day index) and T the current time.
    gamma = 1 gives plain DPO.
    """
    weights = ns_dpo_weights(timesteps, current_time=current_time, gamma=gamma, normalise=normalise)
    base = dpo_loss(policy_chosen, policy_rejected, ref_chosen, ref_rejected, beta=beta)
    return weights.to(base.dtype) * base


def label_smoothed_cross_entropy(
    logits: Tensor, labels: Tensor, *, epsilon: float = 0.1, ignore_index: int = IGNORE_INDEX
) -> Tensor:
    """Label-smoothed cross-entropy for calibrated SFT (Huang et al., ICML 2025), PyTorch's convention:

        L = (1 - eps) * (lse - z_y) + eps * (lse - (1/V) * sum_j z_j),   lse = logsumexp(z)

    averaged over the positions whose label is not `ignore_index`. eps = 0 is plain cross-entropy.
    Returns a scalar (0 when every position is ignored).
    """
    flat = logits.reshape(-1, logits.shape[-1]).float()
    target = labels.reshape(-1)
    keep = target != ignore_index
    if not bool(keep.any()):
        return flat.sum() * 0.0
    flat, target = flat[keep], target[keep]
    lse = torch.logsumexp(flat, dim=-1)
    z_y = flat.gather(-1, target.unsqueeze(-1)).squeeze(-1)
    smooth = lse - flat.mean(dim=-1)
    return ((1.0 - epsilon) * (lse - z_y) + epsilon * smooth).mean()


def token_logps(logits: Tensor, labels: Tensor, *, ignore_index: int = IGNORE_INDEX) -> tuple[Tensor, Tensor]:
    """Per-token log pi(label_t | prefix) for next-token logits, and the mask of trained positions.

    `logits[:, t]` predicts `labels[:, t + 1]`; the result has shape [B, T - 1] and is 0 where masked.
    """
    shifted_logits = logits[:, :-1].float()
    shifted = labels[:, 1:]
    mask = shifted != ignore_index
    safe = shifted.masked_fill(~mask, 0)
    logps = torch.log_softmax(shifted_logits, dim=-1).gather(-1, safe.unsqueeze(-1)).squeeze(-1)
    return logps * mask, mask


def sequence_logps(logits: Tensor, labels: Tensor, *, ignore_index: int = IGNORE_INDEX) -> Tensor:
    """log pi(y|x) = sum over response tokens of log pi(y_t | x, y_<t), per sequence."""
    logps, _ = token_logps(logits, labels, ignore_index=ignore_index)
    return logps.sum(dim=-1)


def bradley_terry_loss(chosen_rewards: Tensor, rejected_rewards: Tensor, *, l2: float = 1e-3) -> Tensor:
    """Bradley-Terry reward model loss with muCode's L2 reward regulariser (scalar):

        L = -mean_i log sigma(r_c,i - r_r,i) + l2 * mean(r^2)

    where the mean of r^2 runs over the chosen and rejected rewards together; the penalty keeps the
    scores near 0, since BT alone only fixes their differences.
    """
    pairwise = -F.logsigmoid(chosen_rewards - rejected_rewards).mean()
    return pairwise + l2 * torch.cat([chosen_rewards, rejected_rewards]).pow(2).mean()


def bce_reward_loss(rewards: Tensor, labels: Tensor) -> Tensor:
    """Pointwise verifier loss on unpaired data: L = mean BCE(sigma(r_i), label_i) (scalar)."""
    return F.binary_cross_entropy_with_logits(rewards, labels.to(rewards.dtype))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of `values` over the positions where `mask` is true, per row (0 for an empty row)."""
    weights = mask.to(values.dtype)
    return (values * weights).sum(dim=-1) / weights.sum(dim=-1).clamp_min(1.0)


def qrm_pair_loss(
    chosen_scores: Tensor,
    chosen_mask: Tensor,
    rejected_scores: Tensor,
    rejected_mask: Tensor,
    *,
    beta: float = 0.2,
    gamma: float = 2.0,
) -> Tensor:
    """Q-RM's pairwise objective (Chen et al., ICML 2025, as implemented), per pair:

        S = mean_t s_t over response tokens,   L = -log sigma(beta * (S_c - S_r) - gamma)

    s_t is the model's scalar score at each response position; gamma is a margin. Trained only from
    preference pairs, the per-token scores become a token-level reward (a stand-in for Q - V).
    """
    margin = masked_mean(chosen_scores, chosen_mask) - masked_mean(rejected_scores, rejected_mask)
    return -F.logsigmoid(beta * margin - gamma)


def qrm_token_rewards(scores: Tensor, mask: Tensor, *, rescore_eos: bool = True, eps: float = 1e-6) -> Tensor:
    """Q-RM token rewards for REINFORCE, as in the paper's code:

        r_t = s_t;  r_last = mean_t s_t (re-scored EOS);  r_t <- r_t / std({r_t : valid t})

    Rewards are divided by their std over all valid tokens of the batch, not centred (the paper found
    that better). Masked positions come back 0.
    """
    rewards = scores * mask
    if rescore_eos:
        lengths = mask.long().sum(dim=-1)
        rows = torch.nonzero(lengths > 0).squeeze(-1)
        if rows.numel():
            last = torch.stack([torch.nonzero(mask[row]).max() for row in rows])
            rewards = rewards.clone()
            rewards[rows, last] = masked_mean(scores, mask)[rows]
    valid = rewards[mask.bool()]
    if valid.numel() > 1:
        rewards = rewards / (valid.std() + eps)
    return rewards * mask


def reinforce_loss(logps: Tensor, rewards: Tensor, mask: Tensor) -> Tensor:
    """Token-level REINFORCE (scalar): L = -mean over valid tokens of r_t * log pi(a_t | s_t).

    The rewards are constants (detached), e.g. `qrm_token_rewards`.
    """
    weights = mask.to(logps.dtype)
    return -(rewards.detach() * logps * weights).sum() / weights.sum().clamp_min(1.0)


PREFERENCE_LOSSES = ("sigmoid", "ipo", "epa", "ns_dpo")
"""Names `train dpo --loss` accepts."""
