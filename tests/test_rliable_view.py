"""rliable's view (mrl.reports.rliable_view): its run matrix, its scores, and its stratified bootstrap, which
resamples runs within each task and never across."""
import numpy as np
import pandas as pd
import pytest
from rliable import metrics

from mrl.reports.rliable_view import (aggregate_table, improvement_table, rliable_sentence, run_scores,
                                      stratified_interval)


@pytest.fixture(autouse=True)
def fewer_resamples(monkeypatch):
    """200 bootstrap resamples instead of REPS: these tests check what is resampled and how, which any number shows;
    rliable's P(X > Y) runs in Python once per resample (34 s of make test under load at 2,000)."""
    monkeypatch.setattr("mrl.reports.rliable_view.REPS", 200)


def runs(probe: str, level: float, zoos: int = 4, seeds: int = 2) -> list[dict]:
    """Endpoint rows of one arm: policy A at `level` + a spread over runs, policy B 0.3 below it."""
    return [{"pairing": "A+B", "probe": probe, "policy": policy, "seed": seed, "zoo_seed": zoo,
             "overall": level - 0.3 * (policy == "B") + 0.01 * (zoo * seeds + seed)}
            for zoo in range(zoos) for seed in range(seeds) for policy in ("A", "B")]


def test_the_run_matrix_has_a_row_per_run_and_a_column_per_policy():
    scores = run_scores(pd.DataFrame(runs("sgt", 0.6)), "sgt")
    assert scores.shape == (8, 2) and list(scores.columns) == ["A", "B"]
    assert scores.iloc[0, 0] == pytest.approx(0.6) and scores.iloc[0, 1] == pytest.approx(0.3)
    with pytest.raises(ValueError):   # a run counted twice is refused, not averaged
        run_scores(pd.DataFrame(runs("sgt", 0.6) + runs("sgt", 0.6)[:1]), "sgt")


def test_the_bootstrap_resamples_within_each_sample_and_each_apart():
    """Within: the mean of the first sample stays inside its own range, never mixed with the second's. Apart: two
    equal samples resampled with shared indices would give mean(x) - mean(y) = 0 every time; drawn apart they
    spread."""
    a, b = np.array([0.1, 0.2, 0.3]), np.array([10.0, 20.0, 30.0])
    low, high = stratified_interval([a, b], lambda x, y: np.mean(x))
    assert 0.1 <= low <= high <= 0.3
    low, high = stratified_interval([a, a.copy()], lambda x, y: np.mean(x) - np.mean(y))
    assert low < 0 < high


def test_a_dominating_arm_improves_with_probability_one():
    values = pd.DataFrame(runs("sgt", 0.9) + runs("grpo", 0.5))
    table = improvement_table(values, [("sgt", "grpo")]).iloc[0]
    assert table["P(X > Y)"] == 1.0 and table["low"] == 1.0 and table["runs X"] == 8
    same = improvement_table(pd.DataFrame(runs("sgt", 0.5) + runs("grpo", 0.5)), [("sgt", "grpo")]).iloc[0]
    assert same["P(X > Y)"] == 0.5 and same["low"] < 0.5 < same["high"]


def test_the_aggregates_are_rliables_scores_with_their_intervals():
    values = pd.DataFrame(runs("sgt", 0.6) + runs("grpo", 0.5))
    table = aggregate_table(values, ["grpo", "sgt"]).set_index(["arm", "policy", "metric"])
    scores = run_scores(values, "sgt")
    assert table.loc[("sgt", "B", "IQM"), "estimate"] == pytest.approx(metrics.aggregate_iqm(scores[["B"]].to_numpy()))
    assert table.loc[("sgt", "A", "mean"), "estimate"] == pytest.approx(scores["A"].mean())
    assert (table.low <= table.estimate).all() and (table.estimate <= table.high).all()
    improvement = improvement_table(values, [("sgt", "grpo")])
    assert rliable_sentence(table.reset_index(), improvement).startswith("As rliable reads the runs (descriptive): "
                                                                         "P(sgt > grpo) = ")


def test_the_interval_is_the_same_for_the_same_seed():
    values = pd.DataFrame(runs("sgt", 0.6) + runs("grpo", 0.5))
    pd.testing.assert_frame_equal(aggregate_table(values, ["sgt"]), aggregate_table(values, ["sgt"]))
