"""Every committed figure is drawn from committed data: its redraw from figures/data/<name>/ equals the committed
PNG byte for byte, and no figure is committed without its data."""
import matplotlib
import pandas as pd
import pytest

from mrl.reports.figure_inputs import committed_figures, draw_and_save, redraw
from mrl.runtime.results import repo_root, save_figure, save_png

FIGURES = repo_root() / "figures"


@pytest.fixture(autouse=True)
def agg_backend():
    matplotlib.use("Agg")


@pytest.mark.parametrize("name", committed_figures(FIGURES))
def test_a_committed_figure_is_its_redraw_from_the_committed_data(name, tmp_path):
    import matplotlib.pyplot as plt

    figure = redraw(FIGURES, name)
    save_png(figure, tmp_path / f"{name}.png")   # the PNG alone: its PDF is written by the same figure's savefig
    plt.close(figure)
    assert (tmp_path / f"{name}.png").read_bytes() == (FIGURES / f"{name}.png").read_bytes(), (
        f"figures/{name}.png differs from its redraw from figures/data/{name}/: regenerate its notebook")


def test_every_committed_figure_has_its_data():
    pictures = {path.stem for path in FIGURES.glob("*.png")}
    with_data = set(committed_figures(FIGURES))
    assert with_data <= pictures, f"inputs without a figure: {sorted(with_data - pictures)}"
    assert pictures == with_data, (f"figures without committed data: {sorted(pictures - with_data)}; a figure is "
                                   "saved with mrl.reports.figure_inputs.draw_and_save")


def line_figure(points: pd.DataFrame, title: str):
    """A drawing function importable by name, as the library's are."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(2, 2))
    ax.plot(points.x, points.y)
    ax.set_title(title)
    return fig


def test_draw_and_save_draws_from_what_it_wrote(tmp_path):
    points = pd.DataFrame({"x": [0.0, 1.0, 2.0], "y": [0.1, 1 / 3, 2 / 3]})
    draw_and_save(line_figure, "line", tmp_path, points=points, title="t")
    assert sorted(p.name for p in (tmp_path / "data" / "line").iterdir()) == ["points.csv", "recipe.json"]
    save_figure(redraw(tmp_path, "line"), "again", tmp_path)
    assert (tmp_path / "again.png").read_bytes() == (tmp_path / "line.png").read_bytes()
    with pytest.raises(TypeError, match="JSON values"):
        draw_and_save(line_figure, "line", tmp_path, points=points, title=object())


def test_a_drawing_function_must_be_importable_by_name(tmp_path):
    def local(points):
        return None

    with pytest.raises(ValueError, match="importable by name"):
        draw_and_save(local, "local", tmp_path, points=pd.DataFrame({"x": [1]}))
