"""One colour per probe, the same in every figure; policies and MWRA phases too; readable tick labels.

A probe label is a registered name, possibly with knobs (`mrl.core.probes.probe_label`: "prp (clip=4.0)",
"hacpo (clipping=fixed, minibatches=4)"), a bandit method or curve ("prp (c=2, sigma_T=0)", "sgt (lambda)") or
the bandit analysis's prose name ("IS-PRP"): it takes the colour of its base probe, and `line_style` tells
variants of one base apart. grpo, the baseline every figure compares to, is black and drawn on top.
"""
from __future__ import annotations

import hashlib
import textwrap

import matplotlib.ticker as mticker
import numpy as np
from matplotlib.colors import to_hex

PROBE_COLOURS = {
    "grpo": "#000000",      # the baseline: black, drawn on top
    "prp": "#1f77b4",       # data level: blues
    "prp_naive": "#7fb2e5",
    "xgrpo": "#2ca02c",     # value level: green
    "sgt": "#d62728",       # outcome level: red
    "hacpo": "#9467bd",     # HACPO and its baselines: purples and browns
    "gspo": "#8c564b",
    "gspo_x2": "#c49c94",
    "naive": "#e377c2",
    "graft": "#ff7f0e",
    "trrd": "#17becf",
}
ALIASES = {"is-prp": "prp", "naive-prp": "prp_naive", "x-grpo": "xgrpo", "gspo-x2": "gspo_x2"}
"""the bandit analysis's and the papers' names of the probes they reconstruct (lower case)"""
OTHER = "#7f7f7f"
POLICY_COLOURS = {"A": "#1b9e77", "B": "#d95f02", "C": "#7570b3", "D": "#e7298a", "E": "#66a61e"}
PHASE_COLOURS = {"rollout": "#e6ab02", "update": "#4d4d4d", "evaluate": "#bdbdbd"}
"""amber, charcoal and light grey: no probe's colour, so a timeline never reads as a probe comparison"""
VARIANT_STYLES = ["-", "--", ":", "-.", (0, (8, 2)), (0, (4, 1.5, 1, 1.5, 1, 1.5)), (0, (1, 1)), (0, (8, 2, 1, 2))]
"""matplotlib line styles: solid, dashed, dotted, dash-dot, long dash, dash-dot-dot, densely dotted, long dash-dot (dash
patterns (on, off, ...) in line widths); the variants of a base probe take them in this order"""


def base_probe(label: str) -> str:
    """The registered probe a label names: 'prp (clip=4.0)' -> 'prp', 'sgt (lambda)' -> 'sgt', 'prp c=2' -> 'prp',
    'IS-PRP' -> 'prp'. With knobs_suffix, the one reader of a label's text: run frames and the committed CSVs that
    figures are redrawn from name a probe by its label (mrl.core.probes.probe_label), so the reports read it here
    and nowhere else."""
    name = str(label).split(" (")[0].strip()
    alias = ALIASES.get(name.lower())
    return alias if alias is not None else name.split(" ")[0].lower()


def knobs_suffix(label: str) -> str:
    """What a probe label adds to its name (mrl.core.probes.probe_label's knobs): 'hacpo (minibatches=4)' ->
    ' (minibatches=4)', 'hacpo' -> ''. The one place besides base_probe that reads a label: run frames name their
    probe by label (saved runs carry only it), and a comparison pairs an arm with the reference of the same knobs."""
    name, sep, knobs = str(label).partition(" (")
    return sep + knobs


SPARE_COLOURS = ("#bcbd22", "#aec7e8", "#98df8a", "#ff9896", "#c5b0d5", "#f7b6d2", "#dbdb8d", "#9edae5", "#ffbb78",
                 "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173")
"""the colours of probes PROBE_COLOURS does not name (a new probe needs no entry): tab20's and tab20b's that no probe,
policy or phase takes, one per name by a stable digest of it"""


def probe_colour(label: str) -> str:
    """The colour of a probe label: its base probe's in PROBE_COLOURS, else one of SPARE_COLOURS chosen by the base
    name's digest (the same in every figure and every process)."""
    base = base_probe(label)
    if base in PROBE_COLOURS:
        return PROBE_COLOURS[base]
    return SPARE_COLOURS[int(hashlib.sha256(base.encode()).hexdigest(), 16) % len(SPARE_COLOURS)]


def probe_palette(labels) -> dict[str, str]:
    """{label: colour} for seaborn's `palette=` and matplotlib's `color=`."""
    return {label: probe_colour(label) for label in labels}


