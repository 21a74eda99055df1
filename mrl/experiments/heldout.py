"""70_heldout: the held-out experiment (arith-forms, fresh RL prompts every step, a form gap over one shared
algorithm): its own task and zoo, and a grid paired on GRPO (the same RL seeds and zoo seeds for every probe)."""
from __future__ import annotations

import dataclasses
from typing import Annotated

from mrl.core.config import RunConfig, TaskConfig, ZooConfig, register_experiment
from mrl.core.probes import as_probe_config, probe_config, probe_label
from mrl.core.validation import Count, NonEmpty, PositiveInt, Seeds, Str, config_dataclass, require
from mrl.experiments.runs import Labelled, ProbeEntry, Run, check_panels, check_probes, policy_paths
from mrl.runtime.zoo import build_zoos


@config_dataclass
class ConfirmatoryConfig:
    """The confirmatory block of the held-out experiment (docs/registration.md): the arms its test reads, on warm-ups
    never run before the block was fixed, each RL seed nested in its warm-up (mrl.core.seeding.nested_rl_seed). The
    runs take the held-out experiment's task, zoo (warm-up seed replaced), steps and evaluation cadence."""

    zoo_seeds: Seeds
    """warm-up seeds of the confirmatory zoos: fresh, disjoint from every other warm-up seed of the profile"""
    probes: list[Str]
    """the arms the confirmatory test reads (mrl.reports.confirmatory.DESIGN): grpo and sgt"""
    seeds: Seeds
    """RL seeds of every arm on every confirmatory warm-up"""


@register_experiment("heldout")
@config_dataclass
class HeldoutConfig:
    """70_heldout: the held-out experiment (arith-forms, fresh RL prompts every step, a form gap over one shared
    algorithm): its own task and zoo, and a grid paired on GRPO (the same RL seeds and zoo seeds for every probe)."""

    task: TaskConfig
    """the task and its splits: arith-forms, pool_per_skill 0 (fresh training prompts every RL step)"""
    zoo: ZooConfig
    """the families and their warm-up (its warmup.seed is replaced by each of zoo_seeds)"""
    pairing: list[Str]
    """the policies trained together (each one's weak form is another's own form)"""
    probes: list[ProbeEntry]
    """the probes (names or mappings, as in ProbeGridConfig.probes); grpo is the paired baseline and must be one"""
    seeds: Seeds
    """RL seeds of every probe (on every zoo seed that probe runs on)"""
    zoo_seeds: Seeds
    """warm-up seeds (initialisation and data stream) of the zoos; the first runs every probe"""
    zoo_seed_probes: list[Str]
    """the probes that also run on the zoo seeds after the first, so their interval covers the warm-up"""
    steps: PositiveInt
    """RL steps of every run"""
    eval_every: PositiveInt
    """greedy held-out evaluation every this many steps"""
    knob_probes: list[ProbeEntry]
    """knob variants of the probes (mappings {name: ..., knob: value}), each paired with its probe's default on the
    first zoo seed; [] for none"""
    knob_seeds: Seeds
    """RL seeds of the knob variants and of their defaults (one seed: the differences are shown, never called real)"""
    panels: Annotated[dict[Str, list[ProbeEntry]], NonEmpty]
    """the weak-skill figure's panels: {title: the probes it draws (names, mappings or labels as the tables show
    them)}"""

    replication_zoo_seeds: list[Count] = dataclasses.field(default_factory=list)
    """a second, disjoint set of warm-up seeds, fixed before it runs, on which the zoo_seed_probes run again and the
    claims ledger is computed alone (the confirmatory replication); () for none"""
    confirmatory: ConfirmatoryConfig | None = None
    """the confirmatory test's runs (docs/registration.md); None: the profile runs none"""

    def __post_init__(self):
        c = "HeldoutConfig"
        require(self.task.name == "arith-forms" and self.task.pool_per_skill == 0, c, "task",
                f"name={self.task.name}, pool_per_skill={self.task.pool_per_skill}",
                "arith-forms with pool_per_skill 0 (fresh prompts)")
        families = [f.name for f in self.zoo.families]
        require(len(set(self.pairing)) == len(self.pairing) >= 2 and set(self.pairing) <= set(families), c,
                "pairing", self.pairing, f"two or more distinct policies drawn from {families}")
        check_probes(c, "probes", self.probes)
        names = [p if isinstance(p, str) else p.get("name") for p in self.probes]
        require("grpo" in names, c, "probes", names, "a list that includes grpo (the paired baseline)")
        require(set(self.zoo_seed_probes) <= set(names)
                and ("grpo" in self.zoo_seed_probes or len(self.zoo_seeds) == 1),
                c, "zoo_seed_probes", self.zoo_seed_probes,
                f"probe names drawn from {names}, grpo among them (each zoo seed needs its baseline)")
        require(len(set(self.replication_zoo_seeds)) == len(self.replication_zoo_seeds)
                and not set(self.replication_zoo_seeds) & set(self.zoo_seeds), c, "replication_zoo_seeds",
                self.replication_zoo_seeds, f"distinct zoo seeds disjoint from zoo_seeds {self.zoo_seeds}")
        if self.confirmatory is not None:
            earlier = {*self.zoo_seeds, *self.replication_zoo_seeds}
            require(not set(self.confirmatory.zoo_seeds) & earlier, c, "confirmatory.zoo_seeds",
                    self.confirmatory.zoo_seeds, f"warm-up seeds disjoint from every other one {sorted(earlier)}")
            require(sorted(self.confirmatory.probes) == ["grpo", "sgt"], c, "confirmatory.probes",
                    self.confirmatory.probes, "the arms the confirmatory test reads: grpo and sgt")
        if self.knob_probes:
            check_probes(c, "knob_probes", self.knob_probes)
        check_panels(c, self.panels)
        labels = [probe_label(as_probe_config(entry)) for entry in self.probes]
        for marginal, canonical in marginal_arms(self):
            require(canonical in labels, c, "probes", marginal,
                    f"an arm with tokenization marginal beside its canonical twin {canonical!r} (the comparison)")

    @property
    def pairing_name(self) -> str:
        return "+".join(self.pairing)


