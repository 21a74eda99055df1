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
# # 80 · Beyond the papers: TRRD, offline GRAFT, a poisoned peer and n policies on the held-out experiment
#
# **What this adds.** MRL, GRAFT and RLAD have no public code, and HACPO's stops at two synchronous policies. On
# one substrate and at equal budgets, this notebook runs what none of them compares:
# - **TRRD** (RLAD's Trust Region Ratio Distillation, a reconstruction, `mrl/core/probes/trrd.py`): GRPO on the own
#   samples with the token ratio anchored to pi_old^alpha pi_T^(1-alpha); the teacher is the peer's fixed starting
#   checkpoint, scored on the learner's tokens through THL.
# - **GRAFT offline** (a reconstruction, `mrl/core/probes/graft.py`, with `runner.OfflinePeers`): each policy learns alone
#   while its peer's records are replayed, step by step, from the SEE log of the GRPO run of the same seed; no
#   co-training.
# - **A poisoned peer** (`mrl/runtime/poison.py`): B learns honestly but publishes lies; A learns beside it. Forged
#   successes (every sample claimed correct) with the learner's re-verification off ("trusting") and on
#   ("re-verified"), and lying group statistics (k = G on every prompt), which nothing can re-verify.
# - **n = 2 to 5 policies**, sync and async (bounded staleness), with families of five architectures and four
#   tokenizer kinds.
#
# **Setup: substrate and statistics** are 70_heldout's: `arith-forms` with fresh prompts, its zoo seed 0, the same steps
# and GRPO settings. Every arm is paired run by run (same RL seed: same prompts and sampling seeds) with GRPO, or, in
# the poisoned-peer table, with the same probe beside an honest peer; the interval is the 95% t interval over the shared
# seeds, called real only when it excludes 0 with n >= 3 (bold).

# %% tags=["parameters"]
profile = "default"  # smoke | default
backend = None       # inline | process | ray (None: the profile's); packed_runs > 1 runs that many at once
progress = True

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
import time
start = time.perf_counter()
import pandas as pd
from IPython.display import Markdown
from mrl.experiments import panel_labels, run_many
from mrl.experiments.beyond import beyond_runs, poison_runs, run_offline, run_scaling
from mrl.notebook import setup_notebook
from mrl.reports.beyond import (beyond_result, poison_figure, poison_figure_inputs, poison_table, records_handed_over,
                                scaling_figure, scaling_table, with_arm_labels)
from mrl.reports.figure_inputs import draw_and_save
from mrl.reports.paired import interval_caption, paired_table, weak_skill_figure, weak_skill_inputs
from mrl.runtime.results import listing, write_table

run = setup_notebook("80_beyond", profile)
config, beyond, heldout = run.config, run.config.experiment("beyond"), run.config.experiment("heldout")
backend = backend or config.runner.backend
run.record(beyond=beyond, heldout=heldout, backend=backend)

# %% [markdown]
# ## TRRD and GRAFT (online and offline) against the MRL probes and HACPO, paired with GRPO

# %%
online_steps, online_evals = run_many(beyond_runs(config), config.packed_runs, backend, progress=progress)
offline_steps, offline_evals = run_offline(config, backend, progress=progress)
steps_df = pd.concat([online_steps, offline_steps], ignore_index=True)
evals = pd.concat([online_evals, offline_evals], ignore_index=True)
steps_df.to_csv(run.folder / "steps.csv", index=False)
evals.to_csv(run.folder / "evals.csv", index=False)
numbers, table = paired_table(evals, steps_df, "held-out")
numbers.to_csv(run.folder / "beyond_numbers.csv", index=False)
write_table(table, "beyond_main", run.tables,
            caption=f"Methods beyond the papers on the held-out experiment ({heldout.task.name}, fresh prompts, "
                    f"{heldout.steps} steps, zoo seed {heldout.zoo_seeds[0]}, RL seeds {listing(beyond.seeds)}): final "
                    f"greedy held-out accuracy on each policy's weak form and overall (mean over the row's runs). "
                    f"trrd: the peer's starting checkpoint as a fixed teacher; graft (offline): each policy alone, "
                    f"its peer replayed from the GRPO run's experience log of the same seed. "
                    + interval_caption(table, f"RL seeds {listing(beyond.seeds)}", reference="GRPO"))
table

