"""Figures and prose of the bandit analysis: the stability-support plane and the dynamics."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.textpath import TextPath

from mrl.core.bandit.dynamics import rescue_type
from mrl.core.bandit.estimators import METHODS, Method
from mrl.reports.paired import curve_band
from mrl.reports.palette import DECIMAL, base_probe, fit_accuracy_axis, line_style, plain_log_axis, probe_colour

SUPPORT_FLOOR = 1e-4
"""on the log axes, support gains at or below this (none, or a loss) are drawn on the grey floor, hollow"""
ZOOM_SUPPORT, ZOOM_INSTABILITY = 10.0, 3.0
"""the zoom panel holds the headline points within these factors of GRPO's support and instability"""
BASELINE = "grpo"
FLAT = 0.01
"""an accuracy curve never above this is flat at 0: the panel names the methods drawn there on top of each other"""


def knob_text(curve: str, label: str) -> str:
    """The swept knob's value of a point: curve 'prp (sigma_T, mu_T=0)', label 'prp (c=inf, sigma_T=0.5)' ->
    'sigma_T=0.5'."""
    knob = curve.split("(")[1].rstrip(")").split(",")[0].strip() if "(" in curve else ""
    parts = [part.strip() for part in label.split("(")[-1].rstrip(")").split(",")]
    return next((part for part in parts if part.startswith(knob + "=")), "")


def place_labels(ax, entries: list[tuple], obstacles=(), fontsize: float = 6.5, gap: float = 4.0,
                 marker: float = 4.0) -> None:
    """Writes each text of `entries` [(x, y, text, colour, side)] beside its point (data coordinates; side
    'right' or 'left', switched where the text would leave the axes; just above the point's level, off a curve
    through it). A text first steps off any marker of
    `obstacles` [(x, y)] it covers (radius `marker` points); then the texts whose extents overlap horizontally (a
    column) are stacked in their points' vertical order, as close to where they want to be as they can be without
    overlapping (`stack`), so no two texts overlap and leader lines (drawn to a moved text) do not cross.
    Deterministic. Call it once the axes' limits and the figure's layout are final (it works in display units)."""
    fig = ax.figure
    frame = ax.get_window_extent()
    scale = fig.dpi / 72.0
    radius = marker * scale
    height = 1.25 * fontsize * scale
    fixed = [tuple(ax.transData.transform(point)) for point in obstacles]

    def covers(left, width, centre, own):
        return [oy for ox, oy in fixed if left < ox + radius and ox - radius < left + width
                and abs(centre - oy) < radius + height / 2 and (ox, oy) != tuple(own)]

    boxes = []  # [left, width, wanted centre, anchor x, anchor y, side]
    for x, y, text, _colour, side in entries:
        px, py = ax.transData.transform((x, y))
        width = TextPath((0, 0), text, size=fontsize).get_extents().width * scale
        if side == "right" and px + gap + width > frame.x1:
            side = "left"
        elif side == "left" and px - gap - width < frame.x0:
            side = "right"
        left = px + gap if side == "right" else px - gap - width
        centre = py + height / 2  # above the point's level: off the curve through it
        for _ in range(len(fixed)):
            covered = covers(left, width, centre, (px, py))
            if not covered:
                break
            oy = covered[0]
            centre = oy + radius + height / 2 + 0.5 if centre >= oy else oy - radius - height / 2 - 0.5
        boxes.append([left, width, centre, px, py, side])
    columns: list[list[int]] = []
    for index, box in enumerate(boxes):
        joined = [c for c in columns if any(boxes[k][0] < box[0] + box[1] and box[0] < boxes[k][0] + boxes[k][1]
                                            for k in c)]
        columns = [c for c in columns if c not in joined] + [[index] + [k for c in joined for k in c]]
    for column in columns:
        column.sort(key=lambda k: (boxes[k][4], k))
        for k, centre in zip(column, stack([boxes[k][2] for k in column], height + 1.0)):
            boxes[k][2] = centre
    for box in boxes:  # a stacked text on a marker: the other side of its point, where that side is clear
        left, width, centre, px, py, side = box
        if covers(left, width, centre, (px, py)):
            other = px - gap - width if side == "right" else px + gap
            clear = frame.x0 <= other and other + width <= frame.x1 and not covers(other, width, centre, (px, py))
            if clear and not any(b is not box and other < b[0] + b[1] and b[0] < other + width
                                 and abs(b[2] - centre) < height for b in boxes):
                box[0], box[5] = other, "left" if side == "right" else "right"
    for (x, y, text, colour, _side), (left, width, centre, px, py, side) in zip(entries, boxes):
        tx = left if side == "right" else left + width
        dy = centre - py
        leader = {"arrowstyle": "-", "color": colour, "lw": 0.5, "shrinkA": 0, "shrinkB": 2} \
            if abs(dy - height / 2) > 0.6 * height else None
        ax.annotate(text, (x, y), xytext=((tx - px) / scale, dy / scale), textcoords="offset points", fontsize=fontsize,
                    color=colour, ha="left" if side == "right" else "right", va="center", arrowprops=leader, zorder=6,
                    bbox={"boxstyle": "square,pad=0.05", "fc": "white", "ec": "none", "alpha": 0.7})


