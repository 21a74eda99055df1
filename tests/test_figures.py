"""Figures: every probe is drawn in its colour of mrl.reports.palette whichever figure draws it (lines and bands,
read back from the artists), count axes read 12k / 1.2M, and bands are the tables' 95% t intervals (checked against
scipy's t interval of the data, not min-max)."""
import itertools
import re
from types import SimpleNamespace

import matplotlib
import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.colors import to_hex
from matplotlib.text import Text
from scipy import stats

from mrl.reports.palette import (PHASE_COLOURS, PROBE_COLOURS, base_probe, compact_number, line_style, policy_colour,
                                 probe_colour)

matplotlib.use("Agg")

PROBES = ["grpo", "prp", "sgt", "xgrpo", "hacpo"]
SEED_OFFSETS = (0.0, 0.05, 0.2)  # skewed, so that min-max and the t interval differ


def synthetic_evals(probes=PROBES, seeds=(0, 1, 2), steps=(0, 5, 10), rollouts_per_step=128) -> pd.DataFrame:
    """A+B; A strong on S1, B on S2; accuracy grows with the step, differs by probe and seed, stays inside (0, 1)."""
    rows = []
    for (i, probe), seed, step, policy, split, skill in itertools.product(enumerate(probes), seeds, steps, "AB",
                                                                          ("held-out", "pool"), ("S1", "S2")):
        strong = (policy == "A") == (skill == "S1")
        base = 0.6 if strong else 0.3
        rows.append({"pairing": "A+B", "probe": probe, "seed": seed, "policy": policy, "step": step, "split": split,
                     "skill": skill, "rollouts": step * rollouts_per_step, "zoo_seed": 0,
                     "accuracy": base + 0.005 * step + 0.01 * i + SEED_OFFSETS[seed % len(SEED_OFFSETS)]})
    return pd.DataFrame(rows)


def synthetic_steps(probes=PROBES, seeds=(0, 1, 2), steps=range(1, 11)) -> pd.DataFrame:
    return pd.DataFrame([{"pairing": "A+B", "probe": p, "seed": s, "policy": q, "step": t, "zoo_seed": 0,
                          "reward": 0.5 + 0.01 * t, "peer_kept": 3.0 + s, "peer_samples": 8.0}
                         for p, s, q, t in itertools.product(probes, seeds, "AB", steps)])


def synthetic_dynamics(methods=("grpo", "sgt (lambda=0.1)", "IS-PRP"), seeds=(0, 1, 2)) -> pd.DataFrame:
    return pd.DataFrame([{"method": m, "kappa": 0.5, "seed": s, "policy": q, "step": t, "entropy": 1.0 / (t + 1),
                          "acc shared-easy": 0.5, "acc A-hard/B-easy": 0.1 * t + SEED_OFFSETS[s] / 2,
                          "acc B-hard/A-easy": 0.1 * t + (0.01 if q == "A" else 0.0)}
                         for m, s, q, t in itertools.product(methods, seeds, "AB", range(5))])


def synthetic_plane() -> pd.DataFrame:
    curves = (("grpo", 0.0003, (None,)), ("sgt (lambda)", 0.1, (1, 2, 3)), ("xgrpo (gamma)", 0.0003, (1, 2, 3)),
              ("prp (c, sigma_T=0)", -0.0002, (1, 2, 3)))
    return pd.DataFrame([{"kappa": k, "overlap": 0.8, "curve": c, "knob": v,
                          "label": c.split(" ")[0] + (f" ({c.split('(')[1].split(',')[0].rstrip(')')}={v})"
                                                      if v is not None else ""),
                          "support": s * (v or 1), "instability": 0.2 + 0.05 * (v or 0) + (30 if c[:3] == "prp" else 0)}
                         for k in (0.5, 1.0) for c, s, knobs in curves for v in knobs])


def drawn_label(text: str) -> str:
    """The probe label of a legend text: 'sgt (n=2)', 'sgt (2 runs)', 'gspo_x2 (2 runs, 2x rollouts/step)' -> the
    label before the count."""
    return re.sub(r" \((n=\d+|\d+ (runs|pairs)[^)]*|mean [\d.]+)\)$", "", text)


