"""The notebooks' experiments' configs: each one's grid and budgets (a profile's `experiments:`), validated when the
profile loads. They sit in core, beside the configs they are made of, so that RunConfig (mrl.core.run_config) holds
them by class; the functions that expand each into runs are in its module of mrl.experiments.
"""
from __future__ import annotations

import dataclasses
from typing import Annotated, Any, Literal, Union

from pydantic import Field

from mrl.core.choices import BACKENDS
from mrl.core.config import ATTACKS, MODES, FamilyConfig, PairingName, TaskConfig, ZooConfig
from mrl.core.probes import as_probe_config, probe_label
from mrl.core.validation import (ConfigError, Count, Float, Int, NonEmpty, PositiveInt, Seeds, Str, config_dataclass,
                                 require)

ProbeEntry = Union[Str, dict[Str, Any]]
"""a probe of a grid: a registered name, or a mapping {name: ..., knob: value} (mrl.core.probes.as_probe_config)"""


def check_probes(cls: str, name: str, values: list) -> None:
    """Every entry a registered probe with valid knobs (checked against mrl.core.probes' registry)."""
    require(len(values) > 0, cls, name, values, "a non-empty list of probe names or mappings {name: ..., knob: value}")
    for entry in values:
        require(isinstance(entry, str) or isinstance(entry.get("name"), str), cls, name, entry,
                "a probe name or a mapping with a name: {name: ..., knob: value}")
        try:
            as_probe_config(entry)
        except (ConfigError, ValueError, TypeError) as err:
            raise ConfigError(f"{cls}.{name}: entry {entry!r} is not a valid probe: {err}") from None


def check_panels(cls: str, panels: dict) -> None:
    """A figure's panels {title: [probe entries]}: a string is a probe label as the tables show it (a registered
    name, its changed knobs in brackets, ' (offline)' for a replayed peer); a mapping a probe entry."""
    for title, entries in panels.items():
        for entry in entries:
            check_probes(cls, f"panels[{title!r}]", [entry.split(" (")[0] if isinstance(entry, str) else entry])


@config_dataclass
class MwraTimingConfig:
    """30_mwra: the same short run on each backend, timed."""

    pairing: PairingName
    """the policy group, by its name in RunConfig.pairings"""
    steps: PositiveInt
    """RL steps per backend"""
    backends: Annotated[list[Literal[BACKENDS]], NonEmpty]
    """the backends to time (the first is the reference the others must match)"""

    def pairings_used(self) -> list[str]:
        return [self.pairing]


@config_dataclass
class ProbeGridConfig:
    """40_probe: every probe on every pairing and seed, each one run of the runner."""

    pairings: Annotated[list[PairingName], NonEmpty]
    """the policy groups trained together, by their names in RunConfig.pairings"""
    probes: list[ProbeEntry]
    """the probes, each a registered name or a mapping {name: ..., knob: value} (mrl.core.probes)"""
    seeds: Seeds
    """RL seeds of every (pairing, probe)"""
    steps: dict[PairingName, PositiveInt]
    """RL steps per pairing"""

    def __post_init__(self):
        c = "ProbeGridConfig"
        check_probes(c, "probes", self.probes)
        require(set(self.pairings) <= set(self.steps), c, "steps", self.steps,
                f"a mapping with a positive integer for every pairing in {self.pairings}")

    def pairings_used(self) -> list[str]:
        return list(self.pairings)


@config_dataclass
class HacpoGridConfig:
    """50_hacpo: HACPO and its baselines over seeds (the MRL probes' runs are shared with 40_probe), and its
    ablations on fewer seeds."""

    pairings: Annotated[list[PairingName], NonEmpty]
    """the policy groups trained together, by their names in RunConfig.pairings"""
    probes: list[ProbeEntry]
    """the arms of the comparison table (names or mappings, as in ProbeGridConfig.probes)"""
    seeds: Seeds
    """RL seeds of the comparison"""
    steps: PositiveInt
    """RL steps of every comparison run"""
    ablation_seeds: Seeds
    """RL seeds of the ablations"""
    ablation_steps: PositiveInt
    """RL steps of every ablation run"""
    ablations: Annotated[dict[Str, list[ProbeEntry]], NonEmpty]
    """{axis: its arms (probe entries of hacpo)}: each ablation axis, the default arm among them; the clipping
    axis runs several minibatch updates per step, so the stepwise bound acts"""

    def __post_init__(self):
        check_probes("HacpoGridConfig", "probes", self.probes)
        for axis, arms in self.ablations.items():
            check_probes("HacpoGridConfig", f"ablations[{axis!r}]", arms)

    def pairings_used(self) -> list[str]:
        return list(self.pairings)


Kappa = Annotated[Float, Field(gt=0, le=1)]


@config_dataclass
class BanditConfig:
    """60_bandit: the contextual-bandit analysis (a reconstruction), its budgets."""

    kappas: Annotated[list[Kappa], NonEmpty]
    """support overlaps kappa of the stability-support plane"""
    reps: PositiveInt
    """Monte Carlo repetitions per point"""
    dynamics_kappas: Annotated[list[Kappa], NonEmpty]
    """support overlaps of the dynamic simulation"""
    seeds: Seeds
    """seeds of the dynamic simulation"""
    steps: PositiveInt
    """steps T of the dynamic simulation"""


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


