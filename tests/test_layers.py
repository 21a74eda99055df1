"""The folders are the layers (mrl/__init__.py): each module imports only its own layer and those below, the old
module paths are aliases of the new homes, and the package's own files import the new paths."""
import ast
import importlib
import re
import sys
from pathlib import Path

import pytest

from mrl.aliases import MOVED, SPLIT, new_home

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mrl"
LAYERS = {"mrl.paths": 0, "mrl.numerics": 0, "mrl.aliases": 0, "mrl.fingerprint": 0, "mrl.core": 1, "mrl.runtime": 2,
          "mrl.experiments": 3, "mrl.integrations": 3, "mrl.profiles": 3, "mrl.reports": 4, "mrl.notebook": 4,
          "mrl.cli": 4, "mrl.reproduce": 4}


def layer(module: str) -> int:
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        if ".".join(parts[:n]) in LAYERS:
            return LAYERS[".".join(parts[:n])]
    raise AssertionError(f"{module} is in no layer: add its folder to LAYERS and to mrl/__init__.py's picture")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every mrl import in a file, at any depth."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "mrl" and not node.level:
            found += [(node.lineno, node.module)]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names if alias.name.split(".")[0] == "mrl"]
    return found


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if module_name(p) != "mrl")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_import_runs_up_a_layer(path):
    own = layer(module_name(path))
    up = [f"{path.relative_to(ROOT)}:{line} imports {name}" for line, name in imported(path)
          if name != "mrl" and layer(name) > own]
    assert not up, up


OLD = re.compile(r"(?<![\w.])mrl\.(" + "|".join(sorted((old.removeprefix("mrl.") for old in [*MOVED, *SPLIT]),
                                                        key=len, reverse=True)) + r")(?![\w])")


def test_the_repository_imports_the_new_paths():
    """Old paths are for users' code; the package, tests, benchmarks and notebooks import the new homes."""
    files = [p for folder in ("mrl", "tests", "benchmarks", "notebooks") for p in (ROOT / folder).rglob("*.py")]
    stale = [f"{p.relative_to(ROOT)}:{line}: {name}" for p in files if p.name not in ("aliases.py", "test_layers.py")
             for line, name in imported(p) if OLD.fullmatch(name) or new_home(name) is not None]
    assert not stale, stale


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_is_the_module_at_its_new_home(old):
    module = importlib.import_module(old)
    assert module is importlib.import_module(MOVED[old])
    assert module.__spec__.name == MOVED[old]      # its own spec, not the alias's


def test_a_submodule_of_a_moved_package_follows_it():
    import mrl.probes.sgt

    assert sys.modules["mrl.probes.sgt"] is importlib.import_module("mrl.core.probes.sgt")
    from mrl.rollout import RolloutBatch
    from mrl.core.batch import RolloutBatch as record

    assert RolloutBatch is record



def test_a_split_path_gives_every_name_it_had():
    """mrl.see, split into the records (mrl.core.see) and the log on disk (mrl.runtime.experience_log), gives every
    public name of both homes, the very objects (from the first home holding it), and a pickle written against the
    old path still loads."""
    import pickle

    import mrl.see

    homes = [importlib.import_module(home) for home in SPLIT["mrl.see"]]
    for name in {name for home in homes for name in vars(home) if not name.startswith("_")}:
        assert getattr(mrl.see, name) is getattr(next(home for home in homes if hasattr(home, name)), name), name
        assert name in dir(mrl.see)
    assert mrl.see.__spec__.name == "mrl.see" and sys.modules["mrl.see"] is mrl.see
    with pytest.raises(AttributeError, match="no attribute 'not_a_name'"):
        mrl.see.not_a_name
    from mrl.see import Exchange, ExperienceLogError, replay

    assert [f.__module__ for f in (Exchange, replay, ExperienceLogError)] == \
        ["mrl.core.see", "mrl.runtime.experience_log", "mrl.runtime.experience_log"]
    written = pickle.dumps(mrl.see.PolicySpec(48, "A:bpe"), protocol=0).replace(b"mrl.core.see\n", b"mrl.see\n")
    assert b"mrl.see\n" in written and pickle.loads(written) == mrl.see.PolicySpec(48, "A:bpe")
