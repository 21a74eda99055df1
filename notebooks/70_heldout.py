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
# **Substrate (ours, from two prototypes run before this package).** `arith-forms`: one algorithm (addition) in three surface
# forms, S1 `37+48=`, S2 `add 37 and 48:`, S3 `37 plus 48 =`. 400 operand pairs are held out in every form and
# never trained on; every RL step draws fresh training prompts (`pool_per_skill: 0`). Its own zoo: A (GPT-2 +
# byte-level BPE) owns S3, B (Llama + char-level Unigram) owns S2, both warmed up on S1, each with a 1% leak
# from 20 fixed pairs of the peer's form. So A's weak form is S2 and B's is S3, and the peer is strong there.
#
# **Statistics, fixed before the runs were read** (`mrl/reports/claims.py`, `docs/claims.md`).
# - *Endpoint:* per run and policy, the mean held-out accuracy over the last 3 evaluations: overall (as the papers
#   report accuracy; primary) and on the policy's weak form (the mechanism; secondary).
# - *Unit:* the warm-up. Runs of one RL seed share prompts and sampling seeds at every step, whatever the probe, so a
#   probe is paired with GRPO run by run; the differences are averaged within each zoo seed, and the 95% t interval
#   is over the zoo seeds (df = warm-ups - 1). A hierarchical bootstrap (warm-ups, then RL seeds) is the check.
# - *Verdicts:* each claim's interval is read against 0 and against the paper's own effect size, with Holm's
#   correction across the ledger: supported, contradicted (the data rule out the paper's effect) or inconclusive.

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
from mrl.experiments.heldout import heldout_runs, heldout_zoos, knob_runs
from mrl.notebook import setup_notebook
from mrl.reports.claims import (ENDPOINT_EVALS, MARGIN, MIN_WARMUPS, base_rate_figure, base_rate_sentence,
                                claims_ledger, endpoint_table, evidence_table, ledger_discussion,
                                ledger_interval_count, ledger_result, ledger_sentence, ledger_table, verdict_counts)
from mrl.reports.paired import chance_note, interval_caption, knob_table, weak_skill_figure
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
# ## The grid: every probe on every warm-up, each over the RL seeds

# %%
steps_df, evals = run_many(heldout_runs(config, progress), config.packed_runs, backend, progress=progress)
steps_df.to_csv(run.folder / "steps.csv", index=False)
evals.to_csv(run.folder / "evals.csv", index=False)
n_runs = len(steps_df.groupby(["probe", "seed", "zoo_seed"]))
runs_text = (f"{len(heldout.zoo_seeds)} warm-ups (zoo seeds {listing(heldout.zoo_seeds)}) x {len(heldout.seeds)} RL "
             f"seeds ({listing(heldout.seeds)}), {heldout.steps} steps")
print(f"{n_runs} runs: {runs_text}; {time.perf_counter() - start:.0f} s")

# %% [markdown]
# ## Warm-up accuracy per form (held-out, step 0 of the runs)

# %%
start_accuracy = evals[evals.step == 0].groupby(["zoo_seed", "policy", "skill"]).accuracy.first().unstack("skill")
write_table(start_accuracy.reset_index(), "heldout_warmup", run.tables,
            caption="Held-out greedy accuracy per form after the warm-up (S1 `a+b=`, S2 `add a and b:`, "
                    "S3 `a plus b =`), per zoo seed.")
start_accuracy

# %% [markdown]
# ## Main result: each probe against GRPO at the endpoint, the warm-up as the unit

# %%
numbers, table = endpoint_table(evals)
numbers.to_csv(run.folder / "heldout_numbers.csv", index=False)
write_table(table, "heldout_main", run.tables,
            caption=f"Held-out experiment ({heldout.task.name}, fresh prompts; {runs_text}): held-out accuracy on "
                    f"each policy's weak form and overall at the endpoint (the mean of the last {ENDPOINT_EVALS} "
                    f"evaluations; mean over the row's runs). "
                    + interval_caption(table, "the warm-ups (each warm-up's mean over its RL seeds first)",
                                       n_column="warm-ups", reference="GRPO"))
table

# %%
panels = panel_labels(heldout.panels)   # {title: probe labels}, the profile's (experiments.heldout.panels)
first_zoo = heldout.zoo_seeds[0]
first_figure = weak_skill_figure(evals, steps_df, panels, zoo_seed=first_zoo, setting=heldout.task.name)
save_figure(first_figure, "heldout_weak_skill", run.figures)

# %% [markdown]
# The last warm-up (one figure per warm-up shown: they start the weak forms at different levels):

