"""One colour per probe, the same in every figure; policies and MWRA phases too; readable tick labels.

A probe label is a registered name, possibly with knobs ("prp (clip=4.0)", "hacpo (clipping='fixed')") or a
bandit curve ("prp (c, sigma_T=0)", "sgt (lambda)"): it takes the colour of its base probe, and
`line_style` tells variants of one base apart. grpo, the baseline every figure compares to, is black.
"""
from __future__ import annotations

import matplotlib.ticker as mticker

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
OTHER = "#7f7f7f"
POLICY_COLOURS = {"A": "#1b9e77", "B": "#d95f02", "C": "#7570b3", "D": "#e7298a", "E": "#66a61e"}
PHASE_COLOURS = {"rollout": "#1f77b4", "update": "#ff7f0e", "evaluate": "#2ca02c"}
VARIANT_STYLES = ["-", "--", ":", "-."]


def base_probe(label: str) -> str:
    """The registered probe a label names: 'prp (clip=4.0)' -> 'prp', 'sgt (lambda)' -> 'sgt'."""
    return str(label).split(" (")[0].split(" ")[0].strip()


def probe_colour(label: str) -> str:
    """The colour of a probe label (its base probe's; grey for a label no probe claims)."""
    return PROBE_COLOURS.get(base_probe(label), OTHER)


def probe_palette(labels) -> dict[str, str]:
    """{label: colour} for seaborn's `palette=` and matplotlib's `color=`."""
    return {label: probe_colour(label) for label in labels}


def line_style(label: str, labels) -> str:
    """Solid for the first label of a base probe among `labels`, then dashed, dotted, dash-dot."""
    same = [other for other in dict.fromkeys(labels) if base_probe(other) == base_probe(label)]
    return VARIANT_STYLES[same.index(label) % len(VARIANT_STYLES)] if label in same else "-"


SEABORN_DASHES = {"-": "", "--": (4, 2), ":": (1, 2), "-.": (4, 1.5, 1, 1.5)}


def probe_dashes(labels) -> dict:
    """{label: seaborn dash pattern}: variants of one base probe told apart (seaborn's `dashes=` with style=hue)."""
    labels = list(dict.fromkeys(labels))
    return {label: SEABORN_DASHES[line_style(label, labels)] for label in labels}


def policy_colour(name: str) -> str:
    return POLICY_COLOURS.get(name, OTHER)


def compact_number(value: float, _position=None) -> str:
    """Tick text for counts: 950, 12k, 1.2M (no offset or scientific notation)."""
    magnitude = abs(value)
    for threshold, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if magnitude >= threshold:
            return f"{value / threshold:.3g}{suffix}"
    return f"{value:.3g}" if value != int(value) else f"{int(value)}"


COMPACT = mticker.FuncFormatter(compact_number)
"""a formatter for rollout, token and step axes: ax.xaxis.set_major_formatter(COMPACT)"""
