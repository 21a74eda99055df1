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
# `arith-ops` task (docs/architecture.md, The task and the zoo): A (GPT-2 + byte-level BPE) is strong on addition S1, B
# (Llama + Unigram, character-level on digits) on subtraction S2, both are partial on the shared
# multiplication S3 (each was taught a different half of its training problems), and each sees only a
# small leak (rho = 3% from 150 fixed problems; 75% own skill, 22% own half of S3) of the peer's skill. C (Qwen2 + WordPiece) is the
# third family for n = 3 runs: taught S3 with leaks of S1 and S2.
#
# This is the substrate, not a result of the papers: the MRL paper uses real models (the `paper`
# profile), and the tiny zoo is our CPU stand-in, built from config with locally trained tokenizers.
# Every family is a real `transformers` checkpoint under `data/models/` (git-ignored, rebuilt when
# its config changes).

# %% tags=["parameters"]
profile = "default"  # smoke | default
progress = True      # tqdm bars during the warm-up

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
from mrl.notebook import setup_notebook
from mrl.reports.substrate import skill_matrix, warmup_accuracy, warmup_figure, zoo_table
from mrl.results import save_figure, write_table
from mrl.tasks import make_task
from mrl.zoo import build_zoo

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
write_table(held_out, "warmup", run.tables,
            caption="Greedy accuracy per skill after the warm-up, held-out prompts (S1 add, S2 sub, S3 mul).")
write_table(pool, "warmup_pool", run.tables, caption="Greedy accuracy per skill after the warm-up, RL pool prompts.")
save_figure(warmup_figure(accuracy, zoo), "warmup", run.figures)

# %% [markdown]
# ## Summary
#
# The complementary structure holds when each policy's strong skill is far above its peer's
# accuracy on the same skill, and its weak skill is the peer's strong one. Rounded to 2 decimals
# (nbval checks this cell on the smoke profile).

# %%
# NBVAL_CHECK_OUTPUT
print(held_out.set_index("policy").round(2).to_string())
