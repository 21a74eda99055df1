"""The bandit's closed forms against Monte Carlo (docs/architecture.md, The bandit analysis).

Tolerances come from the Monte Carlo standard error: a closed form passes when every component lies
within Z standard errors of the sample mean (Z = 5: with a few hundred components per test the chance
that a correct formula fails is below 1e-4, and the draws are seeded).
"""
import math

import numpy as np
import pytest

from mrl.core.bandit import (Draws, DynamicsConfig, EnvConfig, Method, PROMPT_TYPES, chi2, closed_form_mean,
                        expected_grpo, expected_prp, expected_sgt, expected_xgrpo, gate_probability, make_env,
                        monte_carlo, prp_peer_second_moment, ratio_second_moment, sample_responses,
                        sgt_rescue_second_moment, simulate, summarise, support_gain, true_gradient,
                        truncated_lognormal_mean, truncated_lognormal_second_moment, update)
from mrl.core.bandit.closed_form import ess_fraction, score_norm2
from mrl.core.bandit.estimators import weighted_scores

Z = 5.0
G = 8


def policies(seed=0, prompts=6, responses=6, spread=1.0):
    """Random softmax pairs with moderate probabilities; two correct responses per prompt."""
    rng = np.random.default_rng(seed)
    logits = rng.normal(0.0, spread, (2, prompts, responses))
    pi = np.exp(logits) / np.exp(logits).sum(-1, keepdims=True)
    r = np.zeros((prompts, responses))
    r[:, :2] = 1.0
    return pi[0], pi[1], r


def assert_within_se(sample_mean, stderr, exact):
    gap = np.abs(sample_mean - exact)
    assert np.all(gap <= Z * stderr + 1e-12), f"max gap / SE = {np.max(gap / np.maximum(stderr, 1e-300)):.2f}"


def test_grpo_mean_is_shrunk_true_gradient():
    pi_a, pi_b, r = policies(1)
    mc = monte_carlo(Method("grpo"), pi_a, pi_b, r, G, Draws(20_000, seed=1))
    assert_within_se(mc.mean, mc.stderr, (1 - 1 / G) * true_gradient(pi_a, r))
    assert np.allclose(expected_grpo(pi_a, r, G), (1 - 1 / G) * true_gradient(pi_a, r))


@pytest.mark.parametrize("gamma", [0.0, 0.5, 1.0])
def test_xgrpo_mean(gamma):
    pi_a, pi_b, r = policies(2)
    mc = monte_carlo(Method("xgrpo", gamma=gamma), pi_a, pi_b, r, G, Draws(20_000, seed=2))
    exact = expected_xgrpo(pi_a, r, G, gamma)
    assert_within_se(mc.mean, mc.stderr, exact)
    if gamma == 0.5:  # the statement of docs/architecture.md, The bandit analysis
        assert np.allclose(exact, (1 - 1 / (2 * G)) * true_gradient(pi_a, r))
    if gamma == 0.0:  # no peer weight is GRPO
        assert np.allclose(exact, expected_grpo(pi_a, r, G))


def test_xgrpo_differs_from_grpo_by_more_than_noise():
    """The closed forms are distinguishable: the XGRPO sample mean is far from GRPO's expectation."""
    pi_a, pi_b, r = policies(3)
    mc = monte_carlo(Method("xgrpo", gamma=1.0), pi_a, pi_b, r, G, Draws(40_000, seed=3))
    gap = np.abs(mc.mean - expected_grpo(pi_a, r, G)) / mc.stderr
    assert gap.max() > 2 * Z


@pytest.mark.parametrize("sigma", [0.25, 0.5])
def test_is_prp_unbiased_exactly_when_mu_is_minus_half_sigma_squared(sigma):
    pi_a, pi_b, r = policies(4, spread=0.5)
    unbiased_target = (1 - 1 / (2 * G)) * true_gradient(pi_a, r)  # the pooled baseline's shrinkage, as XGRPO
    fair = monte_carlo(Method("prp", mu_t=-sigma ** 2 / 2, sigma_t=sigma), pi_a, pi_b, r, G, Draws(40_000, seed=4))
    assert_within_se(fair.mean, fair.stderr, unbiased_target)
    assert np.allclose(expected_prp(pi_a, pi_b, r, G, mu_t=-sigma ** 2 / 2, sigma_t=sigma), unbiased_target)
    biased = monte_carlo(Method("prp", mu_t=0.0, sigma_t=sigma), pi_a, pi_b, r, G, Draws(40_000, seed=5))
    exact = expected_prp(pi_a, pi_b, r, G, mu_t=0.0, sigma_t=sigma)
    assert_within_se(biased.mean, biased.stderr, exact)
    factor = 0.5 * (1 + math.exp(sigma ** 2 / 2))  # own half + e^{mu + sigma^2/2} peer half
    assert np.allclose(exact, factor * unbiased_target)
    assert (np.abs(biased.mean - unbiased_target) / biased.stderr).max() > Z


