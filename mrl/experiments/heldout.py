"""70_heldout: the held-out experiment (arith-forms, fresh RL prompts every step, a form gap over one shared
algorithm): its own task and zoo, and a grid paired on GRPO (the same RL seeds and zoo seeds for every probe)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from mrl import numerics
from mrl.core.grids import HeldoutConfig, marginal_arms
from mrl.core.probes import as_probe_config, probe_config, probe_label
from mrl.core.run_config import RunConfig
from mrl.core.validation import ConfigError
from mrl.experiments.record import missing_runs, run_into_record
from mrl.experiments.runs import Labelled, Run, policy_paths
from mrl.paths import repo_root
from mrl.runtime.zoo import family_dir
from mrl.runtime.zoo_grid import build_zoos


def heldout_config(config: RunConfig, zoo_seed: int) -> RunConfig:
    """The profile of the held-out experiment on one zoo seed: its task and zoo (warm-up seed `zoo_seed`), its
    pairing, the profile's GRPO settings with the held-out evaluation cadence, and the profile's execution."""
    heldout = config.heldout
    zoo = dataclasses.replace(heldout.zoo, warmup=dataclasses.replace(heldout.zoo.warmup, seed=zoo_seed))
    return dataclasses.replace(config, task=heldout.task, zoo=zoo, policies={},
                               grpo=dataclasses.replace(config.grpo, eval_every=heldout.eval_every),
                               pairings={heldout.pairing_name: list(heldout.pairing)}, notebooks=[],
                               experiments={"heldout": heldout})


def heldout_zoos(config: RunConfig, progress: bool = True,
                 zoo_seeds: list[int] | None = None) -> dict[int, dict[str, str]]:
    """{zoo seed: {name: checkpoint folder}} of the held-out experiment, each zoo built when missing: the zoo seeds
    given, or (None) its zoo seeds, then its replication's. Every missing warm-up of every seed runs in one pool
    (mrl.runtime.zoo.build_zoos), so a core that finishes one seed's A starts the next job while B runs."""
    heldout = config.heldout
    seeds = (*heldout.zoo_seeds, *heldout.replication_zoo_seeds) if zoo_seeds is None else zoo_seeds
    zoos = build_zoos(heldout.task, [heldout_config(config, seed).zoo for seed in seeds], progress=progress)
    return {seed: {name: str(policy.path) for name, policy in zoo.items()} for seed, zoo in zip(seeds, zoos)}


def heldout_base(config: RunConfig) -> tuple[RunConfig, dict[str, str], dict]:
    """(the held-out experiment's run config on its first zoo seed, that zoo's paths of the pairing, the label
    columns its runs share: pairing and zoo_seed)."""
    heldout = config.heldout
    run_config = heldout_config(config, heldout.zoo_seeds[0])
    zoo = policy_paths(run_config, progress=False)   # the first zoo seed's only: the other seeds' are not needed
    return (run_config, {name: zoo[name] for name in heldout.pairing},
            {"pairing": heldout.pairing_name, "zoo_seed": heldout.zoo_seeds[0]})


def _label(heldout: HeldoutConfig, probe, seed: int, zoo_seed: int) -> dict:
    return {"pairing": heldout.pairing_name, "probe": probe_label(probe), "seed": seed, "zoo_seed": zoo_seed}


def heldout_runs(config: RunConfig, progress: bool = True, zoo_seeds: list[int] | None = None) -> Labelled:
    """Every run of the held-out experiment: each probe on the first zoo seed, the zoo_seed_probes on every other
    zoo seed and every replication zoo seed, every RL seed; labelled with pairing, probe, seed and zoo_seed.
    zoo_seeds: only those warm-ups' runs (None: every one, the replication's included)."""
    heldout = config.heldout
    probes = [as_probe_config(entry) for entry in heldout.probes]
    labelled = []
    for zoo_seed, paths in heldout_zoos(config, progress, zoo_seeds).items():
        run_config = heldout_config(config, zoo_seed)
        for probe in probes:
            if zoo_seed != heldout.zoo_seeds[0] and probe.name not in heldout.zoo_seed_probes:
                continue
            labelled += [(_label(heldout, probe, seed, zoo_seed), Run(run_config, paths, probe, seed, heldout.steps))
                         for seed in heldout.seeds]
    return labelled


def marginal_arm_runs(config: RunConfig, progress: bool = True) -> Labelled:
    """The runs that 80_beyond's marginal comparison pairs: each arm with tokenization marginal and its canonical
    twin (marginal_arms) on every zoo seed (not the replication's) and RL seed, labelled as heldout_runs labels them,
    ordered warm-up by warm-up, seed by seed, so that an interrupted grid leaves whole pairs in the cache. [] where
    the profile runs no marginal arm."""
    heldout = config.heldout
    arms = [label for pair in marginal_arms(heldout) for label in pair]
    if not arms:
        return []
    chosen = [(label, run) for label, run in heldout_runs(config, progress, heldout.zoo_seeds)
              if label["probe"] in arms]
    return sorted(chosen, key=lambda item: (heldout.zoo_seeds.index(item[0]["zoo_seed"]), item[0]["seed"],
                                            arms.index(item[0]["probe"])))