def stack(wanted: list[float], step: float) -> list[float]:
    """Positions for texts of height `step` wanted at `wanted` (in the order they must keep, bottom to top): the
    closest in least squares that keep them `step` apart. Touching texts form a block centred on its members'
    wanted mean, blocks merged while they overlap (pool adjacent violators)."""
    blocks: list[list[float]] = []  # [sum of (wanted - offset in block), members]
    for value in wanted:
        blocks.append([value, 1])
        while len(blocks) > 1:
            below, above = blocks[-2], blocks[-1]
            if below[0] / below[1] + below[1] * step <= above[0] / above[1]:
                break
            blocks.pop()
            below[0] += above[0] - below[1] * step * above[1]
            below[1] += above[1]
    out = []
    for total, members in blocks:
        out += [total / members + k * step for k in range(int(members))]
    return out


def _curve_points(plane: pd.DataFrame, curve: str) -> pd.DataFrame:
    """A curve's points in the order of its knob (a knob sweep is a path through the plane), else as listed."""
    points = plane[plane.curve == curve]
    return points.sort_values("knob", kind="stable") if "knob" in points else points


def _draw_curves(ax, plane: pd.DataFrame, curves: list[str], floor: bool) -> None:
    """A line per curve over its knob, a marker per point (hollow where floored), GRPO a black star on top."""
    for curve in curves:
        points = _curve_points(plane, curve)
        if points.empty:
            continue
        colour, style = probe_colour(curve), line_style(curve, curves)
        x = points.support.clip(lower=SUPPORT_FLOOR) if floor else points.support
        if curve == BASELINE:
            ax.scatter(x, points.instability, marker="*", s=260, color=colour, edgecolor="white", lw=0.8, zorder=8,
                       label=curve)
            continue
        if len(points) > 1:
            ax.plot(x, points.instability, ls=style, lw=1.2, color=colour, zorder=3, label=curve)
        floored = (points.support <= SUPPORT_FLOOR) if floor else np.zeros(len(points), bool)
        ax.scatter(x[~floored], points.instability[~floored], s=18, color=colour, zorder=4,
                   label=curve if len(points) == 1 else None)
        ax.scatter(x[floored], points.instability[floored], s=18, facecolor="white", edgecolor=colour, zorder=4)


def _curve_knob(curve: str) -> tuple[str, str]:
    """('sigma_T', 'mu_T=0') for 'prp (sigma_T, mu_T=0)': the knob a curve sweeps and what else names it."""
    inside = curve.split("(")[1].rstrip(")") if "(" in curve else ""
    knob, _, rest = inside.partition(",")
    return knob.strip(), rest.strip()


def _label_entries(plane: pd.DataFrame, curves: list[str], floor: bool) -> list[tuple]:
    """One text per distinct point: its swept knob ('gamma=0.5'), with the rest of the curve's name where two curves
    of one probe sweep the same knob ('sigma_T=0.5, mu_T=0'); points two curves share get one text
    ('c=inf / sigma_T=0'). A base probe's second curve labels on the left, so two curves of one colour read apart."""
    texts: dict[tuple, list] = {}
    for curve in curves:
        same = [c for c in curves if base_probe(c) == base_probe(curve)]
        side = "left" if same.index(curve) % 2 else "right"
        knob, rest = _curve_knob(curve)
        ambiguous = sum(_curve_knob(c)[0] == knob for c in same) > 1
        for _, point in _curve_points(plane, curve).iterrows():
            text = knob_text(curve, point.label)
            if not text:
                continue
            text += f", {rest}" if ambiguous and rest else ""
            x = max(point.support, SUPPORT_FLOOR) if floor else point.support
            key = (round(float(point.support), 12), round(float(point.instability), 9))
            if key in texts:
                if text not in texts[key][2]:
                    texts[key][2].append(text)
            else:
                texts[key] = [x, point.instability, [text], probe_colour(curve), side]
    return [(x, y, " / ".join(shown), colour, side) for x, y, shown, colour, side in texts.values()]