@config_dataclass
class ClaimsBlockConfig:
    """The second registration's block of the held-out experiment (docs/registration_claims.md): every arm its nine
    comparisons read, on warm-ups never run before the block was fixed, each RL seed nested in its warm-up. The runs
    take the held-out experiment's task, zoo (warm-up seed replaced), steps and evaluation cadence, as the first
    block's do."""

    zoo_seeds: Seeds
    """warm-up seeds of the block's zoos: fresh, disjoint from every other warm-up seed of the profile"""
    probes: list[ProbeEntry]
    """the arms the registered comparisons read (mrl.reports.claims_confirmatory.COMPARISONS), names or mappings"""
    seeds: Seeds
    """RL seeds of every arm on every warm-up of the block"""
    numerics: Literal["portable", "native"] = "portable"
    """the numerics mode (mrl.numerics) its runs must have; the analysis refuses runs made in another"""


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
    confirmatory_claims: ClaimsBlockConfig | None = None
    """the second registration's runs, every claim's arms (docs/registration_claims.md); None: the profile runs none"""

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
        if self.confirmatory_claims is not None:
            block = self.confirmatory_claims
            earlier = {*self.zoo_seeds, *self.replication_zoo_seeds,
                       *(self.confirmatory.zoo_seeds if self.confirmatory is not None else ())}
            require(len(set(block.zoo_seeds)) == len(block.zoo_seeds) and not set(block.zoo_seeds) & earlier, c,
                    "confirmatory_claims.zoo_seeds", block.zoo_seeds,
                    f"distinct warm-up seeds disjoint from every other one {sorted(earlier)}")
            check_probes(c, "confirmatory_claims.probes", block.probes)
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


@config_dataclass
class BeyondConfig:
    """80_beyond: methods beyond the papers on the held-out experiment (its zoo seed 0, pairing, steps and GRPO
    settings), every arm paired with GRPO on the same RL seeds."""

    probes: list[ProbeEntry]
    """probes run online between the pairing's policies (the MRL probes and HACPO come from the held-out grid)"""
    offline_probes: list[ProbeEntry]
    """probes run by one learner at a time against its peer replayed from the grpo run's experience log"""
    poison_probes: list[ProbeEntry]
    """probes run beside a poisoned peer; each meets the attacks on the record kinds it reads"""
    attacks: Annotated[list[Literal[ATTACKS]], NonEmpty]
    """what the poisoned peer publishes (mrl.runtime.poison)"""
    poisoned: Str
    """the policy that lies; the other learns beside it"""
    seeds: Seeds
    """RL seeds of every arm (and of its GRPO pair)"""
    reverified_seeds: Seeds
    """RL seeds of the poisoned runs with re-verification on (each must equal the honest run: a check, not an
    estimate)"""
    scaling_families: list[FamilyConfig]
    """families added to the held-out pairing, in order, for the n-policy runs (built into the held-out zoo on its
    first zoo seed)"""
    scaling_sizes: Annotated[list[Annotated[Int, Field(ge=2)]], NonEmpty]
    """numbers of policies n: the pairing plus the first n - 2 scaling families"""
    scaling_probe: ProbeEntry
    """the probe every n-policy run shares with"""
    scaling_modes: Annotated[list[Literal[MODES]], NonEmpty]
    """step clocks compared (RunnerConfig.mode): sync, async (each worker up to one step ahead)"""
    scaling_async_staleness: PositiveInt
    """async runs: SEE keeps peer records up to this many steps old (RunnerConfig.max_staleness; sync runs take the
    profile's runner.max_staleness)"""
    scaling_seeds: Seeds
    """RL seeds of the n-policy runs"""
    scaling_steps: PositiveInt
    """RL steps of the n-policy runs"""
    scaling_backend: Literal[BACKENDS]
    """the backend the n-policy runs use, one run at a time, so their wall times compare the clocks (not packed)"""
    panels: Annotated[dict[Str, list[ProbeEntry]], NonEmpty]
    """the weak-skill figure's panels: {title: the probes it draws (names, mappings or labels as the tables show
    them, e.g. 'graft (offline)')}"""
    marginal_prompts: PositiveInt
    """the marginal measurement (run_marginal_gap): held-out test prompts per skill, the first of each, on which every
    policy of the pairing samples G completions at each point (its CPU time grows with it)"""

    def __post_init__(self):
        c = "BeyondConfig"
        names = [f.name for f in self.scaling_families]
        require(len(set(names)) == len(names) and not set(names) & {"A", "B"}, c, "scaling_families", names,
                "families with distinct names other than the pairing's A and B")
        require(all(n <= 2 + len(names) for n in self.scaling_sizes), c, "scaling_sizes", self.scaling_sizes,
                f"integers from 2 to {2 + len(names)} (2 + the scaling families)")
        check_probes(c, "scaling_probe", [self.scaling_probe])
        for name in ("probes", "offline_probes", "poison_probes"):
            check_probes(c, name, getattr(self, name))
        check_panels(c, self.panels)


def marginal_arms(heldout: HeldoutConfig) -> list[tuple[str, str]]:
    """[(label, its canonical twin's label)] of the probes run with tokenization "marginal" (docs/marginal.md): the
    same probe and knobs with the canonical tokenization is the arm each is paired with."""
    arms = []
    for entry in heldout.probes:
        probe = as_probe_config(entry)
        if getattr(probe, "tokenization", "canonical") == "marginal":
            arms.append((probe_label(probe), probe_label(dataclasses.replace(probe, tokenization="canonical"))))
    return arms
