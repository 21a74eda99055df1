"""Closed-form moments of the per-prompt update estimators (a reconstruction; docs/architecture.md, The bandit
analysis).

Everything lives in logit space of one tabular softmax policy per prompt: arrays (..., K) over the K
responses, r (..., K) in {0, 1} the reward of each response. The score of a response is
s(y) = e_y - pi, so sum_y v(y) s(y) = v - (sum_y v(y)) pi. Updates are ascent directions on
J = E_{y ~ pi} r(y) with group size G; the learner is "a", its peer "b".
"""
from __future__ import annotations

import numpy as np
from scipy.special import ndtr
from scipy.stats import binom


def success_prob(pi: np.ndarray, r: np.ndarray) -> np.ndarray:
    """p = sum_y pi(y) r(y). (..., K) -> (...)."""
    return (pi * r).sum(axis=-1)


def true_gradient(pi: np.ndarray, r: np.ndarray) -> np.ndarray:
    """g* = grad_theta p = pi * (r - p). (..., K)."""
    return pi * (r - success_prob(pi, r)[..., None])


def support_direction(pi: np.ndarray, r: np.ndarray) -> np.ndarray:
    """grad log p = pi_{|C} - pi with pi_{|C} = pi r / p. (..., K)."""
    return pi * r / success_prob(pi, r)[..., None] - pi


def support_gain(pi: np.ndarray, r: np.ndarray, mean_update: np.ndarray) -> np.ndarray:
    """S = <grad log p, E g_hat>: first-order change of log p per unit step. (...)."""
    return (support_direction(pi, r) * mean_update).sum(axis=-1)


