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
# # 75 · The confirmatory test: SGT against GRPO on warm-ups no one had run
#
# **Claim.** MRL's headline: outcome-level sharing (SGT) beats independent GRPO, by +0.013 in the paper's main
# figure (`docs/papers.md`).
#
# **What makes it confirmatory.** Its design, data and analysis were fixed in the repository before any of its runs
# (`docs/registration.md`, registered on 2026-11-28; `tests/test_registration.py` fails if the block, the held-out
# settings or the analysis code change). Everything else in the package, the claims ledger of 70_heldout included,
# is exploratory: its warm-ups shaped the substrate and its rules.
#
# **Design.** The held-out experiment of 70_heldout (`arith-forms`, its zoo, 100 RL steps) on 12 fresh warm-ups, `grpo`
# and `sgt` only, 2 RL seeds nested in each warm-up. The unit is the warm-up: d_z is the mean over its two policies
# and two RL seeds of sgt - grpo on overall held-out accuracy (the last three evaluations).
#
# **Tests.** A gatekeeper, E[d] = 0 two-sided at 0.05 read by its sign (confirmed, contradicted: the opposite sign,
# not confirmed), and a size test, E[d] >= +0.013 one-sided at 0.05 (not reproduced at the paper's size). Their
# nulls are disjoint, so each runs at the full 0.05. The sign-flip p, the warm-ups above 0 and each warm-up left
# out sit beside them and decide nothing.
#
# **The substrate is not the papers'.** Two models of about 0.8M parameters on two-number addition: whatever the
# verdict, it holds on this substrate.

# %% tags=["parameters"]
profile = "default"  # smoke | default
backend = None       # inline | process | ray (None: the profile's); packed_runs > 1 runs that many at once
progress = True
rerun = False        # False: the registered analysis from the runs' committed values; True: run the 48 runs again

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
import time
start = time.perf_counter()
from IPython.display import Markdown, display
from mrl.experiments import run_many
from mrl.experiments.heldout import confirmatory_runs
from mrl.notebook import setup_notebook
from mrl.paths import repo_root
from mrl.reports.claims import read_endpoint_values, seed_differences
from mrl.reports.confirmatory import (DESIGN, complete_warmups, confirmatory_analysis, confirmatory_test,
                                      fewest_warmups, leave_one_out, plan_table, registered_plan, result_sentence,
                                      result_table)
from mrl.reports.figure_inputs import draw_and_save
from mrl.reports.rliable_view import LEVEL, aggregate_table, improvement_table, rliable_figure, rliable_sentence
from mrl.reports.statistics import nested_variance_components
from mrl.runtime.results import listing, write_table

run = setup_notebook("75_confirmatory", profile)
config, heldout = run.config, run.config.experiment("heldout")
backend = backend or config.runner.backend
block = heldout.confirmatory
run.record(confirmatory=block, backend=backend)

# %% [markdown]
# ## The plan
#
# How the number of warm-ups was chosen: the gatekeeper's power at the paper's effect, at the plug-in SD of d_z and
# averaged over that SD's uncertainty, against what each design costs on two cores (`registered_plan`, from the
# registration's inputs).

# %%
plan = registered_plan()
write_table(plan_table(plan), "confirmatory_plan", run.tables,
            caption=f"The confirmatory test's plan (docs/registration.md): per number of RL seeds and warm-ups, the "
                    f"gatekeeper's power at the paper's {DESIGN.paper_effect:+.3f} (two-sided, alpha "
                    f"{DESIGN.alpha}) at the plug-in SD of d_z and averaged over that SD's uncertainty, the size "
                    f"test's power when the true difference is 0, the runs and the minutes on two cores (zoo builds "
                    f"and runs). The registered design is the fewest warm-ups whose averaged power reaches 80%: "
                    f"{fewest_warmups(plan, 2)} with 2 RL seeds.")
plan_table(plan)

# %% [markdown]
# ## The runs and the test
#
# Every arm on every warm-up and RL seed (a warm-up enters only when both arms finished on both RL seeds), then the
# registered test. The runs wrote their per-run values to `paper_tables/confirmatory_runs.csv` (on 2026-11-28, at the
# registered code); by default this notebook reads them back and runs the registered analysis from them
# (`complete_warmups`, `confirmatory_test`: what `confirmatory_analysis` does after computing those values from the
# runs), so it re-executes in seconds. `rerun = True` runs the 48 runs again (hours, through the run cache).

# %%
confirm_runs = block is not None
if confirm_runs and rerun:
    _, confirm_evals = run_many(confirmatory_runs(config, progress), config.packed_runs, backend, progress=progress)
    confirm_values, confirm_d, confirmed = confirmatory_analysis(confirm_evals, block.seeds, heldout.pairing,
                                                                 planned=len(block.zoo_seeds))
    confirm_values.to_csv(run.folder / "confirmatory_runs.csv", index=False)   # the registered values stay as run
