"""The view RL readers expect, after rliable (Agarwal et al. 2021): per arm and policy the mean and the interquartile
mean (IQM) of the runs' endpoint, and the probability that a run of one arm beats the run of the other made on the
same warm-up, RL seed and policy, each with a bootstrap interval that resamples warm-ups.

The scores are rliable's (`rliable.metrics`), and so is the plot (`rliable.plot_utils`). Its bootstrap
(`rliable.library`) is not used: it imports `arch` < 8, and arch 7.2 fails to import under pandas 3. Its resampling
would also be the wrong one here. rliable treats every run as an independent draw within its task, but this package's
runs are nested in warm-ups (RL seeds within zoo seeds), and two RL seeds of one warm-up reach nearly the same
accuracy, so the runs of a dozen warm-ups are about a dozen units, and an interval over runs is too narrow. Here scipy.stats.bootstrap resamples the warm-ups,
each with all its runs (the unit of analysis). The probability of improvement is paired: a run of X is compared with
the run of Y on its own warm-up, RL seed and policy (ties count one half), not with every run of Y.

Descriptive, beside the registered tests and the ledgers, and never deciding a verdict.
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from rliable import metrics
from scipy import stats

REPS = 2000
"""bootstrap resamples (rliable's default is 50,000; 2,000 settles a 95% percentile interval's bounds to about 0.002
here)"""
LEVEL = 0.95
"""the intervals' coverage"""
METRICS = {"mean": metrics.aggregate_mean, "IQM": metrics.aggregate_iqm}
"""the aggregate scores per arm (rliable.metrics)"""


