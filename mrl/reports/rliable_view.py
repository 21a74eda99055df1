"""The view RL readers expect, after rliable (Agarwal et al. 2021): per arm and policy the mean and the interquartile
mean (IQM) of the runs' endpoint with bootstrap intervals, and the probability that a run of one arm beats a run of
the other, P(X > Y), with its stratified bootstrap interval.

The scores and the plot are rliable's (`rliable.metrics`, `rliable.plot_utils`). Its bootstrap (`rliable.library`)
is not used: it imports `arch` < 8, and arch 7.2 fails to import under pandas 3 (`deprecate_kwarg() missing 1
required positional argument`). scipy.stats.bootstrap does the same resampling: given one sample per task (and,
for P(X > Y), X's and Y's apart), it resamples each independently, which is rliable's stratified (independent)
bootstrap.

Descriptive, beside the ledgers' tests and never deciding a verdict: rliable treats every run as an independent draw
within its task (here, a policy), while this package's runs are nested in warm-ups (RL seeds within zoo seeds) and
paired across arms (the same warm-up and RL seed). Its intervals therefore cover the spread of runs, not of warm-ups,
and P(X > Y) compares runs unpaired; the registered test and the ledger read the paired difference with a t interval
over warm-ups. The tables and the figure say so.
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


def stratified_interval(samples: list[np.ndarray], statistic, seed: int = 0) -> tuple[float, float]:
    """The LEVEL percentile interval of statistic(*samples) under a bootstrap that resamples each sample apart
    (scipy.stats.bootstrap, paired=False, REPS resamples, a Generator seeded with `seed`). samples: 1-D arrays, one
    per stratum (a task, or one arm's runs on a task)."""
    result = stats.bootstrap(tuple(samples), statistic, n_resamples=REPS, vectorized=False, method="percentile",
                             confidence_level=LEVEL, rng=np.random.default_rng(seed))
    return float(result.confidence_interval.low), float(result.confidence_interval.high)


def run_scores(values: pd.DataFrame, probe: str, column: str = "overall") -> pd.DataFrame:
    """An arm's runs as rliable reads them: a (runs, tasks) frame of `column`, one row per (zoo seed, RL seed) in
    sorted order, one column per policy (the task). values: endpoint_values rows (pairing, probe, policy, seed,
    zoo_seed, overall, weak), one per run and policy (a duplicate raises). Runs missing a policy are left out."""
    runs = values[values.probe == probe].pivot(index=["zoo_seed", "seed"], columns="policy", values=column)
    return runs.dropna().sort_index()


def aggregate_table(values: pd.DataFrame, probes: list[str], column: str = "overall", seed: int = 0) -> pd.DataFrame:
    """Per arm, policy and metric (METRICS): the score over the arm's runs on that policy and its LEVEL bootstrap
    interval over those runs (stratified_interval). Per policy, because the policies' accuracies sit on different
    scales and rliable's aggregates assume scores normalised across tasks. Columns arm, policy, metric, runs,
    estimate, low, high."""
    rows = []
    for probe in probes:
        scores = run_scores(values, probe, column)
        for policy in scores.columns:
            runs = scores[policy].to_numpy()
            for name, metric in METRICS.items():
                low, high = stratified_interval([runs], lambda r, metric=metric: metric(r[:, None]), seed)
                rows.append({"arm": probe, "policy": policy, "metric": name, "runs": len(runs),
                             "estimate": float(metric(runs[:, None])), "low": low, "high": high})
    return pd.DataFrame(rows)


def improvement_table(values: pd.DataFrame, pairs: list[tuple[str, str]], column: str = "overall",
                      seed: int = 0) -> pd.DataFrame:
    """Per (X, Y) pair: P(X > Y), the probability that a run of X beats a run of Y on the same task (a Mann-Whitney
    U over the runs, ties counting one half, averaged over the tasks; rliable.metrics.probability_of_improvement),
    with its LEVEL stratified independent bootstrap interval (X's and Y's runs resampled apart within each task);
    columns X, Y, runs X, runs Y, P(X > Y), low, high."""
    rows = []
    for x, y in pairs:
        sx, sy = run_scores(values, x, column).to_numpy(), run_scores(values, y, column).to_numpy()
        tasks = sx.shape[1]
        low, high = stratified_interval(
            [*sx.T, *sy.T], lambda *s: metrics.probability_of_improvement(np.column_stack(s[:tasks]),
                                                                           np.column_stack(s[tasks:])), seed)
        rows.append({"X": x, "Y": y, "runs X": sx.shape[0], "runs Y": sy.shape[0],
                     "P(X > Y)": float(metrics.probability_of_improvement(sx, sy)), "low": low, "high": high})
    return pd.DataFrame(rows)


def rliable_sentence(aggregates: pd.DataFrame, improvement: pd.DataFrame) -> str:
    """The rliable view in words, from its two tables: each pair's P(X > Y) with its interval, and each arm's IQM per
    policy, with what the intervals cover."""
    iqm = aggregates[aggregates.metric == "IQM"].to_dict("records")
    arms = "; ".join(f"`{r['arm']}` on {r['policy']} {r['estimate']:.3f} [{r['low']:.3f}, {r['high']:.3f}]"
                     for r in iqm)
    pairs = "; ".join(f"P({r['X']} > {r['Y']}) = {r['P(X > Y)']:.2f} [{r['low']:.2f}, {r['high']:.2f}] over "
                      f"{r['runs X']} and {r['runs Y']} runs" for r in improvement.to_dict("records"))
    return (f"As rliable reads the runs (descriptive): {pairs}; the IQM of the runs' accuracy per arm and policy "
            f"{arms}. Its {LEVEL:.0%} bootstrap intervals treat each run as independent within its policy and compare "
            f"the arms' runs unpaired, so they cover the spread of runs, not of warm-ups, and decide nothing here.")


def rliable_figure(aggregates: pd.DataFrame, improvement: pd.DataFrame):
    """One figure, two panels: each arm's IQM per policy with its interval, and each pair's P(X > Y) with its
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
    right.set_title("P(a run of X beats a run of Y)", fontsize=10)
    fig.suptitle(f"rliable's view (descriptive): {LEVEL:.0%} bootstrap over runs, not warm-ups", fontsize=10)
    fig.tight_layout()
    return fig