# %%
panels = list(panel_labels(beyond.panels).items())   # [(title, probe labels)], the profile's, in its order
draw_and_save(weak_skill_figure, "beyond_weak_skill", run.figures,
              **weak_skill_inputs(evals, steps_df, heldout.zoo_seeds[0]), panels=panels, setting=heldout.task.name)

# %% [markdown]
# ## A poisoned peer
#
# B publishes lies; the table shows A, the honest learner, beside it, paired with the same probe beside an honest B.
# Each probe meets the attacks on the record kinds it reads (SGT successes, PRP, HACPO and GRAFT rollouts, XGRPO
# group statistics). With re-verification on, A re-scores every claimed success and reward with its own verifier
# before it enters a loss, so the run must equal the honest one exactly (`equals honest run`; the unit tests prove
# it for every probe); `claims turned away` counts B's claims A's verifier refused: successes SEE dropped and
# rewards the probe re-scored below the claim. Lying group statistics carry no text: re-verification cannot touch
# them.

# %%
poison_steps, poison_evals = run_many(poison_runs(config), config.packed_runs, backend, progress=progress)
poison_steps, poison_evals = with_arm_labels(poison_steps), with_arm_labels(poison_evals)
poison_numbers, poisoned = poison_table(poison_evals, poison_steps, beyond.poisoned)
write_table(poisoned, "beyond_poison", run.tables,
            caption=f"A poisoned peer ({beyond.poisoned}) on the held-out experiment ({heldout.steps} steps, zoo seed "
                    f"{heldout.zoo_seeds[0]}): the honest learner's final held-out accuracy on its weak form and "
                    f"overall. Claims turned away: the peer's successes and rewards the learner's verifier refused, "
                    f"per run. " + interval_caption(poisoned, f"the shared RL seeds (trusting and lying statistics: "
                                                              f"{listing(beyond.seeds)}; re-verified: "
                                                              f"{listing(beyond.reverified_seeds)})",
                                                    reference="the same probe beside an honest peer"))
poisoned

# %%
draw_and_save(poison_figure, "beyond_poison", run.figures, **poison_figure_inputs(poison_numbers))

# %% [markdown]
# ## More than two policies, sync and async
#
# HACPO's code stops at two synchronous policies. Here the pair shares with SGT beside more families of their own
# architectures and tokenizers (the profile's `scaling_families`, e.g. Qwen2 + WordPiece, Mistral + characters,
# GPT-NeoX + BPE), one run per (n, clock), one at a time on the profile's scaling backend so the wall times compare.
# Sync: a barrier after each phase. Async: each worker may run one step ahead of the slowest and receives the
# records its peers have published so far (up to 2 steps old; the staleness of every record is in the step rows).
# With processes the async schedule follows the machine's timing, so an async run is one draw of it. One seed: the
# rows are single runs, not estimates.

# %%
scaling = None
if beyond.scaling_sizes:
    scale_steps, scale_evals, scale_runs = run_scaling(config, progress=progress)
    scaling = scaling_table(scale_evals, scale_runs)
    write_table(scaling, "beyond_scaling", run.tables,
                caption=f"n policies sharing with {beyond.scaling_probe} on the held-out experiment "
                        f"({beyond.scaling_steps} steps, zoo seed {heldout.zoo_seeds[0]}, RL seed(s) "
                        f"{listing(beyond.scaling_seeds)}, {beyond.scaling_backend} backend, one run at a time): wall "
                        f"time of the run (start-up included), the pair's final held-out accuracy on its weak forms "
                        f"and overall, and the mean overall accuracy of all n policies. Single runs: differences are "
                        f"not estimates.")
    print("records handed over per learner step, async:", records_handed_over(scale_steps))
else:
    print("no n-policy runs in this profile (experiments.beyond.scaling_sizes is empty)")
scaling

# %%
(draw_and_save(scaling_figure, "beyond_scaling", run.figures, table=scaling) if scaling is not None
 else "no n-policy runs")

# %% [markdown]
# ## Result
#
# Generated from the three tables' numbers (`mrl.reports.beyond.beyond_result`): every number is read from them.

# %%
Markdown(beyond_result(numbers, table, poison_numbers, scaling))

