"""Sampled update estimators of each sharing method and their Monte Carlo moments (docs/architecture.md, The
bandit analysis).

An estimator turns one step's samples, batches of shape (..., M, G) with leading replicate axes, into a logit-space
update per prompt, vectorised (no Python loop over samples). Every one is a weighted sum of scores,
g_hat = sum_i c_i e_{y_i} - (sum_i c_i) pi_learner, so each method only says how it weights its own and its peer's
samples (`_coefficients`). The methods and their knobs: docs/architecture.md, The bandit analysis (The estimators).
"""
from __future__ import annotations

import dataclasses
import math

import numpy as np

from mrl.core.bandit.closed_form import (expected_grpo, expected_prp, expected_sgt, expected_xgrpo, success_prob)

METHODS = ("grpo", "xgrpo", "prp", "prp_naive", "sgt", "hacpo")


@dataclasses.dataclass(frozen=True)
class Method:
    """A sharing method and its knobs (knobs another method uses are ignored)."""
    name: str
    """one of METHODS."""
    gamma: float = 0.5
    """xgrpo: peer weight in the baseline (0: GRPO, 1/2: plain pooling)."""
    clip: float = math.inf
    """prp: truncation c of the importance weight."""
    mu_t: float = 0.0
    """prp, hacpo: mean of the THL log-ratio error xi."""
    sigma_t: float = 0.0
    """prp, hacpo: std of the THL log-ratio error xi."""
    lam: float = 0.1
    """sgt: weight of the rescue NLL."""
    eta: float = 0.0
    """sgt: probability that the retokenized target is corrupted into a wrong response."""
    tau: float = 0.0
    """sgt: the gate fires when k_a / G <= tau (tau = 0: all own samples failed)."""
    delta: float = 0.2
    """hacpo: lower clip bound 1 - delta of the peer ratio (minibatch m = 0)."""
    alpha: float = 1.0
    """hacpo: exponent of the stop-gradient ratio."""

    def __post_init__(self):
        if self.name not in METHODS:
            raise ValueError(f"method name={self.name!r} is not allowed; expected one of {list(METHODS)}")
        checks = {"gamma": 0 <= self.gamma <= 1, "clip": self.clip > 0, "sigma_t": self.sigma_t >= 0,
                  "lam": self.lam >= 0, "eta": 0 <= self.eta <= 1, "tau": 0 <= self.tau < 1,
                  "delta": 0 <= self.delta <= 1, "alpha": self.alpha >= 0}
        for field, ok in checks.items():
            if not ok:
                raise ValueError(f"method {self.name}: {field}={getattr(self, field)!r} is out of range "
                                 "(gamma, eta, delta in [0, 1]; tau in [0, 1); clip > 0; sigma_t, lam, alpha >= 0)")

    @property
    def label(self) -> str:
        knobs = {"xgrpo": f"gamma={self.gamma:g}", "prp": f"c={self.clip:g}, sigma_T={self.sigma_t:g}",
                 "sgt": f"lambda={self.lam:g}, eta={self.eta:g}", "hacpo": f"delta={self.delta:g}"}
        return f"{self.name} ({knobs[self.name]})" if self.name in knobs else self.name


def sample_responses(pi: np.ndarray, shape: tuple, rng: np.random.Generator) -> np.ndarray:
    """y ~ pi by inverse CDF. pi (M, K), shape (..., M, G) -> int (..., M, G)."""
    cdf = np.cumsum(pi, axis=-1)
    u = rng.random(shape) * cdf[..., -1:]  # guards against cdf[-1] rounding below 1
    return np.minimum((u[..., None] >= cdf[:, None, :]).sum(axis=-1), pi.shape[-1] - 1)


def rewards_of(r: np.ndarray, y: np.ndarray) -> np.ndarray:
    """r(x, y_i). r (M, K), y (..., M, G) -> (..., M, G)."""
    return np.take_along_axis(np.broadcast_to(r, y.shape[:-1] + r.shape[-1:]), y, axis=-1)


def probs_of(pi: np.ndarray, y: np.ndarray) -> np.ndarray:
    """pi(y_i | x). pi (M, K), y (..., M, G) -> (..., M, G)."""
    return rewards_of(pi, y)