# %%
last_zoo = heldout.zoo_seeds[-1]
last_figure = weak_skill_figure(evals, steps_df, panels, zoo_seed=last_zoo, setting=heldout.task.name)
save_figure(last_figure, f"heldout_weak_skill_zoo{last_zoo}", run.figures)

# %% [markdown]
# ## The gain against the warm-up's base rate
#
# Sharing can only help where the weak form is weak; where the warm-up leaves it at 0, a policy may not even
# sample a near miss. One point per (policy, warm-up): its paired gain over GRPO on its weak form at the endpoint
# (mean over the RL seeds) against the weak form's held-out accuracy after the warm-up.

# %%
save_figure(base_rate_figure(evals), "heldout_base_rate", run.figures)

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
                        f"steps, zoo seed {heldout.zoo_seeds[0]}): final held-out accuracy on the weak form and "
                        f"overall. " + interval_caption(knobs, f"RL seeds {listing(heldout.knob_seeds)}",
                                                        reference="the probe at its defaults"))
else:
    knobs = "no knob variants in this profile (experiments.heldout.knob_probes)"
knobs

# %% [markdown]
# ## The claims ledger
#
# Each claim of the papers as they state it, on overall held-out accuracy (the primary endpoint), then on the weak
# form (the mechanism). HACPO and its baselines run as the HACPO paper runs them, 4 optimizer updates per step.
# The no-loss claim (XGRPO) is a non-inferiority test and the no-rescue claim a non-superiority test, both with a
# margin of 0.01 (`docs/claims.md` says why). `positive units` counts the (policy, warm-up) units whose mean
# difference is above 0. The pool regime (`arith-ops`, 40_probe and 50_hacpo) has one warm-up, so its
# differences are descriptive there and are not in the ledger.

# %%
ledger_caption = (f"the mean paired difference over the warm-ups with its unadjusted 95% t interval (df = warm-ups "
                  f"- 1) and the hierarchical bootstrap's (a check: with few warm-ups it is too narrow), the (policy, "
                  f"warm-up) units above 0, the paper's own effect (docs/papers.md), the one-sided p-values of the "
                  f"support and contradiction tests, Holm-corrected together across the ledger, and the verdict "
                  f"(at least {MIN_WARMUPS} warm-ups; margin {MARGIN} for the no-loss and no-gain claims).")
ledgers = {}
for column, name, endpoint in (("overall", "claims", "overall held-out accuracy"),
                               ("weak", "claims_weak", "the weak form's held-out accuracy")):
    ledgers[column] = claims_ledger(evals, column)
    ledgers[column].to_csv(run.folder / f"{name}_numbers.csv", index=False)
    write_table(ledger_table(ledgers[column]), name, run.tables,
                caption=f"Claims ledger on {endpoint} at the endpoint ({runs_text}): {ledger_caption} "
                        f"{chance_note(ledger_interval_count(ledgers[column]))}")
    print(ledger_sentence(ledgers[column], endpoint))
ledger = ledgers["overall"]
ledger_table(ledger)

# %%
ledger_table(ledgers["weak"])

# %% [markdown]
# The evidence per warm-up: each claim's mean paired difference over the RL seeds, per policy and zoo seed.

# %%
evidence = evidence_table(evals, "overall")
write_table(evidence, "claims_evidence", run.tables,
            caption=f"The claims ledger's evidence per warm-up (overall held-out accuracy at the endpoint): the mean "
                    f"paired difference over the {len(heldout.seeds)} RL seeds per policy and zoo seed, and how many "
                    f"are above 0. No intervals: each cell is one unit of the ledger's t interval.")
evidence

# %% [markdown]
# ## Result
#
# Generated from the two ledgers above (`mrl.reports.claims.ledger_result`): every number is read from the tables.

# %%
Markdown(ledger_result(ledgers))

# %% [markdown]
# ## Discussion
#
# What the primary ledger says about the papers, and how the gains sit against the warm-ups' base rates
# (`ledger_discussion`, `base_rate_sentence`: generated from the ledger and the runs). The tiny zoo and `arith-forms`
# are CPU stand-ins for the papers' models and benchmarks, so a contradiction here says that the claimed effect does
# not carry over to this substrate at this budget, not that the papers' own runs are wrong.

# %%
Markdown(ledger_discussion(ledger) + "\n\n" + base_rate_sentence(evals))

# %%
print(f"70_heldout ran in {time.perf_counter() - start:.0f} s ({profile} profile, backend {backend})")

# %% [markdown]
# ## Summary (rounded; nbval checks this cell on the smoke profile)

# %%
# NBVAL_CHECK_OUTPUT
print(numbers.set_index(["policy", "probe"])[["weak", "overall"]].round(2).to_string())
print(verdict_counts(ledger).to_string())