# %% [markdown]
# ## Discussion
#
# TRRD and offline GRAFT ask two questions the papers leave open. TRRD asks whether a peer helps as a fixed teacher
# through the ratio anchor alone, with no peer text in the loss; offline GRAFT asks whether co-training matters, or
# whether a log of a peer's experience, replayed, carries the same rescue. An interval that excludes 0 answers for this
# substrate; one that spans 0 leaves the question open at this number of seeds, and the chance count above says how
# many exclusions a table of this size would show with no effect at all.
#
# The poisoned peer separates what verification can guard from what it cannot. A forged success carries text, so the
# learner's own verifier can re-score it, and with re-verification on the run must equal the honest one: the table's
# `equals honest run` is a check of that guarantee, not an estimate. Without it, a forged success enters the loss as
# if it were correct; how much that costs is what the trusting rows measure. Lying group statistics carry no text, so
# no verifier can turn them away: a probe that reads only statistics (XGRPO) depends on the peer's honesty.
#
# The n-policy rows are too few runs per (n, clock) to estimate a difference: they show that sync and async sharing run
# for more than two policies across architectures and tokenizers, and what a run costs in wall time on this machine, not
# whether more peers help. Async wall time depends on the machine's timing, so an async row is one draw of its schedule.
# The substrate is 70_heldout's tiny zoo on `arith-forms`, a CPU stand-in for the papers' models and benchmarks.

# %% [markdown]
# ## What the canonical tokenization drops: the exact probability of a peer's text
#
# **Claim (ours, beyond the papers).** Every method here that weighs a peer's sample by the learner's probability
# scores one tokenization of the text, the learner's canonical one: HACPO's official code, GRAFT (which calls its
# ratio "not an exact cross-tokenizer importance ratio") and THL's retokenization. The probability that the learner
# writes the text is the sum over every tokenization that decodes to it (`mrl.core.thl.marginal_logprob`,
# docs/marginal.md), so the canonical one is a lower bound. This section measures how much the shortcut drops, on
# which samples, what it does to HACPO's ratio and how often its clip bounds bind, and what the exact value costs.
#
# **Setup.** The held-out pair (A: GPT-2 + BPE; B: Llama + Unigram) on its first zoo seed, at its warm-up and after
# training: the policies of the GRPO run whose experience log the offline GRAFT above replays (RL seed
# `beyond.seeds[0]`, the held-out steps; `mrl.experiments.beyond.marginal_policies` trains it into
# `results/trained/` when that folder lacks it). Each policy samples G completions of the first
# `beyond.marginal_prompts` held-out test prompts per skill, as its RL rollouts are drawn; the other policy scores every
# text that ended with EOS canonically and over every tokenization (exact: the zoo's answers are a few bytes), split
# by the source's verifier into successes and failures (`mrl.experiments.marginal_gap`). HACPO's sequence ratio s (ratio thl:
# divided by THL's groups) is read under three definitions: canonical (the learner's canonical tokenization over the
# source's sampled tokens: the probes' default), marginal (the learner's marginal over them: `tokenization:
# marginal`) and exact (both sides' marginals: the text's own ratio, which a probe cannot form without the source's
# model). Its clip range is the ledger arm's, 4 updates per step: [0.8, 1] at the first update, rising to [0.875, 1]
# at the last (stepwise); later updates see a learner that has moved, so the last range is read on the same ratios
# as a bound on what it could clip. The cost is CPU time on one RL step's peer texts, canonical and marginal measured
# in the same run.

# %%
from mrl.core.probes import probe_config
from mrl.experiments.beyond import run_marginal_gap
from mrl.experiments.marginal_gap import stepwise_bounds
from mrl.reports.marginal import (cost_table, gap_figure, gap_figure_inputs, gap_table, marginal_result,
                                  ratio_table)

marginal_rows, marginal_cost = run_marginal_gap(config, backend, progress=progress)
marginal_rows.to_csv(run.folder / "marginal_rows.csv", index=False)
marginal_setting = (f"the held-out pair on zoo seed {heldout.zoo_seeds[0]} at its warm-up and after "
                    f"{heldout.steps} GRPO steps (RL seed {beyond.seeds[0]}); each policy sampled G = "
                    f"{config.grpo.group_size} completions of the first {beyond.marginal_prompts} held-out test "
                    f"prompts per skill, and the other scored the texts that ended with EOS")
gap = gap_table(marginal_rows)
write_table(gap, "beyond_marginal_gap", run.tables, float_format="{:.4f}",
            caption=f"What the learner's canonical tokenization drops from the probability of a peer's text: the gap "
                    f"log marginal - log canonical (nats; the marginal sums every tokenization, EOS included), on "
                    f"{marginal_setting}, over the source's successes and failures; the share of texts the learner "
                    f"can write more than one way, and of those whose canonical tokenization carries under 90% of "
                    f"the text's probability.")
gap

