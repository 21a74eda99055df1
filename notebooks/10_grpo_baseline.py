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
# # 10 · Independent GRPO on each family (the reference every probe is compared with)
#
# **Claim.** Plain GRPO, with no sharing, raises a policy's accuracy on a skill only where the policy already
# succeeds sometimes: a group in which every sample fails has zero advantage and gives no gradient. The prediction for
# the zoo (notebook 00): each policy's weak skill moves little, while the skills it partly masters improve. This run
# is also the reference every probe of notebooks 40-80 is compared with.
#
# **Setup.** The zoo's policies train side by side on prompts drawn from the fixed RL pool (docs/architecture.md, The
# task and the zoo; `task.pool_per_skill` prompts per skill) and share nothing. The GRPO loss is
# `mrl.core.grpo.policy_loss`, proven equal to TRL's `GRPOTrainer._compute_loss` in `tests/test_grpo_trl_equality.py`.
# Sampling: full softmax at temperature 1, `grpo.group_size` completions per prompt, KV-cached; one on-policy Adam
# step per batch (`grpo.lr`). It runs on the same runner, with the same `grpo` probe, as the probe experiments' GRPO
# rows (`mrl.runtime.runner.run_concurrent`). Measured: greedy accuracy per skill on held-out prompts and on the pool, at step
# 0 and every `grpo.eval_every` steps.

# %% tags=["parameters"]
profile = "default"  # smoke | default
seed = 0             # RL seed (prompt order and sampling)
progress = True

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
from IPython.display import Markdown
from mrl.core.probes import probe_config
from mrl.experiments import Run, policy_paths, run_one
from mrl.notebook import setup_notebook
from mrl.reports.figure_inputs import draw_and_save
from mrl.reports.substrate import baseline_table, grpo_baseline_result, learning_curves_figure
from mrl.runtime.results import write_table

run = setup_notebook("10_grpo_baseline", profile, seed=seed)
config = run.config
paths = policy_paths(config, progress)

# %%
steps, evals = run_one(Run(config, paths, probe_config("grpo"), seed, config.grpo.steps), progress=progress)
steps.to_csv(run.folder / "steps.csv", index=False)
evals.to_csv(run.folder / "evals.csv", index=False)

# %% [markdown]
# ## Learning curves: per-skill greedy accuracy vs rollouts

# %%
draw_and_save(learning_curves_figure, "grpo_baseline_curves", run.figures, evals=evals,
              title=f"Independent GRPO ({config.task.name}, seed {seed})")

# %%
table = baseline_table(evals)
write_table(table, "grpo_baseline", run.tables,
            caption=f"Independent GRPO: greedy accuracy at step 0 and after {config.grpo.steps} steps (seed {seed}).")
table.pivot_table(index=["policy", "skill"], columns="split", values=["start", "end"]).round(3)

# %% [markdown]
# ## Compute: seconds per phase of a GRPO step and sequences forwarded per step

# %%
steps.groupby("policy")[["rollout_seconds", "update_seconds", "active_sequences", "reward"]].mean().round(3)

# %% [markdown]
# ## Result
#
# Generated from the evaluations behind the table above (`mrl.reports.substrate.grpo_baseline_result`). A policy's
# weak skill is picked from the step-0 held-out accuracy, as the probe notebooks pick it
# (`mrl.reports.probes.rescue_skills`).

# %%
Markdown(grpo_baseline_result(evals))

# %% [markdown]
# ## Discussion
#
# The prediction holds where the weak skills' change stays near zero held out while the other skills' is positive.
# A weak skill that rises on the pool but not on held-out prompts has learned the few pool prompts the warm-up left
# solvable, not the skill: GRPO's only signal there comes from groups with at least one success, and the fixed pool
# has few such prompts on a weak skill. That is the gap the sharing probes aim at: a peer's success gives a signal on
# the prompts where a policy's own group always fails.
#
# Limits. One RL seed on one warm-up, so a change of a few prompts is within run-to-run noise; the paired intervals
# over seeds and warm-ups are notebook 40's and 70's. Greedy accuracy is not the training reward, which is sampled at
# temperature 1 (the compute table's `reward`). The smoke profile runs a few steps on a short warm-up: its changes
# check the loop, not the claim.
#
# ## Summary (rounded; nbval checks this cell on the smoke profile)

# %%
# NBVAL_CHECK_OUTPUT
print(table.set_index(["policy", "split", "skill"]).round(2).to_string())
