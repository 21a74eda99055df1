"""The contextual-bandit analysis of MRL's stability-support trade-off (a reconstruction; docs/architecture.md,
The bandit analysis).

    env          prompts, responses, correct sets and two softmax policies with different supports
    closed_form  exact moments: E g_hat per method, support gain, chi^2, lognormal partial expectations
    estimators   the sampled estimators (grpo, xgrpo, prp, prp_naive, sgt, hacpo) and Monte Carlo moments
    plane        the stability-support plane over each method's knob and the support overlap kappa
    dynamics     both policies trained together on M prompts for T steps; held-out accuracy per type
The figures are in mrl.reports.bandit; the notebook's budgets in the profile's YAML
(experiments.bandit, validated by mrl.core.grids.BanditConfig).
"""
from mrl.core.bandit.closed_form import (chi2, ess_fraction, expected_grpo, expected_prp, expected_sgt, expected_xgrpo,
                                    gate_probability, prp_peer_second_moment, ratio_second_moment,
                                    sgt_rescue_second_moment, support_direction, support_gain, true_gradient,
                                    truncated_lognormal_mean, truncated_lognormal_second_moment)
from mrl.core.bandit.dynamics import DynamicsConfig, dynamics_methods, run_dynamics, simulate, summarise
from mrl.core.bandit.env import PROMPT_TYPES, BanditEnv, EnvConfig, make_env
from mrl.core.bandit.estimators import (METHODS, Draws, Method, Moments, closed_form_mean, monte_carlo,
                                        sample_responses, update)
from mrl.core.bandit.plane import closed_form_check, knob_sweeps, trade_off

__all__ = ["BanditEnv", "Draws", "DynamicsConfig", "EnvConfig", "METHODS", "Method", "Moments", "PROMPT_TYPES",
           "chi2", "closed_form_check", "closed_form_mean", "dynamics_methods", "ess_fraction", "expected_grpo",
           "expected_prp", "expected_sgt", "expected_xgrpo", "gate_probability", "knob_sweeps", "make_env",
           "monte_carlo", "prp_peer_second_moment", "ratio_second_moment", "run_dynamics", "sample_responses",
           "sgt_rescue_second_moment", "simulate", "summarise", "support_direction", "support_gain", "trade_off",
           "true_gradient", "truncated_lognormal_mean", "truncated_lognormal_second_moment", "update"]