def labelled_colours(fig) -> dict[str, set[str]]:
    """{label: colours of the lines and markers drawn with it} over every axis (legend entries included)."""
    out: dict[str, set[str]] = {}
    for ax in fig.axes:
        artists = [(line.get_label(), line.get_color()) for line in ax.get_lines()]
        artists += [(c.get_label(), c.get_facecolor()[0]) for c in ax.collections if len(c.get_facecolor())]
        legend = ax.get_legend()
        if legend is not None:
            artists += [(text.get_text(), handle.get_color()) for handle, text
                        in zip(legend.legend_handles, legend.get_texts()) if hasattr(handle, "get_color")]
        for label, colour in artists:
            if not label.startswith("_"):
                out.setdefault(drawn_label(label), set()).add(to_hex(colour))
    for legend in fig.legends:
        for handle, text in zip(legend.legend_handles, legend.get_texts()):
            if hasattr(handle, "get_color"):
                out.setdefault(text.get_text(), set()).add(to_hex(handle.get_color()))
    return out


def band_colours(fig) -> set[str]:
    return {to_hex(c.get_facecolor()[0], keep_alpha=False) for ax in fig.axes for c in ax.collections
            if isinstance(c, PolyCollection) and len(c.get_facecolor())}


def assert_palette(fig, labels):
    """Every label drawn has exactly its palette colour; every band (fill) is some drawn label's colour."""
    colours = labelled_colours(fig)
    drawn = [label for label in labels if label in colours]
    assert drawn, f"no probe drawn among {sorted(colours)}"
    for label in drawn:
        assert colours[label] == {probe_colour(label)}, (label, colours[label])
    assert band_colours(fig) <= {probe_colour(label) for label in labels}, band_colours(fig)
    return colours


def test_every_builtin_probe_has_its_own_colour_and_grpo_is_black():
    """The built-in probes, every one registered (a test file run earlier in this process may have registered a
    probe of its own, which has no colour of the palette)."""
    from mrl.core.choices import BUILTIN_PROBES
    from mrl.core.probes import PROBES as REGISTERED

    assert set(BUILTIN_PROBES) <= set(REGISTERED) and set(BUILTIN_PROBES) <= set(PROBE_COLOURS)
    colours = [PROBE_COLOURS[name] for name in BUILTIN_PROBES]
    assert len(set(colours)) == len(colours)
    assert PROBE_COLOURS["grpo"] == "#000000"


def test_a_probe_the_palette_does_not_name_takes_a_spare_colour_of_its_own():
    """A new probe needs no palette entry: its colour is a spare one, fixed by its name, no built-in probe's."""
    from mrl.reports.palette import SPARE_COLOURS

    colour = probe_colour("my_new_probe (scale=2)")
    assert colour in SPARE_COLOURS and colour == probe_colour("my_new_probe")
    assert not set(SPARE_COLOURS) & set(PROBE_COLOURS.values())


@pytest.mark.parametrize("label, base", [("prp (clip=4.0)", "prp"), ("prp c=2", "prp"), ("hacpo no stepwise", "hacpo"),
                                         ("prp (c, sigma_T=0)", "prp"), ("IS-PRP", "prp"), ("prp_naive", "prp_naive"),
                                         ("gspo_x2 (minibatches=4)", "gspo_x2"), ("sgt (lambda=0.1, eta=0)", "sgt")])
def test_a_variant_or_method_takes_its_base_probes_colour(label, base):
    assert base_probe(label) == base
    assert probe_colour(label) == PROBE_COLOURS[base]
    assert probe_colour("something else") != probe_colour("grpo")


def test_a_variants_line_style_does_not_depend_on_drawing_order():
    labels = ["hacpo (clipping=symmetric, minibatches=4)", "hacpo (clipping=fixed, minibatches=4)", "hacpo",
              "hacpo (minibatches=4)", "hacpo (clipping=none, minibatches=4)", "grpo"]
    styles = {label: line_style(label, labels) for label in labels}
    assert styles["hacpo"] == styles["grpo"] == "-"
    assert len({styles[label] for label in labels if label.startswith("hacpo")}) == 5
    for order in itertools.permutations(labels, 4):
        assert all(line_style(label, labels) == styles[label] for label in order)


