"""50_hacpo: HACPO and its baselines over seeds (the MRL probes' runs are shared with 40_probe), and its ablations
on fewer seeds, along the axes the profile names (the paper's tables 2-4 and its ratio)."""
from __future__ import annotations

from typing import Annotated

from mrl.core.config import PairingName, RunConfig, register_experiment
from mrl.core.probes import ProbeConfig, as_probe_config
from mrl.core.validation import NonEmpty, PositiveInt, Seeds, Str, config_dataclass
from mrl.experiments.runs import Labelled, ProbeEntry, check_probes, grid_runs


@register_experiment("hacpo")
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


def ablation_probes(grid: HacpoGridConfig) -> dict[str, list[ProbeConfig]]:
    """{axis: its arms' probe configs}, in the profile's order."""
    return {axis: [as_probe_config(entry) for entry in arms] for axis, arms in grid.ablations.items()}


def hacpo_runs(config: RunConfig, zoo_paths: dict[str, str]) -> Labelled:
    """The comparison's runs: every arm on every pairing and seed, labelled with pairing, probe and seed."""
    grid = config.experiment("hacpo")
    return grid_runs(config, zoo_paths, grid.pairings, grid.probes, grid.seeds, grid.steps)


def ablation_runs(config: RunConfig, zoo_paths: dict[str, str]) -> dict[str, Labelled]:
    """{axis: its runs} of the ablations over ablation_seeds and ablation_steps, labelled like the comparison's."""
    grid = config.experiment("hacpo")
    return {axis: grid_runs(config, zoo_paths, grid.pairings, arms, grid.ablation_seeds, grid.ablation_steps)
            for axis, arms in ablation_probes(grid).items()}
