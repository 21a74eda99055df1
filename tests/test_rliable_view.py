"""rliable's view (mrl.reports.rliable_view): its run matrix, its scores, its bootstrap, which resamples warm-ups
(each with all its runs), and its paired probability of improvement."""
import numpy as np
import pandas as pd
import pytest
from rliable import metrics

from mrl.reports.rliable_view import (aggregate_table, improvement_table, paired_wins, rliable_sentence, run_scores,
                                      warmup_interval)


@pytest.fixture(autouse=True)
def fewer_resamples(monkeypatch):
    """200 bootstrap resamples instead of REPS: these tests check what is resampled and how, which any number shows."""
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


def test_the_bootstrap_resamples_warmups_whole():
    """A warm-up's runs move together: two warm-ups whose runs are all equal within each give an interval whose
    bounds are means of whole warm-ups (0, 0.5 or 1 here), never a mixture of runs across them."""
    groups = [np.zeros(4), np.ones(4)]
    low, high = warmup_interval(groups, np.mean)
    assert {low, high} <= {0.0, 0.5, 1.0} and low < high
    assert np.isnan(warmup_interval([np.ones(3)], np.mean)).all()   # one warm-up: no interval


def test_the_probability_of_improvement_is_paired_run_by_run():
    """X beats Y on every (warm-up, seed, policy) though Y's best runs are better than X's worst: paired, P = 1;
    rliable's unpaired P(X > Y) would be far below."""
    x = runs("sgt", 0.51)
    y = runs("grpo", 0.5)
    values = pd.DataFrame(x + y)
    wins = paired_wins(values, "sgt", "grpo")
    assert len(wins) == 16 and wins.eq(1.0).all()
    table = improvement_table(values, [("sgt", "grpo")]).iloc[0]
    assert table["P(X > Y)"] == 1.0 and table["warm-ups"] == 4 and table["paired runs"] == 16
    unpaired = metrics.probability_of_improvement(run_scores(values, "sgt").to_numpy(),
                                                  run_scores(values, "grpo").to_numpy())
    assert unpaired < 0.7
    same = improvement_table(pd.DataFrame(runs("sgt", 0.5) + runs("grpo", 0.5)), [("sgt", "grpo")]).iloc[0]
    assert same["P(X > Y)"] == 0.5


def test_the_aggregates_are_rliables_scores_with_their_intervals():
    values = pd.DataFrame(runs("sgt", 0.6) + runs("grpo", 0.5))
    table = aggregate_table(values, ["grpo", "sgt"]).set_index(["arm", "policy", "metric"])
    scores = run_scores(values, "sgt")
    assert table.loc[("sgt", "B", "IQM"), "estimate"] == pytest.approx(metrics.aggregate_iqm(scores[["B"]].to_numpy()))
    assert table.loc[("sgt", "A", "mean"), "estimate"] == pytest.approx(scores["A"].mean())
    assert (table.low <= table.estimate).all() and (table.estimate <= table.high).all()
    improvement = improvement_table(values, [("sgt", "grpo")])
    assert "P(sgt > grpo) = " in rliable_sentence(table.reset_index(), improvement)
    assert (table["warm-ups"] == 4).all()


def test_the_interval_is_the_same_for_the_same_seed():
    values = pd.DataFrame(runs("sgt", 0.6) + runs("grpo", 0.5))
    pd.testing.assert_frame_equal(aggregate_table(values, ["sgt"]), aggregate_table(values, ["sgt"]))