def weighted_scores(coef: np.ndarray, y: np.ndarray, pi: np.ndarray) -> np.ndarray:
    """sum_i c_i (e_{y_i} - pi). coef, y (..., M, N); pi (M, K) -> (..., M, K)."""
    onehot = y[..., None] == np.arange(pi.shape[-1])
    return np.einsum("...n,...nk->...k", coef, onehot) - coef.sum(axis=-1)[..., None] * pi


def update(method: Method, pi_a, pi_b, r, y_a, y_b, rng: np.random.Generator, capability_ratio: float = 1.0):
    """The learner a's update per prompt from one step's samples. pi (M, K), y (..., M, G) -> (..., M, K).

    y_a are the learner's own samples, y_b its peer's (the peer's own rollouts). capability_ratio
    is P_a / P_b (hacpo's omega); rng draws the THL errors and SGT targets.
    """
    own_coef, peer_coef, target = _coefficients(method, pi_a, pi_b, r, y_a, y_b, rng, capability_ratio)
    g_hat = weighted_scores(own_coef, y_a, pi_a)
    if peer_coef is not None:
        g_hat = g_hat + weighted_scores(peer_coef, y_b, pi_a)
    if target is not None:
        target_coef, target_y = target
        g_hat = g_hat + weighted_scores(target_coef[..., None], target_y[..., None], pi_a)
    return g_hat


def _coefficients(method, pi_a, pi_b, r, y_a, y_b, rng, capability_ratio):
    """(own c_i, peer c_j or None, (target coefficient, target response) or None)."""
    r_a, r_b = rewards_of(r, y_a), rewards_of(r, y_b)
    g = y_a.shape[-1]
    name = method.name
    if name in ("grpo", "sgt"):
        own = (r_a - r_a.mean(axis=-1, keepdims=True)) / g
        return own, None, (_rescue_target(method, pi_b, r, r_a, r_b, y_b, rng) if name == "sgt" else None)
    if name == "xgrpo":
        baseline = (1 - method.gamma) * r_a.mean(-1, keepdims=True) + method.gamma * r_b.mean(-1, keepdims=True)
        return (r_a - baseline) / g, None, None
    if name in ("prp", "prp_naive"):
        baseline = (r_a.sum(-1, keepdims=True) + r_b.sum(-1, keepdims=True)) / (2 * g)
        weight = 1.0 if name == "prp_naive" else np.minimum(method.clip, _noisy_ratio(method, pi_a, pi_b, y_b, rng))
        return (r_a - baseline) / (2 * g), weight * (r_b - baseline) / (2 * g), None
    return _hacpo_coefficients(method, pi_a, pi_b, r_a, r_b, y_b, rng, capability_ratio)


def _noisy_ratio(method, pi_a, pi_b, y_b, rng):
    """w(y) e^xi with w = pi_a / pi_b at the peer's samples and xi ~ N(mu_T, sigma_T^2)."""
    xi = rng.normal(method.mu_t, method.sigma_t, y_b.shape) if method.sigma_t > 0 else method.mu_t
    return probs_of(pi_a, y_b) / probs_of(pi_b, y_b) * np.exp(xi)


def _rescue_target(method, pi_b, r, r_a, r_b, y_b, rng):
    """SGT: gate 1[k_a <= tau G and k_b >= 1] times lam, and one uniform peer success (or its corruption)."""
    g = r_a.shape[-1]
    gate = (r_a.sum(-1) <= np.floor(method.tau * g + 1e-9)) & (r_b.sum(-1) >= 1)
    pick = np.argmax(r_b * rng.random(r_b.shape), axis=-1)          # uniform over the successful samples
    target = np.take_along_axis(y_b, pick[..., None], axis=-1)[..., 0]
    if method.eta > 0:
        wrong = 1.0 - r                                                # (M, K) the corruption's support
        corrupted = sample_responses(wrong / wrong.sum(-1, keepdims=True), target.shape + (1,), rng)[..., 0]
        target = np.where(rng.random(target.shape) < method.eta, corrupted, target)
    return method.lam * gate, target


