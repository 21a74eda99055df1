"""The sampler/trainer mismatch (mrl/core/mismatch.py): TRL's statistics and importance weights on hand-made log-probs,
the weight's place in the loss (the surrogate, not the KL), and a bf16 actor that measures it every step."""
import dataclasses
import math

import pytest
import torch

from testsupport import TINY_TASK
from mrl.core.config import ConfigError, GrpoConfig, PlacementConfig, TaskConfig
from mrl.core.grpo import Surrogate, policy_loss
from mrl.core.mismatch import SAMPLER_CORRECTIONS, mismatch_stats, sampler_weights, weight_stats
from mrl.core.probes import PeerView
from mrl.core.tasks import make_task
from mrl.runtime.actor import WorkerSpec, PolicyActor

TRAIN = torch.tensor([[-1.0, -2.0, -0.5], [-0.2, -3.0, 0.0]])
SAMPLER = torch.tensor([[-1.5, -1.0, -0.5], [-0.2, float("nan"), 0.0]])
MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 0.0]])


def test_the_mismatch_is_trls_mean_and_max_absolute_log_prob_difference_over_completion_tokens():
    # tokens: |−1 − (−1.5)| = 0.5, |−2 − (−1)| = 1.0, 0 (row 1), NaN left out; masked tokens left out
    assert mismatch_stats(TRAIN, SAMPLER, MASK) == {"sampler_logp_diff_mean": pytest.approx(0.5),
                                                    "sampler_logp_diff_max": pytest.approx(1.0)}
    assert mismatch_stats(TRAIN, TRAIN, MASK) == {"sampler_logp_diff_mean": 0.0, "sampler_logp_diff_max": 0.0}


def test_token_weights_are_truncated_or_masked_at_trls_bounds():
    truncated = sampler_weights(TRAIN, SAMPLER, MASK, "token_truncate", clip_max=2.0)
    expected = torch.tensor([[math.exp(0.5), math.exp(-1.0), 1.0], [1.0, 1.0, 1.0]])   # NaN and masked: ratio 1
    assert torch.allclose(truncated, expected)
    capped = sampler_weights(TRAIN, SAMPLER, MASK, "token_truncate", clip_max=1.2)
    assert capped[0, 0] == pytest.approx(1.2)
    masked = sampler_weights(TRAIN, SAMPLER, MASK, "token_mask", clip_min=0.5, clip_max=1.2)
    assert masked[0, 0] == 0.0 and masked[0, 1] == 0.0 and masked[1, 0] == 1.0      # e^0.5 > 1.2, e^-1 < 0.5


def test_sequence_weights_use_the_summed_log_ratio_one_per_sequence():
    weight = sampler_weights(TRAIN, SAMPLER, MASK, "sequence_truncate", clip_max=None)
    assert weight.shape == (2, 1)
    assert torch.allclose(weight.squeeze(1), torch.tensor([math.exp(0.5 - 1.0), 1.0]))
    assert sampler_weights(TRAIN, SAMPLER, MASK, "sequence_mask", clip_min=0.7)[0, 0] == 0.0   # e^-0.5 < 0.7
    assert weight_stats(weight, MASK)["sampler_weight_max"] == pytest.approx(1.0)


def test_an_unknown_mode_is_refused_naming_the_allowed_ones():
    with pytest.raises(ValueError, match="token_truncate"):
        sampler_weights(TRAIN, SAMPLER, MASK, "off")
    with pytest.raises(ConfigError, match=r"GrpoConfig.sampler_correction = 'vllm'.*sequence_mask"):
        GrpoConfig(sampler_correction="vllm")
    assert GrpoConfig().sampler_correction == "off" and SAMPLER_CORRECTIONS[0] == "off"


