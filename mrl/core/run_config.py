"""RunConfig: a profile (configs/<profile>.yaml), everything `make reproduce` runs on one kind of machine: the
training configs of mrl.core.config and each notebook's experiment config (mrl.core.grids), held by class in
EXPERIMENTS; `load_config` reads one from YAML.
"""
from __future__ import annotations

from dataclasses import field
from pathlib import Path
from typing import Annotated, Any, Literal

from mrl.core import validation
from mrl.core.config import (NOTEBOOKS, GrpoConfig, PairingName, PlacementConfig, RunnerConfig, TaskConfig,
                             ZooConfig)
from mrl.core.grids import (BanditConfig, BeyondConfig, HacpoGridConfig, HeldoutConfig, MwraTimingConfig,
                            ProbeGridConfig)
from mrl.core.validation import ConfigError, NonEmpty, PositiveInt, Str, config_dataclass, require

EXPERIMENTS: dict[str, type] = {"mwra": MwraTimingConfig, "probe": ProbeGridConfig, "hacpo": HacpoGridConfig,
                                "bandit": BanditConfig, "heldout": HeldoutConfig, "beyond": BeyondConfig}
"""{name: config class} of every experiment a profile's `experiments:` may hold: the notebooks' (mrl.core.grids),
and a user's own, added by `register_experiment`"""


def register_experiment(name: str):
    """Class decorator: the config class of a user's experiment `name` (a key of RunConfig.experiments). A class may
    define `pairings_used()`, the RunConfig.pairings it names, checked when the profile loads."""
    def wrap(cls):
        EXPERIMENTS[name] = cls
        return cls
    return wrap


@config_dataclass
class RunConfig:
    """A profile: everything `make reproduce` runs on one kind of machine, in one YAML file (configs/<profile>.yaml)."""

    task: TaskConfig = field(default_factory=TaskConfig)
    """the task and its splits"""
    zoo: ZooConfig | None = None
    """the families and their warm-up (None: the profile names pretrained `policies` instead)"""
    grpo: GrpoConfig = field(default_factory=GrpoConfig)
    """GRPO training of each policy (every probe's own-sample term)"""
    policies: dict[Str, Str] = field(default_factory=dict)
    """paper profile: {name: local folder of a pretrained checkpoint}; empty: the zoo built from `zoo`"""
    pairings: dict[PairingName, Annotated[list[Str], NonEmpty]] = field(default_factory=dict)
    """the policy groups trained together: {name: [policy names]}, e.g. {A+B: [A, B]}"""
    runner: RunnerConfig = field(default_factory=RunnerConfig)
    """how the experiments' runs run: backend (inline, process, ray: same metrics, different wall time),
    step_timeout, max_staleness, ... (a run's own variant sets its mode, peers and poisoning)"""
    threads: PositiveInt = 1
    """torch threads per policy worker (1 keeps CPU runs bit-reproducible)"""
    packed_runs: PositiveInt | Literal["auto"] = 1
    """independent runs of a grid executed at once, each inline in its own process (no core waits at a barrier);
    "auto": one per usable core, as many as the memory holds (mrl.runtime.capacity); 1: one run at a time on
    `runner.backend`"""
    placement: dict[Str, PlacementConfig] = field(default_factory=dict)
    """{policy name: its device, dtype, checkpointing, micro-batch and GPU share}; a policy not named takes the
    defaults (this CPU)"""
    notebooks: list[Literal[NOTEBOOKS]] = field(default_factory=lambda: list(NOTEBOOKS))
    """the notebooks `python -m mrl.reproduce` runs for this profile, in order"""
    profile: Str = ""
    """the profile's name (load_profile sets it; '' for a config built otherwise): named in model cards and run.json,
    never in a run's key, so renaming a profile re-runs nothing"""
    experiments: dict[Str, Any] = field(default_factory=dict)
    """{experiment: its grid and budgets}, each validated by its config class in EXPERIMENTS (probe:
    ProbeGridConfig, heldout: HeldoutConfig, ...); a profile holds the experiments its notebooks run"""

    def __post_init__(self):
        c = "RunConfig"
        require((self.runner.poisoned, self.runner.attack, self.runner.reverify) == ("", "forged_success", True), c,
                "runner", f"poisoned={self.runner.poisoned!r}, attack={self.runner.attack!r}, "
                f"reverify={self.runner.reverify!r}", "the defaults: an experiment sets a run's poisoned peer (its "
                "Variant), not the profile")
        if self.policies or self.zoo:   # (a config built in Python for given checkpoint folders may name neither)
            known = set(self.policies) if self.policies else {f.name for f in self.zoo.families}
            for name, members in self.pairings.items():
                require(set(members) <= known, c, f"pairings[{name!r}]", members,
                        f"policies drawn from {sorted(known)}")
            require(set(self.placement) <= known, c, "placement", sorted(self.placement),
                    f"policy names drawn from {sorted(known)}")
        unknown = sorted(set(self.experiments) - set(EXPERIMENTS))
        require(not unknown, c, "experiments", unknown,
                f"experiment names drawn from {sorted(EXPERIMENTS)} (mrl.core.run_config.EXPERIMENTS, or "
                "register_experiment)")
        self.experiments = {name: _experiment(name, value) for name, value in self.experiments.items()}
        for experiment in self.experiments.values():
            for name in getattr(experiment, "pairings_used", list)():
                require(name in self.pairings, c, "experiments", name,
                        f"a pairing defined in pairings {list(self.pairings)}")

    def placement_of(self, name: str) -> PlacementConfig:
        """The placement of one policy (the defaults when the profile does not name it)."""
        return self.placement.get(name, PlacementConfig())

    def pairing(self, name: str) -> list[str]:
        """The policy names of a pairing."""
        if name not in self.pairings:
            raise ConfigError(f"pairing={name!r} is not allowed; expected one of {list(self.pairings)}")
        return list(self.pairings[name])

    def experiment(self, name: str) -> Any:
        """The config of one experiment of this profile by name (a user's own, registered with register_experiment);
        the package's have typed accessors (`heldout`, `probe_grid`, ...)."""
        if name not in self.experiments:
            raise ConfigError(f"RunConfig.experiments has no {name!r} experiment in this profile; it holds "
                              f"{sorted(self.experiments)}")
        return self.experiments[name]

    @property
    def mwra_timing(self) -> MwraTimingConfig:
        return self.experiment("mwra")

    @property
    def probe_grid(self) -> ProbeGridConfig:
        return self.experiment("probe")

    @property
    def hacpo_grid(self) -> HacpoGridConfig:
        return self.experiment("hacpo")

    @property
    def bandit(self) -> BanditConfig:
        return self.experiment("bandit")

    @property
    def heldout(self) -> HeldoutConfig:
        return self.experiment("heldout")

    @property
    def beyond(self) -> BeyondConfig:
        return self.experiment("beyond")


def _experiment(name: str, value: Any) -> Any:
    """An experiment's config: kept when already built, else built from its mapping by the registered class."""
    cls = EXPERIMENTS[name]
    if isinstance(value, cls):
        return value
    require(isinstance(value, dict), "RunConfig", f"experiments.{name}", value, "a mapping of its settings")
    return cls(**value)


def load_config(source: str | Path | dict, cls: type = RunConfig) -> Any:
    """Load a config (a RunConfig unless `cls` says otherwise) from a YAML file, a YAML string or a dict
    (mrl.core.validation.load_config)."""
    return validation.load_config(source, cls)
