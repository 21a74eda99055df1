# ---
# jupyter:
#   jupytext:
#     cell_metadata_filter: tags,-all
#     notebook_metadata_filter: kernelspec,language_info,-language_info.version,-language_info.codemirror_mode,-language_info.pygments_lexer,-language_info.nbconvert_exporter,-language_info.file_extension,-language_info.mimetype
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
#   language_info:
#     name: python
# ---

# %% [markdown]
# # 60 · The contextual-bandit analysis: stability against support
#
# **Claim (MRL paper, abstract; docs/architecture.md, The bandit analysis).** A contextual-bandit analysis places the
# three probes on a stability-support trade-off: PRP (data level) pays density-ratio variance plus the tokenizer
# residual, XGRPO (value level) keeps on-policy support and only shifts a scalar baseline, SGT (outcome level) adds a
# score direction toward verified peer successes on the rescue set.
#
# **This is a reconstruction.** The paper's bandit model, theorems and figures are not available: the environment,
# the estimators, the plane and the dynamics below are our model of its statements, and HACPO's bandit form is ours
# too.
#
# **Setup.** Two softmax policies, A and B, over prompts of four types (solved by both, by B only: A's rescue set, by
# A only, by neither); the support overlap kappa sets how much of B's support lies inside A's. Every method's
# expected update except HACPO's is a closed form (`mrl.core.bandit.closed_form`, checked against Monte Carlo in
# `tests/test_bandit.py` and in the first table); variances come from vectorised Monte Carlo. Three measurements:
# the closed-form check, the stability-support plane (learner A at the static policies, each method over its knob,
# per kappa), and the dynamics (both policies trained together; log-linear policies whose skill directions
# generalise to held-out prompts of the same type).

# %% tags=["parameters"]
profile = "default"  # smoke | default
progress = True

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
import time
start = time.perf_counter()
from IPython.display import Markdown
from mrl.core.bandit import (DynamicsConfig, EnvConfig, closed_form_check, dynamics_methods, run_dynamics, summarise,
                        trade_off)
from mrl.notebook import setup_notebook
from mrl.reports.bandit import bandit_result, dynamics_figure, dynamics_figure_inputs, plane_figure
from mrl.reports.figure_inputs import draw_and_save
from mrl.runtime.results import listing, write_table

env_config = EnvConfig()
run = setup_notebook("60_bandit", profile, extra={"env": repr(env_config), "env_seed": env_config.seed})
settings = run.config.experiment("bandit")
dynamics_config = DynamicsConfig(steps=settings.steps)

# %% [markdown]
# ## The closed forms hold: Monte Carlo gap in units of its own noise (about 1 means exact)

# %%
check = closed_form_check(env_config, reps=settings.reps)
check.round(3)

# %% [markdown]
# ## The stability-support plane
#
# Learner A at the static policies, per support overlap kappa. x: support gain S = <grad log p_A, E g_hat>
# on the prompts A cannot solve and B can; y: Tr Cov / ||g*||^2 plus the squared bias on the prompts A
# can solve. Each curve varies one knob (printed beside its points).

# %%
plane = trade_off(settings.kappas, env_config, reps=settings.reps, progress=progress)
plane.to_csv(run.folder / "plane.csv", index=False)
columns = ["kappa", "curve", "label", "support", "variance", "bias2", "instability", "ess/G", "P(rescue)",
           "mean from"]
write_table(plane[columns], "bandit", run.tables, float_format="{:.4g}",
            caption="Bandit stability-support plane (reconstruction): learner A, support gain on its rescue "
                    "prompts, normalised variance and bias, per method, knob and support overlap kappa.")
plane[columns].head()

# %%
draw_and_save(plane_figure, "bandit_plane", run.figures, plane=plane, draws=settings.reps)

# %% [markdown]
# ## Dynamics: both policies trained together
#
# M = 200 prompts, K = 16, G = 8, SGD on the shared parameters, T steps; held-out accuracy on the
# rescue type (the prompts a policy cannot solve and its peer can), on the prompts it solves, and the
# entropy; mean over seeds and both policies, band: the 95% t interval of that mean. "negative steps" is the
# share of steps that lowered the policy's true training objective.

# %%
runs = run_dynamics(dynamics_methods(), settings.dynamics_kappas, settings.seeds, env_config,
                    dynamics_config, progress=progress)
runs.to_csv(run.folder / "dynamics.csv", index=False)
dynamics = summarise(runs)
write_table(dynamics, "bandit_dynamics", run.tables,
            caption=f"Bandit dynamics (reconstruction): final held-out accuracy per prompt type after "
                    f"{dynamics_config.steps} steps, entropy, share of harmful steps; mean over seeds "
                    f"{listing(settings.seeds)}.")
dynamics.round(3)

# %%
draw_and_save(dynamics_figure, "bandit_dynamics", run.figures, runs=dynamics_figure_inputs(runs))

# %% [markdown]
# ## Result
#
# Generated from the plane and the dynamics table (`mrl.reports.bandit.bandit_result`): every number is read from
# them. Support gain S and instability as defined above the plane; a method's default knob is `mrl.core.bandit`'s.

# %%
Markdown(bandit_result(plane, dynamics))

# %% [markdown]
# ## Discussion
#
# What to read in the Result, by mechanism. XGRPO only moves a scalar baseline, so it cannot put mass on responses A
# never samples: along its knob it can trade variance for bias on the prompts A already solves, not gain support. SGT
# pushes toward the peer's verified successes, so its support gain should grow with its weight, and its instability
# with the weight and with corrupted retokenised targets. Importance-weighted PRP pays the density-ratio variance the
# claim names; truncating the ratio caps that variance and, with it, the support the peer samples bring. Naive PRP
# ignores the ratio, so its support comes with bias; HACPO clips its peer ratio. The Result says, with the numbers,
# whether each method sits where its mechanism puts it, and the dynamics whether a position turns into rescued
# prompts when both policies learn together.
#
# The limits are the model's. It is a reconstruction with tabular softmax policies, a few hundred prompts and log-linear
# skill directions, not the paper's model; THL's residual enters only as a log-normal ratio error (PRP, HACPO) and a
# corruption probability (SGT). Positions depend on kappa and on the environment's seed, and the plane is measured at
# the static starting policies; the dynamics rest on the profile's few seeds.

# %%
print(f"60_bandit ran in {time.perf_counter() - start:.0f} s ({profile} profile)")

# %% [markdown]
# ## Summary (rounded; nbval checks this cell on the smoke profile)
#
# Support gain on A's rescue prompts at the smallest kappa, and the rescue-type accuracy at the end of
# the dynamics. Read with the plane: which methods move right (support) and at what height (instability).

# %%
# NBVAL_CHECK_OUTPUT
first = plane[plane.kappa == min(settings.kappas)].drop_duplicates("label").set_index("label")
print(first[["support", "instability"]].loc[["grpo", "xgrpo (gamma=0.5)", "prp (c=2, sigma_T=0)",
                                             "prp (c=inf, sigma_T=0)", "prp_naive", "sgt (lambda=0.1, eta=0)",
                                             "hacpo (delta=0.2)"]].round(2).to_string())
print(dynamics.groupby("method", sort=False)["rescue-type accuracy"].mean().round(2).to_string())