def test_the_weight_multiplies_the_surrogate_not_the_kl_term():
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    old, ref, mask, adv = logp.detach() - 0.1, torch.tensor([[-1.2, -1.5]]), torch.ones(1, 2), torch.tensor([1.0])
    weight = torch.tensor([[0.5, 2.0]])
    with_kl = Surrogate(beta=0.3)
    plain, _ = policy_loss(logp, old, adv, mask, with_kl, ref_logp=ref)
    weighted, _ = policy_loss(logp, old, adv, mask, with_kl, ref_logp=ref, sample_weight=weight)
    ones, _ = policy_loss(logp, old, adv, mask, with_kl, ref_logp=ref, sample_weight=torch.ones(1, 2))
    assert torch.equal(ones, plain)
    surrogate, _ = policy_loss(logp, old, adv, mask)
    kl = plain - surrogate
    weighted_surrogate, _ = policy_loss(logp, old, adv, mask, sample_weight=weight)
    assert weighted.item() == pytest.approx((weighted_surrogate + kl).item())


def _bf16_actor(path, correction="off"):
    grpo = GrpoConfig(prompts_per_step=4, group_size=4, max_new_tokens=6, lr=1e-4, sampler_correction=correction)
    return PolicyActor(WorkerSpec("A", path, TaskConfig(**TINY_TASK), grpo,
                                   placement=PlacementConfig(dtype="bfloat16")))


def test_a_bf16_actor_logs_the_mismatch_every_step_and_an_fp32_one_has_none(tiny_zoo_paths):
    problems = make_task(TaskConfig(**TINY_TASK)).rl_prompts(__import__("random").Random(0), 4)
    actor = _bf16_actor(tiny_zoo_paths["A"])
    for step in (1, 2):
        stats = actor.rollout(step, problems).sampler
        assert set(stats) == {"sampler_logp_diff_mean", "sampler_logp_diff_max"}
        assert 0.0 < stats["sampler_logp_diff_mean"] <= stats["sampler_logp_diff_max"]   # bf16 is not fp32
        assert actor.pending.sample_weight is None                                         # off: no weight
        actor.update(step)
    fp32 = PolicyActor(WorkerSpec("A", tiny_zoo_paths["A"], TaskConfig(**TINY_TASK), GrpoConfig(prompts_per_step=4,
                                                                                                  group_size=4)))
    assert fp32.rollout(1, problems).sampler == {}


def test_with_a_correction_the_batch_carries_trls_weight_and_the_loss_uses_it(tiny_zoo_paths):
    problems = make_task(TaskConfig(**TINY_TASK)).rl_prompts(__import__("random").Random(0), 4)
    actor = _bf16_actor(tiny_zoo_paths["A"], "token_truncate")
    stats = actor.rollout(1, problems).sampler
    batch = actor.pending
    assert batch.sample_weight.shape == batch.completion_ids.shape and batch.sample_weight.max() <= 3.0
    assert stats["sampler_weight_min"] <= stats["sampler_weight_mean"] <= stats["sampler_weight_max"]
    assert stats["sampler_weight_min"] != 1.0 or stats["sampler_weight_max"] != 1.0
    weighted = actor.probe.loss(batch, PeerView(), actor.learner(1), actor.config.probe).loss(0)
    plain = actor.probe.loss(dataclasses.replace(batch, sample_weight=None), PeerView(), actor.learner(1),
                             actor.config.probe).loss(0)
    assert weighted.item() != plain.item()


def test_a_correction_without_a_bf16_sampler_or_with_crossed_bounds_is_refused(tiny_zoo_paths):
    with pytest.raises(ConfigError, match=r"sampler_correction = 'token_mask' is not allowed with "
                                          r"PlacementConfig.dtype = 'float32'.*expected 'off'"):
        PolicyActor(WorkerSpec("A", tiny_zoo_paths["A"], TaskConfig(**TINY_TASK),
                                GrpoConfig(sampler_correction="token_mask")))
    with pytest.raises(ConfigError, match=r"GrpoConfig.sampler_clip_min = 4.0 is not allowed; expected at most "
                                          r"sampler_clip_max \(3.0\)"):
        GrpoConfig(sampler_clip_min=4.0)
