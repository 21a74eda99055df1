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
# # 76 · Every claim answered: the second registration
#
# **Claims.** The claims ledger's eight (MRL's SGT, PRP and XGRPO claims, HACPO's three, GRAFT's reading of HACPO)
# and GRAFT's own claim that it beats SGT, each on its primary endpoint with its like-for-like arms
# (`docs/registration_claims.md`). The headline, `sgt - grpo`, runs again as a second confirmatory replication; the
# first registration's result (75_confirmatory) sits beside it and is not tested again.
#
# **What makes it confirmatory.** Its design, data and analysis were fixed in the repository before any of its runs
# (registered on 2026-12-06; `tests/test_registration_claims.py` fails if the block, the settings, the code named
# under Integrity or the page's registered text change). The ledger of 70_heldout is exploratory.
#
# **Design.** The held-out experiment of 70_heldout on 12 warm-ups no one had run (zoo seeds 200-211), the ten arms of
# the nine comparisons on each, 2 RL seeds nested in each warm-up. The unit is the warm-up: d_z is the mean over its
# two policies and two RL seeds of the paired difference on the endpoint (the last three held-out evaluations).
#
# **Tests.** Each directional claim: a two-sided t test against 0 read by its sign, and a one-sided test against the
# paper's size where the paper gives one; each no-loss or no-rescue claim: a two-sided test against its margin of
# 0.01. All 15 tests form one Holm family at a family-wise 0.05.
#
# **Reconstructions and substrate.** GRAFT and PRP are the package's reconstructions, HACPO follows its official
# code; two models of about 0.8M parameters on two-number addition are not the papers' setting, so every label holds
# on this substrate.

# %% tags=["parameters"]
profile = "default"  # smoke | default
backend = None       # inline | process | ray (None: the profile's); packed_runs > 1 runs that many at once
run_block = True     # run what the block's committed record lacks (False: read the record only)
progress = True

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
import json
import time
import pandas as pd
start = time.perf_counter()
from IPython.display import Markdown, display
from mrl.experiments.heldout import claims_block_runs, run_claims_block
from mrl.experiments.record import missing_runs, read_record, readable, recorded_evals
from mrl.notebook import setup_notebook
from mrl.paths import repo_root
from mrl.profiles import load_profile
from mrl.reports.claims import read_endpoint_values
from mrl.reports.claims_confirmatory import (COMPARISONS, Costs, PlanningSd, claims_analysis, claims_test,
                                             leave_one_out, plan_table, power_table, weak_forms)
from mrl.reports.claims_registration import PLAN_INPUTS, recorded_checksum, registered_stamp
from mrl.reports.confirmatory import DESIGN, complete_warmups, confirmatory_test
from mrl.reports.claims import seed_effect_caption, seed_effect_table
from mrl.reports.confirmatory_views import claims_sentence, claims_table
from mrl.reports.figure_inputs import draw_and_save
from mrl.reports.sgt_evidence import (committed_evidence, evidence_sentence, forest_figure, forest_table,
                                      pooled_random_effects, warmup_rows)
from mrl.reproduce import BLOCK_RECORD
from mrl.runtime.results import write_table

run = setup_notebook("76_confirmatory_claims", profile)
config, heldout = run.config, run.config.experiment("heldout")
backend = backend or config.runner.backend
block = heldout.confirmatory_claims
tables = repo_root() / "paper_tables"
run.record(confirmatory_claims=block, backend=backend)

# %% [markdown]
# ## The plan
#
# How the registration chose 12 warm-ups: each test's power, at Holm's first and last steps (averaged over the
# planning SD's uncertainty) and simulated in the family, and the cost of each design in core-hours, from the inputs
# the registration froze (`docs/measurements/registration_claims_plan.json`: the nested ledger's SDs, the first
# registration's warm-ups and the per-arm costs measured on zoo seed 0). The registration's page holds the same
# tables.

