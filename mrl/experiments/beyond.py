"""80_beyond: methods beyond the papers on the held-out experiment (its first zoo seed, pairing, steps and GRPO
settings), every arm paired with GRPO on the same RL seeds: probes online, probes offline (each policy alone, its
peers replayed from the grpo run's experience log), a poisoned peer, n-policy runs sync and async, and what the
canonical tokenization drops from a peer's probability (mrl.experiments.marginal_gap) at the warm-up and after
training."""
from __future__ import annotations

import dataclasses
import json

import pandas as pd
from tqdm.auto import tqdm

from mrl.core.probes import as_probe_config, get_probe, probe_config, probe_label
from mrl.core.run_config import RunConfig
from mrl.core.tasks import make_task
from mrl.core.validation import ConfigError, require
from mrl.experiments.heldout import heldout_base, heldout_config
from mrl.experiments.marginal_gap import measure_policies
from mrl.experiments.runs import Labelled, Run, Variant, policy_paths, run_many, trained_paths
from mrl.runtime.zoo import load_policy


def beyond_runs(config: RunConfig) -> Labelled:
    """The online probes (beyond.probes), the poison probes beside an honest peer (the comparison) and grpo on the
    held-out experiment's first zoo seed over beyond.seeds, labelled like the held-out runs (those it shares come
    from their cache)."""
    beyond, heldout = config.beyond, config.heldout
    run_config, paths, base = heldout_base(config)
    probes = [probe_config("grpo"), *(as_probe_config(entry) for entry in [*beyond.probes, *beyond.poison_probes])]
    return [({"pairing": base["pairing"], "probe": probe_label(probe), "seed": seed, "zoo_seed": base["zoo_seed"]},
             Run(run_config, paths, probe, seed, heldout.steps)) for probe in probes for seed in beyond.seeds]


def offline_sources(config: RunConfig) -> Labelled:
    """The grpo runs whose experience logs the offline probes replay, recorded with their logs (same metrics)."""
    beyond, heldout = config.beyond, config.heldout
    run_config, paths, _ = heldout_base(config)
    logged = Variant(log_experience=True)
    return [({"seed": seed}, Run(run_config, paths, probe_config("grpo"), seed, heldout.steps, logged))
            for seed in beyond.seeds]


def offline_runs(config: RunConfig) -> Labelled:
    """The offline probes: each policy of the pairing learns alone while the others are replayed from the
    experience log of the grpo run of the same seed (offline_sources; no co-training; GRAFT's offline variant).
    Labelled "<probe> (offline)"."""
    beyond, heldout = config.beyond, config.heldout
    run_config, paths, base = heldout_base(config)
    logs = {run.seed: run.folder() / "experience" for _, run in offline_sources(config)}
    labelled = []
    for entry in beyond.offline_probes:
        probe = as_probe_config(entry)
        for seed in beyond.seeds:
            for learner in paths:
                variant = Variant(offline=tuple((peer, path) for peer, path in paths.items() if peer != learner),
                                  offline_log=str(logs[seed]))
                label = {"pairing": base["pairing"], "probe": f"{probe_label(probe)} (offline)", "seed": seed,
                         "zoo_seed": base["zoo_seed"]}
                labelled.append((label, Run(run_config, {learner: paths[learner]}, probe, seed, heldout.steps,
                                            variant)))
    return labelled


