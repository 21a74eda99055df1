"""Where things are: the package's own folder (its data/) and the checkout (configs/, data/, results/,
paper_tables/)."""
from __future__ import annotations

from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
"""mrl/: the package's sources and the data shipped with it (mrl/data/)"""

BLOCK_RECORD = Path("paper_tables") / "confirmatory_claims_record"
"""where the second registration's finished runs are committed (mrl.experiments.record), under the checkout"""


def repo_root() -> Path:
    """The mrl checkout: the nearest ancestor of the working directory holding pyproject.toml and mrl/."""
    for folder in (Path.cwd(), *Path.cwd().parents):
        if (folder / "pyproject.toml").exists() and (folder / "mrl").is_dir():
            return folder
    return PACKAGE.parent
