"""The module paths mrl had before its layers got folders (mrl.rollout, mrl.probes.sgt, ...), kept working.

Each old path is the very module object at its new home (mrl.runtime.rollout, mrl.core.probes.sgt, ...), imported
on first use, so a user's code, a saved notebook or a pickled object written against an old path behaves as before.
The package's own code, tests, notebooks and docs import the new paths (tests/test_layers.py checks).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys

MOVED = {
    "mrl.config": "mrl.core.config",
    "mrl.validation": "mrl.core.validation",
    "mrl.grpo": "mrl.core.grpo",
    "mrl.thl": "mrl.core.thl",
    "mrl.marginal": "mrl.core.marginal",
    "mrl.see": "mrl.core.see",
    "mrl.tasks": "mrl.core.tasks",
    "mrl.mismatch": "mrl.core.mismatch",
    "mrl.microbatch": "mrl.core.microbatch",
    "mrl.stop_tokens": "mrl.core.stop_tokens",
    "mrl.token_logprobs": "mrl.core.token_logprobs",
    "mrl.seeding": "mrl.core.seeding",
    "mrl.probes": "mrl.core.probes",
    "mrl.bandit": "mrl.core.bandit",
    "mrl.placement": "mrl.runtime.placement",
    "mrl.rollout": "mrl.runtime.rollout",
    "mrl.fast": "mrl.runtime.fast",
    "mrl.graphs_engine": "mrl.runtime.graphs_engine",
    "mrl.actor": "mrl.runtime.actor",
    "mrl.worker": "mrl.runtime.worker",
    "mrl.spec": "mrl.runtime.spec",
    "mrl.runner": "mrl.runtime.runner",
    "mrl.mwra": "mrl.runtime.mwra",
    "mrl.pools": "mrl.runtime.pools",
    "mrl.checkpoint": "mrl.runtime.checkpoint",
    "mrl.resources": "mrl.runtime.resources",
    "mrl.saving": "mrl.runtime.saving",
    "mrl.evaluation": "mrl.runtime.evaluation",
    "mrl.poison": "mrl.runtime.poison",
    "mrl.teacher": "mrl.runtime.teacher",
    "mrl.tracking": "mrl.runtime.tracking",
    "mrl.results": "mrl.runtime.results",
    "mrl.zoo": "mrl.runtime.zoo",
    "mrl.real_tokenizers": "mrl.runtime.real_tokenizers",
    "mrl.marginal_gap": "mrl.experiments.marginal_gap",
    "mrl.figure_inputs": "mrl.reports.figure_inputs",
}
"""old module path -> its home now (a package's submodules follow it: mrl.probes.sgt -> mrl.core.probes.sgt)"""


def new_home(name: str) -> str | None:
    """The module an old path now names, or None when `name` is not an old path."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers `import mrl.<old path>` with the module at its new home (the same object, never a second copy)."""

    def find_spec(self, name, path=None, target=None):
        home = new_home(name)
        return None if home is None else importlib.util.spec_from_loader(name, self)

    def __init__(self):
        self.specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def create_module(self, spec):
        module = importlib.import_module(new_home(spec.name))
        self.specs[spec.name] = module.__spec__   # the import system sets __spec__ to the old path's: put it back
        return module

    def exec_module(self, module):
        module.__spec__ = self.specs.pop(module.__spec__.name)


def install() -> None:
    """Put the finder first on sys.meta_path, once (mrl/__init__.py calls it): an old path is answered before any
    other finder looks for it, so a stale file left at an old path by an earlier install is never imported."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
