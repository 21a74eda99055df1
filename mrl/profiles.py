"""Profiles: smoke (CI, tiny budgets), default (this 2-core CPU, 150 minutes), full (everything, hours), paper (GPUs,
real models).

A profile is one YAML file, configs/<profile>.yaml, and holds everything its runs need: the task, the zoo
(or pretrained checkpoints), GRPO, the pairings, the runner (backend, timeouts), the notebooks to run and each
experiment's grid (every grid field is required there: no experiment has code defaults). `load_profile` returns it
validated (mrl.core.run_config, and each experiment's config class in mrl.core.grids): every field and every probe
entry of the grids.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from mrl.paths import repo_root

if TYPE_CHECKING:
    from mrl.core.run_config import RunConfig

PROFILES = ("smoke", "default", "full", "paper")


def load_profile(profile: str) -> RunConfig:
    """The RunConfig of a profile; an unknown profile names the allowed ones, a bad probe entry its probe."""
    from mrl.core.run_config import load_config   # here: `mrl --help` reads PROFILES without importing torch

    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r} is not allowed; expected one of {list(PROFILES)}")
    config = load_config(repo_root() / "configs" / f"{profile}.yaml")
    config.policies = {name: str(repo_root() / path) for name, path in config.policies.items()}
    config.profile = profile
    return config