def _knob_count(label: str) -> int:
    return 0 if "(" not in label and " " not in label.strip() else label.count(",") + 1


def line_style(label: str, labels) -> str | tuple:
    """The line style of `label` among the labels of one figure: of the labels sharing its base probe, the one with
    the fewest knobs (the bare probe where it is drawn) is solid, the others dashed, dotted, dash-dot, ... in that
    order (ties alphabetical), so a label's style does not depend on the order the figure draws them in."""
    same = sorted({other for other in [*labels, label] if base_probe(other) == base_probe(label)},
                  key=lambda other: (_knob_count(other), other))
    return VARIANT_STYLES[same.index(label) % len(VARIANT_STYLES)]


def policy_colour(name: str) -> str:
    """The colour of a policy (family) A, B, C, ...; grey for another name."""
    return POLICY_COLOURS.get(name, OTHER)


def phase_colour(phase: str) -> str:
    """The colour of an MWRA phase (rollout, update, evaluate); grey for another phase."""
    return PHASE_COLOURS.get(phase, OTHER)


def baseline_on_top(ax, zorder: float = 4.0) -> None:
    """Raises the lines drawn in grpo's colour above the others (seaborn draws them in hue order, grpo first)."""
    for line in ax.get_lines():
        if to_hex(line.get_color()) == PROBE_COLOURS["grpo"]:
            line.set_zorder(zorder)


def compact_number(value: float, _position=None) -> str:
    """Tick text for counts: 950, 12k, 1.2M (no offset or scientific notation)."""
    magnitude = abs(value)
    for threshold, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}" if value != int(value) else f"{int(value)}"


COMPACT = mticker.FuncFormatter(compact_number)
"""a formatter for rollout, token and step axes: ax.xaxis.set_major_formatter(COMPACT)"""


def decimal_number(value: float, _position=None) -> str:
    """Tick text for a log (or small linear) axis: 0.0001, -0.0004, 0.25, 1, 300 (no 10^k, no 1e-4, no offset);
    12k, 1.2M from 10^4 on."""
    if abs(value) >= 1e4:
        return compact_number(value)
    return np.format_float_positional(float(f"{value:.3g}"), trim="-")


DECIMAL = mticker.FuncFormatter(decimal_number)
"""a formatter for log axes: ax.xaxis.set_major_formatter(DECIMAL)"""


def plain_log_axis(axis) -> None:
    """Decimal tick labels on a log axis (`ax.xaxis` or `ax.yaxis`). Minor ticks are labelled only while the axis
    spans less than a decade (it then has at most one major tick); over several decades their labels would
    overlap, so they stay blank. Decided when the figure is drawn, after autoscaling."""
    def minor_label(value, position=None):
        low, high = axis.get_view_interval()
        return decimal_number(value) if 0 < low and high < 10 * low else ""

    axis.set_major_formatter(DECIMAL)
    axis.set_minor_formatter(mticker.FuncFormatter(minor_label))


ACCURACY_NOTE = "axis fitted to the data"


def fit_accuracy_axis(ax, label: str | None, pad: float = 0.05) -> bool:
    """Sets an accuracy (or any fraction) axis to the range its data and bands cover, within [0, 1], and says so in
    `label` when that range is narrower than 0 to 1: "held-out accuracy (axis fitted to the data)"; label None
    leaves the label alone. Returns whether the axis is narrower than 0 to 1."""
    low, high = ax.dataLim.intervaly
    if not np.isfinite(low) or not np.isfinite(high):
        if label is not None:
            ax.set_ylabel(label)
        return False
    span = max(high - low, 0.02)
    low, high = max(low - pad * span, -0.01), min(high + pad * span, 1.01)
    ax.set_ylim(low, high)
    fitted = bool(low > 0.05 or high < 0.95)
    if label is not None:
        ax.set_ylabel(f"{label}\n({ACCURACY_NOTE})" if fitted else label)
    return fitted


def figure_title(fig, title: str, fontsize: float = 12) -> None:
    """The figure's suptitle above its top edge, wrapped to the figure's width (a title wider than a figure of few
    panels would otherwise set the saved PNG's width and squeeze the panels into its middle); its lines grow
    upwards, clear of the panels' titles (a tight bounding box keeps them in the saved image)."""
    characters = max(40, int(fig.get_figwidth() * 72 / (0.55 * fontsize)))
    fig.suptitle(textwrap.fill(title, characters), y=1.0, va="bottom", fontsize=fontsize)