def test_the_probe_figures_use_the_shared_palette():
    from mrl.reports.paired import weak_skill_figure
    from mrl.reports.probes import accuracy_figure, rescue_figure, stepwise_clipping_figure

    evals = synthetic_evals()
    assert_palette(accuracy_figure(evals), PROBES)
    assert_palette(rescue_figure(evals), PROBES)
    assert_palette(weak_skill_figure(evals, synthetic_steps()), PROBES)
    clipping = ["hacpo (minibatches=4)", "hacpo (clipping=fixed, minibatches=4)"]
    fig = stepwise_clipping_figure(synthetic_steps(clipping), 0.2, 0.025, 4)
    assert_palette(fig, clipping)
    styles = {drawn_label(line.get_label()): line.get_linestyle() for line in fig.axes[1].get_lines()
              if not line.get_label().startswith("_")}
    assert styles[clipping[0]] != styles[clipping[1]]


def test_a_knob_variant_has_its_probes_colour_and_its_own_line_style():
    from mrl.reports.paired import weak_skill_figure

    probes = ["grpo", "hacpo", "hacpo (minibatches=4)"]
    fig = weak_skill_figure(synthetic_evals(probes), synthetic_steps(probes))
    assert_palette(fig, probes)
    styles = {}
    for line in fig.axes[0].get_lines():
        styles[drawn_label(line.get_label())] = line.get_linestyle()
    assert styles["hacpo"] != styles["hacpo (minibatches=4)"]
    grpo = [line for line in fig.axes[0].get_lines() if line.get_label().startswith("grpo")]
    assert grpo[0].get_zorder() > max(line.get_zorder() for line in fig.axes[0].get_lines()
                                      if not line.get_label().startswith("grpo"))


def test_the_bandit_figures_use_the_shared_palette_and_the_plane_reads_on_log_axes():
    from mrl.reports.bandit import dynamics_figure, plane_figure

    fig = plane_figure(synthetic_plane())
    assert_palette(fig, ["grpo", "sgt (lambda)", "xgrpo (gamma)", "prp (c, sigma_T=0)"])
    by_title = {ax.get_title(): ax for ax in fig.axes}
    big = next(ax for title, ax in by_title.items() if "every method" in title)
    near = next(ax for title, ax in by_title.items() if "near GRPO" in title)
    small = [ax for title, ax in by_title.items() if title.startswith("kappa = 0.5")]
    assert (big.get_xscale(), big.get_yscale()) == ("log", "log")
    assert small and all((ax.get_xscale(), ax.get_yscale()) == ("log", "log") for ax in small)
    assert (near.get_xscale(), near.get_yscale()) == ("linear", "log")  # a loss, S < 0, shows here
    for ax in (big, near):
        star = [c for c in ax.collections if c.get_label() == "grpo"]
        assert star and to_hex(star[0].get_facecolor()[0]) == "#000000"
        others = [a for a in [*ax.collections, *ax.get_lines()] if a is not star[0]]
        assert star[0].get_zorder() > max(a.get_zorder() for a in others)
    texts = [t for t in big.texts + near.texts if "=" in t.get_text()]
    fig.canvas.draw()
    boxes = [Text.get_window_extent(t) for t in texts]  # the text alone, not its leader line
    assert len(boxes) == 9 and not any(a.overlaps(b) for a, b in itertools.combinations(boxes, 2)), "labels overlap"

    methods = ["grpo", "sgt (lambda=0.1)", "IS-PRP"]
    assert_palette(dynamics_figure(synthetic_dynamics(methods)), methods)


