"""HACPO's primitives: the mixed baseline is unbiased, stepwise clipping, the tracker, and the hard clamp."""
import math

import pytest
import torch

from mrl.core.probes.hacpo_primitives import (CapabilityTracker, capability_advantages, mixed_baseline, peer_objective,
                       stepwise_lower_bound)


@pytest.mark.parametrize("rates", [(0.3, 0.6, 0.15), (0.05, 0.9), (0.5, 0.5, 0.5, 0.2)])
def test_capability_weighted_baseline_is_unbiased_for_the_learners_success_rate(rates):
    """E[mu^(k)] = P_k when omega(k, j) = P_k / P_j (Monte Carlo, within 5 standard errors)."""
    g, reps = 8, 40_000
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor(rates).repeat_interleave(g)                      # agent 0 is the learner
    rewards = (torch.rand(reps, len(p), generator=gen) < p).double()
    omegas = (rates[0] / p).double()
    baselines = mixed_baseline(rewards, omegas)
    se = baselines.std().item() / math.sqrt(reps)
    assert abs(baselines.mean().item() - rates[0]) <= 5 * se
    plain = rewards.mean(-1)                                           # the plain pooled mean is biased toward peers
    if len(set(rates)) > 1:
        assert abs(plain.mean().item() - rates[0]) > 5 * plain.std().item() / math.sqrt(reps)


def test_stepwise_lower_bound_rises_by_delta_step_and_never_passes_one():
    bounds = [stepwise_lower_bound(m, delta=0.2, delta_step=0.025) for m in range(20)]
    assert bounds[0] == pytest.approx(0.8)
    for m in range(1, 20):
        assert bounds[m] <= 1.0
        if bounds[m] < 1.0:
            assert bounds[m] - bounds[m - 1] == pytest.approx(0.025)
    assert bounds[8] == 1.0 and bounds[-1] == 1.0


def test_peer_objective_is_a_hard_clamp_with_stop_gradient_reweighting():
    log_ratio = torch.log(torch.tensor([0.5, 0.9, 1.2])).requires_grad_()
    adv = torch.tensor([1.0, 1.0, 1.0])
    j = peer_objective(log_ratio, adv, torch.ones(3), lower=0.8, alpha=1.0)
    j.sum().backward()
    assert j.tolist() == pytest.approx([0.8 * 0.8, 0.9 * 0.9, 1.0])
    # inside the clip: d/dlog s of s * sg(s)^alpha = s^(1 + alpha); outside: 0 on both sides
    assert log_ratio.grad.tolist() == pytest.approx([0.0, 0.81, 0.0])


def test_capability_advantages_guards():
    own = torch.tensor([True] * 4 + [False] * 4)
    uniform = capability_advantages(torch.ones(8), torch.tensor([1.0] * 4 + [0.1] * 4), own)
    assert torch.equal(uniform, torch.zeros(8))                        # guard 1: a uniform group has A = 0
    rewards = torch.tensor([1.0, 0, 0, 0, 1, 1, 1, 1])
    strong_peer = capability_advantages(rewards, torch.tensor([1.0] * 4 + [10.0] * 4), own)
    own_mean = 0.25
    assert strong_peer[0].item() == pytest.approx((1 - own_mean) / (rewards.std().item() + 1e-6))  # guard 2
    for mode, b in (("pooled", 0.625), ("own", 0.25)):
        got = capability_advantages(rewards, torch.ones(8), own, mode=mode)
        assert got[1].item() == pytest.approx(-b / (rewards.std().item() + 1e-6))


def test_capability_tracker_rolls_clips_and_survives_a_checkpoint(tmp_path):
    tracker = CapabilityTracker(window=5, warmup_steps=1)
    tracker.update({"A": 0.5, "B": 0.5})
    assert tracker.omega("A", "B") == 1.0                              # warm-up
    for rate_a, rate_b in [(0.9, 0.05), (0.8, 0.0), (0.7, 0.01), (0.9, 0.02), (1.0, 0.0), (0.6, 0.0)]:
        tracker.update({"A": rate_a, "B": rate_b})
    assert tracker.capability("A") == pytest.approx((0.8 + 0.7 + 0.9 + 1.0 + 0.6) / 5)   # the last 5 steps
    assert tracker.capability("B") == pytest.approx((1e-8 + 0.01 + 0.02 + 1e-8 + 1e-8) / 5)
    assert tracker.omega("A", "B") == 10.0 and tracker.omega("B", "A") == pytest.approx(0.1)
    torch.save(tracker.state_dict(), tmp_path / "tracker.pt")
    restored = CapabilityTracker()
    restored.load_state_dict(torch.load(tmp_path / "tracker.pt"))
    assert restored.state_dict() == tracker.state_dict()
    restored.update({"A": 0.0, "B": 1.0})
    tracker.update({"A": 0.0, "B": 1.0})
    assert restored.omega("A", "B") == tracker.omega("A", "B")