@pytest.mark.parametrize("w,clip,mu,sigma", [(0.3, 1.0, 0.0, 0.5), (2.0, 1.5, -0.1, 0.8), (0.05, 2.0, 0.3, 1.2),
                                              (1.0, math.inf, -0.125, 0.5), (0.7, 0.5, 0.0, 0.0)])
def test_truncated_lognormal_moments(w, clip, mu, sigma):
    xi = np.random.default_rng(6).normal(mu, sigma, 400_000)
    draws = np.minimum(clip, w * np.exp(xi))
    se = draws.std() / math.sqrt(draws.size)
    assert abs(draws.mean() - truncated_lognormal_mean(w, clip, mu, sigma)) <= Z * se + 1e-12
    se2 = (draws ** 2).std() / math.sqrt(draws.size)
    assert abs((draws ** 2).mean() - truncated_lognormal_second_moment(w, clip, mu, sigma)) <= Z * se2 + 1e-12


@pytest.mark.parametrize("clip,sigma", [(1.0, 0.0), (2.0, 0.5), (0.8, 1.0)])
def test_truncated_prp_mean(clip, sigma):
    pi_a, pi_b, r = policies(7)
    method = Method("prp", clip=clip, sigma_t=sigma)
    mc = monte_carlo(method, pi_a, pi_b, r, G, Draws(30_000, seed=7))
    assert_within_se(mc.mean, mc.stderr, expected_prp(pi_a, pi_b, r, G, clip=clip, sigma_t=sigma))


def test_naive_prp_mean():
    pi_a, pi_b, r = policies(8)
    mc = monte_carlo(Method("prp_naive"), pi_a, pi_b, r, G, Draws(30_000, seed=8))
    assert_within_se(mc.mean, mc.stderr, expected_prp(pi_a, pi_b, r, G, naive=True))


def peer_term_draws(pi_a, pi_b, r, baseline, mu, sigma, reps, seed):
    """||w e^xi (r(y) - b) s_a(y)||^2 for y ~ pi_b, one draw per replicate and prompt. -> (reps, M)."""
    rng = np.random.default_rng(seed)
    y = sample_responses(pi_b, (reps, pi_a.shape[0], 1), rng)
    ratio = np.take_along_axis(np.broadcast_to(pi_a / pi_b, (reps, *pi_a.shape)), y, -1)
    reward = np.take_along_axis(np.broadcast_to(r, (reps, *r.shape)), y, -1)
    coef = ratio * np.exp(rng.normal(mu, sigma, y.shape)) * (reward - baseline)
    return (weighted_scores(coef, y, pi_a) ** 2).sum(-1), (ratio * np.exp(rng.normal(mu, sigma, y.shape)))[..., 0]


def test_prp_second_moment_follows_chi_square():
    pi_a, pi_b, r = policies(9, spread=0.7)
    mu, sigma, baseline = -0.08, 0.4, 0.3
    norm2, weight = peer_term_draws(pi_a, pi_b, r, baseline, mu, sigma, reps=200_000, seed=9)
    exact = prp_peer_second_moment(pi_a, pi_b, r, baseline, mu, sigma)
    assert_within_se(norm2.mean(0), norm2.std(0) / math.sqrt(norm2.shape[0]), exact)
    w2 = weight ** 2
    assert_within_se(w2.mean(0), w2.std(0) / math.sqrt(w2.shape[0]), ratio_second_moment(pi_a, pi_b, mu, sigma))
    assert np.allclose(ratio_second_moment(pi_a, pi_b), 1 + chi2(pi_a, pi_b))
    assert np.allclose(ess_fraction(pi_a, pi_b), 1 / (1 + chi2(pi_a, pi_b)))