def _zoom_points(points: pd.DataFrame) -> pd.DataFrame:
    """The headline points near GRPO's: support within ZOOM_SUPPORT times GRPO's (either sign), instability within
    ZOOM_INSTABILITY times; empty without GRPO or with fewer than three such points."""
    grpo = points[points.curve == BASELINE]
    if grpo.empty:
        return points.iloc[:0]
    support = max(abs(float(grpo.support.iloc[0])), SUPPORT_FLOOR)
    near = points[(points.support.abs() <= ZOOM_SUPPORT * support)
                  & (points.instability <= ZOOM_INSTABILITY * float(grpo.instability.iloc[0]))]
    return near if len(near) >= 3 else points.iloc[:0]


def plane_figure(plane: pd.DataFrame, headline: float | None = None, draws: int | None = None):
    """The stability-support plane. Top left, large: the headline support overlap kappa (default: the largest),
    every method; x: support gain S on A-hard prompts (log; gains <= 1e-4, i.e. none or a loss, on the grey floor,
    hollow), y: instability (log), a line per method over its knob with the knob's value beside each point. Top
    right: the same kappa near GRPO (the points within 10x GRPO's support and 3x its instability, the dashed box on
    the left) with a linear support axis, where a loss (S < 0) shows. Bottom: the other kappas, small, on the large
    panel's axes. Colours by probe (mrl.reports.palette), a base probe's curves told apart by line style; GRPO a
    black star on top. draws: the Monte Carlo gradient draws behind each point, named in the title."""
    kappas = sorted(plane.kappa.unique())
    headline = max(kappas) if headline is None else headline
    if headline not in kappas:
        raise ValueError(f"plane_figure: headline kappa {headline!r} is not in the plane's kappas {kappas}")
    others = [k for k in kappas if k != headline]
    curves = list(dict.fromkeys(plane.curve))
    top = plane[plane.kappa == headline]
    zoom = _zoom_points(top)

    fig = plt.figure(figsize=(14, 10.5))
    rows = fig.add_gridspec(2, 1, height_ratios=[2.1, 1], hspace=0.3, left=0.07, right=0.98, top=0.92, bottom=0.13)
    upper = rows[0].subgridspec(1, 2, width_ratios=[1.35, 1] if len(zoom) else [1, 0.001], wspace=0.22)
    big = fig.add_subplot(upper[0])
    xlim = (SUPPORT_FLOOR / 1.6, max(plane.support.max(), SUPPORT_FLOOR) * 2.0)
    ylim = (plane.instability.min() / 1.3, plane.instability.max() * 1.7)
    _draw_curves(big, top, curves, floor=True)
    overlap = f" (B mass on A's support {top.overlap.iloc[0]:.2f})" if "overlap" in top else ""
    big.set(title=f"kappa = {headline:g}{overlap}: every method", xscale="log", yscale="log", xlim=xlim, ylim=ylim,
            xlabel=f"support gain S on A-hard prompts (log; S <= {SUPPORT_FLOOR:g}, none or a loss, on the grey "
                   "floor, hollow)",
            ylabel="instability: Tr Cov / ||g*||^2 + bias^2 on A-solvable prompts (log)")
    small_axes = []
    if others:
        lower = rows[1].subgridspec(1, max(len(others), 3), wspace=0.18)
        for index, kappa in enumerate(others):
            ax = fig.add_subplot(lower[index], sharex=big, sharey=big)
            _draw_curves(ax, plane[plane.kappa == kappa], curves, floor=True)
            ax.set_title(f"kappa = {kappa:g}", fontsize=9)
            ax.tick_params(labelsize=7)
            ax.set_xlabel("support gain S (log)", fontsize=8)
            if index == 0:
                ax.set_ylabel("instability (log)", fontsize=8)
            small_axes.append(ax)
    for ax in [big, *small_axes]:
        ax.axvspan(xlim[0], SUPPORT_FLOOR * 1.3, color="0.92", zorder=0, lw=0)
        ax.grid(alpha=0.3, which="major", lw=0.4)
        plain_log_axis(ax.xaxis)
        plain_log_axis(ax.yaxis)
    labelled = top
    if len(zoom):
        near = fig.add_subplot(upper[1])
        _draw_curves(near, zoom, curves, floor=False)
        span = zoom.support.max() - zoom.support.min()
        near.set(xlim=(zoom.support.min() - 0.08 * span, zoom.support.max() + 0.35 * span), yscale="log",
                 ylim=(zoom.instability.min() / 1.05, zoom.instability.max() * 1.05),
                 title=f"kappa = {headline:g} near GRPO (the dashed box), linear support axis",
                 xlabel="support gain S on A-hard prompts (linear: S < 0 is a loss)", ylabel="instability (log)")
        near.axvline(0.0, color="0.6", lw=0.8, zorder=1)
        near.xaxis.set_major_formatter(DECIMAL)
        near.tick_params(axis="x", labelsize=8)
        plain_log_axis(near.yaxis)
        near.grid(alpha=0.3, which="both", lw=0.4)
        box_x = (xlim[0] * 1.15, max(zoom.support.max(), SUPPORT_FLOOR) * 1.5)
        box_y = (zoom.instability.min() / 1.12, zoom.instability.max() * 1.12)
        big.add_patch(Rectangle((box_x[0], box_y[0]), box_x[1] - box_x[0], box_y[1] - box_y[0], fill=False,
                                ls="--", lw=0.9, edgecolor="0.35", zorder=2))
        big.annotate("zoomed at right", (box_x[1], box_y[1]), xytext=(3, 3), textcoords="offset points",
                     fontsize=7, color="0.35")
        place_labels(near, _label_entries(zoom, curves, floor=False), list(zip(zoom.support, zoom.instability)))
        labelled = top.drop(index=zoom.index)
    place_labels(big, _label_entries(labelled, curves, floor=True),
                 list(zip(top.support.clip(lower=SUPPORT_FLOOR), top.instability)))
    handles = []
    for curve in curves:
        single = len(top[top.curve == curve]) == 1
        if curve == BASELINE:
            handles.append(Line2D([], [], ls="", marker="*", ms=13, color=probe_colour(curve), label=curve))
        else:
            handles.append(Line2D([], [], ls="" if single else line_style(curve, curves), marker="o", ms=4,
                                  color=probe_colour(curve), label=curve))
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 5), fontsize=9, frameon=False,
               title="method (knob swept)", title_fontsize=9, bbox_to_anchor=(0.5, 0.0))
    each = f"; each point from {draws:,} Monte Carlo gradient draws" if draws else ""
    fig.suptitle(f"Stability-support plane of the bandit (learner A; reconstruction of the MRL analysis{each})",
                 y=0.97)
    return fig


