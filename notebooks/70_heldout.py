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
# # 70 · The held-out experiment: fresh prompts, a form gap, paired against GRPO, and the claims ledger
#
# **Claims.** The MRL paper's headline (SGT is the favourable point among the probes) and HACPO's (it beats
# GSPO, and does so at half the rollouts) are claims about accuracy on prompts the policies never trained on.
# On `arith-ops` with a fixed 50-prompt pool (40_probe, 50_hacpo) nothing moves on held-out prompts: peer
# demonstrations are memorised. This experiment is where the claims can show.
#
# **Substrate (ours, from notes/prototype2.md).** `arith-forms`: one algorithm (addition) in three surface
# forms, S1 `37+48=`, S2 `add 37 and 48:`, S3 `37 plus 48 =`. 400 operand pairs are held out in every form and
# never trained on; every RL step draws fresh training prompts (`pool_per_skill: 0`). Its own zoo: A (GPT-2 +
# byte-level BPE) owns S3, B (Llama + char-level Unigram) owns S2, both warmed up on S1, each with a 1% leak
# from 20 fixed pairs of the peer's form. So A's weak form is S2 and B's is S3, and the peer is strong there.
#
# **Statistics.** Runs of one RL seed share prompts and sampling seeds at every step, whatever the probe, so
# each probe is compared with GRPO run by run: the paired difference, its 95% t interval over the pairs (RL
# seeds; for GRPO and SGT the pairs of both zoo seeds pooled, as if independent: with two zoo seeds the
# zoo-to-zoo spread is seen, not estimated), called real only when the interval excludes 0 and n >= 3 (bold).
# A row's accuracy means are over its own runs, on the zoo seeds it lists.
# `rollouts to grpo's final weak`: own rollouts until the weak form's held-out accuracy reaches GRPO's final
# one (mean over GRPO's seeds on the same zoo), linearly interpolated between evaluations; `reached` counts
# the runs that get there.

# %% tags=["parameters"]
profile = "default"  # smoke | default
backend = None       # inline | process | ray (None: the profile's); packed_runs > 1 runs that many at once
progress = True

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
import time
start = time.perf_counter()
import pandas as pd
from mrl.experiments import panel_labels, policy_paths, run_many
from mrl.experiments.hacpo import hacpo_runs
from mrl.experiments.heldout import heldout_runs, heldout_zoos, knob_runs
from mrl.notebook import setup_notebook
from mrl.reports.claims import claims_ledger, verdict_counts
from mrl.reports.paired import knob_table, paired_table, weak_skill_figure
from mrl.reports.probes import rescue_skills
from mrl.reports.substrate import zoo_table
from mrl.results import listing, save_figure, write_table
from mrl.tasks import make_task
from mrl.zoo import load_policy

run = setup_notebook("70_heldout", profile)
config, heldout = run.config, run.config.experiment("heldout")
backend = backend or config.runner.backend
run.record(heldout=heldout, backend=backend)
zoos = heldout_zoos(config, progress)

# %% [markdown]
# ## The held-out zoo, one per zoo seed

# %%
task = make_task(heldout.task)
families = pd.concat([zoo_table({name: load_policy(path) for name, path in paths.items()}, task).assign(zoo_seed=seed)
                      for seed, paths in zoos.items()], ignore_index=True)
write_table(families, "heldout_zoo", run.tables,
            caption=f"The held-out experiment's zoo ({heldout.task.name}, zoo seeds {listing(heldout.zoo_seeds)}): "
                    f"warm-up mix and final warm-up loss.")
families

# %% [markdown]
# ## The grid: every probe on zoo seed 0, GRPO and SGT on every zoo seed, each over the RL seeds