def test_prp_second_moment_grows_as_the_peer_loses_coverage():
    """B moves its mass off A's mode: chi^2 and the PRP second moment rise together, without bound."""
    pi_a = np.array([[0.7, 0.1, 0.1, 0.1]])
    r = np.array([[1.0, 0.0, 0.0, 0.0]])
    coverage = [0.5, 0.1, 1e-2, 1e-3, 1e-4]
    pi_b = np.array([[c, (1 - c) / 3, (1 - c) / 3, (1 - c) / 3] for c in coverage])
    chis = chi2(np.repeat(pi_a, len(coverage), 0), pi_b)
    moments = prp_peer_second_moment(np.repeat(pi_a, len(coverage), 0), pi_b, np.repeat(r, len(coverage), 0), 0.5)
    assert np.all(np.diff(chis) > 0) and np.all(np.diff(moments) > 0)
    assert moments[-1] > 1e3 * moments[0]


def rescue_term_draws(method, pi_a, pi_b, r, reps, seed):
    """The SGT update minus the GRPO update on the same samples: lam 1[x in R] s_a(y*). -> (reps, M, K)."""
    rng = np.random.default_rng(seed)
    y_a = sample_responses(pi_a, (reps, pi_a.shape[0], G), rng)
    y_b = sample_responses(pi_b, (reps, pi_a.shape[0], G), rng)
    return update(method, pi_a, pi_b, r, y_a, y_b, rng) - update(Method("grpo"), pi_a, pi_b, r, y_a, y_b, rng)


@pytest.mark.parametrize("eta,tau", [(0.0, 0.0), (0.2, 0.0), (0.0, 0.25)])
def test_sgt_mean_and_variance_bound(eta, tau):
    pi_a, pi_b, r = policies(10, spread=1.5)
    pi_a = pi_a * np.where(r > 0, 0.05, 1.0)  # A rarely succeeds: the gate fires often
    pi_a /= pi_a.sum(-1, keepdims=True)
    method = Method("sgt", lam=0.3, eta=eta, tau=tau)
    mc = monte_carlo(method, pi_a, pi_b, r, G, Draws(30_000, seed=10))
    assert_within_se(mc.mean, mc.stderr, expected_sgt(pi_a, pi_b, r, G, 0.3, eta, tau))
    norm2 = (rescue_term_draws(method, pi_a, pi_b, r, reps=30_000, seed=11) ** 2).sum(-1)
    exact = sgt_rescue_second_moment(pi_a, pi_b, r, G, 0.3, eta, tau)
    assert_within_se(norm2.mean(0), norm2.std(0) / math.sqrt(norm2.shape[0]), exact)
    bound = 2 * 0.3 ** 2 * gate_probability(pi_a, pi_b, r, G, tau)
    assert np.all(exact <= bound) and np.all(norm2 <= 2 * 0.3 ** 2 + 1e-12)


def test_sgt_variance_stays_bounded_where_prp_explodes():
    pi_a = np.array([[1e-4, 0.9, 0.05, 0.05 - 1e-4]])
    pi_b = np.array([[0.6, 1e-7, 0.2, 0.2 - 1e-7]])
    r = np.array([[1.0, 0.0, 0.0, 0.0]])
    assert prp_peer_second_moment(pi_a, pi_b, r, 0.5) > 1e3
    assert sgt_rescue_second_moment(pi_a, pi_b, r, G, lam=1.0) <= 2.0
    assert np.all(score_norm2(pi_a) <= 2.0)


def one_hard_prompt(eps):
    """A puts eps on the only correct response; B solves it with probability 0.6."""
    pi_a = np.array([[eps, 0.5 - eps, 0.3, 0.2]])
    pi_b = np.array([[0.6, 0.1, 0.1, 0.2]])
    return pi_a, pi_b, np.array([[1.0, 0.0, 0.0, 0.0]])


