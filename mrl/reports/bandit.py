"""Figures of the bandit analysis: the stability-support plane and the dynamics."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from mrl.bandit.dynamics import rescue_type


def plane_figure(plane: pd.DataFrame):
    """One panel per support overlap kappa: support S (x, symlog) against instability (y, log),
    each curve one method over its knob, the knob's value printed next to its point."""
    kappas = sorted(plane.kappa.unique())
    curves = list(dict.fromkeys(plane.curve))
    palette = dict(zip(curves, sns.color_palette("tab10", len(curves))))
    fig, axes = plt.subplots(1, len(kappas), figsize=(4.2 * len(kappas), 4.2), sharex=True, sharey=True,
                             squeeze=False)
    for ax, kappa in zip(axes[0], kappas):
        for curve in curves:
            points = plane[(plane.kappa == kappa) & (plane.curve == curve)]
            ax.plot(points.support, points.instability, marker="o", ms=4, color=palette[curve], label=curve)
            for _, point in points.iterrows():
                if pd.notna(point.knob):
                    ax.annotate(f"{point.knob:g}", (point.support, point.instability), fontsize=6,
                                xytext=(2, 2), textcoords="offset points", color=palette[curve])
        overlap = plane[plane.kappa == kappa].overlap.iloc[0]
        ax.set_xscale("symlog", linthresh=1e-3)
        ax.set(yscale="log", title=f"kappa = {kappa:g} (B mass on A's support {overlap:.2f})",
               xlabel="support gain S on A-hard prompts")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("instability: Tr Cov / ||g*||^2 + bias^2 on A-solvable prompts")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1))
    fig.suptitle("Stability-support plane of the bandit (learner A; reconstruction of the MRL analysis)", y=1.02)
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
    grid = sns.relplot(data=long, x="step", y="value", hue="method", col="metric", row="kappa", kind="line",
                       errorbar=("pi", 100), height=2.8, aspect=1.2, facet_kws={"sharey": "col"})
    grid.figure.suptitle("Bandit dynamics: held-out accuracy and entropy (mean over seeds and both policies)",
                         y=1.02)
    return grid.figure