def test_the_substrate_figures_use_the_policy_and_phase_colours():
    from mrl.reports.substrate import mwra_timeline_figure, mwra_timeline_inputs, warmup_figure, warmup_figure_inputs

    zoo = {name: SimpleNamespace(record={"warmup_loss": [3.0, 2.0, 1.5]},
                                 family=SimpleNamespace(arch="gpt2", tokenizer="bpe")) for name in "ABC"}
    accuracy = pd.DataFrame([{"policy": p, "split": "held-out", "skill": s, "accuracy": 0.5}
                             for p in "ABC" for s in ("S1", "S2")])
    fig = warmup_figure(**warmup_figure_inputs(accuracy, zoo))
    assert [to_hex(line.get_color()) for line in fig.axes[0].get_lines()] == [policy_colour(p) for p in "ABC"]
    bars = {to_hex(patch.get_facecolor(), keep_alpha=False) for patch in fig.axes[1].patches if patch.get_height() > 0}
    assert bars == {policy_colour(p) for p in "ABC"}

    def timeline(origin):
        rows = [{"worker": w, "phase": "evaluate", "start": origin, "end": origin + 0.2} for w in "AB"]
        rows += [{"worker": w, "phase": phase, "start": origin + 0.2 + 0.1 * k, "end": origin + 0.25 + 0.1 * k}
                 for w in "AB" for k, phase in enumerate(["rollout", "update"] * 3)]
        return {"timeline": rows, "wall": 1.0, "startup": 0.5}
    fig = mwra_timeline_figure(**mwra_timeline_inputs({"inline": timeline(0.09), "process": timeline(8.4)}))
    for ax in fig.axes:
        starts = [path.vertices[:, 0].min() for c in ax.collections for path in c.get_paths()]
        assert min(starts) == pytest.approx(0.0)  # each backend from its own first step
        assert {to_hex(c.get_facecolor()[0]) for c in ax.collections} == set(PHASE_COLOURS.values())
    assert fig.axes[0].get_shared_x_axes().joined(fig.axes[0], fig.axes[1])
    assert [t.get_text() for t in fig.legends[0].get_texts()] == list(PHASE_COLOURS)


@pytest.mark.parametrize("value, text", [(0, "0"), (950, "950"), (12000, "12k"), (12500, "12.5k"),
                                         (1_200_000, "1.2M"), (1000012500, "1G"), (0.25, "0.25")])
def test_count_axes_read_as_compact_numbers(value, text):
    assert compact_number(value) == text


def test_a_rollouts_axis_has_no_offset_or_scientific_labels():
    from mrl.reports.probes import accuracy_figure

    fig = accuracy_figure(synthetic_evals(steps=(0, 5000, 10000), rollouts_per_step=128))  # up to 1.28M rollouts
    fig.canvas.draw()
    ax = fig.axes[0]
    labels = [t.get_text() for t in ax.get_xticklabels() if t.get_text()]
    assert "1.2M" in labels or "1M" in labels, labels
    assert not any("e" in label or "\N{MINUS SIGN}" in label for label in labels), labels
    assert ax.xaxis.get_offset_text().get_text() == ""


def bands_at(fig_axes, x) -> list[tuple[float, float]]:
    """(low, high) of every filled band at x (the band's polygon's lowest and highest vertex there)."""
    out = []
    for ax in fig_axes:
        for collection in ax.collections:
            if isinstance(collection, PolyCollection):
                for path in collection.get_paths():
                    at = path.vertices[np.isclose(path.vertices[:, 0], x)]
                    if len(at):
                        out.append((at[:, 1].min(), at[:, 1].max()))
    return out


def title_text(fig) -> str:
    """The figure's suptitle as one line (mrl.reports.palette.figure_title wraps it to the figure's width)."""
    return " ".join(fig._suptitle.get_text().split())


def test_a_title_wider_than_its_figure_is_wrapped_to_it():
    from mrl.reports.probes import rescue_figure

    fig = rescue_figure(synthetic_evals(["grpo", "sgt"]), setting="arith-ops, zoo seed 0")
    fig.canvas.draw()
    title = fig._suptitle.get_window_extent(fig.canvas.get_renderer())
    assert "\n" in fig._suptitle.get_text() and title.width <= fig.bbox.width
    assert title_text(fig).startswith("arith-ops, zoo seed 0: Rescue skill: accuracy on the skill each policy lacks")


def t_interval_95(values) -> tuple[float, float]:
    values = np.asarray(values, dtype=float)
    return stats.t.interval(0.95, len(values) - 1, loc=values.mean(), scale=stats.sem(values))


