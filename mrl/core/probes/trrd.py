"""trrd (trust region level, a reconstruction [R] of RLAD's Trust Region Ratio Distillation, "Reinforcement-aware
Knowledge Distillation for LLM Reasoning", arXiv 2602.22495, eq. 3-4; no public code): GRPO on the learner's own
samples with the token ratio anchored to a mixture of the old policy and a teacher.

    log r_t = alpha (log pi_S - log pi_S,old) + (1 - alpha) clamp(log pi_S - log pi_T, -c, c)         (eq. 3, App. B)
    L       = the GRPO clipped surrogate (GrpoConfig's eps, aggregation, beta) with r_t for the token ratio   (eq. 4)

alpha = 1 is GRPO exactly. The teacher is the next policy of the run at its starting checkpoint, fixed, read across
tokenizers through THL (mrl.runtime.teacher). The clamp's gradient, the teacher's choice and what is reconstructed:
docs/architecture.md, The probes (trrd).
"""
from __future__ import annotations

import torch
from torch import Tensor

from mrl.core.batch import Learner, RolloutBatch
from mrl.core.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.core.probes.terms import own_term
from mrl.core.validation import Fraction, Positive, config_dataclass


@config_dataclass(frozen=True)
class TrrdConfig(ProbeConfig):
    alpha: Fraction = 0.5
    """weight of the old policy in the anchor pi_old^alpha pi_T^(1 - alpha); 1 is GRPO"""
    clamp: Positive = 1.0
    """the teacher log ratio log pi_S - log pi_T is clamped to [-clamp, clamp] (RLAD App. B)"""


def trrd_anchor(logp: Tensor, old_logp: Tensor, teacher_logp: Tensor, alpha: float, clamp: float) -> Tensor:
    """The old_logp that makes the GRPO ratio exp(logp - old_logp) RLAD's r^TRRD, value and gradient:

        anchor = alpha old_logp + (1 - alpha) (logp - clamp(logp - teacher_logp, -c, c))
        logp - anchor = alpha (logp - old_logp) + (1 - alpha) clamp(logp - teacher_logp, -c, c)

    logp with its gradient, old_logp and teacher_logp without; all (N, T); returns (N, T)."""
    return alpha * old_logp + (1 - alpha) * (logp - torch.clamp(logp - teacher_logp, -clamp, clamp))


@register_probe("trrd", config=TrrdConfig, teacher=True)
def trrd_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: TrrdConfig) -> ProbeOutput:
    """The GRPO loss on the own samples with the token ratio r^TRRD (one update, on-policy: pi_S,old = pi_S in
    value)."""
    if batch.teacher_logp is None:
        raise ValueError("trrd needs the teacher's log-probs (RolloutBatch.teacher_logp); the actor computes them for "
                         "probes registered with teacher=True")
    teacher = batch.teacher_logp

    def anchor(logp: Tensor) -> Tensor:
        return trrd_anchor(logp, logp.detach(), teacher, cfg.alpha, cfg.clamp)

    loss, active, stats, _ = own_term(batch, learner, anchor=anchor)
    mask = batch.completion_mask.bool()
    gap = (batch.sample_logp - teacher)[mask]   # log pi_S - log pi_T at sampling, per token
    stats = {**stats, "teacher_log_ratio_mean": gap.mean().item() if gap.numel() else 0.0,
             "teacher_clamped": (gap.abs() > cfg.clamp).float().mean().item() if gap.numel() else 0.0,
             "teacher_thl_failed": batch.teacher_failed}
    return ProbeOutput.single(loss, active, stats)
