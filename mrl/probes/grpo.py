"""grpo: independent GRPO, no sharing (the reference every probe is compared with)."""
from __future__ import annotations

from mrl.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.probes.terms import own_term
from mrl.rollout import RolloutBatch


@register_probe("grpo")
def grpo_loss(batch: RolloutBatch, peers: PeerView, cfg: ProbeConfig) -> ProbeOutput:
    """L_GRPO on the own groups: A = (r - mean_g r) / (std_g r + eps), any aggregation; with beta > 0 the k3 KL to
    the actor's reference model, whose mean is reported as `kl`."""
    own = own_term(batch)
    return ProbeOutput.single(own.loss, own.active, {"kl": own.stats["kl"]} if "kl" in own.stats else {})
