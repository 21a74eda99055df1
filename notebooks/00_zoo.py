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
# # 00 · The tiny heterogeneous zoo and its complementary skills
#
# **Claim.** A short supervised warm-up gives each family a *complementary* skill profile on the
# `arith-ops` task (docs/architecture.md, The task and the zoo): A (GPT-2 + byte-level BPE) is strong on addition S1,
# B (Llama + Unigram, character-level on digits) on subtraction S2, both are partial on the shared multiplication S3
# (each was taught a different half of its training problems), and each sees the peer's skill only through a small
# leak of fixed problems. C (Qwen2 + WordPiece) is the third family for n = 3 runs: taught S3, with leaks of S1 and
# S2. This is what the sharing probes need: a *rescue set*, prompts a policy rarely solves and its peer often does.
#
# **Setup.** Each family is a real `transformers` checkpoint built from config under `data/models/` (git-ignored,
# rebuilt when its config changes), with its own tokenizer trained locally on the task corpus, and warmed up by
# cross-entropy on its mixture (the zoo table's `warm-up mix` column: a share per skill, `.half` for one half of S3,
# `leak:` for the peer's fixed subset). Measured: greedy accuracy per skill on held-out prompts, which no training
# step sees, and on the RL pool that the GRPO notebooks train on.
#
# This is the substrate, not a result of the papers: the MRL paper uses real models (the `paper` profile), and the
# tiny zoo is our CPU stand-in.

# %% tags=["parameters"]
profile = "default"  # smoke | default
progress = True      # tqdm bars during the warm-up

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
from IPython.display import Markdown
from mrl.core.tasks import make_task
from mrl.notebook import setup_notebook
from mrl.reports.figure_inputs import draw_and_save
from mrl.reports.substrate import (skill_matrix, warmup_accuracy, warmup_caption, warmup_figure, warmup_figure_inputs,
                                   zoo_result, zoo_table)
from mrl.runtime.results import write_table
from mrl.runtime.zoo_grid import build_zoo

run = setup_notebook("00_zoo", profile)
config = run.config
run.record(warmup_seed=config.zoo.warmup.seed)
task = make_task(config.task)
zoo = build_zoo(config.task, config.zoo, progress=progress)

# %% [markdown]
# ## The families: architecture, tokenizer, size, and how each splits the same text

# %%
families = zoo_table(zoo, task)
write_table(families, "zoo", run.tables, caption="The model zoo (built from config, tokenizers trained locally).")
families

# %% [markdown]
# ## Greedy accuracy per skill after the warm-up (held-out prompts and the RL pool)

# %%
accuracy = warmup_accuracy(zoo, task, config.grpo.max_new_tokens)
accuracy.to_csv(run.folder / "warmup_accuracy.csv", index=False)
held_out, pool = skill_matrix(accuracy, "held-out"), skill_matrix(accuracy, "pool")
write_table(held_out, "warmup", run.tables, caption=warmup_caption(task, "held-out"))
write_table(pool, "warmup_pool", run.tables, caption=warmup_caption(task, "pool"))
setting = f"{config.task.name}, zoo seed {config.zoo.warmup.seed}"
draw_and_save(warmup_figure, "warmup", run.figures, **warmup_figure_inputs(accuracy, zoo), setting=setting)

# %% [markdown]
# ## Result
#
# Generated from the warm-up accuracy and the zoo table (`mrl.reports.substrate.zoo_result`). A policy's own skill is
# the one its mixture teaches most; the skills it lacks are those it sees only as a leak.

# %%
Markdown(zoo_result(accuracy, families))

# %% [markdown]
# ## Discussion
#
# The complementary structure holds when each policy leads the zoo on its own skill and sits near zero on the skills
# it lacks: each policy's weak skill is then a peer's strong one, so a peer succeeds on the prompts where the
# policy's whole group fails, which is the experience the sharing probes pass on. The leak is meant to keep the weak
# skill just above zero, and whether it does decides if independent GRPO has any signal there at all (notebook 10).
#
# Limits. Accuracy is greedy decoding on a fixed set of prompts per skill, so a cell moves in steps of one prompt and
# one warm-up seed gives one draw of the zoo; notebook 70 warms up several. The pool prompts come from the training
# split, so a family may have seen its own skill's pool prompts during the warm-up: the held-out row is the one that
# measures a skill. The smoke profile's warm-up is far shorter than the default's: its numbers check that the code
# runs, not that the zoo is complementary.
#
# ## Summary
#
# Rounded to 2 decimals (nbval checks this cell on the smoke profile).

# %%
# NBVAL_CHECK_OUTPUT
print(held_out.set_index("policy").round(2).to_string())
