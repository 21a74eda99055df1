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
# # 40 · The three probes against independent GRPO (the main experiment)
#
# **Claim (MRL paper).** Sharing experience between heterogeneous policies helps, and the three probes differ: PRP
# (data level: the peer's samples, retokenized by THL, join the learner's group with importance weights) pays
# density-ratio variance and the tokenizer residual; XGRPO (value level: only the peer's mean reward enters the
# baseline) keeps on-policy support but cannot rescue a prompt the learner never solves; SGT (outcome level: an NLL
# toward one verified peer success where the learner's whole group failed) is the favourable point. The paper's own
# effects, read off its MATH curves (docs/papers.md): SGT - GRPO = +0.013, XGRPO - GRPO = +0.005, PRP - SGT = -0.050;
# it calls SGT's gains "real but modest".
#
# **Setup.** PRP and XGRPO are reconstructions (the paper's code is not public); SGT's form is confirmed by GRAFT;
# `prp_naive` is PRP with every importance weight 1. The substrate is ours: the tiny zoo on `arith-ops` with a fixed
# RL pool (docs/architecture.md, The task and the zoo), families A (GPT-2 + BPE) and B (Llama + Unigram) in both
# directions and, where the profile's grid has it, the three-family group A+B+C (C: Qwen2 + WordPiece). Every probe
# runs on the same runner (SEE + MWRA) with the same prompts and sampling seeds per step as GRPO on the same RL seed;
# only the loss differs. Accuracy is greedy, on held-out prompts (never trained on) and on the RL pool: the
# prototypes found that peer demonstrations are learned on the pool prompts without transferring to held-out ones
# within this budget, and the Result says whether that holds here.
#
# **What this notebook can say.** This is the pool regime: one warm-up per family and the profile's RL seeds, so its
# intervals run over RL seeds on that one warm-up and describe these runs; they are not verdicts on the claims. The
# claims ledger, with the warm-up as the unit and a verdict per claim, is 70_heldout's.

# %% tags=["parameters"]
profile = "default"  # smoke | default | paper
pairings = None      # e.g. ["A+B"]; None: the profile's grid (experiments.probe in configs/<profile>.yaml)
probes = None        # e.g. ["sgt", {"name": "prp", "clip": 4.0}]
seeds = None         # e.g. [0]
steps = None         # RL steps per run, or {pairing: steps}
backend = None       # inline | process | ray: same metrics, different wall time (None: the profile's);
                     # packed_runs > 1 or auto (one per core): that many at once, each inline; --ray: on Ray
progress = True

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
import time
start = time.perf_counter()
import pandas as pd
from IPython.display import Markdown
from mrl.core.validation import override
from mrl.experiments import policy_paths, run_many
from mrl.experiments.probe import probe_runs
from mrl.notebook import setup_notebook
from mrl.reports.figure_inputs import draw_and_save
from mrl.reports.paired import interval_caption, paired_table, probe_result
from mrl.reports.probes import accuracy_figure, main_table, rescue_figure, stability_table
from mrl.runtime.results import listing, write_table

requested = {"pairings": pairings, "probes": probes, "seeds": seeds, "steps": steps}
run = setup_notebook("40_probe", profile, partial=any(v is not None for v in requested.values()))
config = run.config
grid = override(config.experiment("probe"), pairings=pairings)  # checked; papermill's text values parsed as YAML
if isinstance(steps, int):
    requested["steps"] = {pairing: steps for pairing in grid.pairings}
grid = override(grid, **{k: v for k, v in requested.items() if k != "pairings"})
backend = backend or config.runner.backend
run.record(grid=grid, backend=backend)
paths = policy_paths(config, progress)
steps_text = ", ".join(f"{k} {v}" for k, v in grid.steps.items() if k in grid.pairings)