def confirmatory_runs(config: RunConfig, progress: bool = True) -> Labelled:
    """The confirmatory block's runs (ConfirmatoryConfig): each arm on every confirmatory warm-up and RL seed, labelled
    as heldout_runs labels them, ordered warm-up by warm-up so that an interrupted grid leaves whole warm-ups in the
    cache. [] where the profile has no confirmatory block."""
    heldout = config.heldout
    block = heldout.confirmatory
    if block is None:
        return []
    labelled = []
    for zoo_seed, paths in heldout_zoos(config, progress, block.zoo_seeds).items():
        run_config = heldout_config(config, zoo_seed)
        labelled += [(_label(heldout, probe, seed, zoo_seed), Run(run_config, paths, probe, seed, heldout.steps))
                     for seed in block.seeds for probe in map(probe_config, block.probes)]
    return labelled


def knob_runs(config: RunConfig, progress: bool = True) -> Labelled:
    """The probes' knob variants (knob_probes) and each one's probe at its defaults, on the first zoo seed over
    knob_seeds, labelled like heldout_runs' (a default shared with the main grid comes from the run cache)."""
    heldout = config.heldout
    variants = [as_probe_config(entry) for entry in heldout.knob_probes]
    defaults = [probe_config(name) for name in dict.fromkeys(v.name for v in variants)]
    zoo_seed = heldout.zoo_seeds[0]
    paths = heldout_zoos(config, progress)[zoo_seed]
    run_config = heldout_config(config, zoo_seed)
    return [(_label(heldout, probe, seed, zoo_seed), Run(run_config, paths, probe, seed, heldout.steps))
            for probe in defaults + variants for seed in heldout.knob_seeds]


def claims_block_runs(config: RunConfig) -> Labelled:
    """The second registration's runs (ClaimsBlockConfig, docs/registration_claims.md): each arm on every warm-up of
    the block and RL seed, labelled as heldout_runs labels them, ordered warm-up by warm-up, then RL seed, then arm,
    so that a stop leaves whole warm-ups behind it. The policies' folders are where the zoo cache puts each warm-up
    (mrl.runtime.zoo.family_dir): nothing is built here, so the runs' keys are known before their zoos exist
    (run_claims_block builds them). [] where the profile has no such block."""
    heldout = config.heldout
    block = heldout.confirmatory_claims
    if block is None:
        return []
    root = repo_root() / "data" / "models"
    labelled = []
    for zoo_seed in block.zoo_seeds:
        run_config = heldout_config(config, zoo_seed)
        folders = {f.name: str(family_dir(root, run_config.task, f, run_config.zoo)) for f in run_config.zoo.families}
        paths = {name: folders[name] for name in heldout.pairing}
        labelled += [(_label(heldout, probe, seed, zoo_seed), Run(run_config, paths, probe, seed, heldout.steps))
                     for seed in block.seeds for probe in map(as_probe_config, block.probes)]
    return labelled


def run_claims_block(config: RunConfig, record: Path, progress: bool = True, backend: str | None = None,
                     zoos_at_once: int = 2, stamp: str = "", after_chunk=None) -> Labelled:
    """Run what the record (mrl.experiments.record) lacks of the second registration's block, `zoos_at_once`
    warm-ups at a time: their zoos built in one pool (so a core that finishes a short warm-up starts the next), then
    their runs, each chunk added to the record with `stamp` (the registration's checksum) as it finishes (after_chunk:
    as run_into_record). Refused in another numerics mode than the block's. Returns the block's runs
    (claims_block_runs)."""
    block = config.heldout.confirmatory_claims
    if block is not None and numerics.mode() != block.numerics:
        raise ConfigError(f"the confirmatory_claims block's runs must run in numerics mode {block.numerics!r}; this "
                          f"process runs in {numerics.mode()!r} (MRL_NUMERICS)")
    labelled = claims_block_runs(config)
    todo = missing_runs(labelled, record, stamp or None)
    seeds = list(dict.fromkeys(label["zoo_seed"] for label, _ in todo))
    for start in range(0, len(seeds), zoos_at_once):
        part = seeds[start:start + zoos_at_once]
        built = heldout_zoos(config, progress, part)
        runs = [(label, run) for label, run in todo if label["zoo_seed"] in part]
        for label, run in runs:
            if {name: built[label["zoo_seed"]][name] for name in run.paths} != run.paths:
                raise RuntimeError(f"the zoo of warm-up {label['zoo_seed']} was built into {built[label['zoo_seed']]}, "
                                   f"not where its runs were keyed ({run.paths})")
        run_into_record(runs, record, config.packed_runs, backend, progress, stamp=stamp, after_chunk=after_chunk)
    return labelled
