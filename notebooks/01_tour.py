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
# # 01 · A tour: the zoo, a peer's text through THL, SEE's records, and SGT rescuing as it trains
#
# Start here. In a minute or two this notebook shows the pieces every later notebook builds on, one small example
# each: the families and how differently their tokenizers split the same prompt; what two policies sample for one
# prompt; how THL lines a peer's text up with the receiver's tokens by bytes; the records SEE exchanged in one step;
# and a short SGT run in which each policy learns its weak skill from its peer. It runs on the held-out experiment's
# zoo when that is cached (`make reproduce`'s `70_heldout` builds it; `profile = "default"` builds it here, minutes
# on two cores), where the learning shows within the run, and otherwise on the smoke zoo, which learns almost nothing:
# the first output says which. Change the parameters and run it again: nothing here is cached.

# %% tags=["parameters"]
profile = "auto"   # auto (the default profile's held-out zoo when it is cached, else the smoke zoo) | default | smoke
steps = None       # RL steps of the SGT run (None: 60 on the held-out zoo, 12 on the smoke zoo)
seed = 0           # sampling and training seed
skill = "S2"       # the prompt's skill: S1, S2 or S3

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
import dataclasses

import pandas as pd
from IPython.display import HTML, Markdown, display

from mrl.core.config import RunnerConfig
from mrl.core.probes import probe_config
from mrl.core.tasks import make_task
from mrl.core.thl import align
from mrl.notebook import setup_notebook
from mrl.reports.palette import policy_colour
from mrl.reports.substrate import zoo_table
from mrl.reports.tour import (TOUR_STEPS, alignment_html, learning_figure, learning_sentence, logged_records,
                              prompt_samples, tokenization_table, tour_eval_every, tour_setting, tour_zoo)
from mrl.runtime.runner import run_concurrent
from mrl.runtime.spec import Run
from mrl.runtime.tracking import NotebookPlot, NotebookTable
from mrl.runtime.zoo import load_policy

chosen = tour_zoo(profile)
steps = steps or TOUR_STEPS[chosen.zoo]
run = setup_notebook("01_tour", chosen.profile, seed=seed)
config, paths = tour_setting(run.config, chosen.zoo)
task = make_task(config.task)
zoo = {name: load_policy(path) for name, path in paths.items()}
problem = task.test[skill][0]
print(f"{chosen.why}\nzoo {chosen.zoo}: policies {list(zoo)}; task {config.task.name}; {steps} SGT steps; the "
      f"prompt: {problem.prompt!r}")

# %% [markdown]
# ## The families: different architectures, different tokenizers
#
# Each policy is a real `transformers` checkpoint with its own tokenizer, trained here from scratch
# (`notebooks/00_zoo.ipynb` builds and evaluates them). The same prompt becomes different token sequences:
# this is why sharing experience between families needs THL.

# %%
zoo_table(zoo, task)

# %%
# NBVAL_CHECK_OUTPUT
print(tokenization_table({name: policy.tokenizer for name, policy in zoo.items()}, problem.prompt).to_string())

# %% [markdown]
# ## One prompt, sampled by A and B
#
# Six samples per policy at temperature 1, scored by the task's verifier (1: the exact answer). On the held-out
# zoo the prompt's form, S2, is B's strength and A's weakness (their held-out accuracies on it are in the table at
# the end, step 0), the gap sharing tries to close; on one prompt either may miss. The smoke zoo is warmed up for
# seconds only, so both answer few.

# %%
samples = prompt_samples({name: zoo[name] for name in ("A", "B")}, problem, task.verify, n=6, seed=seed,
                         max_new_tokens=config.grpo.max_new_tokens)
samples

# %% [markdown]
# ## A peer's text through THL
#
# To learn from B's sample, A needs B's text in A's tokens. THL splits the text's UTF-8 bytes into the
# smallest groups on which both tokenizations agree; every group has one colour on both rows. Per-token
# values (log-probs, advantages, masks) move through these groups (`mrl/core/thl.py`). Hover over a token to see
# its group.

# %%
peer = samples[samples.policy == "B"].sort_values("reward", ascending=False).iloc[0]
for text in (problem.prompt + peer.completion, peer.completion):
    display(HTML(alignment_html(align(text, zoo["B"].tokenizer, zoo["A"].tokenizer), zoo["B"].tokenizer,
                                zoo["A"].tokenizer, "B (source)", "A (receiver)")))

