"""GRPO core: group advantages and the clipped policy loss with its four aggregations (docs/architecture.md, GRPO core).

Pure tensor functions, no mrl imports. `policy_loss` equals TRL 1.16 `GRPOTrainer._compute_loss`
on the same inputs for loss types grpo, bnpo, dr_grpo and dapo, token and sequence level, with
and without the k3 KL term (tests/test_grpo_trl_equality.py proves it against TRL itself).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

# The aggregation modes, by TRL's loss_type names, each with what it computes (verl's mode names in brackets).
LOSS_TYPES = {
    "grpo": "mean over sequences of each sequence's token mean (seq-mean-token-mean)",
    "bnpo": "token sum over the batch / active tokens of the batch (token-mean)",
    "dr_grpo": "token sum / (sequences x max completion length) (seq-mean-token-sum-norm)",
    "dapo": "token sum / active tokens of the whole generation batch (token-mean, global)",
}
LEVELS = ("token", "sequence")


@dataclass(frozen=True)
class Surrogate:
    """The clipped surrogate's settings (policy_loss), each with its TRL GRPOConfig equivalent; GrpoConfig.surrogate
    builds them from a run's GRPO settings."""

    level: str = "token"
    """importance ratio level, one of LEVELS: token, or sequence (GSPO) (TRL's importance_sampling_level)"""
    loss_type: str = "grpo"
    """aggregation, one of LOSS_TYPES (TRL's loss_type)"""
    eps_low: float = 0.2
    """lower clip range: the ratio is clipped below at 1 - eps_low (TRL's epsilon)"""
    eps_high: float | None = None
    """upper clip range: clipped above at 1 + eps_high; None: eps_low (TRL's epsilon_high)"""
    beta: float = 0.0
    """k3 KL coefficient; > 0 needs policy_loss's ref_logp (TRL's beta)"""
    max_completion_length: int | None = None
    """dr_grpo's denominator, sequences x this length (TRL's max_completion_length)"""
    kl_bias_correction: bool = False
    """multiply k3 by the importance ratio (TRL's use_bias_correction_kl)"""


def group_advantages(rewards: Tensor, group_size: int, scale: str = "group", eps: float = 1e-4) -> Tensor:
    """A_i = (r_i - mean_g r) / (std_g r + eps), std unbiased as in TRL.

    rewards: (B,) with B = n_prompts * group_size, groups contiguous. Returns (B,).
    scale: "group" (per-group std), "batch" (one std over the whole batch, mean still per group,
    Lite-PPO), "none" (no division, Dr. GRPO).
    """
    if rewards.dim() != 1 or rewards.numel() % group_size:
        raise ValueError(
            f"rewards must be (n_prompts * group_size,), got {tuple(rewards.shape)} with group_size={group_size}")
    grouped = rewards.view(-1, group_size)
    centred = (grouped - grouped.mean(dim=1, keepdim=True)).view(-1)
    if scale == "group":
        return centred / (grouped.std(dim=1).repeat_interleave(group_size) + eps)
    if scale == "batch":
        return centred / (rewards.std() + eps)
    if scale == "none":
        return centred
    raise ValueError(f"scale={scale!r} is not allowed; expected one of ['group', 'batch', 'none']")


