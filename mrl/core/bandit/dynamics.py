"""The dynamic simulation: both policies trained together under one method (a reconstruction; docs/architecture.md,
The bandit analysis).

Per step, each policy draws G samples on every training prompt; its update is the method's
logit-space estimator (estimators.update) with the other policy's samples as its peer's, pulled
back to the shared parameters theta through the features (grad_theta log pi(y|x) = Phi_x^T (e_y - pi)),
averaged over prompts, one SGD step of size lr. Both policies move from the same state (simultaneous).
Measured every step: expected accuracy on held-out prompts of each type (exact, not sampled), the true
change of the training objective J (negative = a harmful step), and the policy entropy.
"""
from __future__ import annotations

import dataclasses
from collections import deque

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from mrl.core.bandit.closed_form import success_prob
from mrl.core.bandit.env import PROMPT_TYPES, BanditEnv, EnvConfig, make_env
from mrl.core.bandit.estimators import Method, sample_responses, update


@dataclasses.dataclass(frozen=True)
class DynamicsConfig:
    """Knobs of the simulation."""
    steps: int = 100
    """T, simultaneous updates."""
    group_size: int = 8
    """G, samples per prompt and policy."""
    lr: float = 2.0
    """SGD step on theta."""
    held_out: int = 200
    """held-out prompts (same types and skill directions, new draws)."""
    capability_window: int = 5
    """hacpo: rolling window of the positive-reward rate."""
    seed: int = 0
    """sampling seed (the environment has its own)."""

    def __post_init__(self):
        if self.steps < 1 or self.group_size < 2 or self.lr <= 0 or self.held_out < 1:
            raise ValueError(f"DynamicsConfig needs steps >= 1, group_size >= 2, lr > 0, held_out >= 1; got {self}")


def entropy(pi: np.ndarray) -> np.ndarray:
    """H(pi) per prompt. (M, K) -> (M,)."""
    return -(pi * np.log(np.clip(pi, 1e-300, None))).sum(-1)


def objective(env: BanditEnv, theta_a, theta_b) -> np.ndarray:
    """(J_a, J_b): mean success probability over env's prompts."""
    pi_a, pi_b = env.probs(theta_a, theta_b)
    return np.array([success_prob(pi_a, env.correct).mean(), success_prob(pi_b, env.correct).mean()])


def parameter_step(env: BanditEnv, logit_updates: np.ndarray) -> np.ndarray:
    """(1/M) sum_x Phi_x^T g_x: a logit-space update (M, K) pulled back to theta (d,)."""
    return np.einsum("mk,mkd->d", logit_updates, env.features) / logit_updates.shape[0]


def simulate(env_config: EnvConfig, method: Method, config: DynamicsConfig = DynamicsConfig()) -> pd.DataFrame:
    """One run; a row per (step, policy) with held-out accuracy per type, improvement and entropy."""
    train = make_env(env_config)
    test = make_env(env_config, prompts=config.held_out, seed=env_config.seed + 10_000)
    rng = np.random.default_rng([config.seed, 7])
    d = train.features.shape[-1]
    theta = {"A": np.zeros(d), "B": np.zeros(d)}
    rates = {"A": deque(maxlen=config.capability_window), "B": deque(maxlen=config.capability_window)}
    rows = [_measure(test, theta, 0, {"A": np.nan, "B": np.nan})]
    j_before = objective(train, theta["A"], theta["B"])
    shape = (train.correct.shape[0], config.group_size)
    for step in range(1, config.steps + 1):
        pi = dict(zip("AB", train.probs(theta["A"], theta["B"])))
        samples = {name: sample_responses(pi[name], shape, rng) for name in "AB"}
        for name in "AB":
            rates[name].append(float(np.take_along_axis(train.correct, samples[name], axis=-1).mean()))
        new_theta = {}
        for name, peer in (("A", "B"), ("B", "A")):
            ratio = np.mean(rates[name]) / max(np.mean(rates[peer]), 1e-6)
            g_hat = update(method, pi[name], pi[peer], train.correct, samples[name], samples[peer], rng,
                           capability_ratio=ratio)
            new_theta[name] = theta[name] + config.lr * parameter_step(train, g_hat)
        theta = new_theta
        j_after = objective(train, theta["A"], theta["B"])
        rows.append(_measure(test, theta, step, dict(zip("AB", j_after - j_before))))
        j_before = j_after
    frame = pd.concat(rows, ignore_index=True)
    frame.insert(0, "method", method.label)
    return frame


def dynamics_methods() -> list[Method]:
    """The methods the dynamics figure compares, each at its default knob."""
    return [Method("grpo"), Method("xgrpo"), Method("prp", sigma_t=0.5, mu_t=-0.125), Method("prp", clip=2.0),
            Method("prp_naive"), Method("sgt"), Method("hacpo")]


def run_dynamics(methods: list[Method], kappas=(0.5,), seeds=(0, 1, 2), env_config: EnvConfig = EnvConfig(),
                 config: DynamicsConfig = DynamicsConfig(), progress: bool = True) -> pd.DataFrame:
    """simulate() for every method, support overlap and seed (a new environment and sampling seed each)."""
    jobs = [(m, k, s) for k in kappas for s in seeds for m in methods]
    frames = []
    for method, kappa, seed in tqdm(jobs, desc="bandit dynamics", disable=not progress):
        frame = simulate(dataclasses.replace(env_config, kappa=kappa, seed=seed), method,
                         dataclasses.replace(config, seed=seed))
        frames.append(frame.assign(kappa=kappa, seed=seed))
    return pd.concat(frames, ignore_index=True)


def _measure(test: BanditEnv, theta, step: int, improvement: dict) -> pd.DataFrame:
    pi = dict(zip("AB", test.probs(theta["A"], theta["B"])))
    rows = []
    for name in "AB":
        accuracy = success_prob(pi[name], test.correct)
        row = {"step": step, "policy": name, "accuracy": accuracy.mean(), "entropy": entropy(pi[name]).mean(),
               "improvement": improvement[name], "theta_norm": float(np.linalg.norm(theta[name]))}
        row.update({f"acc {t}": accuracy[test.types == i].mean() for i, t in enumerate(PROMPT_TYPES)})
        rows.append(row)
    return pd.DataFrame(rows)


def rescue_type(policy: str) -> str:
    """The prompt type on which `policy` needs its peer: A-hard/B-easy for A."""
    return "A-hard/B-easy" if policy == "A" else "B-hard/A-easy"


def summarise(runs: pd.DataFrame) -> pd.DataFrame:
    """Per (kappa,) method and policy, means over seeds: final held-out accuracy overall, per type and on the
    policy's rescue type, final entropy, and the share of steps with a negative true improvement of J."""
    keys = [k for k in ("kappa", "method", "policy") if k in runs.columns]
    final = runs[runs.step == runs.step.max()].copy()
    final["rescue-type accuracy"] = final[f"acc {rescue_type('A')}"].where(final.policy == "A",
                                                                          final[f"acc {rescue_type('B')}"])
    acc_cols = [c for c in runs.columns if c.startswith("acc ")]
    table = final.groupby(keys, sort=False)[["accuracy", "rescue-type accuracy", *acc_cols, "entropy"]].mean()
    steps = runs[runs.step > 0].assign(negative=lambda f: f.improvement < 0)
    table["negative steps"] = steps.groupby(keys, sort=False)["negative"].mean()
    return table.reset_index()