def marginal_arms(heldout: HeldoutConfig) -> list[tuple[str, str]]:
    """[(label, its canonical twin's label)] of the probes run with tokenization "marginal" (docs/marginal.md): the
    same probe and knobs with the canonical tokenization is the arm each is paired with."""
    arms = []
    for entry in heldout.probes:
        probe = as_probe_config(entry)
        if getattr(probe, "tokenization", "canonical") == "marginal":
            arms.append((probe_label(probe), probe_label(dataclasses.replace(probe, tokenization="canonical"))))
    return arms


def heldout_config(config: RunConfig, zoo_seed: int) -> RunConfig:
    """The profile of the held-out experiment on one zoo seed: its task and zoo (warm-up seed `zoo_seed`), its
    pairing, the profile's GRPO settings with the held-out evaluation cadence, and the profile's execution."""
    heldout = config.experiment("heldout")
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
    heldout = config.experiment("heldout")
    seeds = (*heldout.zoo_seeds, *heldout.replication_zoo_seeds) if zoo_seeds is None else zoo_seeds
    zoos = build_zoos(heldout.task, [heldout_config(config, seed).zoo for seed in seeds], progress=progress)
    return {seed: {name: str(policy.path) for name, policy in zoo.items()} for seed, zoo in zip(seeds, zoos)}


def heldout_base(config: RunConfig) -> tuple[RunConfig, dict[str, str], dict]:
    """(the held-out experiment's run config on its first zoo seed, that zoo's paths of the pairing, the label
    columns its runs share: pairing and zoo_seed)."""
    heldout = config.experiment("heldout")
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
    heldout = config.experiment("heldout")
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
    heldout = config.experiment("heldout")
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
    heldout = config.experiment("heldout")
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
    heldout = config.experiment("heldout")
    variants = [as_probe_config(entry) for entry in heldout.knob_probes]
    defaults = [probe_config(name) for name in dict.fromkeys(v.name for v in variants)]
    zoo_seed = heldout.zoo_seeds[0]
    paths = heldout_zoos(config, progress)[zoo_seed]
    run_config = heldout_config(config, zoo_seed)
    return [(_label(heldout, probe, seed, zoo_seed), Run(run_config, paths, probe, seed, heldout.steps))
            for probe in defaults + variants for seed in heldout.knob_seeds]
