"""Figures drawn from committed data: a figure saved with its inputs and its drawing call, so it can be redrawn.

`draw_and_save(draw, name, folder, runs=frame, kappa=0.5)` writes each DataFrame input as CSV and the call as
`recipe.json` under `<folder>/data/<name>/`, reads the CSVs back, draws the figure from what was read (so a redraw
from the committed files gives the same picture) and saves it with mrl.runtime.results.save_figure.
`redraw(folder, name)` draws it again from the committed files; tests/test_figure_inputs.py compares every committed PNG
with its redraw.
"""
from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from mrl.runtime.results import save_figure

RECIPE = "recipe.json"
FLOAT_FORMAT = "%.7g"
"""the committed inputs' floats, to float32's precision: a figure cannot show more, and the files stay small"""


def inputs_dir(folder: Path, name: str) -> Path:
    """Where a figure's committed inputs live: <figures folder>/data/<name>/."""
    return folder / "data" / name


def write_inputs(folder: Path, name: str, draw: Callable, frames: dict[str, pd.DataFrame], params: dict) -> None:
    """The figure's DataFrame inputs as <input>.csv (floats to FLOAT_FORMAT) and the call as recipe.json: the drawing
    function's module and name, and its other (JSON) arguments."""
    target = inputs_dir(folder, name)
    target.mkdir(parents=True, exist_ok=True)
    for old in target.glob("*.csv"):
        if old.stem not in frames:
            old.unlink()
    for key, frame in frames.items():
        frame.to_csv(target / f"{key}.csv", index=False, float_format=FLOAT_FORMAT)
    recipe = {"function": f"{draw.__module__}:{draw.__qualname__}", "frames": sorted(frames), "params": params}
    (target / RECIPE).write_text(json.dumps(recipe, indent=1, sort_keys=True) + "\n")


def read_call(folder: Path, name: str) -> tuple[Callable, dict]:
    """(the drawing function, its keyword arguments) from a figure's committed inputs."""
    target = inputs_dir(folder, name)
    recipe = json.loads((target / RECIPE).read_text())
    module, _, qualname = recipe["function"].partition(":")
    draw = importlib.import_module(module)
    for part in qualname.split("."):
        draw = getattr(draw, part)
    frames = {key: pd.read_csv(target / f"{key}.csv") for key in recipe["frames"]}
    return draw, {**frames, **recipe["params"]}


def draw_and_save(draw: Callable, name: str, folder: Path, **inputs):
    """Save draw(**inputs) as name.png and name.pdf (mrl.runtime.results.save_figure) with its inputs committed beside
    it (write_inputs); the figure is drawn from the inputs as read back, so its redraw is the same. DataFrame inputs are
    written as CSV, the others must be JSON values (numbers, strings, lists, mappings). Returns the figure."""
    if "<locals>" in draw.__qualname__ or draw.__module__ == "__main__":
        raise ValueError(f"draw_and_save({name!r}): the drawing function must be importable by name (a module-level "
                         f"function of the library), got {draw.__module__}.{draw.__qualname__}")
    frames = {key: value for key, value in inputs.items() if isinstance(value, pd.DataFrame)}
    params = {key: value for key, value in inputs.items() if key not in frames}
    try:
        json.dumps(params)
    except TypeError as err:
        raise TypeError(f"draw_and_save({name!r}): inputs other than DataFrames must be JSON values: {err}") from None
    write_inputs(folder, name, draw, frames, params)
    function, arguments = read_call(folder, name)
    return save_figure(function(**arguments), name, folder)


def redraw(folder: Path, name: str):
    """The figure drawn again from its committed inputs (read_call)."""
    function, arguments = read_call(folder, name)
    return function(**arguments)


def committed_figures(folder: Path) -> list[str]:
    """The names of the figures in `folder` that have committed inputs."""
    return sorted(path.parent.name for path in (folder / "data").glob(f"*/{RECIPE}"))
