"""The setup every notebook shares, in one call: an offline hub, the profile's config, torch threads, output
folders and the run folder that records config, seed and git SHA.

    run = setup_notebook("10_grpo_baseline", profile, seed=seed)
    run.config, run.tables, run.figures, run.folder
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path

from mrl.core.run_config import RunConfig
from mrl.profiles import load_profile
from mrl.runtime.results import output_dirs, start_run


@dataclass
class NotebookRun:
    """Where one notebook run reads its settings and writes its outputs."""

    name: str
    """the notebook, e.g. 40_probe"""
    profile: str
    """smoke, default or paper"""
    config: RunConfig
    """the profile's config, with the notebook's seed in config.grpo.seed"""
    tables: Path
    """paper_tables/ for the default profile, results/<profile>/paper_tables/ for every other (output_dirs)"""
    figures: Path
    """figures/ for the default profile, results/<profile>/figures/ for every other"""
    folder: Path
    """results/<notebook>/<profile>-seed<seed>/: config.yaml, meta.json and the raw metrics"""

    def record(self, **settings) -> None:
        """Add what the notebook resolved after setup (a grid with its overrides, the backend) to meta.json."""
        meta = json.loads((self.folder / "meta.json").read_text())
        meta.update({k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for k, v in settings.items()})
        (self.folder / "meta.json").write_text(json.dumps(meta, indent=2, default=str))


def setup_notebook(name: str, profile: str, seed: int | None = None, extra: dict | None = None,
                   partial: bool = False) -> NotebookRun:
    """Load the profile, apply the seed (None: the profile's GRPO seed), set torch threads, create the run folder.

    partial: the notebook runs less than the profile's whole grid (a parameter override), so its tables and
    figures go to the run folder instead of paper_tables/ and figures/.
    """
    import torch

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    config = load_profile(profile)
    if seed is not None:
        config.grpo = dataclasses.replace(config.grpo, seed=seed)
    torch.set_num_threads(config.threads)
    tables, figures = output_dirs(profile)
    folder = start_run(name, profile, config, seed=config.grpo.seed, extra=extra)
    if partial:
        tables = figures = folder
    return NotebookRun(name, profile, config, tables, figures, folder)