# %%
draw_and_save(gap_figure, "beyond_marginal_gap", run.figures, **gap_figure_inputs(marginal_rows))

# %%
bounds = stepwise_bounds(probe_config("hacpo", minibatches=4))   # the ledger's HACPO arm (claims.HACPO4)
ratios = ratio_table(marginal_rows, bounds)
write_table(ratios, "beyond_marginal_ratio", run.tables, float_format="{:.4f}",
            caption=f"HACPO's sequence log-ratio log s (ratio thl) of the peer's texts by definition, on "
                    f"{marginal_setting}: canonical (the learner's canonical tokenization over the source's sampled "
                    f"tokens), marginal (the learner's marginal over them: tokenization marginal), exact (both "
                    f"sides' marginals); the share outside the stepwise clip range at the first update "
                    f"[{bounds[0]:g}, 1] and at the last of 4 [{bounds[1]:g}, 1], and the share the definition moves "
                    f"to the other side of the first range than the canonical.")
ratios

# %%
cost = cost_table(marginal_cost)
write_table(cost, "beyond_marginal_cost", run.tables, float_format="{:.2f}",
            caption=f"What the marginal costs, on {marginal_setting}: the learner's CPU milliseconds (median of 3, "
                    f"{config.threads} thread(s)) to score one RL step's peer texts (the first prompts_per_step x G = "
                    f"{config.grpo.prompts_per_step * config.grpo.group_size} that ended). Probe: forward and backward "
                    f"as a probe scores them, canonical encodings against tokenization marginal (the canonical rows "
                    f"plus one row per tokenization: rows per text); search: the exact value without gradient "
                    f"(mrl.core.marginal) against a canonical forward. Ratio: marginal / canonical, measured in one run.")
cost

# %% [markdown]
# ### The ledger's HACPO arm and GRAFT with the marginal ratio
#
# The ledger's HACPO arm (4 updates per step) and GRAFT also run with `tokenization: marginal` in 70_heldout's grid, on
# every warm-up and RL seed their canonical twins run on, fixed in the profile before any of their runs (the default
# profile: the ledger's 5 warm-ups x 2 RL seeds at its steps; `configs/full.yaml`: 3 RL seeds at 300 steps; the smoke
# profile: HACPO's alone). The marginal arm is paired with its twin run by run and read by the ledger's rule (warm-up as
# the unit, a two-sided t test against 0 in one Holm family per endpoint, sign-flip p, leave one warm-up out); the
# ledger's claims on HACPO are judged again with the marginal arm in the canonical arm's place. A last table reads the
# runs' step metrics: what the marginal cost the update phase per step, how many peer samples HACPO's clip range kept
# under each arm, and the gap the marginal arm met in the peer texts it trained on.

# %%
from IPython.display import display
from mrl.experiments.heldout import heldout_runs, marginal_arm_runs, marginal_arms
from mrl.reports.claims import endpoint_values
from mrl.reports.marginal import (arms_training_result, arms_training_table, marginal_arms_result,
                                  marginal_arms_table, marginal_ledger_verdicts)

arm_pairs, arm_runs = marginal_arms(heldout), marginal_arm_runs(config, progress)
arms = verdicts = training = None
if arm_runs:
    arm_steps, arm_evals = run_many(arm_runs, config.packed_runs, backend, progress=progress)
    arms = marginal_arms_table(endpoint_values(arm_evals), arm_pairs)
    training = arms_training_table(arm_steps, arm_pairs)
    # the ledger's every arm on its own warm-ups (the replication's apart, as 70_heldout reads it)
    _, ledger_evals = run_many(heldout_runs(config, progress, heldout.zoo_seeds), config.packed_runs, backend,
                               progress=progress)
    verdicts = marginal_ledger_verdicts(endpoint_values(ledger_evals), arm_pairs)
    write_table(arms, "beyond_marginal_arms", run.tables,
                caption=f"The ledger's HACPO arm and GRAFT with the marginal ratio against their canonical twins on "
                        f"the held-out experiment ({heldout.steps} steps, zoo seeds {listing(heldout.zoo_seeds)}, RL "
                        f"seeds {listing(heldout.seeds)}): the paired difference marginal - canonical at the ledger's "
                        f"endpoint, its 95% t interval over the warm-ups and the hierarchical bootstrap's, the Holm p "
                        f"of the two-sided test against 0 (one family per endpoint), the sign-flip p, the reading on "
                        f"this substrate, leave-one-warm-up-out, and whether the interval lies inside the ledger's "
                        f"margin.")
    write_table(verdicts, "beyond_marginal_verdicts", run.tables,
                caption="The ledger's claims that read HACPO's arm, judged with the canonical arm and again with its "
                        "marginal twin in its place (rule v2, both Holm families).")
    display(verdicts)
    write_table(training, "beyond_marginal_training", run.tables, float_format="{:.3f}",
                caption=f"What the marginal did inside training, per pair and learner (mean over steps, then over "
                        f"the pair's runs): the update phase's wall seconds per step of each arm and their ratio "
                        f"(marginal / canonical; 70_heldout packed its runs, packed_runs {config.packed_runs}, each on one "
                        f"core), HACPO's share of peer samples kept inside its clip range under each arm, and the "
                        f"marginal arm's mean gap log marginal - log canonical over the peer texts it scored.")
    display(training)