DYNAMICS_METRICS = {"rescue type": "held-out accuracy on the rescue type",
                    "own-solvable": "held-out accuracy on own-solvable prompts", "entropy": "policy entropy (nats)"}


def flat_methods(band: pd.DataFrame, methods: list[str], floor: float = FLAT) -> list[str]:
    """The methods whose mean curve in `band` (curve_band rows of one panel) stays at or below `floor` throughout."""
    peak = band.groupby("method")["mean"].max()
    return [method for method in methods if peak.get(method, np.inf) <= floor]


def name_flat_lines(ax, band: pd.DataFrame, methods: list[str]) -> None:
    """Where two or more methods lie flat at 0 (at or below FLAT) on top of each other, says which, in the panel: a
    reader sees one line and could not tell that the others are there."""
    flat = flat_methods(band, methods)
    if len(flat) > 1:
        ax.text(0.98, 0.04, f"at or below {FLAT:g} throughout:\n" + "\n".join(flat), transform=ax.transAxes,
                ha="right", va="bottom", fontsize=7, color="0.3")


def dynamics_figure_inputs(runs: pd.DataFrame) -> pd.DataFrame:
    """The columns of run_dynamics' rows that dynamics_figure draws (what mrl.reports.figure_inputs.draw_and_save
    commits)."""
    accuracies = [f"acc {rescue_type(p)}" for p in ("A", "B")] + ["acc shared-easy"]
    return runs[["method", "kappa", "seed", "step", "policy", "entropy", *accuracies]]


