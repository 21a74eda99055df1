"""grpo: independent GRPO, no sharing (the reference every probe is compared with); with `minibatches` M > 1, M
optimizer updates per step, as HACPO and its baselines take them, so a comparison with them is like for like."""
from __future__ import annotations

import math

import torch
from torch import Tensor

from mrl.core.batch import Learner, RolloutBatch
from mrl.core.grpo import policy_loss
from mrl.core.probes.advantages import get_advantage
from mrl.core.probes.contract import PeerView, ProbeConfig, ProbeOutput, register_probe
from mrl.core.probes.terms import own_logprobs, own_term
from mrl.core.validation import PositiveInt, config_dataclass


@config_dataclass(frozen=True)
class GrpoProbeConfig(ProbeConfig):
    """grpo's knob."""

    minibatches: PositiveInt = 1
    """optimizer updates per step, each on one contiguous share of the own samples (prompt order), with the ratio
    to the policy that sampled them (TRL's steps_per_generation > 1; HACPO's update count)"""


def minibatch_output(batch: RolloutBatch, learner: Learner, advantages: Tensor, minibatches: int) -> ProbeOutput:
    """The GRPO loss of each of `minibatches` updates, each computed when the actor asks for it (after update m - 1).

    Update m takes rows [m * ceil(B / M), (m + 1) * ceil(B / M)) of the B = P*G own samples: mrl.core.grpo.policy_loss
    with old_logp the sampling policy's log-probs (taken now, before the first update), aggregated over the chunk's
    rows as batch.grpo.loss_type says. advantages: (B,). Its stats: the clip fractions' mean over the updates."""
    cfg, rows = batch.grpo, len(advantages)
    with torch.no_grad():
        old_logp = own_logprobs(batch, learner, torch.arange(rows, device=batch.device))
    size = math.ceil(rows / minibatches)
    clip_stats: dict[str, list] = {}
    output = ProbeOutput(math.ceil(rows / size), None, rows)

    def loss(m: int) -> Tensor:
        chunk = torch.arange(m * size, min((m + 1) * size, rows), device=batch.device)
        value, chunk_stats = policy_loss(
            own_logprobs(batch, learner, chunk), old_logp[chunk], advantages[chunk], batch.completion_mask[chunk],
            cfg.surrogate, ref_logp=None if batch.ref_logp is None else batch.ref_logp[chunk],
            sample_weight=None if batch.sample_weight is None else batch.sample_weight[chunk])
        for key, v in chunk_stats.items():
            clip_stats.setdefault(key, []).append(float(v))
        output.stats.update({key: sum(values) / len(values) for key, values in clip_stats.items()})
        return value

    output.loss = loss
    return output


@register_probe("grpo", config=GrpoProbeConfig)
def grpo_loss(batch: RolloutBatch, peers: PeerView, learner: Learner,
              cfg: GrpoProbeConfig | ProbeConfig) -> ProbeOutput:
    """L_GRPO on the own groups: A = (r - mean_g r) / (std_g r + eps), any aggregation; with beta > 0 the k3 KL to
    the actor's reference model, whose mean is reported as `kl`. With minibatches > 1, one update per share of the
    samples (minibatch_output)."""
    minibatches = getattr(cfg, "minibatches", 1)   # a bare ProbeConfig("grpo") is grpo at its defaults
    if minibatches == 1:
        own = own_term(batch, learner)
        return ProbeOutput.single(own.loss, own.active, {"kl": own.stats["kl"]} if "kl" in own.stats else {})
    advantages, _ = get_advantage("group")(batch, peers, cfg)
    return minibatch_output(batch, learner, advantages, minibatches)