def run_offline(config: RunConfig, backend: str | None = None, cache: bool = True,
                progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(steps, evals) of the offline runs, their sources first (run_many of offline_sources, then offline_runs)."""
    run_many(offline_sources(config), config.packed_runs, backend, cache, progress)
    return run_many(offline_runs(config), config.packed_runs, backend, cache, progress)


MARGINAL_POINTS = ("warm-up", "after training")
"""where the marginal is measured: the pairing's checkpoints, and the same policies trained by GRPO"""


def marginal_policies(config: RunConfig, backend: str | None = None, progress: bool = True) -> dict[str, dict]:
    """{point: {name: checkpoint folder}} of MARGINAL_POINTS: the held-out pairing on its first zoo seed, and the
    policies the grpo run whose experience log the offline probes replay trained (offline_sources' first, RL seed
    beyond.seeds[0]; runs.trained_paths computes it into results/trained/<key>/ when that folder lacks them)."""
    _, paths, _ = heldout_base(config)
    _, source = offline_sources(config)[0]
    return dict(zip(MARGINAL_POINTS, (paths, trained_paths(source, backend, progress))))


def run_marginal_gap(config: RunConfig, backend: str | None = None,
                     progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(rows, cost) of mrl.experiments.marginal_gap.measure_policies at each point (marginal_policies; column "point"):
    the pairing samples G completions of the first beyond.marginal_prompts held-out test prompts per skill, at the
    profile's temperature, length and engine, seeded from the profile's GRPO seed; the cost is measured on one RL step's
    peer samples (prompts_per_step x G ended texts)."""
    beyond = config.beyond
    run_config, _, _ = heldout_base(config)
    task, grpo = make_task(run_config.task), run_config.grpo
    problems = [p for skill in sorted(task.test) for p in task.test[skill][:beyond.marginal_prompts]]
    rows, cost = [], []
    for point, paths in tqdm(marginal_policies(config, backend, progress).items(), desc="marginal",
                             disable=not progress):
        policies = {name: load_policy(path) for name, path in paths.items()}
        measured, timed = measure_policies(policies, problems, grpo, task.verify,
                                           grpo.prompts_per_step * grpo.group_size)
        rows.append(measured.assign(point=point))
        cost.append(timed.assign(point=point))
    return pd.concat(rows, ignore_index=True), pd.concat(cost, ignore_index=True)


ATTACKED_KINDS = {"forged_success": {"rollout", "success"}, "lying_stats": {"group_stats"},
                  "malformed": {"rollout", "success", "group_stats"}}
"""the record kinds each attack changes: a probe meets an attack only when it reads one of them"""


def poison_runs(config: RunConfig) -> Labelled:
    """Each poison probe beside the poisoned policy under each attack on a record kind it reads (forged successes
    without re-verification over beyond.seeds and with it over beyond.reverified_seeds; the other attacks, which
    re-verification cannot touch, over beyond.seeds), and each probe honest over beyond.seeds (from the held-out
    grid's cache). Labels add attack ("none" for honest) and reverify."""
    beyond, heldout = config.beyond, config.heldout
    run_config, paths, base = heldout_base(config)
    require(beyond.poisoned in paths, "BeyondConfig", "poisoned", beyond.poisoned,
            f"a policy of the held-out pairing, one of {sorted(paths)}")
    labelled = []
    for entry in beyond.poison_probes:
        probe = as_probe_config(entry)
        label = {"pairing": base["pairing"], "probe": probe_label(probe), "zoo_seed": base["zoo_seed"]}
        labelled += [({**label, "seed": seed, "attack": "none", "reverify": True},
                      Run(run_config, paths, probe, seed, heldout.steps)) for seed in beyond.seeds]
        for attack in beyond.attacks:
            if not ATTACKED_KINDS[attack] & set(get_probe(probe.name).kinds):
                continue
            arms = ((False, beyond.seeds), (True, beyond.reverified_seeds)) if attack == "forged_success" \
                else ((True, beyond.seeds),)   # nothing re-verifies group statistics; SEE rejects malformed ones
            for reverify, seeds in arms:
                variant = Variant(runner={"poisoned": beyond.poisoned, "attack": attack, "reverify": reverify})
                labelled += [({**label, "seed": seed, "attack": attack, "reverify": reverify},
                              Run(run_config, paths, probe, seed, heldout.steps, variant)) for seed in seeds]
    return labelled


def scaling_runs(config: RunConfig, progress: bool = True) -> Labelled:
    """The n-policy runs: the held-out pairing plus the first n - 2 of beyond.scaling_families (built into the
    held-out zoo of its first zoo seed), sharing with beyond.scaling_probe under each clock of scaling_modes (async:
    records up to scaling_async_staleness steps old), on beyond.scaling_backend (in the run's key: its wall time is
    a measurement of that backend); labelled with pairing, probe, seed, zoo_seed, n and mode."""
    beyond, heldout = config.beyond, config.heldout
    zoo_seed = heldout.zoo_seeds[0]
    base = heldout_config(config, zoo_seed)
    added = beyond.scaling_families[:max(beyond.scaling_sizes) - 2]   # only the families some run needs
    grown = dataclasses.replace(base, zoo=dataclasses.replace(base.zoo, families=[*base.zoo.families, *added]))
    zoo = policy_paths(grown, progress)
    order = [*heldout.pairing, *(f.name for f in added)]
    probe = as_probe_config(beyond.scaling_probe)
    labelled = []
    for n in beyond.scaling_sizes:
        for mode in beyond.scaling_modes:
            for seed in beyond.scaling_seeds:
                paths = {name: zoo[name] for name in order[:n]}
                staleness = beyond.scaling_async_staleness if mode == "async" else config.runner.max_staleness
                variant = Variant(runner={"mode": mode, "max_staleness": staleness, "backend": beyond.scaling_backend})
                label = {"pairing": "+".join(paths), "probe": probe_label(probe), "seed": seed, "zoo_seed": zoo_seed,
                         "n": n, "mode": mode}
                labelled.append((label, Run(base, paths, probe, seed, beyond.scaling_steps, variant)))
    return labelled


def run_scaling(config: RunConfig, progress: bool = True) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The n-policy runs one at a time (scaling_runs; never packed: their wall times are measurements). Returns
    (steps, evals, runs: one row per run with its label, its wall seconds start-up included and backend)."""
    probe = as_probe_config(config.beyond.scaling_probe).name
    if get_probe(probe).in_cells:
        raise ConfigError(f"BeyondConfig.scaling_probe = {probe!r} is not allowed: it is written in a notebook cell, "
                          f"and a run's wall seconds are read from its run cache entry; move it into a .py module")
    labelled = scaling_runs(config, progress)
    all_steps, all_evals, runs = [], [], []
    for label, run in tqdm(labelled, desc="n-policy runs", disable=not progress):
        steps_df, evals_df = run_many([(label, run)], progress=False)
        all_steps.append(steps_df)
        all_evals.append(evals_df)
        saved = json.loads((run.folder() / "run.json").read_text())
        runs.append({**label, "wall seconds": saved["wall_seconds"], "backend": saved["backend"]})
    return pd.concat(all_steps, ignore_index=True), pd.concat(all_evals, ignore_index=True), pd.DataFrame(runs)
