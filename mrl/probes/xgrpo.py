"""xgrpo (value level, reconstruction): own samples only, a baseline mixed with the peers' mean reward.

Only GroupStats cross between policies; no text, no THL.
"""
from __future__ import annotations

import torch
from torch import Tensor

from mrl.config import Float, Str, choice, config_dataclass, require
from mrl.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.probes.terms import own_grpo_loss
from mrl.rollout import RolloutBatch


@config_dataclass(frozen=True)
class XgrpoConfig(ProbeConfig):
    gamma: Float = 0.5
    """peer weight in the baseline b = (1 - gamma) mean(own r) + gamma mean(peer r)"""
    std: Str = "pooled"
    """advantage normaliser: the pooled std of own and peer rewards (pooled), or the own group's (own)"""

    def __post_init__(self):
        require(0 <= self.gamma <= 1, "XgrpoConfig", "gamma", self.gamma, "a number in [0, 1]")
        choice("XgrpoConfig", "std", self.std, ("own", "pooled"))


def xgrpo_advantages(rewards: Tensor, group_size: int, peer_n: Tensor, peer_sum: Tensor, peer_sq_sum: Tensor,
                     gamma: float = 0.5, std: str = "pooled", eps: float = 1e-4) -> tuple[Tensor, Tensor]:
    """A_i = (r_i - b) / (s + eps),  b = (1 - gamma) mean(own r) + gamma mean(peer r).

    rewards: (P*G,) own, groups contiguous; peer_n, peer_sum, peer_sq_sum: (P,) the peers' pooled
    GroupStats per prompt (n = 0: no peer statistics, then b is the own mean). s: the unbiased std of
    own and peer rewards together (std="pooled"), or the own group's (std="own"); where the own group is
    uniform (own std 0) but the peer-shifted baseline is not its reward, the pooled std stands in, since
    (r - b) / eps would blow the update up (a pooled std of 0 means every reward equals b: A = 0).
    With gamma = 0 and std = "own" this is exactly group_advantages(scale="group").
    Returns (advantages (P*G,), baseline b (P,)).
    """
    grouped = rewards.view(-1, group_size)
    own_mean = grouped.mean(dim=1)
    has_peer = peer_n > 0
    peer_mean = torch.where(has_peer, peer_sum / peer_n.clamp(min=1), own_mean)
    baseline = own_mean if gamma == 0 else (1 - gamma) * own_mean + gamma * peer_mean
    n = group_size + peer_n
    total, total_sq = grouped.sum(dim=1) + peer_sum, (grouped ** 2).sum(dim=1) + peer_sq_sum
    pooled_scale = ((total_sq - total ** 2 / n).clamp(min=0) / (n - 1)).sqrt()
    own_scale = grouped.std(dim=1)
    scale = pooled_scale if std == "pooled" else torch.where(own_scale > 0, own_scale, pooled_scale)
    centred = (grouped - baseline[:, None]).view(-1)
    return centred / (scale.repeat_interleave(group_size) + eps), baseline


@register_probe("xgrpo", config=XgrpoConfig, kinds=("group_stats",))
def xgrpo_loss(batch: RolloutBatch, peers: PeerView, cfg: XgrpoConfig) -> ProbeOutput:
    """L_GRPO on the own samples with the mixed baseline; stats: the mean baseline shift b - mean(own r)."""
    stats = [peers.group_stats.get(problem.pid, []) for problem in batch.problems]
    peer_n = torch.tensor([float(sum(s.n for s in row)) for row in stats], device=batch.device)
    peer_sum = torch.tensor([sum(s.reward_sum for s in row) for row in stats], device=batch.device)
    peer_sq_sum = torch.tensor([sum(s.reward_sq_sum for s in row) for row in stats], device=batch.device)
    advantages, baseline = xgrpo_advantages(batch.rewards, batch.group_size, peer_n, peer_sum, peer_sq_sum,
                                            cfg.gamma, cfg.std)
    loss, active, _ = own_grpo_loss(batch, advantages)
    own_mean = batch.rewards.view(-1, batch.group_size).mean(dim=1)
    return ProbeOutput.single(loss, active, {"baseline_shift": float((baseline - own_mean).abs().mean()),
                                      "prompts_without_peer_stats": int((peer_n == 0).sum())})
