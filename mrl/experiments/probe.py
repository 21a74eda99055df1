"""40_probe: every probe on every pairing and seed, each one run of the runner."""
from __future__ import annotations

from typing import Annotated

from mrl.core.config import PairingName, RunConfig, register_experiment
from mrl.core.validation import NonEmpty, PositiveInt, Seeds, config_dataclass, require
from mrl.experiments.runs import Labelled, ProbeEntry, check_probes, grid_runs


@register_experiment("probe")
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


def probe_runs(config: RunConfig, zoo_paths: dict[str, str], grid: ProbeGridConfig | None = None) -> Labelled:
    """The runs of 40_probe's grid (the profile's, or `grid`: the notebook's with its overrides), labelled with
    pairing, probe and seed."""
    grid = grid or config.experiment("probe")
    return grid_runs(config, zoo_paths, grid.pairings, grid.probes, grid.seeds, grid.steps)
