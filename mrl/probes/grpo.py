"""grpo: independent GRPO, no sharing (the reference every probe is compared with)."""
from __future__ import annotations

from mrl.grpo import group_advantages
from mrl.probes import register_probe
from mrl.probes.batch import LearnerBatch, PeerView, ProbeOutput


@register_probe("grpo")
def grpo_loss(batch: LearnerBatch, peers: PeerView, cfg) -> ProbeOutput:
    """L_GRPO on the own groups: A = (r - mean_g r) / (std_g r + eps)."""
    advantages = group_advantages(batch.rewards, batch.group_size, batch.worker.config.scale)
    loss, active, stats = batch.own_loss(advantages)
    return ProbeOutput(loss, active, {})
