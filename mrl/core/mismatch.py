"""The sampler/trainer mismatch: what the samples' distribution (the bf16 sampler) and the trained model (fp32,
the old log-probs of the ratio) disagree on, measured every step, and TRL's importance-sampling correction for it.

Under `PlacementConfig.dtype: bfloat16` the completions come from a bf16 copy of the model, while the ratio's old
log-probs come from the fp32 model, so the ratio starts at 1 although the samples were drawn from another
distribution. TRL measures and corrects exactly this for vLLM (GRPOTrainer, `vllm_importance_sampling_correction`);
the rules and the logged statistics here are TRL 1.16's, so a run here and a TRL run log the same quantities:

    delta_t = |log pi_train(y_t) - log pi_sampler(y_t)|            mean and max over completion tokens
    w_t = pi_train(y_t) / pi_sampler(y_t)                            token modes
    w = exp(sum_t log pi_train(y_t) - log pi_sampler(y_t))           sequence modes, one weight per sequence
    *_truncate: w clamped to [clip_min, clip_max];  *_mask: w set to 0 outside [clip_min, clip_max]

and the weight multiplies the clipped surrogate of every token before the KL term (mrl.core.grpo.policy_loss). Hand-
written because TRL computes it inside its trainer's `_generate_and_score_completions`, with no function to call.
"""
from __future__ import annotations

import math

import torch
from torch import Tensor

SAMPLER_CORRECTIONS = ("off", "token_truncate", "token_mask", "sequence_truncate", "sequence_mask")
"""GrpoConfig.sampler_correction: off, or TRL's vllm_importance_sampling_mode values"""


def log_ratio(train_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> Tensor:
    """log pi_train - log pi_sampler per completion token, 0 where masked or where the sampler gave no log-prob
    (NaN: TRL's rule, ratio exactly 1). All (B, T); returns (B, T)."""
    return torch.nan_to_num((train_logp - sampler_logp) * mask, nan=0.0)


def mismatch_stats(train_logp: Tensor, sampler_logp: Tensor, mask: Tensor) -> dict[str, float]:
    """TRL's sampling/sampling_logp_difference: the mean and max of |log pi_train - log pi_sampler| over the
    completion tokens (NaN tokens left out, as TRL does: counting them as 0 would understate it). (B, T) each."""
    delta = (train_logp - sampler_logp).abs()
    delta = delta[mask.bool() & ~torch.isnan(delta)]
    if delta.numel() == 0:
        return {"sampler_logp_diff_mean": 0.0, "sampler_logp_diff_max": 0.0}
    return {"sampler_logp_diff_mean": float(delta.mean()), "sampler_logp_diff_max": float(delta.max())}


def sampler_weights(train_logp: Tensor, sampler_logp: Tensor, mask: Tensor, mode: str,
                    clip_min: float | None = None, clip_max: float | None = 3.0) -> Tensor:
    """The importance weight pi_train / pi_sampler of TRL's `mode` (SAMPLER_CORRECTIONS but off): (B, T) for the
    token modes, (B, 1) for the sequence modes (the sequence's summed log-ratio), truncated to [clip_min, clip_max]
    or zeroed outside it (a bound None is open). Detached: a weight, not a path for the gradient."""
    if mode not in SAMPLER_CORRECTIONS[1:]:
        raise ValueError(f"sampler_weights: mode {mode!r} is not one of {list(SAMPLER_CORRECTIONS[1:])}")
    diff = log_ratio(train_logp.detach(), sampler_logp.detach(), mask)
    if mode.startswith("sequence"):
        diff = diff.sum(dim=-1, keepdim=True)
    weight = torch.exp(diff)
    if mode.endswith("truncate"):
        return weight if clip_min is None and clip_max is None else torch.clamp(weight, min=clip_min, max=clip_max)
    low = -math.inf if clip_min is None else clip_min
    high = math.inf if clip_max is None else clip_max
    return weight.masked_fill((weight < low) | (weight > high), 0.0)


def weight_stats(weight: Tensor, mask: Tensor) -> dict[str, float]:
    """TRL's sampling/importance_sampling_ratio min, mean and max: over the completion tokens for a (B, T) weight,
    over the sequences for a (B, 1) one."""
    flat = weight.flatten() if weight.size(-1) == 1 else weight[mask.bool()]
    if flat.numel() == 0:
        return {"sampler_weight_min": 0.0, "sampler_weight_mean": 0.0, "sampler_weight_max": 0.0}
    return {"sampler_weight_min": float(flat.min()), "sampler_weight_mean": float(flat.mean()),
            "sampler_weight_max": float(flat.max())}
