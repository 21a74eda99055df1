"""40_probe: every probe on every pairing and seed, each one run of the runner."""
from __future__ import annotations

from mrl.core.grids import ProbeGridConfig
from mrl.core.run_config import RunConfig
from mrl.experiments.runs import Labelled, grid_runs


def probe_runs(config: RunConfig, zoo_paths: dict[str, str], grid: ProbeGridConfig | None = None) -> Labelled:
    """The runs of 40_probe's grid (the profile's, or `grid`: the notebook's with its overrides), labelled with
    pairing, probe and seed."""
    grid = grid or config.probe_grid
    return grid_runs(config, zoo_paths, grid.pairings, grid.probes, grid.seeds, grid.steps)
