"""Tables, figure and prose of what the canonical tokenization drops (80_beyond's section on the marginal;
docs/marginal.md), from mrl.experiments.marginal_gap's rows and cost, and the paired differences of the ledger's arms
run with the marginal ratio against their canonical twins, read by the claims ledger's rule (mrl.reports.claims).

rows: one per source text a learner scored (point, learner, source, outcome, tokenizations, gap, canonical share,
log s <definition>, ...); cost: one per (point, learner, source) with the CPU seconds of each scoring.
"""
from __future__ import annotations

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from mrl.core.probes.terms import marginal_gap_column
from mrl.reports.claims import CLAIMS, Claim, claims_ledger, ledger_table
from mrl.reports.claims_rule import MARGIN, Fragility, Verdict, VerdictKind
from mrl.reports.palette import policy_colour

PAIR = ["point", "learner", "source"]
DEFINITIONS = ("canonical", "marginal", "exact")
"""HACPO's sequence ratio by what each side's probability is (mrl.experiments.marginal_gap.DEFINITIONS)"""
SHARE_LINE = 0.9
"""the canonical share below which a text counts as one where the canonical tokenization misses much"""
OUTCOMES = {"success": "successes", "failure": "failures"}
INSIDE = f"inside +-{MARGIN:g}"
"""marginal_arms_table's column: whether the t interval lies inside the ledger's margin"""


def _share(mask) -> float:
    mask = np.asarray(mask, dtype=bool)
    return float(mask.mean()) if len(mask) else float("nan")


def gap_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per point, learner, source and outcome: the texts, the share with more than one tokenization under the
    learner, the share whose canonical tokenization carries under SHARE_LINE of the text's probability, the texts
    the learner cannot write, and the gap log marginal - log canonical (nats): mean, median, 90% quantile, max."""
    out = []
    for (point, learner, source), group in rows.groupby(PAIR, sort=False):
        for outcome, plural in OUTCOMES.items():
            texts = group[group.outcome == outcome]
            gaps = texts.gap[np.isfinite(texts.gap)].to_numpy()
            row = {"point": point, "learner": learner, "source": source, "outcome": plural, "texts": len(texts),
                   "more than one tokenization": _share(texts.tokenizations > 1),
                   f"canonical share < {SHARE_LINE:.0%}": _share(texts["canonical share"] < SHARE_LINE),
                   "not writable": int((texts.tokenizations == 0).sum())}
            stats = (gaps.mean(), np.median(gaps), np.quantile(gaps, 0.9), gaps.max()) if len(gaps) else [np.nan] * 4
            row.update(zip(("mean gap", "median gap", "q90 gap", "max gap"), map(float, stats)))
            out.append(row)
    return pd.DataFrame(out)


def outside(log_s, lower: float, upper: float = 1.0) -> np.ndarray:
    """Whether each ratio s = exp(log s) lies outside HACPO's clip range [lower, upper] (the bound binds)."""
    s = np.exp(np.asarray(log_s, dtype=float))
    return (s < lower) | (s > upper)


def ratio_table(rows: pd.DataFrame, bounds: tuple[float, ...]) -> pd.DataFrame:
    """Per point, learner, source and definition of HACPO's ratio (DEFINITIONS): the texts with a THL alignment,
    the mean and 10/50/90% quantiles of log s, the share outside each clip range [lower, 1] of `bounds` (the
    stepwise bound of the first and of the last update: mrl.experiments.marginal_gap.stepwise_bounds), and the share
    whose side of the first range differs from the canonical definition's (a sample the definition moves in or out)."""
    out = []
    for (point, learner, source), group in rows.groupby(PAIR, sort=False):
        group = group[np.isfinite(group.groups)]
        canonical = outside(group["log s canonical"], bounds[0])
        for definition in DEFINITIONS:
            log_s = group[f"log s {definition}"].to_numpy()
            q10, q50, q90 = np.quantile(log_s, [0.1, 0.5, 0.9]) if len(log_s) else [np.nan] * 3
            row = {"point": point, "learner": learner, "source": source, "definition": definition,
                   "texts": len(log_s), "mean log s": float(log_s.mean()) if len(log_s) else np.nan,
                   "q10": q10, "median": q50, "q90": q90}
            row.update({f"outside [{lower:g}, 1]": _share(outside(log_s, lower)) for lower in bounds})
            row["changes side"] = _share(outside(log_s, bounds[0]) != canonical)
            out.append(row)
    return pd.DataFrame(out)