def dynamics_figure(runs: pd.DataFrame):
    """Per method, a row per support overlap kappa: held-out accuracy on the rescue type (the prompts a policy
    cannot solve and its peer can), on the prompts it can solve, and the policy entropy, vs step. Line: the mean
    over seeds of the two policies' mean; band: its 95% t interval over the seeds (`curve_band`, the tables'
    interval; accuracies clipped to [0, 1]; none with one seed). Colours by probe (mrl.reports.palette), grpo on
    top."""
    frame = runs.copy()
    is_a = frame.policy == "A"
    frame["rescue type"] = frame[f"acc {rescue_type('A')}"].where(is_a, frame[f"acc {rescue_type('B')}"])
    peer_rescue = frame[f"acc {rescue_type('B')}"].where(is_a, frame[f"acc {rescue_type('A')}"])
    frame["own-solvable"] = (frame["acc shared-easy"] + peer_rescue) / 2  # A solves shared-easy and B's rescue type
    per_seed = frame.groupby(["method", "kappa", "seed", "step"], sort=False)[list(DYNAMICS_METRICS)].mean()
    per_seed = per_seed.reset_index()
    methods = list(dict.fromkeys(frame.method))
    kappas = sorted(frame.kappa.unique())
    seeds = per_seed.seed.nunique()
    fig, axes = plt.subplots(len(kappas), len(DYNAMICS_METRICS), figsize=(4.2 * len(DYNAMICS_METRICS),
                                                                           3.0 * len(kappas) + 0.6),
                             squeeze=False, sharex=True, sharey="col")
    for column, (metric, name) in enumerate(DYNAMICS_METRICS.items()):
        band = curve_band(per_seed, "step", metric, ["method", "kappa"])
        for row, kappa in enumerate(kappas):
            ax = axes[row, column]
            for method in methods:
                line = band[(band.method == method) & (band.kappa == kappa)]
                if line.empty:
                    continue
                colour = probe_colour(method)
                low, high = line["low"], line["high"]
                if metric != "entropy":
                    low, high = low.clip(0, 1), high.clip(0, 1)
                ax.plot(line.step, line["mean"], color=colour, ls=line_style(method, methods), lw=1.3,
                        zorder=4 if method == BASELINE else 3, label=method)
                ax.fill_between(line.step, low, high, color=colour, alpha=0.15, lw=0, zorder=2)
            if metric != "entropy":
                name_flat_lines(ax, band[band.kappa == kappa], methods)
            ax.set_title(f"kappa = {kappa:g}: {metric}", fontsize=9)
            if row == len(kappas) - 1:
                ax.set_xlabel("step")
        if metric != "entropy":
            fitted = [fit_accuracy_axis(ax, None) for ax in axes[:, column]]
            axes[0, column].set_ylim(min(ax.get_ylim()[0] for ax in axes[:, column]),
                                     max(ax.get_ylim()[1] for ax in axes[:, column]))
            name += "\n(axis fitted to the data)" if any(fitted) else ""
        for ax in axes[:, column]:
            ax.set_ylabel(name, fontsize=8)
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False, title="method")
    band_text = f"band: 95% t interval over {seeds} seeds" if seeds > 1 else "one seed, no band"
    fig.suptitle(f"Bandit dynamics: held-out accuracy and entropy (mean over seeds of both policies' mean; "
                 f"{band_text})")
    fig.tight_layout()
    return fig


def _number(value: float, spec: str = ".3g") -> str:
    """A number for prose: `spec`-formatted, 'n/a' for NaN."""
    return "n/a" if pd.isna(value) else format(float(value), spec)


def _times(value: float) -> str:
    """A ratio for prose: two decimals below 10, none above ('0.94×', '252×')."""
    return "n/a" if pd.isna(value) else f"{value:.2f}×" if abs(value) < 10 else f"{value:.0f}×"


def default_labels() -> dict[str, str]:
    """{method: its plane label at the default knobs} ('sgt' -> 'sgt (lambda=0.1, eta=0)'): mrl.core.bandit's Method
    defaults, so the prose names the point the library calls the default."""
    return {name: Method(name).label for name in METHODS}