# %%
steps_df, evals = run_many(heldout_runs(config, progress), config.packed_runs, backend, progress=progress)
steps_df.to_csv(run.folder / "steps.csv", index=False)
evals.to_csv(run.folder / "evals.csv", index=False)
n_runs = len(steps_df.groupby(["probe", "seed", "zoo_seed"]))
print(f"{n_runs} runs of {heldout.steps} steps, {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## Warm-up accuracy per form (held-out, step 0 of the runs)

# %%
start_accuracy = evals[evals.step == 0].groupby(["zoo_seed", "policy", "skill"]).accuracy.first().unstack("skill")
write_table(start_accuracy.reset_index(), "heldout_warmup", run.tables,
            caption="Held-out greedy accuracy per form after the warm-up (S1 `a+b=`, S2 `add a and b:`, "
                    "S3 `a plus b =`), per zoo seed.")
start_accuracy

# %% [markdown]
# ## Main result: each probe against GRPO on the weak form, paired

# %%
numbers, table = paired_table(evals, steps_df, "held-out")
numbers.to_csv(run.folder / "heldout_numbers.csv", index=False)
runs_text = f"{len(heldout.seeds)} RL seeds {listing(heldout.seeds)} on zoo seed {heldout.zoo_seeds[0]}"
if heldout.zoo_seeds[1:]:
    runs_text += f"; {', '.join(heldout.zoo_seed_probes)} also on zoo seed(s) {listing(heldout.zoo_seeds[1:])}"
write_table(table, "heldout_main", run.tables,
            caption=f"Held-out experiment ({heldout.task.name}, fresh prompts, {heldout.steps} steps): final greedy "
                    f"held-out accuracy on each policy's weak form and overall (mean over the row's runs, on the zoo "
                    f"seeds it lists), and the paired difference to GRPO with its 95% t interval over the shared "
                    f"seeds ({runs_text}; pairs of both zoo seeds pooled; `pairs` gives n). Bold: the interval "
                    f"excludes 0 (and n >= 3).")
table

# %% [markdown]
# ## The same per zoo seed (the probes that ran on every zoo seed, paired within each)
#
# The pooled intervals above treat the pairs of two zoo seeds alike; where the two warm-ups start the weak form
# at different levels, the effect can differ by zoo, and this table shows it.

# %%
on_every_zoo = lambda frame, z: frame[(frame.zoo_seed == z) & frame.probe.isin(heldout.zoo_seed_probes)]  # noqa: E731
per_zoo = pd.concat([paired_table(on_every_zoo(evals, z), on_every_zoo(steps_df, z), "held-out")[1]
                     for z in heldout.zoo_seeds], ignore_index=True)
write_table(per_zoo, "heldout_per_zoo", run.tables,
            caption=f"Held-out experiment per zoo seed: {', '.join(heldout.zoo_seed_probes)} over RL seeds "
                    f"{listing(heldout.seeds)} on each zoo seed, paired difference to GRPO with its 95% t interval "
                    f"over the RL seeds of that zoo (n = `pairs`). Bold: the interval excludes 0 (and n >= 3).")
per_zoo

# %%
panels = panel_labels(heldout.panels)   # {title: probe labels}, the profile's (experiments.heldout.panels)
first_zoo = heldout.zoo_seeds[0]
save_figure(weak_skill_figure(evals, steps_df, panels, zoo_seed=first_zoo), "heldout_weak_skill", run.figures)

# %% [markdown]
# The last zoo seed (GRPO and SGT only; one figure per zoo seed, since the warm-ups start the weak forms at
# different levels):

# %%
last_zoo = heldout.zoo_seeds[-1]
name = f"heldout_weak_skill_zoo{last_zoo}"
save_figure(weak_skill_figure(evals, steps_df, panels, zoo_seed=last_zoo), name, run.figures)

# %% [markdown]
# ## The probes' knobs on this experiment
#
# Each knob variant against its probe at the defaults (SGT lambda 0.1, tau 0; PRP truncation c = 2, token level;
# XGRPO gamma 0.5), on zoo seed 0, paired on the RL seeds `knob_seeds` of the profile: the bandit analysis
# (60_bandit) sweeps the same knobs on the reconstruction; here they act on language-model runs.

# %%
if heldout.knob_probes:
    knob_steps, knob_evals = run_many(knob_runs(config, progress), config.packed_runs, backend, progress=progress)
    knobs = knob_table(knob_evals)
    write_table(knobs, "heldout_knobs", run.tables,
                caption=f"Knob variants against their probe's defaults on the held-out experiment ({heldout.steps} "
                        f"steps, zoo seed {heldout.zoo_seeds[0]}, RL seeds {listing(heldout.knob_seeds)}): paired "
                        f"difference of the final held-out accuracy on the weak form and overall, with its 95% t "
                        f"interval over the seeds (n = `pairs`); bold: the interval excludes 0 (and n >= 3).")
else:
    knobs = "no knob variants in this profile (experiments.heldout.knob_probes)"
knobs

# %% [markdown]
# ## The claims ledger: both regimes
#
# The pool regime is `arith-ops` with a fixed RL pool: the runs of 50_hacpo's comparison (the MRL probes' runs are
# 40_probe's), read from the run cache; accuracy there is also measured on held-out prompts. The verdict rule is
# in `mrl/reports/claims.py`: reproduced when every policy's paired difference is real in the claimed direction,
# mixed when some are, not reproduced when none is, inconclusive with fewer than 3 pairs; the no-loss claim
# (XGRPO) is a non-inferiority test with a 0.05 margin. Where a probe ran on several zoo seeds, each policy on
# each zoo seed is a unit of its own (its interval over the RL seeds of that zoo).

# %%
pool_grid = config.experiment("hacpo")
pool_steps, pool_evals = run_many(hacpo_runs(config, policy_paths(config, progress)), config.packed_runs, backend,
                                  progress=progress)
regimes = {"pool (arith-ops)": (pool_evals, pool_steps), "held-out (arith-forms)": (evals, steps_df)}
ledger = claims_ledger(regimes, {name: rescue_skills(e) for name, (e, _) in regimes.items()})
write_table(ledger, "claims", run.tables,
            caption=f"Claims ledger, generated from the runs. Pool regime: {listing(pool_grid.pairings)}, "
                    f"{pool_grid.steps} steps, RL seeds {listing(pool_grid.seeds)}; held-out regime: {heldout.steps} "
                    f"steps, {runs_text}. "
                    "Evidence: paired difference per policy (weak skill in brackets) and, where a regime has several, "
                    "per zoo seed, 95% t interval over the shared RL seeds; bold: the interval excludes 0 "
                    "(and n >= 3).")
ledger

# %%
print(f"70_heldout ran in {time.perf_counter() - start:.0f} s ({profile} profile, backend {backend})")

# %% [markdown]
# ## Summary (rounded; nbval checks this cell on the smoke profile)

# %%
# NBVAL_CHECK_OUTPUT
print(numbers.set_index(["policy", "probe"])[["weak", "overall"]].round(2).to_string())
print(verdict_counts(ledger).to_string())