# %%
first_values = read_endpoint_values(tables / "confirmatory_runs.csv")
committed_seeds = load_profile("default").experiment("heldout").seeds   # the RL seeds of the committed runs
frozen = json.loads(PLAN_INPUTS.read_text())   # the plan's inputs as the registration froze them
sds, effects, registered = [PlanningSd(**sd) for sd in frozen["sds"]], frozen["effects"], frozen["registered"]
plan = plan_table(frozen["warmups"], effects, sds, Costs(**frozen["costs"]))
write_table(plan, "confirmatory_claims_plan", run.tables, float_format="{:.2f}",
            caption=f"The second registration's plan (docs/registration_claims.md), from its frozen inputs: per number "
                    f"of warm-ups, the runs, the cost in core-hours (measured per arm on zoo seed 0, "
                    f"{frozen['costs']['machine']}) and on two cores, and the family's power simulated at the planning "
                    f"effects (the headline's replication confirmed at +0.013, its size ruled out at 0, the least "
                    f"power of the other sized claims, the margin and unsized claims) with the family's error when "
                    f"every difference is 0. The registered design: {registered} warm-ups.")
display(plan)
power = power_table(registered, effects, sds)
write_table(power, "confirmatory_claims_power", run.tables, float_format="{:.2f}",
            caption=f"Each registered test's power at {registered} warm-ups: at Holm's first step (alpha/15) and its "
                    f"last (alpha), averaged over the planning SD's uncertainty, and simulated in the family; the sign "
                    f"and margin tests at their planning effects, the size tests at a true difference of 0. The "
                    f"table holds powers, no interval.")
power

# %% [markdown]
# ## The runs and the tests
#
# Every arm on every warm-up and RL seed, read from the block's committed record
# (`paper_tables/confirmatory_claims_record/`, each run under its key), which `python -m mrl.reproduce --block-part`
# fills in parts; a run the record lacks runs here when `run_block`. A warm-up enters a comparison when both of its
# arms finished on both RL seeds for both policies.

# %%
block_runs = claims_block_runs(config)
if block_runs:
    stamp = recorded_checksum(repo_root() / "docs" / "registration_claims.md")
    if run_block and missing_runs(block_runs, repo_root() / BLOCK_RECORD, stamp):
        stamp = registered_stamp(config, repo_root() / "docs" / "registration_claims.md")   # runs only as registered
        run_claims_block(config, repo_root() / BLOCK_RECORD, progress, backend, stamp=stamp)
    record_runs, _ = read_record(repo_root() / BLOCK_RECORD)
    record_runs = record_runs[record_runs.key.isin(set(readable(block_runs, record_runs, stamp)))]
    evals = recorded_evals(block_runs, repo_root() / BLOCK_RECORD, stamp)
    if len(evals):
        values, differences, results = claims_analysis(
            evals, record_runs, block.numerics, weak_forms(heldout.zoo.families), stamp, block.seeds,
            heldout.pairing, planned=len(block.zoo_seeds))
        values.to_csv(run.tables / "confirmatory_claims_runs.csv", index=False)
    else:   # no run recorded yet: every comparison without a result
        differences = [pd.Series(dtype=float) for _ in COMPARISONS]
        results = claims_test(differences, len(block.zoo_seeds))
    first_d = complete_warmups(first_values, DESIGN, committed_seeds, heldout.pairing)
    first = confirmatory_test(first_d, planned=len(heldout.confirmatory.zoo_seeds))
    table = claims_table(results, leave_one_out(differences), first)
    write_table(table, "confirmatory_claims", run.tables,
                caption=f"Every claim's confirmatory test (the second registration, docs/registration_claims.md): "
                        f"per comparison its complete warm-ups of {len(block.zoo_seeds)} fresh ones (zoo seeds "
                        f"{block.zoo_seeds[0]}-{block.zoo_seeds[-1]}) x {len(block.seeds)} nested RL seeds, the mean "
                        f"of d_z with its 95% t interval over warm-ups (not adjusted), the raw and Holm-adjusted p of "
                        f"its test against 0 or its margin and of its size test (one Holm family of 15 tests at "
                        f"0.05), the exact sign-flip p and the warm-ups above 0 (descriptive), its labels and "
                        f"leave-one-out at the full sample's degrees of freedom. The table holds {len(results)} "
                        f"intervals of this family; read unadjusted, about {0.05 * len(results):.1f} would exclude 0 "
                        f"by chance, which is why the labels come from the Holm family. Last row: the first "
                        f"registration's test (75_confirmatory), recomputed from its committed runs, not in this "
                        f"family.")
    display(table)
    text = claims_sentence(results)
