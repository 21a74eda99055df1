"""The module paths mrl had before its layers got folders (mrl.rollout, mrl.probes.sgt, ...), kept working.

Each old path is the very module object at its new home (mrl.runtime.rollout, mrl.core.probes.sgt, ...), imported
on first use, so a user's code, a saved notebook or a pickled object written against an old path behaves as before.
An old path whose module was split in two (SPLIT: mrl.see, now mrl.core.see and mrl.runtime.experience_log) is a
module that reads each name from the first of its homes that has it.
The package's own code, tests, notebooks and docs import the new paths (tests/test_layers.py checks).
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types

MOVED = {
    "mrl.config": "mrl.core.config",
    "mrl.validation": "mrl.core.validation",
    "mrl.grpo": "mrl.core.grpo",
    "mrl.thl": "mrl.core.thl",
    "mrl.marginal": "mrl.core.marginal",
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

SPLIT = {
    "mrl.see": ("mrl.core.see", "mrl.runtime.experience_log"),
}
"""old module path -> the homes its names now live in, searched in order (the records first, then the log on disk)"""


def new_home(name: str) -> str | None:
    """The module an old path now names, or None when `name` is not an old path."""
    for old, new in MOVED.items():
        if name == old or name.startswith(old + "."):
            return new + name[len(old):]
    return None


class SplitModule(types.ModuleType):
    """An old module path whose module was split: each name is read from the first of its homes that has it."""

    def __init__(self, name: str, homes: tuple[str, ...]):
        super().__init__(name, f"{name}, whose names now live in {' and '.join(homes)} (mrl.aliases.SPLIT).")
        self._homes = tuple(importlib.import_module(home) for home in homes)

    def __getattr__(self, attr: str):
        for home in vars(self).get("_homes", ()):
            if hasattr(home, attr):
                return getattr(home, attr)
        raise AttributeError(f"module {self.__name__!r} has no attribute {attr!r} (nor has any of its homes)")

    def __dir__(self):
        return sorted(set(super().__dir__()).union(*(dir(home) for home in self._homes)))


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Answers `import mrl.<old path>` with the module at its new home (the same object, never a second copy), or
    with a SplitModule over its homes for a split one."""

    def find_spec(self, name, path=None, target=None):
        home = new_home(name)
        return None if home is None and name not in SPLIT else importlib.util.spec_from_loader(name, self)

    def __init__(self):
        self.specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def create_module(self, spec):
        if spec.name in SPLIT:
            return SplitModule(spec.name, SPLIT[spec.name])   # a module of its own: it keeps the old path's spec
        module = importlib.import_module(new_home(spec.name))
        self.specs[spec.name] = module.__spec__   # the import system sets __spec__ to the old path's: put it back
        return module

    def exec_module(self, module):
        module.__spec__ = self.specs.pop(module.__spec__.name, module.__spec__)


def install() -> None:
    """Put the finder first on sys.meta_path, once (mrl/__init__.py calls it): an old path is answered before any
    other finder looks for it, so a stale file left at an old path by an earlier install is never imported."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.insert(0, MovedModules())