def knob_sentence(points: pd.DataFrame, curve: str, reference: float) -> str:
    """One curve's trade-off along its knob, first to last value: 'lambda 0.01 → 1: S 0.0116 → 1.13,
    instability 1.00× → 1.54× GRPO's'. points: the curve's plane rows at one kappa; reference: GRPO's
    instability there (NaN: the instability is given as it is)."""
    knob, rest = _curve_knob(curve)
    points = _curve_points(points, curve)
    first, last = points.iloc[0], points.iloc[-1]
    scaled = bool(np.isfinite(reference) and reference > 0)
    low, high = (first.instability, last.instability)
    levels = (f"{_times(low / reference)} → {_times(high / reference)} GRPO's" if scaled
              else f"{_number(low)} → {_number(high)}")
    values = [_number(row.get("knob", np.nan), "g") for row in (first, last)]
    named = f"{knob} {values[0]} → {values[1]}" + (f" ({rest})" if rest else "")
    return f"{named}: S {_number(first.support)} → {_number(last.support)}, instability {levels}"


def plane_result(plane: pd.DataFrame, kappa: float | None = None) -> str:
    """Where each method sits on the stability-support plane at `kappa` (default: the largest, the figure's large
    panel), as Markdown: GRPO's point, then a line per method: its point at the default knobs (default_labels;
    instability as a multiple of GRPO's) and, per curve of the method that sweeps a knob, the trade-off from the
    knob's first value to its last (knob_sentence). plane: trade_off's rows."""
    if plane.empty:
        return "The plane has no points."
    kappa = plane.kappa.max() if kappa is None else kappa
    at = plane[plane.kappa == kappa]
    grpo = at[at.label == BASELINE]
    reference = float(grpo.instability.iloc[0]) if len(grpo) else float("nan")
    overlap = f" (B's mass on A's support {at.overlap.iloc[0]:.2f})" if "overlap" in at and len(at) else ""
    lead = f"At support overlap kappa = {kappa:g}{overlap}, "
    lead += (f"GRPO sits at support gain S = {_number(grpo.support.iloc[0])} and instability {_number(reference)}; "
             f"S <= 0 is no rescue or a loss." if len(grpo) else "GRPO is not on the plane.")
    lines = []
    curves = list(dict.fromkeys(at.curve))
    for method, label in default_labels().items():
        if method == BASELINE:
            continue
        point = at[at.label == label]
        sweeps = [c for c in curves if base_probe(c) == method and len(at[at.curve == c]) > 1]
        if point.empty and not sweeps:
            continue
        text = f"- **{method}**"
        if len(point):
            row = point.iloc[0]
            ratio = f" ({_times(row.instability / reference)} GRPO's)" if reference > 0 else ""
            where = f" at its default `{label}`" if label != method else " (no knob)"
            text += f"{where}: S = {_number(row.support)}, instability {_number(row.instability)}{ratio}."
        if sweeps:
            text += " Along " + "; along ".join(knob_sentence(at, c, reference) for c in sweeps) + "."
        lines.append(text)
    return "\n".join([lead, "", *lines])


def dynamics_result(dynamics: pd.DataFrame) -> str:
    """The dynamics table in words, as Markdown: per kappa, each method's final rescue-type accuracy (mean over
    seeds and both policies), highest first, and the largest share of steps that lowered a policy's true objective.
    dynamics: summarise's rows."""
    if dynamics.empty:
        return "The dynamics ran no method."
    means = dynamics.groupby(["kappa", "method"], sort=False)[["rescue-type accuracy", "negative steps"]].mean()
    per_kappa = []
    for kappa, group in means.groupby(level=0, sort=True):
        ranked = group.droplevel(0)["rescue-type accuracy"].sort_values(ascending=False, kind="stable")
        per_kappa.append(f"at kappa = {kappa:g}, " + ", ".join(f"{method} {_number(value, '.3f')}"
                                                                for method, value in ranked.items()))
    sentences = ["Final rescue-type accuracy (mean over seeds and both policies), highest first: "
                 + "; ".join(per_kappa) + "."]
    harmful = dynamics["negative steps"]
    if harmful.notna().any():
        worst = dynamics.loc[harmful.idxmax()]
        sentences.append(f"The largest share of steps that lowered a policy's true objective is "
                         f"{_number(worst['negative steps'], '.3f')} ({worst.method}, policy {worst.policy}, kappa = "
                         f"{worst.kappa:g}).")
    return " ".join(sentences)


def bandit_result(plane: pd.DataFrame, dynamics: pd.DataFrame, kappa: float | None = None) -> str:
    """The notebook's Result (Markdown): the plane at `kappa` (plane_result), then the dynamics (dynamics_result)."""
    return f"**The plane.** {plane_result(plane, kappa)}\n\n**The dynamics.** {dynamics_result(dynamics)}"
