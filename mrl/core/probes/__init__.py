"""Sharing probes: one registered function per probe over the same batch structure.

    contract     ProbeLoss, ProbeConfig, ProbeOutput, PeerView, the registry (register_probe, get_probe, probe_code)
    advantages   advantage estimators with a registry of their own (group: GRPO's; xgrpo: the peer-mixed baseline)
    terms        loss terms the probes share (the own GRPO term, log-probs of any completion, THL-retokenized peer
                 rollouts, pooled groups, importance ratios, the rescue set)
    grpo         independent GRPO, the reference
    prp          prp, prp_naive: the peers' samples in the learner's group (data level)
    xgrpo        a baseline mixed with the peers' mean reward (value level)
    sgt          an NLL toward one verified peer success on the rescue set (outcome level)
    hacpo        hacpo and its baselines gspo, gspo_x2, naive; hacpo_primitives holds HACPO's pure functions
    graft        a peer's verified success on prompts the learner's group all failed, compatibility-weighted and
                 token-clipped (trajectory level; a reconstruction of GRAFT)
    trrd         GRPO with the token ratio anchored to an old-policy/teacher mixture, the teacher a peer's fixed
                 checkpoint through THL (trust region level; a reconstruction of RLAD's TRRD)

Probes are discovered: every module of this package is imported, then every entry point of the group `mrl.core.probes`
that an installed package declares (`[project.entry-points."mrl.probes"] my_probe = "my_package.my_probe"`). A probe
in a user's own module needs neither: importing the module registers it (see mrl.core.probes.contract).
"""
import importlib
import pkgutil
import warnings
from importlib.metadata import entry_points

from mrl.core.probes.contract import (PROBES, PeerView, Probe, ProbeConfig, ProbeLoss, ProbeOutput, as_probe_config,
                                 get_probe, probe_code, probe_config, probe_label, register_probe,
                                 require_importable)

ENTRY_POINT_GROUP = "mrl.probes"


def discover_package() -> None:
    """Import every module of mrl.core.probes (each registers its probes)."""
    for module in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{module.name}")


def discover_entry_points() -> list[str]:
    """Import the modules other packages declare in the entry-point group `mrl.core.probes`; returns their names. One that
    fails to import is named in a warning and skipped (mrl still imports)."""
    loaded = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except Exception as err:  # a broken plug-in must not break mrl
            warnings.warn(f"the mrl.core.probes entry point {point.name!r} ({point.value}) failed to import and is "
                          f"skipped: {type(err).__name__}: {err}", stacklevel=2)
            continue
        loaded.append(point.name)
    return loaded


discover_package()
discover_entry_points()

__all__ = ["PROBES", "PeerView", "Probe", "ProbeConfig", "ProbeLoss", "ProbeOutput", "as_probe_config",
           "discover_entry_points", "get_probe", "probe_code", "probe_config", "probe_label", "register_probe",
           "require_importable"]
