"""prp (data level, reconstruction): the peers' samples, retokenized by THL, join the learner's group.

For prompt x the learner's group is its own G samples plus every peer sample of x; advantages are
pooled over all of them. A peer sample y enters the loss as T(y) (the learner's tokenization of its
text) with the importance weight pi_learner(T(y)) / pi_peer(y), from THL-projected traces:
    token level    one weight per THL group: exp(sum_group logp_learner - sum_group logp_peer)
    sequence level one weight per sample:    exp(sum logp_learner - sum logp_peer)
truncated at c and carrying no gradient (weighted_sequence_loss); at the sequence level, tokenization "marginal"
puts the learner's log-probability of the text over every tokenization in place of sum logp_learner
(terms.sequence_logprobs, docs/marginal.md). prp_naive uses weight 1 (no correction: as if the learner had sampled
the tokens itself). Peer rewards are re-scored with the learner's verifier (never above what the peer claimed).
Log ESS = (sum w)^2 / sum w^2 over peer samples.
"""
from __future__ import annotations

import math
from typing import Literal

import numpy as np
import torch

from mrl.core.batch import Learner, RolloutBatch
from mrl.core.grpo import LEVELS
from mrl.core.probes.advantages import pooled_advantages
from mrl.core.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.core.probes.terms import (MAX_LOG_WEIGHT, TOKENIZATIONS, ess_fraction, group_log_ratios, marginal_statistics,
                              own_grpo_loss, pooled_loss, rescored_reward, retokenize_rollouts, sequence_logprobs,
                              text_logprobs, weighted_sequence_loss)
from mrl.core.validation import Positive, config_dataclass, require


@config_dataclass(frozen=True)
class PrpConfig(ProbeConfig):
    level: Literal[LEVELS] = "token"
    """importance ratio per THL group (token) or per sequence"""
    clip: Positive | None = 2.0
    """truncation c of the importance weight (None: no truncation)"""
    tokenization: Literal[TOKENIZATIONS] = "canonical"
    """the learner's log-probability of a peer text in the sequence-level weight: its canonical tokenization's, or
    summed over every tokenization it can write (marginal, terms.sequence_logprobs; level sequence only)"""

    def __post_init__(self):
        require(self.tokenization == "canonical" or self.level == "sequence", "PrpConfig", "tokenization",
                self.tokenization, "'canonical' with level='token' (a THL group's ratio has no marginal; "
                "level='sequence' takes 'marginal')")


def _prp(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: PrpConfig | None) -> ProbeOutput:
    """The pooled-group loss; cfg None: naive (every peer token weighted 1)."""
    samples, failed, inexact = retokenize_rollouts(batch, learner, peers)
    g = batch.group_size
    own = batch.rewards.view(-1, g)
    peer_rewards = [[] for _ in batch.problems]
    disagreements = 0
    for x, record, _ in samples:
        reward = rescored_reward(batch, learner, peers, x, record)
        disagreements += reward != record.reward
        peer_rewards[x].append(reward)
    pooled = pooled_advantages([torch.cat([own[x], torch.tensor(peer_rewards[x], dtype=own.dtype, device=own.device)])
                                for x in range(len(batch.problems))])
    own_advantages = torch.cat([a[:g] for a in pooled])
    loss, active, _ = own_grpo_loss(batch, learner, own_advantages)
    stats = {"peer_samples": len(samples), "thl_failed": failed, "thl_inexact": inexact,
             "reward_disagreements": disagreements}
    if not samples:
        return ProbeOutput.single(loss, active, stats)
    cursor = [g] * len(batch.problems)
    peer_advantages = []
    for x, _, _ in samples:
        peer_advantages.append(pooled[x][cursor[x]])
        cursor[x] += 1
    peer_advantages = torch.stack(peer_advantages)
    keep = (peer_advantages != 0).nonzero().squeeze(-1).tolist()  # A = 0 adds nothing (its loss and gradient are 0)
    log_w_seq = []
    if keep:
        kept = [samples[i] for i in keep]
        learner_logp, mask = text_logprobs(batch, learner, [batch.problems[x].prompt for x, _, _ in kept],
                                           [a.dst_ids for _, _, a in kept])
        weights = torch.ones_like(learner_logp)
        detached = learner_logp.detach().double().cpu().numpy()
        tokenization = "canonical" if cfg is None else cfg.tokenization
        canonical = (learner_logp.detach() * mask).sum(-1)
        with torch.no_grad():   # the weights carry no gradient
            texts = sequence_logprobs(batch, learner, [batch.problems[x].prompt for x, _, _ in kept],
                                      [a.text for _, _, a in kept], canonical,
                                      [a.dst_ids[-1] == learner.eos_id for _, _, a in kept], tokenization)
        learner_sums, marginal = texts[0].double().cpu().tolist(), texts[1]
        truncated = 0
        for row, (_, record, alignment) in enumerate(kept):
            n = len(alignment.dst_ids)
            log_w = np.clip(group_log_ratios(detached[row, :n], np.asarray(record.logps, dtype=np.float64),
                                             alignment), -MAX_LOG_WEIGHT, MAX_LOG_WEIGHT)
            sequence = learner_sums[row] - float(np.sum(record.logps)) if marginal[row] else log_w.sum()
            log_w_seq.append(float(np.clip(sequence, -MAX_LOG_WEIGHT, MAX_LOG_WEIGHT)))
            if cfg is None:
                continue
            per_token = np.exp(log_w[alignment.dst_group]) if cfg.level == "token" \
                else np.full(n, math.exp(log_w_seq[-1]))
            clip = math.inf if cfg.clip is None else cfg.clip
            truncated += int((per_token > clip).sum())
            weights[row, :n] = torch.as_tensor(np.minimum(per_token, clip), dtype=weights.dtype, device=weights.device)
        peer_sum = weighted_sequence_loss(learner_logp, mask, peer_advantages[keep], weights)
        stats["truncated_tokens"] = truncated
        stats["ess_fraction"] = ess_fraction(np.asarray(log_w_seq))
        stats["mean_log_ratio"] = float(np.mean(log_w_seq))
        if tokenization == "marginal":
            stats.update(marginal_statistics([record.policy_id for _, record, _ in kept],
                                             [v - b for v, b in zip(learner_sums, canonical.tolist())], marginal))
    else:
        peer_sum = None
    total = pooled_loss(loss, len(batch.rewards), peer_sum, len(samples))
    return ProbeOutput.single(total, active + len(keep), stats)


@register_probe("prp", config=PrpConfig, kinds=("rollout",), aggregations=("grpo",))
def prp_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: PrpConfig) -> ProbeOutput:
    """Pooled group, THL-projected importance weights truncated at cfg.clip (cfg.level token or sequence)."""
    return _prp(batch, peers, learner, cfg)


@register_probe("prp_naive", kinds=("rollout",), aggregations=("grpo",))
def prp_naive_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: ProbeConfig) -> ProbeOutput:
    """Pooled group, peer tokens weighted 1 (ratio to the learner's own log-probs, as if it had sampled them)."""
    return _prp(batch, peers, learner, None)
