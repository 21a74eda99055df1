"""HACPO's primitives (from the official code of the HACPO paper, arXiv 2603.02604; docs/architecture.md, The
probes): capability tracking, the capability-aware mixed baseline, exponential importance sampling and stepwise
clipping.

Pure functions and one small stateful tracker; the probes `hacpo`, `gspo` and `naive` (mrl/core/probes/hacpo.py)
put them together (beside this file). Nothing here imports the rest of mrl.
"""
from __future__ import annotations

from collections import deque

import torch
from torch import Tensor

OMEGA_CLIP = (0.1, 10.0)


class CapabilityTracker:
    """P_k: the rolling mean over the last `window` steps of each agent's positive-reward rate (K = 5).

    Each entry is floored at 1e-8; the current step is included (update before use); during the first
    `warmup_steps` updates every ratio is 1. omega(k, j) = clip(P_k / P_j, 0.1, 10).
    """

    def __init__(self, window: int = 5, warmup_steps: int = 0, floor: float = 1e-8):
        if window < 1 or warmup_steps < 0:
            raise ValueError(f"window={window} must be >= 1 and warmup_steps={warmup_steps} >= 0")
        self.window, self.warmup_steps, self.floor = window, warmup_steps, floor
        self.rates: dict[str, deque] = {}
        self.updates = 0

    def update(self, rates: dict[str, float]) -> None:
        """Record one step's positive-reward rate of each agent ({agent: fraction of rewards > 0})."""
        for agent, rate in rates.items():
            self.rates.setdefault(agent, deque(maxlen=self.window)).append(max(float(rate), self.floor))
        self.updates += 1

    def capability(self, agent: str) -> float:
        rates = self.rates.get(agent)
        if not rates:
            raise KeyError(f"no positive-reward rate recorded for agent {agent!r}")
        return sum(rates) / len(rates)

    def omega(self, learner: str, source: str) -> float:
        """omega(learner, source) = clip(P_learner / P_source, 0.1, 10); 1 during the warm-up or for itself."""
        if learner == source or self.updates <= self.warmup_steps:
            return 1.0
        ratio = self.capability(learner) / self.capability(source)
        return min(max(ratio, OMEGA_CLIP[0]), OMEGA_CLIP[1])

    def state_dict(self) -> dict:
        return {"window": self.window, "warmup_steps": self.warmup_steps, "floor": self.floor,
                "rates": {agent: list(rates) for agent, rates in self.rates.items()}, "updates": self.updates}

    def load_state_dict(self, state: dict) -> None:
        self.window, self.warmup_steps, self.floor = state["window"], state["warmup_steps"], state["floor"]
        self.rates = {agent: deque(rates, maxlen=self.window) for agent, rates in state["rates"].items()}
        self.updates = state["updates"]


def mixed_baseline(rewards: Tensor, omegas: Tensor) -> Tensor:
    """mu^(k) = (1 / (nG)) sum_j sum_i omega(k, j) R(y_i^j): the capability-weighted mean of one prompt's rewards.

    rewards, omegas: (..., N) every agent's samples of one prompt and omega(k, source) of each. Unbiased for the
    learner's success rate when omega is the true ratio P_k / P_j: E[omega(k,j) R^j] = (P_k/P_j) P_j = P_k.
    """
    return (omegas * rewards).mean(dim=-1)


def capability_advantages(rewards: Tensor, omegas: Tensor, is_own: Tensor, eps: float = 1e-6,
                          mode: str = "capability") -> Tensor:
    """HACPO's advantages of one prompt's pooled samples (own and peers'), as the official code computes them.

    mode capability: b = mixed_baseline; a uniform-reward group gets b = its reward (advantages 0); a b above 1
    falls back to the learner's own mean. mode pooled: b = the plain mean of all samples. mode own: b = the
    mean of the own samples. A = (r - b) / (std(all r, unbiased) + eps). Shapes (N,).
    """
    if mode == "capability":
        baseline = mixed_baseline(rewards, omegas)
        if bool((rewards == rewards[0]).all()):
            baseline = rewards[0]
        elif baseline > 1:
            baseline = rewards[is_own].mean()
    elif mode == "pooled":
        baseline = rewards.mean()
    elif mode == "own":
        baseline = rewards[is_own].mean()
    else:
        raise ValueError(f"mode={mode!r} is not allowed; expected one of ['capability', 'pooled', 'own']")
    std = rewards.std() if rewards.numel() > 1 else torch.zeros((), device=rewards.device)
    return (rewards - baseline) / (std + eps)


def stepwise_lower_bound(minibatch: int, delta: float = 0.2, delta_step: float = 0.025) -> float:
    """lower_m = min(1, 1 - delta + m * delta_step): the peer ratio's lower clip bound at minibatch m (from 0)."""
    return min(1.0, 1.0 - delta + minibatch * delta_step)


def peer_objective(log_ratio: Tensor, advantages: Tensor, omega_source: Tensor, lower: float, alpha: float = 1.0,
                   upper: float = 1.0) -> Tensor:
    """J = clip(s, lower, upper) * sg(clip(s, lower, upper))^alpha * omega(source, learner) * A per peer sequence.

    log_ratio: (N,) log s (with gradient), s the sequence-level ratio; advantages, omega_source: (N,). The
    clamp is hard: outside [lower, upper] the term passes no gradient (a sample is "discarded"). Returns (N,).
    """
    clipped = torch.clamp(torch.exp(log_ratio), lower, upper)
    return clipped * clipped.detach() ** alpha * omega_source * advantages
