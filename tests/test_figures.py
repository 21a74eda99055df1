"""Figures: every probe is drawn in its colour of mrl.reports.palette whichever figure draws it, count axes read
12k / 1.2M, and bands are the tables' 95% t intervals, not min-max."""
import itertools

import matplotlib
import numpy as np
import pandas as pd
import pytest
from matplotlib.colors import to_hex

from mrl.reports.palette import PROBE_COLOURS, compact_number, probe_colour

matplotlib.use("Agg")

PROBES = ["grpo", "prp", "sgt", "xgrpo", "hacpo"]


def synthetic_evals(probes=PROBES, seeds=(0, 1, 2), steps=(0, 5, 10)) -> pd.DataFrame:
    """A+B; A strong on S1, B on S2; accuracy grows with the step, differs by probe and seed."""
    rng = np.random.default_rng(0)
    rows = []
    for probe, seed, step, policy, split, skill in itertools.product(probes, seeds, steps, "AB",
                                                                     ("held-out", "pool"), ("S1", "S2")):
        strong = (policy == "A") == (skill == "S1")
        base = 0.8 if strong else 0.1
        rows.append({"pairing": "A+B", "probe": probe, "seed": seed, "policy": policy, "step": step, "split": split,
                     "skill": skill, "rollouts": step * 128, "zoo_seed": 0,
                     "accuracy": float(np.clip(base + 0.01 * step * (1 + 0.1 * seed) + 0.02 * rng.random(), 0, 1))})
    return pd.DataFrame(rows)


def synthetic_steps(probes=PROBES, seeds=(0, 1, 2), steps=range(1, 11)) -> pd.DataFrame:
    return pd.DataFrame([{"pairing": "A+B", "probe": p, "seed": s, "policy": q, "step": t, "zoo_seed": 0,
                          "reward": 0.5 + 0.01 * t, "peer_kept": 3.0, "peer_samples": 8.0}
                         for p, s, q, t in itertools.product(probes, seeds, "AB", steps)])


def line_colours(fig) -> dict[str, set[str]]:
    """{legend label: colours of the lines drawn with it} over every axis of a figure."""
    out: dict[str, set[str]] = {}
    for ax in fig.axes:
        for line in ax.get_lines():
            label = line.get_label().split(" (n=")[0]
            if not label.startswith("_"):
                out.setdefault(label, set()).add(to_hex(line.get_color()))
        legend = ax.get_legend()
        if legend is not None:
            for handle, text in zip(legend.legend_handles, legend.get_texts()):
                if hasattr(handle, "get_color"):
                    out.setdefault(text.get_text().split(" (n=")[0], set()).add(to_hex(handle.get_color()))
    return out


def assert_palette(fig, probes):
    colours = line_colours(fig)
    drawn = [p for p in probes if p in colours]
    assert drawn, f"no probe line found among {sorted(colours)}"
    for probe in drawn:
        assert colours[probe] == {to_hex(probe_colour(probe))}, (probe, colours[probe])


def test_the_probe_figures_use_the_shared_palette():
    from mrl.reports.paired import weak_skill_figure
    from mrl.reports.probes import accuracy_figure, rescue_figure, stepwise_clipping_figure

    evals = synthetic_evals()
    assert_palette(accuracy_figure(evals), PROBES)
    assert_palette(rescue_figure(evals), PROBES)
    assert_palette(weak_skill_figure(evals, synthetic_steps()), PROBES)
    assert_palette(stepwise_clipping_figure(synthetic_steps(["hacpo", "naive"]), 0.2, 0.025, 4), ["hacpo", "naive"])


def test_the_bandit_figures_use_the_shared_palette():
    from mrl.reports.bandit import dynamics_figure, plane_figure

    plane = pd.DataFrame([{"kappa": k, "curve": c, "label": f"{c.split(' ')[0]} (x={v})", "support": s * v,
                           "instability": 0.2 + v}
                          for k in (0.5, 1.0) for c, s in (("grpo", 0.0003), ("sgt (x)", 0.1), ("xgrpo (x)", 0.0003))
                          for v in ((1,) if c == "grpo" else (1, 2, 3))])
    fig = plane_figure(plane)
    colours = {to_hex(c.get_facecolor()[0]) for ax in fig.axes for c in ax.collections if len(c.get_offsets())}
    assert to_hex(PROBE_COLOURS["grpo"]) in colours and to_hex(PROBE_COLOURS["sgt"]) in colours
    assert_palette(fig, ["sgt (x)", "xgrpo (x)"])
    assert all(ax.get_xscale() == "log" and ax.get_yscale() == "log" for ax in fig.axes)
    dynamics = pd.DataFrame([{"method": m, "kappa": 0.5, "seed": s, "policy": q, "step": t, "entropy": 1.0 / (t + 1),
                              "acc shared-easy": 0.5, "acc A-hard/B-easy": 0.1 * t, "acc B-hard/A-easy": 0.1 * t}
                             for m, s, q, t in itertools.product(["grpo", "sgt (lambda=0.1)"], (0, 1), "AB", range(5))])
    assert_palette(dynamics_figure(dynamics), ["grpo", "sgt (lambda=0.1)"])


def test_a_variant_takes_its_base_probes_colour():
    assert probe_colour("prp (clip=4.0)") == probe_colour("prp") == probe_colour("prp (c, sigma_T=0)")
    assert probe_colour("grpo") == "#000000" and probe_colour("something else") != probe_colour("grpo")


@pytest.mark.parametrize("value, text", [(0, "0"), (950, "950"), (12000, "12k"), (12500, "12.5k"),
                                         (1_200_000, "1.2M"), (1000012500, "1G"), (0.25, "0.25")])
def test_count_axes_read_as_compact_numbers(value, text):
    assert compact_number(value) == text


def test_a_curve_band_is_the_t_interval_of_the_mean_not_min_max():
    from scipy.stats import t as student_t

    from mrl.reports.probes import t_band

    values = np.array([0.2, 0.3, 0.7])
    low, high = t_band(values)
    half = student_t.ppf(0.975, 2) * values.std(ddof=1) / np.sqrt(3)
    assert (low, high) == pytest.approx((values.mean() - half, values.mean() + half))
    assert (low, high) != (values.min(), values.max())
    assert t_band([0.4]) == (0.4, 0.4)  # one run: no band