def warmup_interval(groups: list[np.ndarray], statistic, seed: int = 0) -> tuple[float, float]:
    """The LEVEL percentile interval of statistic(values) under a bootstrap that resamples the warm-ups, each with
    all its values: groups holds one array per warm-up (its runs' values, or its paired comparisons), and a resample
    draws len(groups) warm-ups with replacement and concatenates theirs (scipy.stats.bootstrap over the warm-ups'
    indices, REPS resamples, a Generator seeded with `seed`). NaN with fewer than 2 warm-ups."""
    if len(groups) < 2:
        return float("nan"), float("nan")
    result = stats.bootstrap((np.arange(len(groups)),),
                             lambda picked: statistic(np.concatenate([groups[int(k)] for k in picked])),
                             n_resamples=REPS, vectorized=False, method="percentile", confidence_level=LEVEL,
                             rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def run_scores(values: pd.DataFrame, probe: str, column: str = "overall") -> pd.DataFrame:
    """An arm's runs as rliable reads them: a (runs, tasks) frame of `column`, one row per (zoo seed, RL seed) in
    sorted order, one column per policy (the task). values: endpoint_values rows (pairing, probe, policy, seed,
    zoo_seed, overall, weak), one per run and policy (a duplicate raises). Runs missing a policy are left out."""
    runs = values[values.probe == probe].pivot(index=["zoo_seed", "seed"], columns="policy", values=column)
    return runs.dropna().sort_index()


def aggregate_table(values: pd.DataFrame, probes: list[str], column: str = "overall", seed: int = 0) -> pd.DataFrame:
    """Per arm, policy and metric (METRICS): the score over the arm's runs on that policy and its LEVEL bootstrap
    interval over warm-ups (warmup_interval). Per policy, because the policies' accuracies sit on different scales
    and rliable's aggregates assume scores normalised across tasks. Columns arm, policy, metric, warm-ups, runs,
    estimate, low, high."""
    rows = []
    for probe in probes:
        scores = run_scores(values, probe, column)
        for policy in scores.columns:
            groups = [group.to_numpy() for _, group in scores[policy].groupby(level="zoo_seed")]
            runs = scores[policy].to_numpy()
            for name, metric in METRICS.items():
                low, high = warmup_interval(groups, lambda r, metric=metric: metric(r[:, None]), seed)
                rows.append({"arm": probe, "policy": policy, "metric": name, "warm-ups": len(groups),
                             "runs": len(runs), "estimate": float(metric(runs[:, None])), "low": low, "high": high})
    return pd.DataFrame(rows)


def paired_wins(values: pd.DataFrame, x: str, y: str, column: str = "overall") -> pd.Series:
    """Per (zoo seed, RL seed, policy) where both arms ran: 1 where X's run beat Y's, 0.5 for a tie, 0 else."""
    sx, sy = run_scores(values, x, column).stack(), run_scores(values, y, column).stack()
    both = sx.index.intersection(sy.index)
    a, b = sx[both], sy[both]
    return ((a > b).astype(float) + 0.5 * (a == b)).rename("win")


def improvement_table(values: pd.DataFrame, pairs: list[tuple[str, str]], column: str = "overall",
                      seed: int = 0) -> pd.DataFrame:
    """Per (X, Y) pair: the paired probability of improvement, P(X > Y) = the share of (warm-up, RL seed, policy)
    on which X's run beat Y's (ties one half), with its LEVEL bootstrap interval over warm-ups; columns X, Y,
    warm-ups, paired runs, P(X > Y), low, high."""
    rows = []
    for x, y in pairs:
        wins = paired_wins(values, x, y, column)
        groups = [group.to_numpy() for _, group in wins.groupby(level="zoo_seed")]
        low, high = warmup_interval(groups, np.mean, seed)
        rows.append({"X": x, "Y": y, "warm-ups": len(groups), "paired runs": len(wins),
                     "P(X > Y)": float(wins.mean()), "low": low, "high": high})
    return pd.DataFrame(rows)


def rliable_sentence(aggregates: pd.DataFrame, improvement: pd.DataFrame) -> str:
    """The rliable view in words, from its two tables: each pair's P(X > Y) with its interval, and each arm's IQM per
    policy, with what the intervals cover."""
    iqm = aggregates[aggregates.metric == "IQM"].to_dict("records")
    arms = "; ".join(f"`{r['arm']}` on {r['policy']} {r['estimate']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
                     for r in iqm)
    pairs = "; ".join(f"P({r['X']} > {r['Y']}) = {r['P(X > Y)']:.2f} [{r['low']:.2f}, {r['high']:.2f}] over "
                      f"{r['paired runs']} paired runs on {r['warm-ups']} warm-ups" for r in improvement.to_dict("records"))
    return (f"As rliable reads the runs (descriptive): a run of X beats the run of Y on its own warm-up, RL seed and "
            f"policy with {pairs}; the IQM of the runs' accuracy per arm and policy {arms}. The {LEVEL:.0%} bootstrap "
            f"intervals resample warm-ups, the unit of analysis, each with all its runs; they decide nothing here.")


def rliable_figure(aggregates: pd.DataFrame, improvement: pd.DataFrame):
    """One figure, two panels: each arm's IQM per policy with its interval, and each pair's paired P(X > Y) with its
    interval (rliable's probability-of-improvement plot), the intervals' coverage in the title."""
    import matplotlib.pyplot as plt
    from rliable import plot_utils

    from mrl.reports.palette import probe_colour

    iqm = aggregates[aggregates.metric == "IQM"].reset_index(drop=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9.0, 0.9 + 0.4 * max(len(iqm), 2 * len(improvement), 2)),
                                      gridspec_kw={"width_ratios": [1, 1.2]})
    for i, r in iqm.iterrows():
        left.errorbar(r.estimate, i, xerr=[[r.estimate - r.low], [r.high - r.estimate]], fmt="o", capsize=4,
                      color=probe_colour(r.arm))
    left.set_yticks(range(len(iqm)), [f"{r.arm}, policy {r.policy} ({r.runs} runs)" for r in iqm.itertuples()])
    left.set_ylim(-0.6, len(iqm) - 0.4)
    left.set_xlabel("IQM of held-out accuracy")
    left.set_title("IQM per arm and policy", fontsize=10)
    keys = [f"{x}|{y}" for x, y in zip(improvement.X, improvement.Y)]
    plot_utils.plot_probability_of_improvement(
        dict(zip(keys, improvement["P(X > Y)"])),
        {k: np.array([lo, hi]) for k, lo, hi in zip(keys, improvement.low, improvement.high)}, pair_separator="|",
        ax=right, colors=[probe_colour(x) for x in improvement.X], xticks=[0, 0.25, 0.5, 0.75, 1],
        ticklabelsize="medium", labelsize="medium", left_ylabel="X", right_ylabel="Y")
    right.set_xlim(0, 1)
    right.axvline(0.5, color="0.4", linewidth=0.8, linestyle=":")
    right.set_title("P(X's run beats Y's on its warm-up, seed, policy)", fontsize=10)
    fig.suptitle(f"rliable's view (descriptive): {LEVEL:.0%} bootstrap intervals over warm-ups", fontsize=10)
    fig.tight_layout()
    return fig