else:
    print("no marginal arms in this profile (the smoke, default and full profiles run them)")
arms

# %% [markdown]
# ### Result
#
# Generated from the tables above (`mrl.reports.marginal.marginal_result`, `marginal_arms_result`): every number is
# read from them.

# %%
Markdown(marginal_result(gap, ratios, marginal_cost, bounds)
         + ("\n\n**The ledger's HACPO arm and GRAFT with the marginal ratio**, on this substrate:\n\n"
            + marginal_arms_result(arms, verdicts) + "\n\n**Inside training:**\n\n"
            + arms_training_result(training) if arms is not None else ""))

# %% [markdown]
# ### Discussion
#
# The gap lives where the learner's tokenizer can write one text several ways. The zoo's BPE merges frequent digit
# pairs, so A can write `12` as one token or two; the zoo's Unigram trains to single characters, so B has one
# tokenization per text and, as a learner, no gap: the canonical shortcut is exact for it on this substrate, and the
# marginal and exact definitions of its ratio differ only by the source's side. Where the gap is not 0 the canonical
# under-states the learner's probability of the peer's text, so HACPO's ratio is biased downward for exactly those
# samples, toward and past the clip range's lower bound; the ratio table counts how many the marginal moves to the
# other side of it, which is what the probe's loss sees (a clipped peer sample passes no gradient). Whether the gap
# differs between the source's successes and failures is read from the gap table: a gap concentrated on one outcome
# would tilt the ratio, and the weight of peer samples in the loss, by outcome.
#
# The two costs differ by construction. The search shares the prompt and every common tokenization prefix on the KV
# cache and forwards one token per prefix without a graph; the zoo's answers are a few bytes, so a lattice holds a
# handful of paths. The probe scores every tokenization as a row of a forward with gradient beside the canonical rows,
# so a text with one tokenization is scored twice, which an implementation could skip. On a real tokenizer and longer
# answers the lattice grows exponentially and the beam with its bound on the uncovered mass takes over
# (docs/marginal.md). Whether the marginal changes a HACPO or GRAFT result is read from the arms' table: a paired
# difference whose interval holds 0 is "no difference detected", not "no difference" (the table says whether the
# interval lies inside the ledger's margin). All of it holds on this substrate only: 70_heldout's tiny zoo on
# `arith-forms`, where B has no gap; a real tokenizer on longer answers writes a text many more ways.

# %% [markdown]
# ### Summary of the marginal (rounded; nbval checks this cell on the smoke profile)

# %%
# NBVAL_CHECK_OUTPUT
print(gap.set_index(["point", "learner", "source", "outcome"]).drop(columns="not writable").round(3).to_string())
print(ratios.set_index(["point", "learner", "source", "definition"])[["mean log s", f"outside [{bounds[0]:g}, 1]",
                                                                       "changes side"]].round(3).to_string())
if arms is not None:
    print(arms.set_index(["comparison", "endpoint"])[["warm-ups x seeds", "difference", "reading"]].to_string())

# %%
print(f"80_beyond ran in {time.perf_counter() - start:.0f} s ({profile} profile, backend {backend})")

# %% [markdown]
# ## Summary (rounded; nbval checks this cell on the smoke profile)

# %%
# NBVAL_CHECK_OUTPUT
print(numbers.set_index(["policy", "probe"])[["weak", "overall"]].round(2).to_string())
print(poisoned.set_index(["policy", "probe", "arm"])[["weak", "overall", "equals honest run"]].to_string())
if scaling is not None:
    print(scaling.drop(columns=["wall seconds"]).set_index(["n", "clock"]).round(2).to_string())
