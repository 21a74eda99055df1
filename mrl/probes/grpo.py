"""grpo: independent GRPO, no sharing (the reference every probe is compared with)."""
from __future__ import annotations

from mrl.grpo import group_advantages
from mrl.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.probes.terms import own_grpo_loss
from mrl.rollout import RolloutBatch


@register_probe("grpo")
def grpo_loss(batch: RolloutBatch, peers: PeerView, cfg: ProbeConfig) -> ProbeOutput:
    """L_GRPO on the own groups: A = (r - mean_g r) / (std_g r + eps), any aggregation; with beta > 0 the k3 KL to
    the actor's reference model, whose mean is reported as `kl`."""
    advantages = group_advantages(batch.rewards, batch.group_size, batch.grpo.scale)
    loss, active, stats = own_grpo_loss(batch, advantages)
    return ProbeOutput.single(loss, active, {"kl": stats["kl"]} if "kl" in stats else {})
