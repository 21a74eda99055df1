"""Profiles: smoke (CI, tiny budgets), default (this 2-core CPU), paper (GPUs, real models).

A profile is a YAML file in configs/; `load_profile` returns its validated RunConfig.
"""
from __future__ import annotations

from mrl.config import RunConfig, load_config
from mrl.results import repo_root

PROFILES = ("smoke", "default", "paper")
# the notebooks each profile runs (the paper profile has no zoo, THL corpus study or MWRA timing to redo)
PROFILE_NOTEBOOKS = {"paper": ("40_probe.ipynb", "50_hacpo.ipynb", "60_bandit.ipynb")}


def load_profile(profile: str) -> RunConfig:
    """The RunConfig of a profile; an unknown profile names the allowed ones."""
    if profile not in PROFILES:
        raise ValueError(f"profile={profile!r} is not allowed; expected one of {list(PROFILES)}")
    config = load_config(repo_root() / "configs" / f"{profile}.yaml")
    config.policies = {name: str(repo_root() / path) for name, path in config.policies.items()}
    return config
