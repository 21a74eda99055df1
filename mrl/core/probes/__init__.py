"""Sharing probes: one registered function per probe over the same batch structure (docs/architecture.md, The probes).

`contract` holds the types and the registry, `advantages` the advantage estimators (a registry of their own), `terms`
the loss terms the probes share; then one module per probe: grpo (the reference), prp and prp_naive (data level),
xgrpo (value level), sgt (outcome level), hacpo with gspo, gspo_x2 and naive (HACPO's pure functions in
hacpo_primitives), graft (trajectory level) and trrd (trust region level).

Every module of this folder is imported here, so a probe of the package is one file: its registration is its
name, which mrl.core.choices.BUILTIN_PROBES reads from the file's syntax for the command line (without importing
torch); then every entry point of the group `mrl.probes` that an installed package declares is imported. A probe in
a user's own module needs neither: importing the module registers it (docs/architecture.md, Adding a probe).
"""
import importlib
import pkgutil
import warnings
from importlib.metadata import entry_points

from mrl.core.choices import BUILTIN_PROBES
from mrl.core.probes.contract import (PROBES, PeerView, Probe, ProbeConfig, ProbeLoss, ProbeOutput, as_probe_config,
                                      get_probe, probe_code, probe_config, probe_label, register_probe,
                                      require_importable)

for _module in pkgutil.iter_modules(__path__):   # sorted by name: the registry's order does not depend on the disk
    importlib.import_module(f"{__name__}.{_module.name}")
del _module

assert set(BUILTIN_PROBES) <= set(PROBES), "every name of mrl.core.choices.BUILTIN_PROBES is registered above"


ENTRY_POINT_GROUP = "mrl.probes"


def discover_entry_points() -> list[str]:
    """Import the modules other packages declare in the entry-point group ENTRY_POINT_GROUP; returns their names. One
    that fails to import is named in a warning and skipped (mrl still imports)."""
    loaded = []
    for point in entry_points(group=ENTRY_POINT_GROUP):
        try:
            point.load()
        except Exception as err:  # a broken plug-in must not break mrl
            warnings.warn(f"the mrl.probes entry point {point.name!r} ({point.value}) failed to import and is "
                          f"skipped: {type(err).__name__}: {err}", stacklevel=2)
            continue
        loaded.append(point.name)
    return loaded


discover_entry_points()

__all__ = ["PROBES", "PeerView", "Probe", "ProbeConfig", "ProbeLoss", "ProbeOutput", "as_probe_config",
           "discover_entry_points", "get_probe", "probe_code", "probe_config", "probe_label", "register_probe",
           "require_importable"]
