"""xgrpo (value level, reconstruction): own samples only, a baseline mixed with the peers' mean reward.

Only GroupStats cross between policies; no text, no THL.
"""
from __future__ import annotations

from typing import Literal

from mrl.core.batch import Learner, RolloutBatch
from mrl.core.probes.advantages import xgrpo_estimator
from mrl.core.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.core.probes.terms import own_term
from mrl.core.validation import Fraction, config_dataclass


@config_dataclass(frozen=True)
class XgrpoConfig(ProbeConfig):
    gamma: Fraction = 0.5
    """peer weight in the baseline b = (1 - gamma) mean(own r) + gamma mean(peer r)"""
    std: Literal["own", "pooled"] = "pooled"
    """advantage normaliser: the pooled std of own and peer rewards (pooled), or the own group's (own)"""


@register_probe("xgrpo", config=XgrpoConfig, kinds=("group_stats",))
def xgrpo_loss(batch: RolloutBatch, peers: PeerView, learner: Learner, cfg: XgrpoConfig) -> ProbeOutput:
    """L_GRPO on the own samples with the mixed baseline (advantages.xgrpo_advantages); stats: the mean baseline shift
    |b - mean(own r)| and the prompts without peer statistics."""
    loss, active, _, advantage_stats = own_term(batch, learner, peers, cfg, estimator=xgrpo_estimator)
    return ProbeOutput.single(loss, active, advantage_stats)
