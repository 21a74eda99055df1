"""The stability-support plane: each method's point per knob setting and support overlap (docs/architecture.md,
The bandit analysis).

For learner A at the static policies (theta = 0) of an environment:
    support      S = <grad log p_A, E g_hat> averaged over the A-hard/B-easy prompts (the rescue set);
    variance     mean_x Tr Cov g_hat(x) / mean_x ||g*(x)||^2 over all prompts (Monte Carlo);
    bias^2       mean_x ||E g_hat(x) - g*(x)||^2 / mean_x ||g*(x)||^2 over the prompts A can solve
                 (shared-easy, B-hard/A-easy): the deviation from A's own RL objective;
    instability  variance + bias^2.
E g_hat comes from the closed form where closed_form.py has one (every method but hacpo), else from the
Monte Carlo mean. ESS/G (prp) and P(x in R) (sgt) annotate the rows.
"""
from __future__ import annotations

import dataclasses
import math
import zlib

import numpy as np
import pandas as pd
from tqdm.auto import tqdm

from mrl.core.bandit.closed_form import ess_fraction, gate_probability, support_gain, true_gradient
from mrl.core.bandit.env import EnvConfig, make_env
from mrl.core.bandit.estimators import Draws, Method, capability, closed_form_mean, monte_carlo

SOLVABLE_BY_A = ("shared-easy", "B-hard/A-easy")


def knob_sweeps() -> dict[str, list[Method]]:
    """Each curve of the plane: a method with one knob varied (docs/architecture.md, The bandit analysis)."""
    return {
        "grpo": [Method("grpo")],
        "xgrpo (gamma)": [Method("xgrpo", gamma=g) for g in (0.0, 0.25, 0.5, 0.75, 1.0)],
        "prp (c, sigma_T=0)": [Method("prp", clip=c) for c in (1.0, 2.0, 5.0, math.inf)],
        "prp (sigma_T, unbiased mu_T)": [Method("prp", sigma_t=s, mu_t=-s * s / 2) for s in (0.0, 0.25, 0.5, 1.0)],
        "prp (sigma_T, mu_T=0)": [Method("prp", sigma_t=s) for s in (0.0, 0.25, 0.5, 1.0)],
        "prp_naive": [Method("prp_naive")],
        "sgt (lambda)": [Method("sgt", lam=lam) for lam in (0.01, 0.03, 0.1, 0.3, 1.0)],
        "sgt (eta, lambda=0.1)": [Method("sgt", eta=eta) for eta in (0.0, 0.05, 0.2)],
        "hacpo (delta)": [Method("hacpo", delta=d) for d in (0.1, 0.2, 0.5, 1.0)],
    }


def knob_value(curve: str, method: Method) -> float:
    """The value of the knob a curve varies (NaN for single points)."""
    knob = {"gamma": method.gamma, "c,": method.clip, "sigma_T,": method.sigma_t, "lambda)": method.lam,
            "eta": method.eta, "delta": method.delta}
    return next((value for key, value in knob.items() if f"({key}" in curve), float("nan"))


def plane_point(method: Method, pi_a, pi_b, r, types, group_size: int, draws: Draws,
                capability_ratio: float) -> dict:
    """One row of the plane for learner A. pi (M, K), types (M,) names."""
    moments = monte_carlo(method, pi_a, pi_b, r, group_size, draws, capability_ratio)
    closed = closed_form_mean(method, pi_a, pi_b, r, group_size)
    mean = moments.mean if closed is None else closed
    g_star = true_gradient(pi_a, r)
    scale = (g_star ** 2).sum(-1)
    rescue = types == "A-hard/B-easy"
    solvable = np.isin(types, SOLVABLE_BY_A)
    variance = moments.trace_cov.mean() / scale.mean()
    bias2 = ((mean - g_star) ** 2).sum(-1)[solvable].mean() / scale[solvable].mean()
    row = {"method": method.name, "label": method.label,
           "mean from": "Monte Carlo" if closed is None else "closed form",
           "support": support_gain(pi_a, r, mean)[rescue].mean(), "variance": variance, "bias2": bias2,
           "instability": variance + bias2, "ess/G": np.nan, "P(rescue)": np.nan}
    if method.name == "prp":
        row["ess/G"] = ess_fraction(pi_a, pi_b, method.clip, method.mu_t, method.sigma_t).mean()
    if method.name == "sgt":
        row["P(rescue)"] = gate_probability(pi_a, pi_b, r, group_size, method.tau)[rescue].mean()
    return row


def trade_off(kappas=(0.25, 0.5, 0.75, 1.0), env_config: EnvConfig = EnvConfig(), group_size: int = 8,
              reps: int = 1000, seed: int = 0, sweeps: dict[str, list[Method]] | None = None,
              progress: bool = True) -> pd.DataFrame:
    """The plane's rows: every curve's methods at every support overlap kappa."""
    sweeps = sweeps or knob_sweeps()
    jobs = [(kappa, curve, method) for kappa in kappas for curve, methods in sweeps.items() for method in methods]
    envs = {kappa: make_env(dataclasses.replace(env_config, kappa=kappa)) for kappa in kappas}
    rows = []
    for kappa, curve, method in tqdm(jobs, desc="trade-off plane", disable=not progress):
        env = envs[kappa]
        pi_a, pi_b = env.probs()
        draw_seed = [seed, zlib.crc32(f"{kappa}|{method}".encode())]  # the same method in two curves: same draws
        row = plane_point(method, pi_a, pi_b, env.correct, env.type_names, group_size, Draws(reps, seed=draw_seed),
                          capability(pi_a, env.correct) / capability(pi_b, env.correct))
        rows.append({"kappa": kappa, "overlap": env.overlap().mean(), "curve": curve,
                     "knob": knob_value(curve, method), **row})
    return pd.DataFrame(rows)




def closed_form_check(env_config: EnvConfig = EnvConfig(), group_size: int = 8, reps: int = 2000,
                      seed: int = 0) -> pd.DataFrame:
    """Each closed-form mean against its Monte Carlo estimate on one environment's prompts (learner A).

    gap / noise = ||MC mean - closed form|| / sqrt(sum of squared standard errors) over all M x K components:
    about 1 when the closed form is right (the gap is Monte Carlo noise), far above 1 when it is not. The last
    row is a control: XGRPO (gamma = 1) sampled, held against GRPO's formula, which it does not follow.
    """
    env = make_env(env_config)
    pi_a, pi_b = env.probs()
    methods = [Method("grpo"), Method("xgrpo"), Method("prp", clip=2.0, sigma_t=0.5),
               Method("prp", sigma_t=0.5, mu_t=-0.125), Method("prp_naive"), Method("sgt"), Method("sgt", eta=0.2)]
    pairs = [(method, method, method.label) for method in methods]
    pairs.append((Method("xgrpo", gamma=1.0), Method("grpo"), "control: xgrpo (gamma=1) vs grpo's formula"))
    rows = []
    for index, (sampled, formula, label) in enumerate(pairs):
        moments = monte_carlo(sampled, pi_a, pi_b, env.correct, group_size, Draws(reps, seed=[seed, index]))
        exact = closed_form_mean(formula, pi_a, pi_b, env.correct, group_size)
        noise = np.sqrt((moments.stderr ** 2).sum())
        rows.append({"method": label, "||closed form||": np.linalg.norm(exact),
                     "||MC - closed form||": np.linalg.norm(moments.mean - exact),
                     "gap / noise": np.linalg.norm(moments.mean - exact) / noise, "draws": reps})
    return pd.DataFrame(rows)