def cost_table(cost: pd.DataFrame) -> pd.DataFrame:
    """Per point, learner and source: the texts scored, the probe's rows per text with the marginal, and the CPU
    milliseconds (medians) of the probe's scoring (forward and backward) and of the exact search against the
    canonical, with their ratios (marginal / canonical, both measured in one run)."""
    table = cost[PAIR + ["texts", "rows per text"]].copy()
    for kind in ("probe", "search"):
        for side in ("canonical", "marginal"):
            table[f"{kind} {side} ms"] = cost[f"{kind} {side} s"] * 1e3
        table[f"{kind} ratio"] = cost[f"{kind} ratio"]
    return table


def gap_figure_inputs(rows: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """What gap_figure draws: `gaps`, one row per text (point, learner, source, outcome, tokenizations, gap)."""
    return {"gaps": rows[PAIR + ["outcome", "tokenizations", "gap"]].reset_index(drop=True)}


GAP_FLOOR = 1e-6
"""the figure's smallest gap (nats): a gap below it is drawn at it"""


def gap_figure(gaps: pd.DataFrame):
    """One panel per point: for each learner scoring a source's successes (solid) and failures (dashed), the share
    of texts whose gap log marginal - log canonical exceeds x, against x on a log axis (a survival curve: its height
    at the left edge is the share with any gap, at the dotted line the share whose canonical tokenization carries
    under SHARE_LINE of the text's probability). gaps: gap_figure_inputs'."""
    points = list(dict.fromkeys(gaps.point))
    top = max(float(np.nanmax(gaps.gap)) if len(gaps) else 1.0, 1.0) * 2
    grid = np.geomspace(GAP_FLOOR, top, 400)
    line = -math.log(SHARE_LINE)
    fig, axes = plt.subplots(1, len(points), figsize=(5.4 * len(points), 3.9), sharey=True, squeeze=False)
    highest = 0.0
    for ax, point in zip(axes[0], points):
        for (learner, source), pair in gaps[gaps.point == point].groupby(["learner", "source"], sort=True):
            for outcome, style in (("success", "-"), ("failure", "--")):
                values = pair[pair.outcome == outcome].gap.dropna().to_numpy()
                if not len(values):
                    continue
                survival = (values[None, :] > grid[:, None]).mean(axis=1)
                highest = max(highest, float(survival[0]))
                none = "" if survival[0] > 0 else ": no gap"
                ax.step(grid, survival, where="post", color=policy_colour(learner), ls=style, lw=1.6,
                        label=f"{learner} scores {source}'s {OUTCOMES[outcome]} ({len(values)}){none}")
        ax.axvline(line, color="0.35", lw=0.9, ls=":")
        ax.annotate(f"canonical share {SHARE_LINE:.0%}", (line, 0.03), xycoords=("data", "axes fraction"),
                    xytext=(-4, 0), textcoords="offset points", fontsize=7, color="0.35", rotation=90,
                    ha="right", va="bottom")
        ax.set_xscale("log")
        ax.set_xlim(GAP_FLOOR, top)
        ax.set_title(point, fontsize=10)
        ax.set_xlabel("x: log marginal - log canonical (nats)")
        ax.legend(fontsize=7, loc="upper right", framealpha=0.9, edgecolor="none")
    top_share = max(highest * 1.7, 0.05)   # room above the curves for the legend
    axes[0][0].set_ylim(-0.015 * top_share, top_share)   # a curve at 0 (no gap) stays visible above the axis
    axes[0][0].set_ylabel("share of texts with a gap above x")
    fig.suptitle("What the learner's canonical tokenization drops from the probability of a peer's text",
                 fontsize=10)
    fig.tight_layout()
    return fig


def _percent(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.1%}"


def _pair_sentence(gap: pd.DataFrame) -> str:
    """One learner scoring one source's texts at one point, from gap_table's two rows (successes, failures)."""
    head = gap.iloc[0]
    texts = int(gap.texts.sum())
    more = float((gap["more than one tokenization"].fillna(0) * gap.texts).sum() / max(texts, 1))
    if more == 0:
        return (f"{head.learner} scoring {head.source}'s {texts} texts: every text has one tokenization, so the "
                f"canonical is the marginal (gap 0).")
    under = float((gap[f"canonical share < {SHARE_LINE:.0%}"].fillna(0) * gap.texts).sum() / max(texts, 1))
    parts = [f"{r['outcome']} ({int(r['texts'])}) mean {r['mean gap']:.4f} nats, max {r['max gap']:.3f}"
             for r in gap.to_dict("records") if r["texts"]]
    return (f"{head.learner} scoring {head.source}'s {texts} texts: {_percent(more)} have more than one tokenization "
            f"and {_percent(under)} a canonical tokenization that carries under {SHARE_LINE:.0%} of the text's "
            f"probability; the gap over " + "; over ".join(parts) + ".")


def _ratio_sentence(ratios: pd.DataFrame, bounds: tuple[float, ...]) -> str:
    """HACPO's ratio for one (point, learner, source), from ratio_table's three rows."""
    by = ratios.set_index("definition")
    first = f"outside [{bounds[0]:g}, 1]"
    return (f"HACPO's mean log s is {by.loc['canonical', 'mean log s']:+.4f} canonical, "
            f"{by.loc['marginal', 'mean log s']:+.4f} marginal and {by.loc['exact', 'mean log s']:+.4f} exact; the "
            f"first update's bounds [{bounds[0]:g}, 1] bind on {_percent(by.loc['canonical', first])}, "
            f"{_percent(by.loc['marginal', first])} and {_percent(by.loc['exact', first])} of the samples, and the "
            f"marginal moves {_percent(by.loc['marginal', 'changes side'])} of them to the other side.")


def marginal_result(gap: pd.DataFrame, ratios: pd.DataFrame, cost: pd.DataFrame, bounds: tuple[float, ...]) -> str:
    """The section's result as prose (Markdown), every number read from gap_table, ratio_table and cost_table:
    per point, what each learner's canonical tokenization drops from its peer's texts and what that does to
    HACPO's ratio and its clipping, then what the marginal costs."""
    blocks = []
    for point in dict.fromkeys(gap.point):
        lines = []
        for (learner, source), pair in gap[gap.point == point].groupby(["learner", "source"], sort=False):
            sentence = _pair_sentence(pair)
            has_gap = (pair["more than one tokenization"].fillna(0) > 0).any()
            mine = ratios[(ratios.point == point) & (ratios.learner == learner) & (ratios.source == source)]
            if has_gap and len(mine):
                sentence += " " + _ratio_sentence(mine, bounds)
            lines.append(f"- {sentence}")
        blocks.append(f"**{point.capitalize()}**, on this substrate:\n\n" + "\n".join(lines))
    probe, search = cost["probe ratio"], cost["search ratio"]
    blocks.append(
        f"**Cost**, on this substrate (CPU time, one RL step's peer texts, canonical and marginal measured in one "
        f"run): the probe's marginal scoring takes {probe.min():.2f}x to {probe.max():.2f}x the canonical's "
        f"({cost['rows per text'].min():.2f} to {cost['rows per text'].max():.2f} rows per text against 1), and the "
        f"exact search without gradient {search.min():.2f}x to {search.max():.2f}x a canonical forward.")
    return "\n\n".join(blocks)


# ---- the ledger's HACPO arm and GRAFT with the marginal ratio, against their canonical twins ----

READINGS = {VerdictKind.SUPPORTED: "higher with the marginal", VerdictKind.OPPOSITE: "lower with the marginal",
            VerdictKind.INCONCLUSIVE: "no difference detected"}
"""rule v2's verdicts of a two-sided test against 0 (a "better" claim with no paper effect), read as the marginal
arm against its canonical twin"""


def marginal_claims(pairs: list[tuple[str, str]]) -> tuple[Claim, ...]:
    """Each (marginal arm, canonical arm) as a claim the ledger's rule tests two-sided against 0 (kind "better"
    with no paper effect: one sign test per endpoint)."""
    return tuple(Claim("mrl", f"{marginal} differs from {canonical}", marginal, canonical, "better", None,
                       "issue 44: the marginal against the canonical tokenization in the peer ratio")
                 for marginal, canonical in pairs)


def as_reading(verdict: Verdict) -> str:
    """A verdict of a marginal arm against its canonical twin in READINGS' words ("higher with the marginal"; a
    verdict READINGS does not name, such as too few warm-ups, keeps its label)."""
    return READINGS.get(verdict.kind, verdict.label())


def fragility_reading(without: Fragility | None) -> str:
    """The leave-one-warm-up-out column in READINGS' words ("fragile: without zoo 1, higher with the marginal");
    "" where the ledger had too few warm-ups to leave one out."""
    return "" if without is None else without.label(reading=as_reading)


def same_verdict(canonical: Verdict, marginal: Verdict) -> str:
    """'yes' where the two verdicts are of one kind, else 'no' (the same kind near the alpha edge on one side only
    is the same verdict: near_edge_only)."""
    return "yes" if canonical.kind is marginal.kind else "no"


def near_edge_only(canonical: Verdict, marginal: Verdict) -> str:
    """Which arm's verdict alone sits near the alpha edge: 'marginal', 'canonical', or '' (both or neither)."""
    if canonical.near_edge == marginal.near_edge:
        return ""
    return "marginal" if marginal.near_edge else "canonical"


def marginal_arms_table(values: pd.DataFrame, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """Per endpoint (overall accuracy, then the weak form) and (marginal, canonical) arm pair: the ledger's table
    (claims.ledger_table: warm-ups x seeds, the mean paired difference with its t interval over the warm-ups and the
    bootstrap's, the sign counts, the Holm p over this table's tests of that endpoint, the sign-flip p, the
    leave-one-warm-up-out fragility) with the verdict read as READINGS, and whether the t interval lies inside the
    ledger's margin +-MARGIN. values: endpoint_values of the held-out runs."""
    claims = marginal_claims(pairs)
    tables = []
    for family in ("primary", "secondary"):
        ledger = claims_ledger(values, family, claims)
        table = ledger_table(ledger).drop(columns=["paper", "claim", "paper's effect", "p vs paper's size (Holm)",
                                                   "rule v1"])
        table["reading"] = [as_reading(v) for v in ledger.verdict]
        table["leave one warm-up out"] = [fragility_reading(f) for f in ledger["leave-one-out"]]
        low, high = (ledger[c] if c in ledger else pd.Series(np.nan, index=ledger.index) for c in ("low", "high"))
        table[INSIDE] = ["" if math.isnan(lo) else "yes" if -MARGIN < lo and hi < MARGIN else "no"
                                         for lo, hi in zip(low, high)]
        tables.append(table.drop(columns=["verdict"]))
    return pd.concat(tables, ignore_index=True)


def with_arm_replaced(values: pd.DataFrame, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """The endpoint values with each canonical arm's runs replaced by its marginal twin's, under the canonical
    label (so the ledger's claims read the marginal arm)."""
    marginal = {m: c for m, c in pairs}
    kept = values[~values.probe.isin(set(marginal.values()))]
    return kept.assign(probe=kept.probe.replace(marginal))


VERDICT_COLUMNS = ["family", "claim", "comparison", "endpoint", "canonical: difference [95% t]", "canonical: verdict",
                   "marginal: difference [95% t]", "marginal: verdict", "same verdict", "near the alpha edge only with"]
"""marginal_ledger_verdicts' columns, which its table keeps when no claim reads the arms"""


def marginal_ledger_verdicts(values: pd.DataFrame, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """The ledger's claims that read a canonical arm of `pairs`, in both Holm families, judged with the canonical
    arm and again with its marginal twin in its place (with_arm_replaced; the other claims of the family unchanged):
    the difference with its t interval and the verdict of each, whether the verdict is the same (same_verdict) and
    which arm's alone sits near the alpha edge (near_edge_only)."""
    arms = {c for _, c in pairs}
    out = []
    for family in ("primary", "secondary"):
        canonical, marginal = (claims_ledger(v, family) for v in (values, with_arm_replaced(values, pairs)))
        shown = zip(ledger_table(canonical).to_dict("records"), ledger_table(marginal).to_dict("records"))
        for claim, before, after, (a, b) in zip(CLAIMS, canonical.verdict, marginal.verdict, shown):
            if not {claim.probe, claim.reference} & arms:
                continue
            out.append({"family": family, "claim": a["claim"], "comparison": a["comparison"], "endpoint": a["endpoint"],
                        "canonical: difference [95% t]": f"{a['difference']} {a['95% t over warm-ups']}".strip(),
                        "canonical: verdict": a["verdict"],
                        "marginal: difference [95% t]": f"{b['difference']} {b['95% t over warm-ups']}".strip(),
                        "marginal: verdict": b["verdict"], "same verdict": same_verdict(before, after),
                        "near the alpha edge only with": near_edge_only(before, after)})
    return pd.DataFrame(out, columns=VERDICT_COLUMNS)


def arms_training_table(steps: pd.DataFrame, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """What the marginal did inside training, per (marginal, canonical) pair and learner, from the runs' step
    metrics (mean over steps, then over the pair's runs): the update phase's wall seconds per step of each arm and
    their ratio (marginal / canonical), HACPO's share of peer samples kept inside the clip range (peer_kept /
    peer_samples) under each arm, and the marginal arm's mean gap log marginal - log canonical of the peer texts it
    scored (marginal_gap_from_<source>, averaged over sources).
    steps: run_many's steps of the pairs' runs."""
    sources = {marginal_gap_column(policy) for policy in steps.policy.unique()}   # every source is a policy
    gap_columns = [c for c in steps.columns if c in sources]
    frame = steps.assign(kept=steps.peer_kept / steps.peer_samples.where(steps.peer_samples > 0)
                         if {"peer_kept", "peer_samples"} <= set(steps.columns) else np.nan,
                         gap=steps[gap_columns].mean(axis=1) if gap_columns else np.nan)
    columns = ["update_seconds", "kept", "gap"]
    per_run = frame.groupby(["probe", "policy", "seed", "zoo_seed"], sort=False)[columns].mean()   # over steps
    runs = per_run.groupby(["probe", "policy"], sort=False)
    means, counts = runs.mean(), runs.size()
    rows = []
    for marginal, canonical in pairs:
        for policy in dict.fromkeys(frame.loc[frame.probe == marginal, "policy"]):
            m, c = means.loc[(marginal, policy)], means.loc[(canonical, policy)]
            rows.append({"comparison": f"{marginal} - {canonical}", "learner": policy,
                         "runs": int(counts[(marginal, policy)]), "update s canonical": c.update_seconds,
                         "update s marginal": m.update_seconds, "update ratio": m.update_seconds / c.update_seconds,
                         "peer kept canonical": c.kept, "peer kept marginal": m.kept, "gap in training": m.gap})
    return pd.DataFrame(rows)


def arms_training_result(training: pd.DataFrame) -> str:
    """arms_training_table in words: a line per pair and learner with the update's cost ratio, HACPO's kept shares
    (where the probe clips) and the gap the marginal arm met in training."""
    lines = []
    for r in training.to_dict("records"):
        kept = ("" if math.isnan(r["peer kept canonical"]) else
                f"; peer samples kept inside the clip range {_percent(r['peer kept canonical'])} canonical, "
                f"{_percent(r['peer kept marginal'])} marginal")
        gap = "" if math.isnan(r["gap in training"]) else f"; mean gap {r['gap in training']:.4f} nats"
        lines.append(f"- `{r['comparison']}`, learner {r['learner']} ({r['runs']} runs): update "
                     f"{r['update ratio']:.2f}x the canonical's wall time per step{kept}{gap}.")
    return "\n".join(lines)


def _endpoint_reading(row: dict) -> str:
    """'overall +0.003 [-0.004, +0.010], no difference detected (inside +-0.01: yes)' from a marginal_arms_table
    row; 'overall not run' where the pair has no runs."""
    if not row["difference"]:
        return f"{row['endpoint']} not run"
    margin = f" ({INSIDE}: {row[INSIDE]})" if row[INSIDE] else ""
    return f"{row['endpoint']} {row['difference']} {row['95% t over warm-ups']}, {row['reading']}{margin}"


def marginal_arms_result(arms: pd.DataFrame, verdicts: pd.DataFrame) -> str:
    """The arms' result in words, on this substrate: a line per (marginal, canonical) pair with each endpoint's
    difference, interval, reading and whether the interval lies inside the ledger's margin, then which ledger
    verdicts the marginal arm changes. arms: marginal_arms_table; verdicts: marginal_ledger_verdicts."""
    lines = [f"- `{comparison}`, {rows['warm-ups x seeds'].iloc[0]} warm-ups x seeds: "
             + "; ".join(_endpoint_reading(r) for r in rows.to_dict("records")) + ", on this substrate."
             for comparison, rows in arms.groupby("comparison", sort=False)]
    if verdicts.empty:
        return "\n".join([*lines, "- No claim of the ledger reads these arms."])
    changed = verdicts[verdicts["same verdict"] == "no"]
    edge = verdicts[(verdicts["same verdict"] == "yes") & (verdicts["near the alpha edge only with"] != "")]
    lines.append(f"- The ledger's claims on these arms: {len(verdicts) - len(changed)} of {len(verdicts)} verdicts "
                 f"are the same with the marginal arm" + (": " + "; ".join(
                     f"`{r['comparison']}` ({r['family']}) goes from {r['canonical: verdict']} to "
                     f"{r['marginal: verdict']}" for r in changed.to_dict("records")) if len(changed) else "")
                 + ("; " + ", ".join(f"`{r['comparison']}` ({r['family']}) is near the alpha edge with the "
                                     f"{r['near the alpha edge only with']}"
                                     for r in edge.to_dict("records")) if len(edge) else "") + ".")
    return "\n".join(lines)
