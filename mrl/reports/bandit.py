"""Figures of the bandit analysis: the stability-support plane and the dynamics."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from mrl.bandit.dynamics import rescue_type
from mrl.reports.palette import line_style, probe_colour, probe_dashes, probe_palette
from mrl.reports.probes import t_band


SUPPORT_FLOOR = 1e-4
"""support gains at or below this (none, or a negative one of order 1e-4) are drawn on the floor, hollow"""


def knob_text(curve: str, label: str) -> str:
    """The swept knob's value of a point: curve 'prp (sigma_T, mu_T=0)', label 'prp (c=inf, sigma_T=0.5)' ->
    'sigma_T=0.5'."""
    knob = curve.split("(")[1].rstrip(")").split(",")[0].strip() if "(" in curve else ""
    parts = [part.strip() for part in label.split("(")[-1].rstrip(")").split(",")]
    return next((part for part in parts if part.startswith(knob + "=")), "")


def _plane_panel(ax, plane: pd.DataFrame, curves: list[str], annotate: bool) -> None:
    """One kappa: support (log x, floored) against instability (log y), a line per curve over its knob."""
    for curve in sorted(curves, key=lambda c: c == "grpo"):  # grpo last: on top
        points = plane[plane.curve == curve].sort_values("support")
        colour, style = probe_colour(curve), line_style(curve, curves)
        x = points.support.clip(lower=SUPPORT_FLOOR)
        floored = points.support <= SUPPORT_FLOOR
        if curve == "grpo":
            ax.scatter(x, points.instability, marker="*", s=160, color=colour, zorder=5, label=curve)
            continue
        ax.plot(x, points.instability, ls=style, lw=1.2, color=colour, zorder=3, label=curve)
        ax.scatter(x[~floored], points.instability[~floored], s=14, color=colour, zorder=4)
        ax.scatter(x[floored], points.instability[floored], s=14, facecolor="white", edgecolor=colour, zorder=4)
        if annotate:
            for offset, (_, point) in enumerate(points.iterrows()):
                ax.annotate(knob_text(curve, point.label), (max(point.support, SUPPORT_FLOOR), point.instability),
                            fontsize=6, color=colour, xytext=(4, -3 + 6 * (offset % 2)), textcoords="offset points")
    ax.axvspan(SUPPORT_FLOOR * 0.7, SUPPORT_FLOOR * 1.4, color="0.93", zorder=0)
    ax.set(xscale="log", yscale="log")
    ax.grid(alpha=0.3, which="both", lw=0.4)


def plane_figure(plane: pd.DataFrame, headline: float | None = None):
    """The stability-support plane: one large panel at the headline support overlap kappa (default: the largest),
    small multiples for the others. x: support gain S on A-hard prompts (log; gains <= 1e-4, i.e. none, sit on
    the grey floor, hollow), y: instability (log); a line per method over its knob (the knob's value next to
    its point on the large panel), colours by probe (mrl.reports.palette), GRPO a black star on top."""
    kappas = sorted(plane.kappa.unique())
    headline = max(kappas) if headline is None else headline
    others = [k for k in kappas if k != headline]
    curves = list(dict.fromkeys(plane.curve))
    fig = plt.figure(figsize=(13, 7.5))
    grid = fig.add_gridspec(max(len(others), 1), 3, width_ratios=[2.2, 2.2, 1.3])
    big = fig.add_subplot(grid[:, :2])
    _plane_panel(big, plane[plane.kappa == headline], curves, annotate=True)
    overlap = plane[plane.kappa == headline].overlap.iloc[0] if "overlap" in plane else None
    big.set(title=f"kappa = {headline:g}" + (f" (B mass on A's support {overlap:.2f})" if overlap is not None else ""),
            xlabel=f"support gain S on A-hard prompts (log; <= {SUPPORT_FLOOR:g} drawn on the grey floor)",
            ylabel="instability: Tr Cov / ||g*||^2 + bias^2 on A-solvable prompts (log)")
    big.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="method (knob)", title_fontsize=8)
    small = None
    for row, kappa in enumerate(others):
        small = fig.add_subplot(grid[row, 2], sharex=big, sharey=small or big)
        _plane_panel(small, plane[plane.kappa == kappa], curves, annotate=False)
        small.set_title(f"kappa = {kappa:g}", fontsize=8)
        small.tick_params(labelsize=7)
    fig.suptitle("Stability-support plane of the bandit (learner A; reconstruction of the MRL analysis)")
    fig.tight_layout()
    return fig


def dynamics_figure(runs: pd.DataFrame):
    """Mean over seeds and both policies, per method: held-out accuracy on the rescue type (the prompts a
    policy cannot solve and its peer can), on the prompts it can solve, and the policy entropy."""
    frame = runs.copy()
    is_a = frame.policy == "A"
    frame["rescue type"] = frame[f"acc {rescue_type('A')}"].where(is_a, frame[f"acc {rescue_type('B')}"])
    peer_rescue = frame[f"acc {rescue_type('B')}"].where(is_a, frame[f"acc {rescue_type('A')}"])
    frame["own-solvable"] = (frame["acc shared-easy"] + peer_rescue) / 2  # A solves shared-easy and B's rescue type
    long = frame.melt(id_vars=["method", "kappa", "seed", "policy", "step"],
                      value_vars=["rescue type", "own-solvable", "entropy"], var_name="metric")
    methods = list(dict.fromkeys(long.method))
    seeds = long.seed.nunique()
    grid = sns.relplot(data=long, x="step", y="value", hue="method", hue_order=methods, palette=probe_palette(methods),
                       style="method", style_order=methods, dashes=probe_dashes(methods), col="metric", row="kappa",
                       kind="line", errorbar=t_band if seeds > 1 else None, height=2.8, aspect=1.2,
                       facet_kws={"sharey": "col"})
    band = f"band: 95% t interval over {seeds} seeds x 2 policies" if seeds > 1 else "one seed: no band"
    grid.figure.suptitle(f"Bandit dynamics: held-out accuracy and entropy (mean over seeds and both policies; {band})",
                         y=1.02)
    return grid.figure