def _hacpo_coefficients(method, pi_a, pi_b, r_a, r_b, y_b, rng, capability_ratio):
    """HACPO in the bandit (|y| = 1, one minibatch: m = 0, own ratio 1 inside GSPO's clip).

    With the official code's guards: a uniform-reward group has zero advantages; a weighted baseline
    above 1 falls back to the learner's own mean.
    """
    g = r_a.shape[-1]
    omega_ab = float(np.clip(capability_ratio, 0.1, 10.0))         # omega(a, b) = P_a / P_b weights the baseline
    omega_ba = float(np.clip(1.0 / capability_ratio, 0.1, 10.0))   # omega(b, a) weights the peer's loss terms
    baseline = (r_a.sum(-1, keepdims=True) + omega_ab * r_b.sum(-1, keepdims=True)) / (2 * g)
    baseline = np.where(baseline > 1.0, r_a.mean(-1, keepdims=True), baseline)     # guard 2: own mean
    pooled = np.concatenate([r_a, r_b], axis=-1)
    uniform = pooled.min(-1, keepdims=True) == pooled.max(-1, keepdims=True)
    baseline = np.where(uniform, pooled[..., :1], baseline)                       # guard 1: advantages 0
    scale = pooled.std(axis=-1, ddof=1, keepdims=True) + 1e-6
    ratio = _noisy_ratio(method, pi_a, pi_b, y_b, rng)
    kept = (ratio >= min(1.0, 1.0 - method.delta)) & (ratio <= 1.0)   # the hard clamp passes no gradient outside
    peer = kept * ratio ** (1.0 + method.alpha) * omega_ba * (r_b - baseline) / scale
    return (r_a - baseline) / scale / (2 * g), peer / (2 * g), None


def closed_form_mean(method: Method, pi_a, pi_b, r, group_size: int) -> np.ndarray | None:
    """E g_hat in closed form (closed_form.py), or None where only Monte Carlo answers (hacpo)."""
    if method.name == "grpo":
        return expected_grpo(pi_a, r, group_size)
    if method.name == "xgrpo":
        return expected_xgrpo(pi_a, r, group_size, method.gamma)
    if method.name in ("prp", "prp_naive"):
        return expected_prp(pi_a, pi_b, r, group_size, method.clip, method.mu_t, method.sigma_t,
                            naive=method.name == "prp_naive")
    if method.name == "sgt":
        return expected_sgt(pi_a, pi_b, r, group_size, method.lam, method.eta, method.tau)
    return None


@dataclasses.dataclass(frozen=True)
class Moments:
    """Monte Carlo moments of one estimator per prompt over `reps` independent steps."""
    mean: np.ndarray         # (M, K) sample mean of g_hat
    stderr: np.ndarray       # (M, K) its standard error
    second: np.ndarray       # (M,) E ||g_hat||^2
    trace_cov: np.ndarray    # (M,) Tr Cov g_hat
    reps: int


@dataclasses.dataclass(frozen=True)
class Draws:
    """How monte_carlo draws its independent steps."""
    reps: int
    """independent draws of both groups (steps)."""
    seed: int | list[int] = 0
    """seed of numpy's generator (an int, or a list numpy's SeedSequence takes)."""
    chunk: int = 256
    """replicates drawn at once, vectorised (the draws' order depends on it)."""


def monte_carlo(method: Method, pi_a, pi_b, r, group_size: int, draws: Draws,
                capability_ratio: float = 1.0) -> Moments:
    """Moments of `update` over `draws.reps` independent draws of both groups, in chunks of vectorised replicates."""
    reps, chunk = draws.reps, draws.chunk
    rng = np.random.default_rng(draws.seed)
    m, k = pi_a.shape
    total, total_sq, norm_sq = np.zeros((m, k)), np.zeros((m, k)), np.zeros(m)
    for start in range(0, reps, chunk):
        n = min(chunk, reps - start)
        y_a = sample_responses(pi_a, (n, m, group_size), rng)
        y_b = sample_responses(pi_b, (n, m, group_size), rng)
        g_hat = update(method, pi_a, pi_b, r, y_a, y_b, rng, capability_ratio)
        total += g_hat.sum(0)
        total_sq += (g_hat ** 2).sum(0)
        norm_sq += (g_hat ** 2).sum((0, 2))
    mean = total / reps
    var = np.maximum(total_sq / reps - mean ** 2, 0.0) * reps / max(reps - 1, 1)
    return Moments(mean=mean, stderr=np.sqrt(var / reps), second=norm_sq / reps, trace_cov=var.sum(-1), reps=reps)


def capability(pi: np.ndarray, r: np.ndarray) -> float:
    """A policy's positive-reward rate over the prompts (HACPO's P at the static policies)."""
    return float(success_prob(pi, r).mean())