else:
    text = ("This profile has no confirmatory_claims block (experiments.heldout.confirmatory_claims): the default "
            "profile holds the registered one.")
Markdown(text)

# %% [markdown]
# ## The evidence on SGT, whole (descriptive)
#
# `sgt - grpo` has now run on four kinds of warm-up: the ledger's (zoo seeds 0-4, exploratory), the two
# registrations' (confirmatory), and outside checks that ran the project's own code elsewhere
# (`data/outside_checks/`, each set with its design and commit). Each warm-up's d_z, each set's mean with its t
# interval over warm-ups, and a random-effects pooled estimate over all of them, which mixes designs and so decides
# nothing.

# %%
evidence = committed_evidence(repo_root(), values if block_runs and len(evals) else None)
forest_rows = warmup_rows(evidence, committed_seeds, heldout.pairing)
pooled = pooled_random_effects(evidence, forest_rows)
forest = forest_table(forest_rows, pooled)
write_table(forest, "sgt_forest", run.tables,
            caption=f"sgt - grpo on every warm-up it has run ({len(forest_rows)} warm-ups in {len(evidence)} sets): per "
                    f"set its role, design (RL seeds nested in warm-ups, or crossed: seed s drew the same streams on "
                    f"every warm-up) and provenance, the mean of d_z with its 95% t interval over its warm-ups, and "
                    f"the warm-ups above 0; last, a random-effects pooled estimate over all of them (statsmodels "
                    f"MixedLM, 95% Wald interval), descriptive: it mixes designs, exploratory and confirmatory "
                    f"warm-ups and runs made at several commits. The table holds {len(forest)} intervals; read "
                    f"unadjusted, about {0.05 * len(forest):.1f} would exclude 0 by chance.")
display(forest)
Markdown(evidence_sentence(forest, pooled))

# %%
draw_and_save(forest_figure, "sgt_forest", run.figures, rows=forest_rows, pooled_mean=pooled["mean"],
              pooled_low=pooled["low"], pooled_high=pooled["high"], paper_effect=DESIGN.paper_effect)

# %% [markdown]
# **The RL seed's main effect, per design.** Where RL seed s drew the same streams on every warm-up (crossed), the
# warm-ups' means share a seed effect, tested by the two-way ANOVA's F. Where seeds are nested in warm-ups, a seed
# label means nothing shared: the only valid reference is the labels' exchangeability within each warm-up, so the p is
# the exact one of the 2^n label swaps (with 5 warm-ups it cannot fall below 2/32), not the F test's.

# %%
ledger = read_endpoint_values(tables / "claims_runs.csv")
crossed = read_endpoint_values(tables / "claims_runs_crossed.csv")
designs = {"crossed: the ledger before the nesting": crossed[crossed.zoo_seed.isin(set(ledger.zoo_seed))],
           "nested: the ledger": ledger, "nested: the first registration": first_values}
if block_runs and len(evals):
    designs["nested: the second registration"] = values
seed_effect = seed_effect_table(designs, nested=tuple(name for name in designs if name.startswith("nested")),
                                claims=COMPARISONS)
write_table(seed_effect, "claims_seed_effect", run.tables, caption=seed_effect_caption(seed_effect))
seed_effect

# %%
print(f"76_confirmatory_claims ran in {time.perf_counter() - start:.0f} s ({profile} profile, backend {backend})")

# %% [markdown]
# ## Summary (rounded; nbval checks this cell on the smoke profile)

# %%
# NBVAL_CHECK_OUTPUT
print(f"registered warm-ups: {registered}; tests in the family: {sum(1 for _ in power.itertuples())}")
print(f"sgt - grpo pooled over {pooled['warm-ups']} warm-ups (descriptive): {pooled['mean']:+.3f}")
print(text if not block_runs else "; ".join(f"{r.reading.value} ({r.warmups} of {r.planned})" for r in results))
