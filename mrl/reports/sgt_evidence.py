"""The evidence on SGT, whole: d_z of `sgt - grpo` on every warm-up it has run, each with its design (RL seeds crossed
or nested) and provenance (the ledger, a registration, an outside check), per set the mean with its t interval over
warm-ups, and a random-effects pooled estimate over all of them beside the confirmatory ones (descriptive: it mixes
designs, exploratory and confirmatory warm-ups, and runs made at several commits).

The outside checks' per-run values are the project's own code run elsewhere (data/outside_checks/README.md gives each
set's design, commit, machine and date); they are shown as such and never enter a registered test.
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from mrl.reports.claims import seed_differences
from mrl.reports.confirmatory import DESIGN, complete_warmups
from mrl.reports.statistics import t_interval

ROLES = ("exploratory", "confirmatory", "outside check")
"""what each set is (the forest's colours, in this order in its legend)"""


@dataclass(frozen=True)
class EvidenceSet:
    """The per-run endpoint values of one set of warm-ups (endpoint_values rows) and what they are."""

    name: str
    role: str
    """one of ROLES"""
    design: str
    """"nested" (each warm-up's own RL seeds) or "crossed" (RL seed s drew the same streams on every warm-up)"""
    provenance: str
    values: pd.DataFrame


def warmup_rows(sets: list[EvidenceSet], seeds: list[int], policies: list[str]) -> pd.DataFrame:
    """One row per (set, warm-up): d_z of sgt - grpo on overall held-out accuracy over the warm-up's complete runs
    (the first registration's complete_warmups: both arms on every seed of `seeds` for every policy)."""
    rows = []
    for evidence in sets:
        d = complete_warmups(evidence.values, DESIGN, seeds, policies)
        rows += [{"set": evidence.name, "role": evidence.role, "design": evidence.design,
                  "provenance": evidence.provenance, "zoo seed": int(zoo), "d_z": float(value)}
                 for zoo, value in d.items()]
    return pd.DataFrame(rows)


def set_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per set, in the rows' order: its role, design and provenance, its warm-ups, the mean of d_z with its 95% t
    interval over them, and how many lie above 0."""
    out = []
    for name, group in rows.groupby("set", sort=False):
        mean, low, high = t_interval(group.d_z.to_numpy(), 0.95) if len(group) > 1 else \
            (group.d_z.mean(), math.nan, math.nan)   # one warm-up: no interval
        out.append({"set": name, "role": group.role.iloc[0], "design": group.design.iloc[0],
                    "provenance": group.provenance.iloc[0], "warm-ups": len(group),
                    "zoo seeds": f"{group['zoo seed'].min()}-{group['zoo seed'].max()}", "mean d_z": mean,
                    "95% t low": low, "95% t high": high, "above 0": f"{int((group.d_z > 0).sum())}/{len(group)}"})
    return pd.DataFrame(out)


def pooled_random_effects(sets: list[EvidenceSet], rows: pd.DataFrame) -> dict:
    """A random-effects pooled estimate of sgt - grpo over every warm-up of the forest, each warm-up once: the REML fit
    (statsmodels MixedLM) of d_zs = mu + u_z + c_s + e_zs to the RL-seed level differences (mean over policies) of the
    warm-ups in `rows`, with u_z a warm-up's effect, and c_s the effect of crossed RL seed s, which every warm-up of
    every crossed set shares (seed s drew the same streams there; data/outside_checks/README.md) and no nested run
    has. Returns mu with its 95% Wald interval and the three SDs: {"mean", "low", "high", "warm-ups",
    "between-warm-up SD", "crossed-seed SD", "RL-seed SD"}. Descriptive: it mixes exploratory and confirmatory
    warm-ups and runs made at several commits."""
    import statsmodels.formula.api as smf

    if rows["zoo seed"].duplicated().any():
        raise ValueError(f"warm-ups {sorted(set(rows['zoo seed'][rows['zoo seed'].duplicated()]))} appear in two "
                         f"sets: the pooled estimate takes each warm-up once")
    frames = []
    for evidence in sets:
        mine = rows[rows.set == evidence.name]["zoo seed"]
        seeds = seed_differences(evidence.values, DESIGN.comparison.probe, DESIGN.comparison.reference,
                                 DESIGN.endpoint).rename("d").reset_index()
        seeds = seeds[seeds.zoo_seed.isin(set(mine))]
        frames.append(seeds.assign(crossed=evidence.design == "crossed"))
    frame = pd.concat(frames, ignore_index=True).assign(everything=1)
    streams = sorted(frame.loc[frame.crossed, "seed"].unique())
    for seed in streams:   # an indicator per crossed seed: 0 on every nested run, so no nested run shares it
        frame[f"crossed_seed_{seed}"] = (frame.crossed & (frame.seed == seed)).astype(float)
    components = {"warmup": "0 + C(zoo_seed)"}
    if streams:
        components["crossed_seed"] = "0 + " + " + ".join(f"crossed_seed_{seed}" for seed in streams)
    with warnings.catch_warnings():   # a variance on the boundary (0) warns; it is a valid REML estimate
        warnings.simplefilter("ignore")
        fit = smf.mixedlm("d ~ 1", frame, groups="everything", vc_formula=components).fit(reml=True)
    low, high = fit.conf_int().loc["Intercept"]
    variances = dict(zip(fit.model.exog_vc.names, fit.vcomp))
    return {"mean": float(fit.params["Intercept"]), "low": float(low), "high": float(high),
            "warm-ups": int(frame.zoo_seed.nunique()),
            "between-warm-up SD": math.sqrt(max(0.0, float(variances["warmup"]))),
            "crossed-seed SD": math.sqrt(max(0.0, float(variances.get("crossed_seed", 0.0)))),
            "RL-seed SD": math.sqrt(float(fit.scale))}


def forest_table(rows: pd.DataFrame, pooled: dict) -> pd.DataFrame:
    """The forest as a table: each set's row (set_table, formatted) and the pooled estimate's last."""
    table = set_table(rows)
    table["mean d_z [95% t]"] = [f"{m:+.4f}" + ("" if math.isnan(lo) else f" [{lo:+.4f}, {hi:+.4f}]") for m, lo, hi in
                                 zip(table["mean d_z"], table["95% t low"], table["95% t high"])]
    table = table.drop(columns=["mean d_z", "95% t low", "95% t high"])
    pooled_row = {"set": "random-effects pooled (descriptive)", "role": "all of the above", "design": "mixed",
                  "provenance": "statsmodels MixedLM (REML): a random effect per warm-up and per crossed RL seed",
                  "warm-ups": pooled["warm-ups"], "zoo seeds": "",
                  "mean d_z [95% t]": f"{pooled['mean']:+.4f} [{pooled['low']:+.4f}, {pooled['high']:+.4f}] (Wald)",
                  "above 0": f"{int((rows.d_z > 0).sum())}/{len(rows)}"}
    return pd.concat([table, pd.DataFrame([pooled_row])], ignore_index=True)


def forest_figure(rows: pd.DataFrame, pooled_mean: float, pooled_low: float, pooled_high: float,
                  paper_effect: float):
    """Every warm-up's d_z as a dot, grouped by set (its role's colour), each set's mean with its 95% t interval,
    the pooled estimate as a diamond at the bottom, and lines at 0 and at the paper's effect."""
    import matplotlib.pyplot as plt

    colours = dict(zip(ROLES, ("#7f7f7f", "#1f77b4", "#ff7f0e")))
    sets = list(dict.fromkeys(rows.set))
    fig, ax = plt.subplots(figsize=(8, 0.5 * len(sets) + 1.8))
    for y, name in enumerate(reversed(sets), start=1):
        group = rows[rows.set == name]
        colour = colours.get(group.role.iloc[0], "black")
        jitter = np.linspace(-0.18, 0.18, len(group)) if len(group) > 1 else np.zeros(1)
        ax.scatter(group.d_z, y + jitter, s=14, color=colour, alpha=0.6, zorder=3)
        if len(group) > 1:
            mean, low, high = t_interval(group.d_z.to_numpy(), 0.95)
            ax.errorbar(mean, y, xerr=[[mean - low], [high - mean]], fmt="s", color=colour, ms=6, capsize=3,
                        zorder=4)
    ax.fill([pooled_low, pooled_mean, pooled_high, pooled_mean], [0, 0.25, 0, -0.25], color="black", zorder=4)
    ax.axvline(0, color="black", lw=0.8)
    ax.axvline(paper_effect, color="black", lw=0.8, ls="--")
    ax.set_yticks(range(0, len(sets) + 1), ["pooled (random effects, descriptive)", *reversed(sets)])
    ax.set_xlabel(f"d_z of sgt - grpo, overall held-out accuracy (dashed: the paper's {paper_effect:+.3f})")
    ax.set_title("sgt - grpo per warm-up (dots); per set, the mean and its 95% t interval", fontsize=10)
    handles = [plt.Line2D([], [], marker="o", ls="", color=c, label=r) for r, c in colours.items()]
    ax.legend(handles=handles, loc="lower right", fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def outside_checks(folder, read) -> list[EvidenceSet]:
    """The outside checks of `folder` (data/outside_checks/) as evidence sets, from its manifest `sets.csv` (per file:
    its design, the code it ran and the machine and date it ran on; the README says the same in words): files of one
    design made by one code are one set. read: reads a per-run CSV (mrl.reports.claims.read_endpoint_values)."""
    from pathlib import Path

    folder = Path(folder)
    manifest = pd.read_csv(folder / "sets.csv", dtype=str)
    sets = []
    for (design, code), files in manifest.groupby(["design", "code"], sort=False):
        values = pd.concat([read(folder / file) for file in files.file], ignore_index=True)
        seeds = sorted(values.zoo_seed.unique())
        made = "; ".join(sorted(set(files.machine + ", " + files.date)))
        sets.append(EvidenceSet(name=f"outside check, {seeds[0]}-{seeds[-1]}", role="outside check", design=design,
                                provenance=f"code: {code}; {made}", values=values))
    return sorted(sets, key=lambda evidence: int(evidence.values.zoo_seed.min()))


def committed_evidence(root, second: pd.DataFrame | None = None) -> list[EvidenceSet]:
    """Every set of warm-ups on which sgt - grpo has run, from the committed files of the checkout at `root`: the
    ledger (paper_tables/claims_runs.csv), the first registration (confirmatory_runs.csv), the second when its
    per-run values are given (or committed as confirmatory_claims_runs.csv), and the outside checks."""
    from pathlib import Path

    from mrl.reports.claims import read_endpoint_values

    tables = Path(root) / "paper_tables"
    sets = [EvidenceSet("the ledger, zoo seeds 0-4", "exploratory", "nested", "the project's runs (70_heldout)",
                        read_endpoint_values(tables / "claims_runs.csv")),
            EvidenceSet("the first registration", "confirmatory", "nested",
                        "the project's runs (75_confirmatory), registered 2026-11-28",
                        read_endpoint_values(tables / "confirmatory_runs.csv"))]
    if second is None and (tables / "confirmatory_claims_runs.csv").exists():
        second = read_endpoint_values(tables / "confirmatory_claims_runs.csv")
    if second is not None and len(second):
        sets.append(EvidenceSet("the second registration", "confirmatory", "nested",
                                "the project's runs (76_confirmatory_claims), registered 2026-12-06", second))
    return sets + outside_checks(Path(root) / "data" / "outside_checks", read_endpoint_values)


def evidence_sentence(table: pd.DataFrame, pooled: dict) -> str:
    """The forest in words, every number from its table: each set's mean and interval, and the pooled estimate."""
    sets = table[table.set != "random-effects pooled (descriptive)"]
    parts = "; ".join(f"{r['set']} ({r['role']}, {r['design']}): {r['mean d_z [95% t]']}, {r['above 0']} above 0"
                      for _, r in sets.iterrows())
    return (f"`sgt - grpo` on every warm-up it has run, d_z with its 95% t interval over each set's warm-ups: {parts}. "
            f"Pooled over all {pooled['warm-ups']} warm-ups by a random-effects model (descriptive: it mixes designs, "
            f"exploratory and confirmatory warm-ups, and outside checks made at other commits): {pooled['mean']:+.4f} "
            f"[{pooled['low']:+.4f}, {pooled['high']:+.4f}] (95% Wald; a random effect per warm-up and per crossed "
            f"RL seed, whose streams the crossed sets share), SDs between warm-ups {pooled['between-warm-up SD']:.4f}, "
            f"between crossed seeds {pooled['crossed-seed SD']:.4f}, between runs {pooled['RL-seed SD']:.4f}. The "
            f"confirmatory answers are the registered tests above, not this pool.")
