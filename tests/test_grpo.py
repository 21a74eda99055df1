"""Hand-computed cases of the GRPO core; its equality with TRL is in test_grpo_trl_equality.py."""
import pytest
import torch

from mrl.core.grpo import Surrogate, aggregate, group_advantages, k3_kl, log_importance_weights, policy_loss


def test_group_advantages_by_hand():
    rewards = torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0])
    adv = group_advantages(rewards, 4, eps=0.0)
    # group 1: mean 1/4, unbiased std sqrt(((3/4)^2 + 3 (1/4)^2) / 3) = 1/2
    torch.testing.assert_close(adv[:4], torch.tensor([1.5, -0.5, -0.5, -0.5]))
    # group 2: all correct, zero advantage (no signal), no NaN
    assert torch.equal(group_advantages(rewards, 4)[4:], torch.zeros(4))


def test_group_advantage_scales():
    rewards = torch.tensor([1.0, 0.0, 2.0, 0.0])
    torch.testing.assert_close(group_advantages(rewards, 2, "none"), torch.tensor([0.5, -0.5, 1.0, -1.0]))
    batch_std = rewards.std()
    torch.testing.assert_close(group_advantages(rewards, 2, "batch", eps=0.0),
                               torch.tensor([0.5, -0.5, 1.0, -1.0]) / batch_std)
    with pytest.raises(ValueError, match="scale='mean'"):
        group_advantages(rewards, 2, "mean")
    with pytest.raises(ValueError, match="group_size=3"):
        group_advantages(rewards, 3)


def test_sequence_ratio_is_masked_mean_of_token_log_ratios():
    logp = torch.tensor([[-1.0, -2.0, -3.0]])
    old = torch.tensor([[-1.5, -2.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    assert log_importance_weights(logp, old, mask, "sequence").item() == pytest.approx(0.25)
    assert log_importance_weights(logp, old, mask, "token").tolist() == [[0.5, 0.0, -3.0]]


def test_clipping_by_hand():
    """A > 0 and w = e^0.5 > 1.2: the clipped term 1.2 A is used; A < 0 and w < 0.8: min picks clip."""
    logp = torch.tensor([[0.5], [-0.5]])
    old = torch.zeros(2, 1)
    mask = torch.ones(2, 1)
    loss, stats = policy_loss(logp, old, torch.tensor([1.0, -1.0]), mask, Surrogate(loss_type="bnpo"))
    expected = (-(1.2 * 1.0) + -min(torch.exp(torch.tensor(-0.5)).item() * -1.0, 0.8 * -1.0)) / 2
    assert loss.item() == pytest.approx(expected, abs=1e-6)
    assert stats["clip_high"].item() == pytest.approx(0.5) and stats["clip_low"].item() == pytest.approx(0.5)


def test_aggregations_by_hand():
    per_token = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    assert aggregate(per_token, mask, "grpo").item() == pytest.approx((2.0 + 4.0) / 2)
    assert aggregate(per_token, mask, "bnpo").item() == pytest.approx(10.0 / 4)
    assert aggregate(per_token, mask, "dr_grpo", max_completion_length=5).item() == pytest.approx(10.0 / 10)
    assert aggregate(per_token, mask, "dapo", num_items=8).item() == pytest.approx(10.0 / 8)
    with pytest.raises(ValueError, match="max_completion_length"):
        aggregate(per_token, mask, "dr_grpo")


def test_k3_is_nonnegative_and_zero_at_equality():
    logp = torch.randn(4, 5)
    ref = torch.randn(4, 5)
    assert (k3_kl(logp, ref) >= 0).all()
    assert torch.allclose(k3_kl(logp, logp), torch.zeros(4, 5))


def test_beta_needs_reference():
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="ref_logp"):
        policy_loss(x, x, torch.ones(1), torch.ones(1, 2), Surrogate(beta=0.1))
