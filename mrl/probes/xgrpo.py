"""xgrpo (value level, reconstruction): own samples only, a baseline mixed with the peers' mean reward.

Only GroupStats cross between policies; no text, no THL.
"""
from __future__ import annotations

from mrl.validation import Float, Str, choice, config_dataclass, require
from mrl.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.probes.terms import own_term
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


@register_probe("xgrpo", config=XgrpoConfig, kinds=("group_stats",))
def xgrpo_loss(batch: RolloutBatch, peers: PeerView, cfg: XgrpoConfig) -> ProbeOutput:
    """L_GRPO on the own samples with the mixed baseline (advantages.xgrpo_advantages); stats: the mean baseline shift
    |b - mean(own r)| and the prompts without peer statistics."""
    loss, active, _, advantage_stats = own_term(batch, peers, cfg, estimator="xgrpo")
    return ProbeOutput.single(loss, active, advantage_stats)
