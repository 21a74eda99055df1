"""The folders are the layers (mrl/__init__.py): each module imports only its own layer and those below; the flat
module paths of the 0.1.0 package before the folders no longer import."""
import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "mrl"
LAYERS = {"mrl.paths": 0, "mrl.numerics": 0, "mrl.fingerprint": 0, "mrl.core": 1, "mrl.runtime": 2,
          "mrl.experiments": 3, "mrl.integrations": 3, "mrl.profiles": 3, "mrl.reports": 4, "mrl.notebook": 4,
          "mrl.cli": 4, "mrl.command": 4, "mrl.reproduce": 4}


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


@pytest.mark.parametrize("old", ["mrl.rollout", "mrl.probes.sgt", "mrl.see", "mrl.runner"])
def test_a_flat_path_of_before_the_folders_no_longer_imports(old):
    """mrl/aliases.py kept them importing through an import hook in every `import mrl`; docs/usage.md lists each
    one's home now."""
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(old)
    assert f"`{old.split('.')[0]}.{old.split('.')[1]}`" in (ROOT / "docs" / "usage.md").read_text()
