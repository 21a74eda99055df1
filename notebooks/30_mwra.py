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
# # 30 · MWRA: several policies trained concurrently, on three backends
#
# **Claim (docs/architecture.md, MWRA and the runner).** One worker per policy; the same runner drives them
# inline (sequential, deterministic), in one OS process each (the CPU default), or as Ray actors (the scale-out
# path), and the three give the same metrics for the same seed. Each step is two barriers with deadlines (rollout,
# then update); the policies publish their experience to SEE in between.
#
# **Setup.** The profile's pairing (`experiments.mwra`) trains for a few steps on each backend with the `grpo` probe:
# independent GRPO whose policies still publish their experience (the sharing probes come with the next notebooks).
# Measured on this machine: per-worker step time (rollout and update), utilisation and wait fraction of the training
# loop's wall time, start-up apart, and the timeline of busy intervals. The summary cell checks that the backends'
# metrics agree.

# %% tags=["parameters"]
profile = "default"   # smoke | default
steps = None          # RL steps per backend (None: the profile's experiments.mwra.steps)
backends = None       # e.g. ["inline", "process"] (None: the profile's experiments.mwra.backends)
progress = True

# %%
import mrl  # noqa: F401  (first: the numerics contract, mrl.numerics, before torch, numpy and pandas)
import dataclasses
import pandas as pd
from IPython.display import Markdown
from mrl.core.probes import probe_config
from mrl.core.validation import override
from mrl.experiments import policy_paths
from mrl.notebook import setup_notebook
from mrl.reports.figure_inputs import draw_and_save
from mrl.reports.substrate import mwra_compute_table, mwra_result, mwra_timeline_figure, mwra_timeline_inputs
from mrl.runtime.results import write_table
from mrl.runtime.runner import run_concurrent
from mrl.runtime.spec import Run

run = setup_notebook("30_mwra", profile, partial=steps is not None or backends is not None)
config, timing = run.config, run.config.experiment("mwra")
timing = override(timing, steps=steps, backends=backends)  # checked; papermill's text values parsed as YAML
steps, backends = timing.steps, timing.backends
timed = dataclasses.replace(config, grpo=dataclasses.replace(config.grpo, eval_every=steps))
run.record(steps=steps, backends=backends, pairing=timing.pairing)
zoo_paths = policy_paths(config, progress)
paths = {name: zoo_paths[name] for name in config.pairing(timing.pairing)}

# %%
grpo_run = Run(timed, paths, probe_config("grpo"), config.grpo.seed, steps)
records = {backend: run_concurrent(grpo_run.with_runner(backend=backend), progress=progress) for backend in backends}
runs = {b: {"timeline": r.timeline, "wall": r.wall_seconds, "startup": r.startup_seconds} for b, r in records.items()}
pd.DataFrame([r for b, rec in records.items() for r in rec.timeline]).to_csv(run.folder / "timeline.csv", index=False)

# %% [markdown]
# ## Compute: step time, utilisation and wait fraction per worker

# %%
compute = mwra_compute_table(runs)
write_table(compute, "mwra_compute", run.tables,
            caption=f"MWRA compute, {len(paths)} policies x {steps} steps ({config.grpo.prompts_per_step} prompts x "
                    f"{config.grpo.group_size} samples), {config.threads} torch thread(s) per worker.")
compute.round(3)

# %%
draw_and_save(mwra_timeline_figure, "mwra_timeline", run.figures, **mwra_timeline_inputs(runs))

# %% [markdown]
# ## Result
#
# Generated from the compute table (`mrl.reports.substrate.mwra_result`): means over each backend's workers.

# %%
Markdown(mwra_result(compute))

# %% [markdown]
# ## Discussion
#
# Step time is the work itself; the wait fraction is what the barriers cost. Inline runs the workers one after the
# other, so each waits while the others work. A process or an actor per worker lets the workers compute at once,
# which lowers the wait fraction where the machine has a free core per worker, but each step then pays for moving
# experience between processes, and start-up pays for spawning them (under Ray, for starting its cluster too). Which
# backend finishes the training loop first therefore depends on free cores against policies, and on how long a step
# takes against the cost of a message: the tiny zoo's steps are short, so messaging weighs more here than it would
# with real models.
#
# Limits. A few steps on a shared machine: the timings move with its load from run to run, and nbval checks only that
# the backends' metrics agree, never the timings. The benchmarks, with their machine and date, are in
# docs/performance.md (MWRA backends).

# %% [markdown]
# ## Summary: the backends agree (rounded; nbval checks this cell on the smoke profile)

# %%
# NBVAL_CHECK_OUTPUT
def learning(record):
    return [(r["policy"], r["step"], round(r["reward"], 4), round(r["loss"], 4)) for r in record.steps]
reference = learning(records[backends[0]])
print({backend: learning(record) == reference for backend, record in records.items()})
print({k: v for k, v in sorted(records[backends[0]].counters.items())})