# %% [markdown]
# ## SGT on A and B: rescues as they happen
#
# A short concurrent run with the `sgt` probe: each step both policies sample, publish their records to SEE
# (the Shared Experience Exchange), and for every prompt where all of a learner's samples failed, the peer's
# verified successes (re-verified by the learner) enter its loss. The plot and the table redraw at every step:
# each policy's mean reward, how many of its prompts had no success (`rescue_candidates`) and how many peer
# successes it learned from (`rescue_size`). `report_to="tensorboard"` or `"trackio"` on `RunnerConfig` sends the
# same metrics to a dashboard. What to expect on the held-out zoo: a few rescues per policy at every step, and a
# training reward, over all three forms, that barely moves; the learning is in each policy's weak skill, drawn
# after the run.

# %%
metrics = ["train/reward", "probe/rescue_candidates", "probe/rescue_size"]
live_plot = NotebookPlot(metrics, policies=["A", "B"], title="SGT, live: one run, one point per step",
                         colour=policy_colour)
live = NotebookTable([f"{name}/{key}" for name in ("A", "B") for key in metrics], title="SGT, live")
tour = dataclasses.replace(config, grpo=dataclasses.replace(config.grpo, eval_every=tour_eval_every(config, steps)),
                           runner=RunnerConfig())
sgt_run = Run(tour, {name: paths[name] for name in ("A", "B")}, probe_config("sgt"), seed, steps)
record = run_concurrent(sgt_run, experience_dir=run.folder / "experience", progress=False, reporters=[live_plot, live])

# %%
# NBVAL_CHECK_OUTPUT
print(live.frame().round(3).to_string())

# %% [markdown]
# ## What SEE exchanged in step 1
#
# Every accepted record was written to an experience log (one Parquet file per kind and step, with a
# checksummed manifest); `mrl.runtime.experience_log.replay` reads it back and validates it again. Rollouts carry the text and
# the source's token ids and log-probs (left out here), group statistics carry reward sums, successes only
# the verified text.

# %%
records = logged_records(run.folder / "experience", step=1)
print(records.kind.value_counts().to_string())
for kind, rows in records.groupby("kind"):
    display(HTML(f"<b>{kind}</b>"), rows.dropna(axis=1, how="all").head(3))

# %% [markdown]
# ## What the run learned, and the run as data
#
# Each policy's held-out accuracy per skill along the run, its weak skill bold: on the held-out zoo it rises while
# the strong skills hold (the sentence below the table is computed from the run).
#
# `save_run` writes the run as the notebooks' grids and `mrl run` write theirs (steps, evaluations, settings);
# `mrl.runtime.results.load_runs` reads every run of a folder into one DataFrame (or a `datasets.Dataset`), each row with
# its run's identity. Called without a folder it reads the cache of every notebook's runs, `results/runs/`. The tour's
# run folder is removed first: `save_run` publishes like the run cache, keeping an entry already in place, and this one
# is named by hand, not by the run's key.

# %%
import shutil

from mrl.experiments import save_run
from mrl.runtime.results import load_runs

shutil.rmtree(run.folder / "runs" / "tour-sgt", ignore_errors=True)
save_run(run.folder / "runs" / "tour-sgt", record, sgt_run, record.wall_seconds)
evals = load_runs(run.folder / "runs", "evals")
learning_figure(evals)

# %%
display(evals[evals.split == "held-out"].pivot_table(index=["probe", "policy", "step"], columns="skill",
                                                     values="accuracy"))
Markdown(learning_sentence(pd.DataFrame(record.steps), pd.DataFrame(record.evals)))

# %% [markdown]
# ## Where to go next
#
# | notebook | its claim, in one line |
# |---|---|
# | `00_zoo` | a short warm-up gives each family a complementary skill profile (the substrate) |
# | `10_grpo_baseline` | independent GRPO, proven equal to TRL's, learns each policy's skills alone |
# | `20_thl` | THL is exact wherever both tokenizers can write the text; its residual cost per tokenizer pair |
# | `30_mwra` | the inline, process and Ray backends give the same metrics; what each costs in wall time |
# | `40_probe` | what sharing raw rollouts (PRP), baselines (XGRPO) or verified successes (SGT) does on a fixed pool |
# | `50_hacpo` | HACPO against GSPO, GSPO with twice the rollouts and naive sharing, with its ablations |
# | `60_bandit` | the contextual-bandit analysis: each probe's place on the stability-support plane |
# | `70_heldout` | the held-out experiment where the papers' claims can show, and the claims ledger |
#
# From the command line: `mrl run --probe sgt --steps 20` runs one run into the cache; `mrl reproduce --profile
# smoke` regenerates every table and figure of a profile.