# %%
steps_df, evals = run_many(probe_runs(config, paths, grid), config.packed_runs, backend, progress=progress)
steps_df.to_csv(run.folder / "steps.csv", index=False)
evals.to_csv(run.folder / "evals.csv", index=False)
print(f"{len(steps_df.groupby(['pairing', 'probe', 'seed']))} runs, {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## Main results: held-out accuracy per skill (mean ± 95% CI over seeds)

# %%
held_out_numbers, held_out = main_table(evals, "held-out")
write_table(held_out, "probe_main", run.tables,
            caption=f"Main results: held-out greedy accuracy after {steps_text} steps, mean ± 95% CI over seeds "
                    f"{listing(grid.seeds)} ({config.grpo.prompts_per_step} prompts x {config.grpo.group_size} "
                    f"samples per step).")
held_out_numbers.to_csv(run.folder / "probe_main_numbers.csv", index=False)
held_out

# %% [markdown]
# ## Each probe against GRPO, paired on the seeds (held-out prompts)
#
# Runs of one seed share prompts and sampling seeds at every step, so each probe is compared with GRPO seed by
# seed: the mean paired difference and its 95% t interval over the seeds; bold only when the interval excludes 0.
# The weak skill is the one a policy lacks most against its best peer at step 0. `rollouts to grpo's final weak`:
# own rollouts until the weak skill's held-out accuracy reaches GRPO's final one (mean over GRPO's seeds),
# interpolated between evaluations, mean over the seeds that reach it (`reached`); `peer used`: peer samples
# (PRP, naive) or demonstrations (SGT) that entered the loss.

# %%
paired_numbers, paired = paired_table(evals, steps_df, "held-out")
write_table(paired, "probe_paired", run.tables,
            caption=f"Each probe against GRPO after {steps_text} steps: held-out greedy accuracy on each policy's "
                    f"weak skill and overall. " + interval_caption(paired, f"RL seeds {listing(grid.seeds)}",
                                                                    reference="GRPO"))
paired

# %% [markdown]
# ## The same on the RL pool prompts (where the policies train)

# %%
pool_numbers, pool = main_table(evals, "pool")
write_table(pool, "probe_pool", run.tables,
            caption=f"RL-pool greedy accuracy after {steps_text} steps, mean ± 95% CI over seeds "
                    f"{listing(grid.seeds)}.")
pool

# %% [markdown]
# ## Stability

# %%
stability = stability_table(steps_df, evals)
write_table(stability, "probe_stability", run.tables,
            caption="Stability per probe: collapsed runs (10-step mean reward below half its start), grad-norm "
                    "spread, PRP's effective sample size fraction, SGT's rescue hits per step, change of held-out "
                    "accuracy on the policy's strongest skill.")
stability.round(3)

# %% [markdown]
# ## Accuracy vs rollouts, and the rescue skill

# %%
setting = f"{config.task.name}, zoo seed {config.zoo.warmup.seed}"
draw_and_save(accuracy_figure, "probe_accuracy", run.figures, evals=evals, setting=setting)

# %%
draw_and_save(rescue_figure, "probe_rescue", run.figures, evals=evals, setting=setting)

# %% [markdown]
# ## Result
#
# Generated from the tables above (`mrl.reports.paired.probe_result`): the paired table, the main tables on both
# splits and the stability table. Descriptive: one warm-up, intervals over RL seeds.

# %%
Markdown(probe_result(paired_numbers, held_out_numbers, pool_numbers, stability))

# %% [markdown]
# ## Discussion
#
# The weak skill is the one a policy's warm-up left it without, so it starts near the floor, where a held-out set of
# this size resolves only coarse differences: an interval that straddles 0 is a small effect or none, not evidence
# of none. Set each interval's half-width beside the paper's effects (docs/papers.md): where it is wider, a
# null here cannot rule them out. The count of intervals that exclude 0 is to be read against the chance count
# beside it: with many intervals a few exclude 0 even if no probe did anything, and an isolated one, on overall
# accuracy or on one policy only, is what chance alone can produce.
#
# The pool and held-out comparison separates two things sharing can do. A gain on the pool prompts that does not
# reach held-out prompts means the peer's successes were learned as answers to the prompts they came from, not as the
# skill; a gain on both is transfer. SGT and PRP put the peer's solutions into the loss (PRP weighted, naive PRP
# not), so they are the probes to watch for the first; XGRPO moves only the baseline and adds no peer solution.
#
# PRP's effective sample size fraction says how much of the peer's data its importance weights use: a small fraction
# is the density-ratio variance the paper names as PRP's cost, and naive PRP, which drops the weights, shows what
# ignoring it does. A loss on the strongest skill that GRPO shows too is forgetting under RL on the other skills, not
# a cost of sharing; a probe's own cost is its difference from GRPO's change.
#
# Limits: one warm-up, so a difference may belong to what this warm-up gave each family; reconstructed PRP and XGRPO;
# small models trained from scratch on arithmetic rather than the paper's pretrained models on MATH. 70_heldout
# repeats the comparison over several warm-ups and gives the verdicts.

# %%
print(f"40_probe ran in {time.perf_counter() - start:.0f} s ({profile} profile, backend {backend})")

# %% [markdown]
# ## Summary: overall accuracy per probe and policy (rounded; nbval checks this cell on the smoke profile)

# %%
# NBVAL_CHECK_OUTPUT
overall = pd.concat([held_out_numbers.assign(split="held-out"), pool_numbers.assign(split="pool")])
overall = overall[overall.skill == "overall"].pivot_table(index=["pairing", "policy", "probe"], columns="split",
                                                          values="mean", sort=False)
print(overall.round(2).to_string())