def k3_kl(logp: Tensor, ref_logp: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref): exp(ref - logp) - (ref - logp) - 1. Shapes (B, T)."""
    delta = ref_logp - logp
    return torch.exp(delta) - delta - 1


def log_importance_weights(logp: Tensor, old_logp: Tensor, mask: Tensor, level: str = "token") -> Tensor:
    """log w_it = logp_it - oldlogp_it (token) or log s_i = sum_t m_it (logp - oldlogp) / sum_t m_it (sequence).

    logp, old_logp, mask: (B, T). Returns (B, T) for token level, (B, 1) for sequence level.
    """
    log_ratio = logp - old_logp
    if level == "token":
        return log_ratio
    if level == "sequence":
        return ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    raise ValueError(f"level={level!r} is not allowed; expected one of ['token', 'sequence']")


def aggregate(per_token_loss: Tensor, mask: Tensor, loss_type: str, max_completion_length: int | None = None,
              num_items: float | None = None) -> Tensor:
    """Reduce a (B, T) per-token loss to a scalar.

    grpo: mean_i (sum_t m l / sum_t m); bnpo: sum m l / sum m; dr_grpo: sum m l / (B * max_completion_length);
    dapo: sum m l / num_items (active tokens of the whole generation batch; defaults to sum m).
    """
    masked = per_token_loss * mask
    if loss_type == "grpo":
        return (masked.sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return masked.sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        if max_completion_length is None:
            raise ValueError("loss_type='dr_grpo' needs max_completion_length")
        return masked.sum() / (per_token_loss.size(0) * max_completion_length)
    if loss_type == "dapo":
        denominator = mask.sum() if num_items is None else torch.as_tensor(num_items, dtype=masked.dtype,
                                                                           device=masked.device)
        return masked.sum() / denominator.clamp(min=1.0)
    raise ValueError(f"loss_type={loss_type!r} is not allowed; expected one of {list(LOSS_TYPES)}")


def policy_loss(logp: Tensor, old_logp: Tensor, advantages: Tensor, mask: Tensor, surrogate: Surrogate = Surrogate(),
                *, ref_logp: Tensor | None = None, num_items: float | None = None,
                sample_weight: Tensor | None = None) -> tuple[Tensor, dict]:
    """Clipped surrogate with optional k3 KL, aggregated as `surrogate.loss_type`.

    l_it = -rho_it min(w A_i, clip(w, 1 - eps_low, 1 + eps_high) A_i) + beta * k3_it (k3 times w when
    kl_bias_correction, TRL's use_bias_correction_kl), w the token ratio or the GSPO sequence ratio, rho the
    sampler correction's weight (mrl.core.mismatch.sampler_weights; 1 when sample_weight is None), applied where TRL
    applies it: to the surrogate, before the KL term. eps_low, eps_high, beta, kl_bias_correction: `surrogate`'s.
    logp, old_logp, mask, ref_logp: (B, T); advantages: (B,) or (B, T); sample_weight: (B, T) or (B, 1); num_items:
    dapo's denominator (see aggregate). Returns (loss, stats) where stats holds detached clip fractions and the
    mean KL.
    """
    eps_low, beta = surrogate.eps_low, surrogate.beta
    eps_high = eps_low if surrogate.eps_high is None else surrogate.eps_high
    if advantages.dim() == 1:
        advantages = advantages.unsqueeze(1)
    mask = mask.to(logp.dtype)
    ratio = torch.exp(log_importance_weights(logp, old_logp, mask, surrogate.level))
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    per_token_loss = -torch.min(ratio * advantages, clipped * advantages)
    if sample_weight is not None:
        per_token_loss = per_token_loss * sample_weight
    stats = {}
    if beta != 0.0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp")
        kl = k3_kl(logp, ref_logp)
        stats["kl"] = ((kl * mask).sum() / mask.sum().clamp(min=1.0)).detach()
        per_token_loss = per_token_loss + beta * (kl * ratio if surrogate.kl_bias_correction else kl)
    loss = aggregate(per_token_loss, mask, surrogate.loss_type, surrogate.max_completion_length, num_items)
    with torch.no_grad():
        low = ((ratio < 1 - eps_low) & (advantages < 0)).to(logp.dtype).expand_as(mask)
        high = ((ratio > 1 + eps_high) & (advantages > 0)).to(logp.dtype).expand_as(mask)
        active = mask.sum().clamp(min=1.0)
        stats["clip_low"] = (low * mask).sum() / active
        stats["clip_high"] = (high * mask).sum() / active
    return loss, stats