def test_a_band_is_the_t_interval_of_the_mean_over_seeds_not_min_max():
    from mrl.reports.paired import weak_skill_figure
    from mrl.reports.probes import accuracy_figure

    evals = synthetic_evals(["grpo", "sgt"])
    # accuracy_figure, panel A+B: policy A, held-out overall accuracy of grpo at step 5 (640 rollouts)
    fig = accuracy_figure(evals)
    assert "95% t interval of the mean over 3 seeds" in title_text(fig)
    overall = evals[(evals.probe == "grpo") & (evals.policy == "A") & (evals.split == "held-out") & (evals.step == 5)]
    values = overall.groupby("seed").accuracy.mean()
    expected = t_interval_95(values)
    bands = bands_at([fig.axes[0]], 640)
    assert any(np.allclose(band, expected) for band in bands), (bands, expected)
    assert not any(np.allclose(band, (values.min(), values.max())) for band in bands)
    # weak_skill_figure, A's weak skill S2
    fig = weak_skill_figure(evals, synthetic_steps(["grpo", "sgt"]))
    weak = evals[(evals.probe == "sgt") & (evals.policy == "A") & (evals.split == "held-out") & (evals.skill == "S2")
                 & (evals.step == 5)]
    assert any(np.allclose(band, t_interval_95(weak.accuracy)) for band in bands_at([fig.axes[0]], 5))


def test_below_three_runs_the_weak_skill_figure_draws_each_run_not_a_t_band():
    from mrl.reports.paired import weak_skill_figure

    evals = synthetic_evals(["grpo", "sgt"], seeds=(0, 1))
    fig = weak_skill_figure(evals, synthetic_steps(["grpo", "sgt"]), setting="arith-forms")
    title = fig._suptitle.get_text()
    assert title.startswith("arith-forms, ") and "thin lines: each run" in title
    accuracy, difference = fig.axes[0], fig.axes[1]
    assert not accuracy.collections and not difference.collections          # no band at n = 2
    thin = [line for line in accuracy.get_lines() if line.get_linewidth() < 1.0]
    assert len(thin) == 2 * 2                                                # two probes x two runs
    assert any("sgt (2 runs)" == line.get_label() for line in accuracy.get_lines())


def test_the_dynamics_band_is_the_t_interval_over_seeds_of_the_policies_mean():
    from mrl.core.bandit.dynamics import rescue_type
    from mrl.reports.bandit import dynamics_figure

    runs = synthetic_dynamics(["grpo"])
    fig = dynamics_figure(runs)
    assert "95% t interval over 3 seeds" in fig._suptitle.get_text()
    at = runs[runs.step == 2]
    rescue = at[f"acc {rescue_type('A')}"].where(at.policy == "A", at[f"acc {rescue_type('B')}"])
    per_seed = rescue.groupby(at.seed).mean()
    assert any(np.allclose(band, t_interval_95(per_seed)) for band in bands_at([fig.axes[0]], 2))


def test_one_seed_draws_no_band_and_says_so():
    from mrl.reports.probes import accuracy_figure

    fig = accuracy_figure(synthetic_evals(seeds=(0,)))
    assert "one seed: no band" in title_text(fig)
    assert all(high - low < 1e-12 for low, high in bands_at(fig.axes, 640))


def test_accuracy_axes_fit_their_data_and_say_so():
    from mrl.reports.probes import accuracy_figure

    fig = accuracy_figure(synthetic_evals())
    low, high = fig.axes[0].get_ylim()
    assert low > 0.1 and high < 0.95
    assert "fitted" in fig.axes[0].get_ylabel()


@pytest.mark.parametrize("wanted", [[0, 0, 0], [0, 5, 5.2], [1, 2, 3], [0, 0.5, 10, 10.2], [3, 1, 2]])
def test_stacked_labels_keep_their_order_and_never_overlap(wanted):
    from mrl.reports.bandit import stack

    placed = stack(wanted, 1.0)
    assert len(placed) == len(wanted)
    assert all(b - a >= 1.0 - 1e-9 for a, b in zip(placed, placed[1:]))
    if all(b - a >= 1.0 for a, b in zip(wanted, wanted[1:])):
        assert placed == pytest.approx(wanted)  # already apart: nothing moves
    assert np.mean(placed) == pytest.approx(np.mean(wanted))  # blocks centred on what they want