def test_sgt_support_gain_stays_order_one_as_pa_vanishes():
    lam = 0.1
    gains = {}
    for eps in (1e-2, 1e-4, 1e-6):
        pi_a, pi_b, r = one_hard_prompt(eps)
        p_res = gate_probability(pi_a, pi_b, r, G)[0]
        gains[eps] = {name: support_gain(pi_a, r, closed_form_mean(Method(name, sigma_t=0.3, mu_t=-0.045), pi_a,
                                                                    pi_b, r, G))[0]
                      for name in ("grpo", "sgt", "prp")}
        # single correct response: S_SGT - S_GRPO = lam P_res ||e_y* - pi_A||^2 = lam P_res (1 - 2 eps + ||pi_A||^2)
        rescue_gain = lam * p_res * (1 - 2 * eps + (pi_a ** 2).sum())
        assert gains[eps]["sgt"] == pytest.approx(gains[eps]["grpo"] + rescue_gain, rel=1e-9)
        assert gains[eps]["sgt"] > 0.1 * lam                       # O(1) (times lam)
        assert abs(gains[eps]["grpo"]) < 10 * eps and abs(gains[eps]["prp"]) < 10 * eps  # O(p_A)
    assert gains[1e-6]["grpo"] < gains[1e-2]["grpo"] / 1000
    pi_a, pi_b, r = one_hard_prompt(1e-4)  # and the Monte Carlo estimator agrees with the closed form
    mc = monte_carlo(Method("sgt"), pi_a, pi_b, r, G, Draws(20_000, seed=12))
    assert_within_se(mc.mean, mc.stderr, expected_sgt(pi_a, pi_b, r, G))


def test_hacpo_discards_out_of_support_peer_successes_and_zeroes_uniform_groups():
    pi_a, pi_b, r = one_hard_prompt(1e-4)
    y_a = np.ones((1, 1, G), dtype=int)               # A fails everywhere (a uniform group)
    own_only = update(Method("hacpo"), pi_a, pi_b, r, y_a, y_a, np.random.default_rng(0))
    assert np.allclose(own_only, 0.0)                 # uniform rewards: advantages 0 (the official code's guard)
    # B's successes have ratio 1e-4 / 0.6, below the clip's lower bound 1 - delta: zero gradient, no rescue
    hacpo = monte_carlo(Method("hacpo"), pi_a, pi_b, r, G, Draws(20_000, seed=13), capability_ratio=1.0)
    sgt = monte_carlo(Method("sgt"), pi_a, pi_b, r, G, Draws(20_000, seed=13))
    sgt_gain = support_gain(pi_a, r, sgt.mean)[0]
    assert sgt_gain > 0.05 and abs(support_gain(pi_a, r, hacpo.mean)[0]) < 0.2 * sgt_gain


def test_environment_types_supports_and_validation():
    env = make_env(EnvConfig(prompts=100, kappa=0.5))
    pi_a, pi_b = env.probs()
    p_a, p_b = (pi_a * env.correct).sum(-1), (pi_b * env.correct).sum(-1)
    names = env.type_names
    assert set(names) == set(PROMPT_TYPES)
    assert p_a[names == "A-hard/B-easy"].max() < 0.01 < 0.2 < p_b[names == "A-hard/B-easy"].min()
    assert p_b[names == "B-hard/A-easy"].max() < 0.01 < 0.2 < p_a[names == "B-hard/A-easy"].min()
    assert make_env(EnvConfig(kappa=0.0)).overlap().mean() < make_env(EnvConfig(kappa=1.0)).overlap().mean()
    with pytest.raises(ValueError, match="kappa"):
        EnvConfig(kappa=1.5)
    with pytest.raises(ValueError, match="name='ppo'"):
        Method("ppo")
    with pytest.raises(ValueError, match="eta"):
        Method("sgt", eta=2.0)


def test_dynamics_is_deterministic_and_sgt_rescues_where_grpo_cannot():
    config = DynamicsConfig(steps=60, held_out=100)
    env = EnvConfig(prompts=100)
    first = simulate(env, Method("sgt"), config)
    assert first.equals(simulate(env, Method("sgt"), config))
    table = summarise(pd_concat([first, simulate(env, Method("grpo"), config)]))
    rescue = table.set_index(["method", "policy"])["rescue-type accuracy"]
    assert rescue.loc[("grpo", "A")] < 0.05 and rescue.loc[("grpo", "B")] < 0.05
    assert rescue.loc[(Method("sgt").label, "A")] > 0.3 and rescue.loc[(Method("sgt").label, "B")] > 0.3


def pd_concat(frames):
    import pandas as pd
    return pd.concat(frames, ignore_index=True)
