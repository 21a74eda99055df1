"""50_hacpo: HACPO and its baselines over seeds (the MRL probes' runs are shared with 40_probe), and its ablations
on fewer seeds, along the axes the profile names (the paper's tables 2-4 and its ratio)."""
from __future__ import annotations

from mrl.core.grids import HacpoGridConfig
from mrl.core.probes import ProbeConfig, as_probe_config
from mrl.core.run_config import RunConfig
from mrl.experiments.runs import Labelled, grid_runs


def ablation_probes(grid: HacpoGridConfig) -> dict[str, list[ProbeConfig]]:
    """{axis: its arms' probe configs}, in the profile's order."""
    return {axis: [as_probe_config(entry) for entry in arms] for axis, arms in grid.ablations.items()}


def hacpo_runs(config: RunConfig, zoo_paths: dict[str, str]) -> Labelled:
    """The comparison's runs: every arm on every pairing and seed, labelled with pairing, probe and seed."""
    grid = config.hacpo_grid
    return grid_runs(config, zoo_paths, grid.pairings, grid.probes, grid.seeds, grid.steps)


def ablation_runs(config: RunConfig, zoo_paths: dict[str, str]) -> dict[str, Labelled]:
    """{axis: its runs} of the ablations over ablation_seeds and ablation_steps, labelled like the comparison's."""
    grid = config.hacpo_grid
    return {axis: grid_runs(config, zoo_paths, grid.pairings, arms, grid.ablation_seeds, grid.ablation_steps)
            for axis, arms in ablation_probes(grid).items()}