elif confirm_runs:
    confirm_values = read_endpoint_values(repo_root() / "paper_tables" / "confirmatory_runs.csv")
    confirm_values = confirm_values[confirm_values.zoo_seed.isin(block.zoo_seeds)]
    confirm_d = complete_warmups(confirm_values, DESIGN, block.seeds, heldout.pairing)
    confirmed = confirmatory_test(confirm_d, planned=len(block.zoo_seeds))
if confirm_runs:
    write_table(result_table(confirmed), "confirmatory", run.tables,
                caption=f"The confirmatory test (registered before its runs, docs/registration.md): "
                        f"{DESIGN.comparison} on {DESIGN.endpoint} held-out accuracy over {confirmed.warmups} fresh "
                        f"warm-ups (zoo seeds {listing(list(confirm_d.index))}) x {len(block.seeds)} nested RL seeds, "
                        f"the mean of d_z with its {1 - DESIGN.alpha:.0%} t interval over warm-ups, the gatekeeper's "
                        f"two-sided p against 0 and the size test's one-sided p against the paper's "
                        f"{DESIGN.paper_effect:+.3f} (disjoint nulls, each at alpha {DESIGN.alpha}: one interval, "
                        f"one family), the exact sign-flip p and the warm-ups above 0 (both descriptive), and the two "
                        f"labels.")
    write_table(leave_one_out(confirm_d), "confirmatory_leave_one_out", run.tables,
                caption="The confirmatory test with each warm-up left out (descriptive, deciding nothing): the mean "
                        "of the others and their t against 0, read at the full sample's two-sided critical t, so a "
                        "warm-up is flagged for what it moves, not for the degree of freedom its removal costs.")
    components = nested_variance_components(seed_differences(confirm_values, DESIGN.comparison.probe,
                                                             DESIGN.comparison.reference, DESIGN.endpoint))
    confirm_text = (result_sentence(confirmed) + f" Beside it, deciding nothing: the SD between warm-ups "
                    f"{components['between-warm-up SD']:.4f} and between RL seeds within one "
                    f"{components['RL-seed SD']:.4f} (REML).")
else:
    confirm_text = ("This profile has no confirmatory block (experiments.heldout.confirmatory): the default profile "
                    "holds the registered one.")
Markdown(confirm_text)

# %% [markdown]
# ## rliable's view (descriptive)
#
# The view RL readers expect (rliable): each arm's interquartile mean of the runs' accuracy per policy, and the
# probability that SGT's run beats GRPO's on the same warm-up, RL seed and policy, on the runs the test read. The
# intervals resample warm-ups, each with all its runs: two RL seeds of one warm-up are nearly one unit, so an interval
# over runs would be too narrow. The registered test above is the answer, and this decides nothing.

# %%
if confirm_runs:
    arms = [DESIGN.comparison.reference, DESIGN.comparison.probe]
    tested = confirm_values[confirm_values.zoo_seed.isin(confirm_d.index) & confirm_values.seed.isin(block.seeds)]
    aggregates = aggregate_table(tested, arms, DESIGN.endpoint)
    improvement = improvement_table(tested, [(DESIGN.comparison.probe, DESIGN.comparison.reference)],
                                    DESIGN.endpoint)
    write_table(aggregates, "confirmatory_rliable", run.tables,
                caption=f"rliable's view of the confirmatory test's runs (descriptive, deciding nothing): per arm "
                        f"and policy the mean and the interquartile mean of {DESIGN.endpoint} held-out accuracy over "
                        f"its runs (the tested warm-ups x RL seeds) with {LEVEL:.0%} bootstrap intervals that resample "
                        f"warm-ups, each with all its runs. The table holds {len(aggregates)} intervals of accuracy "
                        f"levels, none of a difference, so none is read against 0.")
    display(aggregates)
    rliable_text = rliable_sentence(aggregates, improvement)
else:
    rliable_text = "No confirmatory runs in this profile."
Markdown(rliable_text)

# %%
(draw_and_save(rliable_figure, "confirmatory_rliable", run.figures, aggregates=aggregates, improvement=improvement)
 if confirm_runs else None)

# %%
print(f"75_confirmatory ran in {time.perf_counter() - start:.0f} s ({profile} profile, backend {backend})")

# %% [markdown]
# ## Summary (rounded; nbval checks this cell on the smoke profile)

# %%
# NBVAL_CHECK_OUTPUT
print(f"planned warm-ups: {fewest_warmups(plan, 2)} with 2 RL seeds")
print(confirm_text if not confirm_runs else f"{confirmed.reading.value}; {confirmed.size.value}; "
      f"{confirmed.warmups} of {confirmed.planned} warm-ups")