def test_log_axis_minor_labels_only_within_a_decade():
    """Over several decades (the warm-up loss) minor ticks stay unlabelled, their labels would overlap; within one
    decade (the plane's zoom) they carry the decimals, there being at most one major tick."""
    from mrl.reports.palette import plain_log_axis

    for (low, high), labelled in [((5e-4, 6.0), False), ((0.18, 0.45), True)]:
        fig, ax = plt.subplots()
        ax.plot([0, 1], [low, high])
        ax.set_yscale("log")
        plain_log_axis(ax.yaxis)
        fig.canvas.draw()
        texts = [t.get_text() for t in ax.yaxis.get_minorticklabels() if low <= t.get_position()[1] <= high]
        assert any(texts) == labelled, texts
        plt.close(fig)


def test_phase_colours_are_no_probes_and_policies_colours():
    from mrl.reports.palette import POLICY_COLOURS, PROBE_COLOURS

    assert not set(PHASE_COLOURS.values()) & (set(PROBE_COLOURS.values()) | set(POLICY_COLOURS.values()))


def test_the_thl_heatmaps_share_one_colour_bar_and_name_metrics_in_words():
    from mrl.reports.substrate import THL_METRIC_NAMES, thl_heatmaps

    table = pd.DataFrame([{"corpus": "task", "source": s, "receiver": r, "inexact_rate": 0.1, "coarseness": 0.5,
                           "round_trip_failure_rate": 0.0} for s in "AB" for r in "AB"])
    fig = thl_heatmaps(table)
    heatmaps = [ax for ax in fig.axes if ax.get_title()]
    assert len(fig.axes) == len(heatmaps) + 1                                   # one colour bar
    assert [ax.get_title() for ax in heatmaps] == [f"{name} (task corpus)" for name in THL_METRIC_NAMES.values()]
    assert not any("_" in ax.get_title() for ax in heatmaps)


def test_methods_flat_at_zero_are_named_in_the_panel():
    from mrl.reports.bandit import dynamics_figure

    runs = synthetic_dynamics(["grpo", "xgrpo (gamma=0.5)", "sgt (lambda=0.1)"])
    flat = runs.method != "sgt (lambda=0.1)"
    runs.loc[flat, ["acc A-hard/B-easy", "acc B-hard/A-easy"]] = 0.0
    fig = dynamics_figure(runs)
    notes = [text.get_text() for text in fig.axes[0].texts]
    assert notes == ["at or below 0.01 throughout:\ngrpo\nxgrpo (gamma=0.5)"]


def test_a_variant_that_keeps_every_peer_sample_is_named_not_drawn():
    from mrl.reports.probes import stepwise_clipping_figure

    clipping = ["hacpo (minibatches=4)", "hacpo (clipping=none, minibatches=4)"]
    steps = synthetic_steps(clipping)
    steps.loc[steps.probe == clipping[1], "peer_kept"] = steps.peer_samples
    right = stepwise_clipping_figure(steps, 0.2, 0.025, 4).axes[1]
    drawn = {drawn_label(line.get_label()) for line in right.get_lines() if len(line.get_xdata())
             and not line.get_label().startswith("_")}
    assert drawn == {clipping[0]}
    named = [text.get_text() for text in right.get_legend().get_texts()]
    assert f"{clipping[1]}: keeps all (1.0, not drawn)" in named
    assert right.get_ylim()[1] < 1.0                       # the range where the variants differ, not squashed


def test_the_poison_figure_draws_each_seed_and_no_interval_below_three():
    from mrl.reports.beyond import poison_figure, poison_figure_inputs

    numbers = pd.DataFrame([
        {"policy": "A", "probe": "sgt", "arm": "honest peer", "re-verified": False, "runs": 2, "weak Δ": None,
         "weak units": ()},
        {"policy": "A", "probe": "sgt", "arm": "forged_success, trusting", "re-verified": False, "runs": 2,
         "weak Δ": (0.01, -0.1, 0.12, False), "weak units": (-0.02, 0.04)}])
    ax = poison_figure(**poison_figure_inputs(numbers)).axes[0]
    ticks = [line for line in ax.get_lines() if line.get_marker() == "|"]
    assert [list(line.get_xdata()) for line in ticks] == [[-0.02, 0.04]]
    bars = [line for line in ax.get_lines() if line.get_marker() in ("None", "") and len(set(line.get_xdata())) == 2]
    assert not bars                                        # the axvline at 0 is the only plain line
    assert "no interval" in ax.get_title()
