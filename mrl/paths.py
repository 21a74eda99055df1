"""Where the checkout is: the one place the package finds its repository (configs/, data/, results/, paper_tables/)."""
from __future__ import annotations

from pathlib import Path


def repo_root() -> Path:
    """The mrl checkout: the nearest ancestor of the working directory holding pyproject.toml and mrl/."""
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / "pyproject.toml").exists() and (folder / "mrl").is_dir():
            return folder
    return Path(__file__).resolve().parents[1]