def combine_scores(weights: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """sum_y weights(y) s(y) = weights - (sum_y weights(y)) pi. (..., K)."""
    return weights - weights.sum(axis=-1, keepdims=True) * pi


def score_norm2(pi: np.ndarray) -> np.ndarray:
    """||s(y)||^2 = ||e_y - pi||^2 = 1 - 2 pi(y) + ||pi||^2 <= 2, per response. (..., K)."""
    return 1.0 - 2.0 * pi + (pi ** 2).sum(axis=-1, keepdims=True)


def chi2(pi_a: np.ndarray, pi_b: np.ndarray) -> np.ndarray:
    """chi^2(pi_a || pi_b) = sum_y pi_a^2 / pi_b - 1. (...)."""
    return (pi_a ** 2 / pi_b).sum(axis=-1) - 1.0


def ratio_second_moment(pi_a, pi_b, mu_t: float = 0.0, sigma_t: float = 0.0) -> np.ndarray:
    """E_{y ~ pi_b, xi}[(w(y) e^xi)^2] = e^{2 mu + 2 sigma^2} (1 + chi^2(pi_a || pi_b)); ESS/G is its inverse."""
    return np.exp(2 * mu_t + 2 * sigma_t ** 2) * (1.0 + chi2(pi_a, pi_b))


def truncated_lognormal_mean(w: np.ndarray, clip: float, mu_t: float = 0.0, sigma_t: float = 0.0) -> np.ndarray:
    """E_xi[min(c, w e^xi)], xi ~ N(mu, sigma^2): the lognormal partial expectation.

    = w e^{mu + sigma^2/2} Phi(d - sigma) + c (1 - Phi(d)),  d = (ln(c / w) - mu) / sigma.
    sigma = 0 gives min(c, w e^mu); c = inf gives w e^{mu + sigma^2/2}.
    """
    w = np.asarray(w, dtype=float)
    if np.isinf(clip):
        return w * np.exp(mu_t + sigma_t ** 2 / 2)
    if sigma_t == 0:
        return np.minimum(clip, w * np.exp(mu_t))
    d = (np.log(clip / w) - mu_t) / sigma_t
    return w * np.exp(mu_t + sigma_t ** 2 / 2) * ndtr(d - sigma_t) + clip * (1.0 - ndtr(d))


def truncated_lognormal_second_moment(w: np.ndarray, clip: float, mu_t: float = 0.0,
                                      sigma_t: float = 0.0) -> np.ndarray:
    """E_xi[min(c, w e^xi)^2] = w^2 e^{2 mu + 2 sigma^2} Phi(d - 2 sigma) + c^2 (1 - Phi(d)), d as above."""
    w = np.asarray(w, dtype=float)
    if np.isinf(clip):
        return w ** 2 * np.exp(2 * mu_t + 2 * sigma_t ** 2)
    if sigma_t == 0:
        return np.minimum(clip, w * np.exp(mu_t)) ** 2
    d = (np.log(clip / w) - mu_t) / sigma_t
    return w ** 2 * np.exp(2 * mu_t + 2 * sigma_t ** 2) * ndtr(d - 2 * sigma_t) + clip ** 2 * (1.0 - ndtr(d))


def ess_fraction(pi_a, pi_b, clip: float = np.inf, mu_t: float = 0.0, sigma_t: float = 0.0) -> np.ndarray:
    """ESS/G = (E_b w~)^2 / E_b w~^2 of the truncated noisy weights w~ = min(c, w e^xi); untruncated with
    mu = -sigma^2/2 this is 1 / (e^{sigma^2} (1 + chi^2)). (...)."""
    w = pi_a / pi_b
    first = (pi_b * truncated_lognormal_mean(w, clip, mu_t, sigma_t)).sum(-1)
    second = (pi_b * truncated_lognormal_second_moment(w, clip, mu_t, sigma_t)).sum(-1)
    return first ** 2 / second


def expected_grpo(pi: np.ndarray, r: np.ndarray, group_size: int) -> np.ndarray:
    """E g_GRPO = (1 - 1/G) g* (mean baseline left in the group, no std)."""
    return (1.0 - 1.0 / group_size) * true_gradient(pi, r)


def expected_xgrpo(pi: np.ndarray, r: np.ndarray, group_size: int, gamma: float = 0.5) -> np.ndarray:
    """E g_XGRPO = (1 - (1 - gamma)/G) g*; b = (1 - gamma) mean(own r) + gamma mean(peer r).

    The peer's rewards are independent of the learner's samples and E_pi s = 0, so only the
    learner's own reward inside b shrinks the signal; gamma = 1/2 gives (1 - 1/(2G)) g*.
    """
    return (1.0 - (1.0 - gamma) / group_size) * true_gradient(pi, r)


def expected_prp(pi_a, pi_b, r, group_size: int, clip: float = np.inf, mu_t: float = 0.0, sigma_t: float = 0.0,
                 naive: bool = False) -> np.ndarray:
    """E g_PRP with the pooled group (G own + G peer samples, b = mean of the 2G rewards, loss mean over 2G).

    own half:  1/2 (1 - 1/(2G)) g*
    peer half: 1/2 sum_y pi_b(y) m(y) [(1 - 1/(2G)) r(y) - b_-j] s_a(y),  b_-j = (G p_a + (G-1) p_b) / (2G),
    m(y) = E_xi min(c, w(y) e^xi) with w = pi_a / pi_b (truncated_lognormal_mean); naive PRP: m = 1.
    Untruncated: the peer half is e^{mu + sigma^2/2} times the own half, so PRP is an unbiased
    multiple of g* exactly when mu_T = -sigma_T^2 / 2.
    """
    g = group_size
    p_a, p_b = success_prob(pi_a, r)[..., None], success_prob(pi_b, r)[..., None]
    ratio_mean = np.ones_like(pi_a) if naive else truncated_lognormal_mean(pi_a / pi_b, clip, mu_t, sigma_t)
    baseline_others = (g * p_a + (g - 1) * p_b) / (2 * g)
    peer = combine_scores(pi_b * ratio_mean * ((1 - 1 / (2 * g)) * r - baseline_others), pi_a)
    return 0.5 * (1 - 1 / (2 * g)) * true_gradient(pi_a, r) + 0.5 * peer


def gate_probability(pi_a, pi_b, r, group_size: int, tau: float = 0.0) -> np.ndarray:
    """P(x in R) = P(k_a <= tau G) * (1 - (1 - p_b)^G); tau = 0 gives (1 - p_a)^G (1 - (1 - p_b)^G)."""
    p_a, p_b = success_prob(pi_a, r), success_prob(pi_b, r)
    return binom.cdf(np.floor(tau * group_size + 1e-9), group_size, p_a) * (1.0 - (1.0 - p_b) ** group_size)


def rescue_target_weights(pi_b, r, eta: float = 0.0) -> np.ndarray:
    """Distribution of the SGT target: (1 - eta) pi_b(y | C) + eta * uniform over the wrong responses. (..., K)."""
    wrong = 1.0 - r
    return (1 - eta) * pi_b * r / success_prob(pi_b, r)[..., None] + eta * wrong / wrong.sum(axis=-1, keepdims=True)


def expected_sgt(pi_a, pi_b, r, group_size: int, lam: float = 0.1, eta: float = 0.0, tau: float = 0.0) -> np.ndarray:
    """E g_SGT = E g_GRPO + lam P(x in R) sum_y q(y) s_a(y), q = rescue_target_weights (THL corruption eta)."""
    rescue = combine_scores(rescue_target_weights(pi_b, r, eta), pi_a)
    gate = gate_probability(pi_a, pi_b, r, group_size, tau)[..., None]
    return expected_grpo(pi_a, r, group_size) + lam * gate * rescue


def sgt_rescue_second_moment(pi_a, pi_b, r, group_size: int, lam: float = 0.1, eta: float = 0.0,
                             tau: float = 0.0) -> np.ndarray:
    """E ||lam 1[x in R] s_a(y*)||^2 = lam^2 P(x in R) sum_y q(y) ||s_a(y)||^2 <= 2 lam^2 P(x in R). (...)."""
    q = rescue_target_weights(pi_b, r, eta)
    return lam ** 2 * gate_probability(pi_a, pi_b, r, group_size, tau) * (q * score_norm2(pi_a)).sum(axis=-1)


def prp_peer_second_moment(pi_a, pi_b, r, baseline: float, mu_t: float = 0.0, sigma_t: float = 0.0) -> np.ndarray:
    """E_{y ~ pi_b, xi} ||w e^xi (r(y) - b) s_a(y)||^2 for a constant baseline b (untruncated).

    = e^{2 mu + 2 sigma^2} sum_y pi_a(y)^2 / pi_b(y) (r(y) - b)^2 ||s_a(y)||^2: it grows with the ratio's
    second moment 1 + chi^2(pi_a || pi_b) (ratio_second_moment) and blows up where pi_b << pi_a.
    """
    per_response = pi_a ** 2 / pi_b * (r - baseline) ** 2 * score_norm2(pi_a)
    return np.exp(2 * mu_t + 2 * sigma_t ** 2) * per_response.sum(-1)
