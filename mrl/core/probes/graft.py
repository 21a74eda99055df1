"""graft (trajectory level, a reconstruction [R] of GRAFT, "Learning Beyond What You Sample: Off-Policy-Aware
Cross-Model Trajectory Exchange for RLVR", 2026; no public code): a peer's verified successful trajectory enters
the learner's loss only on prompts where the learner's whole group failed, weighted by how compatible it is with
the learner and with token-level importance clipping on the learner's tokens.

    L = ( G P * L_GRPO + sum_y -A_y mean_t w_t exp(logp_t - sg logp_t) ) / (G P + |Y|),   w_t = c(y) clip(rho_t)

Without peer successes graft is grpo exactly. The compatibility c(y), the token ratios rho_t, the pooled advantage
A_y and what is reconstructed: docs/architecture.md, The probes (graft). Offline GRAFT is this probe with the peers
replayed from a stored SEE log (mrl.runtime.spec.OfflinePeers).
"""
from __future__ import annotations

import math
from typing import Annotated, Literal

import numpy as np
import torch
from pydantic import Field

from mrl.core.batch import Learner, RolloutBatch
from mrl.core.probes.advantages import pooled_advantages
from mrl.core.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.core.probes.terms import (MAX_LOG_WEIGHT, TOKENIZATIONS, group_log_ratios, marginal_statistics, own_term,
                              peer_log_ratio, pooled_loss, rescored_reward, rescue_set, retokenize_rollouts,
                              sequence_logprobs, text_logprobs, weighted_sequence_loss)
from mrl.core.validation import Float, Fraction, config_dataclass


@config_dataclass(frozen=True)
class GraftConfig(ProbeConfig):
    delta: Fraction = 0.8
    """floor of the compatibility weight c(y) = min(1, max(delta, s(y)))"""
    eps_low: Annotated[Float, Field(ge=0, lt=1)] = 0.2
    """token importance ratios are clipped to [1 - eps_low, 1 + eps_high]"""
    eps_high: Annotated[Float, Field(ge=0)] = 0.2
    tokenization: Literal[TOKENIZATIONS] = "canonical"
    """the learner's log-probability of a peer text in s(y): its canonical tokenization's, or summed over every
    tokenization it can write (marginal, terms.sequence_logprobs); the per-token ratios rho_t stay THL's"""


def compatibility(learner_logps, source_logps, delta: float, learner_sum: float | None = None) -> tuple[float, float]:
    """(s, c): s = HACPO's cross ratio with ratio="mean" (terms.peer_log_ratio: mean learner token log-prob -
    mean source token log-prob, clamped to +-10, exponentiated), c = min(1, max(delta, s)).
    Inputs: the learner's log-probs of its tokens of T(y) (n_dst,), the source's of its own tokens (n_src,);
    learner_sum: the learner's log-probability of the text in place of their sum (the marginal), still over n_dst."""
    total = float(np.sum(learner_logps)) if learner_sum is None else learner_sum
    learner_sum = torch.tensor(total, device="cpu")  # host-side: a float comes out
    log_s = peer_log_ratio(learner_sum, len(learner_logps), list(source_logps), 0, "mean")
    s = math.exp(float(log_s))
    return s, min(1.0, max(delta, s))


def token_weights(log_rho: np.ndarray, c: float, eps_low: float, eps_high: float) -> np.ndarray:
    """w_t = c * clip(exp(log_rho_t), 1 - eps_low, 1 + eps_high). (n_dst,) -> (n_dst,)."""
    return c * np.clip(np.exp(np.clip(log_rho, -MAX_LOG_WEIGHT, MAX_LOG_WEIGHT)), 1 - eps_low, 1 + eps_high)


@register_probe("graft", config=GraftConfig, kinds=("rollout",), aggregations=("grpo",))
def graft_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: GraftConfig) -> ProbeOutput:
    """The own GRPO loss pooled with the compatibility-weighted, token-clipped policy-gradient terms of the peers'
    verified successes on the prompts the learner's whole group failed (see the module docstring)."""
    samples, failed, inexact = retokenize_rollouts(batch, learner, peers)
    claimed = [(x, record, alignment) for x, record, alignment in samples if record.reward > 0]
    verified = [(x, record, alignment) for x, record, alignment in claimed
                if rescored_reward(batch, learner, peers, x, record) > 0]
    counts = [0] * len(batch.problems)
    for x, _, _ in verified:
        counts[x] += 1
    chosen = set(rescue_set(batch.successes_per_prompt, batch.group_size, 0.0, [n > 0 for n in counts]))
    used = [(x, record, alignment) for x, record, alignment in verified if x in chosen]
    g = batch.group_size
    loss, active, _, _ = own_term(batch, learner)
    stats = {"graft_candidates": int((batch.successes_per_prompt == 0).sum()), "graft_prompts": len(chosen),
             "graft_samples": len(used), "rejected_successes": len(claimed) - len(verified), "thl_failed": failed,
             "thl_inexact": inexact}
    if not used:
        return ProbeOutput.single(loss, active, stats)
    own = batch.rewards.view(-1, g)
    advantage = {x: pooled_advantages([torch.cat([own[x], torch.ones(counts[x], dtype=own.dtype,
                                                                  device=own.device)])])[0][g]
                 for x in chosen}
    learner_logp, mask = text_logprobs(batch, learner, [batch.problems[x].prompt for x, _, _ in used],
                                       [a.dst_ids for _, _, a in used])
    detached = learner_logp.detach().double().cpu().numpy()
    canonical = (learner_logp.detach() * mask).sum(-1)
    with torch.no_grad():   # c(y) carries no gradient
        texts = sequence_logprobs(batch, learner, [batch.problems[x].prompt for x, _, _ in used],
                                  [a.text for _, _, a in used], canonical, [a.dst_ids[-1] == learner.eos_id for _, _, a in used], cfg.tokenization)
    learner_sums, marginal = texts[0].double().cpu().tolist(), texts[1]
    weights = torch.ones_like(learner_logp)
    compat, floored, capped = [], 0, 0
    for row, (_, record, alignment) in enumerate(used):
        n = len(alignment.dst_ids)
        source = np.asarray(record.logps, dtype=np.float64)
        s, c = compatibility(detached[row, :n], source, cfg.delta, learner_sums[row] if marginal[row] else None)
        compat.append(s)
        floored += s < cfg.delta
        capped += s > 1
        log_rho = group_log_ratios(detached[row, :n], source, alignment)[alignment.dst_group]
        weights[row, :n] = torch.as_tensor(token_weights(log_rho, c, cfg.eps_low, cfg.eps_high), dtype=weights.dtype,
                                           device=weights.device)
    peer_sum = weighted_sequence_loss(learner_logp, mask, torch.stack([advantage[x] for x, _, _ in used]), weights)
    stats.update({"compatibility_mean": float(np.mean(compat)), "compatibility_floored": floored,
                  "compatibility_capped": capped})
    if cfg.tokenization == "marginal":
        stats.update(marginal_statistics([record.policy_id for _, record, _ in used],
                                         [v - b for v, b in zip(learner_sums, canonical.tolist())], marginal))
    return ProbeOutput.single(pooled_loss(loss, len(batch.rewards), peer_sum, len(used)), active + len(used), stats)
