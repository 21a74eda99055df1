"""The claims ledger's pre-registered analysis on hand-made runs with known answers: the endpoint, the warm-up as
the unit, Holm, and the effect-size-aware verdicts."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as student_t

from mrl.reports.claims import (CLAIMS, MARGIN, Claim, claim_tests, claims_ledger, endpoint_values, evidence_table,
                                hierarchical_bootstrap, holm, ledger_interval_count, ledger_sentence, ledger_table,
                                unit_differences, verdict)
from mrl.reports.paired import chance_note

FORMS = {"A": ("S1", "S3", "S2"), "B": ("S1", "S2", "S3")}
"""policy: (shared form, own form, weak form)"""


def make_evals(effects: dict, zoos=range(5), seeds=(0, 1), noise=0.0, start=0.1) -> pd.DataFrame:
    """Evals of the held-out grid: every probe in `effects` ({probe: its endpoint gain over grpo on every form}), each
    policy's accuracies constant after step 0 (so the endpoint is the last three evaluations' value), plus a seeded
    per-run noise."""
    rng = np.random.default_rng(0)
    rows = []
    for zoo in zoos:
        for seed in seeds:
            for probe, gain in {"grpo": 0.0, **effects}.items():
                for policy, (shared, own, weak) in FORMS.items():
                    bump = gain + noise * rng.standard_normal()
                    for step in (0, 10, 20, 30, 40):
                        for skill, base in ((shared, 0.8), (own, 0.7), (weak, start + 0.02 * zoo)):
                            value = base if step == 0 else base + 0.1 + bump
                            rows.append({"pairing": "A+B", "probe": probe, "policy": policy, "seed": seed,
                                         "zoo_seed": zoo, "step": step, "rollouts": step * 128, "split": "held-out",
                                         "skill": skill, "accuracy": value})
    return pd.DataFrame(rows)


def test_the_endpoint_averages_the_last_three_evaluations():
    evals = make_evals({})
    evals.loc[(evals.step == 10), "accuracy"] = 0.0   # an evaluation before the last three: not in the endpoint
    evals.loc[(evals.step == 40) & (evals.skill == "S2") & (evals.policy == "A"), "accuracy"] = 0.5
    values = endpoint_values(evals).set_index(["probe", "policy", "zoo_seed", "seed"])
    row = values.loc[("grpo", "A", 0, 0)]
    assert row["weak"] == pytest.approx((0.2 + 0.2 + 0.5) / 3) and row["weak start"] == pytest.approx(0.1)
    assert row["overall"] == pytest.approx(np.mean([np.mean([0.9, 0.8, 0.2])] * 2 + [np.mean([0.9, 0.8, 0.5])]))


def test_the_endpoint_leaves_out_step_0_when_a_run_has_few_evaluations():
    evals = make_evals({})
    evals = evals[evals.step.isin([0, 10, 20])]   # evaluations at 0, 10 and 20: the endpoint is 10 and 20
    row = endpoint_values(evals).set_index(["probe", "policy", "zoo_seed", "seed"]).loc[("grpo", "A", 0, 0)]
    assert row["weak"] == pytest.approx(0.2)


def test_the_warm_up_is_the_unit_and_its_interval_has_zoos_minus_one_dof():
    evals = make_evals({"sgt": 0.03}, noise=0.01)
    ledger = claims_ledger(evals).set_index("comparison")
    row = ledger.loc["sgt - grpo"]
    units = unit_differences(endpoint_values(evals), "sgt", "grpo", "overall")
    d = units.groupby("zoo_seed")["diff"].mean().to_numpy()
    half = student_t.ppf(0.975, 4) * d.std(ddof=1) / math.sqrt(5)
    assert row.zoos == 5 and row["seeds per zoo"] == 2
    assert row["diff"] == pytest.approx(d.mean()) and row.low == pytest.approx(d.mean() - half)
    assert row["positive units"] == "10/10"


def test_rl_seeds_pooled_across_warm_ups_would_overstate_the_evidence():
    """Two warm-ups with opposite effects: pooled as independent pairs the mean looks firm; by warm-up it is not."""
    evals = make_evals({"sgt": 0.0}, zoos=(0, 1), seeds=(0, 1, 2))
    values = endpoint_values(evals)
    sgt = (values.probe == "sgt")
    values.loc[sgt & (values.zoo_seed == 0), "overall"] += 0.10
    values.loc[sgt & (values.zoo_seed == 1), "overall"] += 0.02
    index = ["policy", "zoo_seed", "seed"]
    pairs = (values[sgt].set_index(index).overall - values[values.probe == "grpo"].set_index(index).overall)
    pooled = student_t.sf(pairs.mean() / (pairs.std(ddof=1) / math.sqrt(len(pairs))), len(pairs) - 1)
    units = unit_differences(values, "sgt", "grpo", "overall")
    by_zoo = claim_tests(CLAIMS[0], units.groupby("zoo_seed")["diff"].mean().to_numpy())["p support"]
    assert pooled < 0.001 and by_zoo > 0.05    # 12 pairs look decisive; two warm-ups (df = 1) cannot settle it


def test_hierarchical_bootstrap_covers_the_warm_up_spread():
    evals = make_evals({"sgt": 0.03}, noise=0.02)
    values = endpoint_values(evals)
    low, high = hierarchical_bootstrap(values, "sgt", "grpo", "overall")
    assert low < 0.03 < high and high - low < 0.1
    spread = endpoint_values(make_evals({"sgt": 0.0}))   # no seed noise: all the spread is between warm-ups
    spread.loc[spread.probe == "sgt", "overall"] += 0.01 * spread.loc[spread.probe == "sgt", "zoo_seed"]
    low, high = hierarchical_bootstrap(spread, "sgt", "grpo", "overall")
    assert high - low > 0.01   # it resamples the warm-ups


def test_holm_by_hand():
    adjusted = holm([0.01, 0.04, 0.03, float("nan")])
    assert adjusted[0] == pytest.approx(0.03) and adjusted[2] == pytest.approx(0.06)
    assert adjusted[1] == pytest.approx(0.06) and math.isnan(adjusted[3])


BETTER = Claim("P", "x beats y", "x", "y", "better", 0.05, "")


@pytest.mark.parametrize("low, high, p_support, p_contradiction, expected", [
    (0.06, 0.10, 0.001, 0.9, "supported"),
    (0.01, 0.03, 0.01, 0.01, "supported, smaller than the paper's"),   # real, and below the paper's effect
    (-0.03, 0.02, 0.4, 0.001, "contradicted: smaller than the paper's"),  # rules the paper's +0.05 out
    (-0.09, -0.03, 0.9, 0.001, "contradicted: the opposite sign"),
    (-0.02, 0.09, 0.3, 0.4, "inconclusive"),                             # holds both 0 and +0.05
])
def test_verdicts_read_the_interval_against_0_and_the_papers_effect(low, high, p_support, p_contradiction, expected):
    assert verdict(BETTER, low, high, p_support, p_contradiction) == expected


def test_no_loss_and_no_gain_claims_use_the_margin():
    no_loss = Claim("P", "", "x", "y", "no_loss", 0.0, "")
    no_gain = Claim("P", "", "x", "y", "no_gain", 0.0, "")
    small = np.array([0.001, -0.002, 0.0015, 0.0, -0.001])
    assert claim_tests(no_loss, small)["p support"] < 0.05 and claim_tests(no_gain, small)["p support"] < 0.05
    rescue = small + 0.08   # a real gain well beyond the margin: no_gain contradicted, no_loss holds
    assert claim_tests(no_gain, rescue)["p contradiction"] < 0.05
    loss = small - 0.08     # a clear loss: no_loss contradicted, and no gain supported (non-superiority)
    assert claim_tests(no_loss, loss)["p contradiction"] < 0.05 and claim_tests(no_gain, loss)["p support"] < 0.05
    assert MARGIN == 0.01


def test_the_ledger_on_known_effects():
    """SGT +0.03 over GRPO everywhere; PRP 0.05 below SGT; nothing else ran."""
    evals = make_evals({"sgt": 0.03, "prp": -0.02}, noise=0.002)
    ledger = claims_ledger(evals).set_index("comparison")
    assert ledger.loc["sgt - grpo", "verdict"] == "supported"
    assert ledger.loc["prp - sgt", "verdict"] == "supported"   # -0.05, as the paper's -0.050
    assert (ledger.drop(index=["sgt - grpo", "prp - sgt"]).verdict == "not run").all()
    table = ledger_table(ledger.reset_index())
    assert table.loc[0, "warm-ups x seeds"] == "5 x 2" and table.loc[0, "paper's effect"] == "+0.013"
    sentence = ledger_sentence(ledger.reset_index(), "overall held-out accuracy")
    assert sentence.startswith("On overall held-out accuracy, 2 claims were judged on 5 warm-ups: 2 supported")
    assert ledger_interval_count(ledger.reset_index()) == 2
    evidence = evidence_table(evals)
    assert list(evidence.columns[-6:]) == ["zoo 0", "zoo 1", "zoo 2", "zoo 3", "zoo 4", "positive"]


def test_an_effect_far_below_the_papers_is_contradicted():
    evals = make_evals({"hacpo (minibatches=4)": 0.0, "gspo (minibatches=4)": 0.0, "naive (minibatches=4)": 0.0},
                       noise=0.002)
    ledger = claims_ledger(evals).set_index("comparison")
    # the paper's +0.032 lies far above an interval around 0; so does its -0.069 for naive sharing, below it
    smaller = "contradicted: smaller than the paper's"
    assert ledger.loc["hacpo (minibatches=4) - gspo (minibatches=4)", "verdict"] == smaller
    assert ledger.loc["naive (minibatches=4) - gspo (minibatches=4)", "verdict"] == smaller


def test_fewer_than_three_warm_ups_get_no_verdict():
    ledger = claims_ledger(make_evals({"sgt": 0.05}, zoos=(0, 1), noise=0.001)).set_index("comparison")
    assert ledger.loc["sgt - grpo", "verdict"] == "too few warm-ups (2)"
    assert ledger_sentence(ledger.reset_index(), "x").startswith("No claim has a verdict on x: 1 ran on 2 warm-up(s)")


def test_a_claim_whose_paper_effect_has_the_other_sign_is_refused():
    with pytest.raises(ValueError, match="other sign"):
        Claim("P", "x beats y", "x", "y", "better", -0.01, "")


def test_the_chance_note_counts_the_intervals():
    assert chance_note(40) == ("The table holds 40 intervals; at 95%, about 2.0 of them would exclude 0 by chance "
                               "alone if no effect were real.")


def test_the_endpoint_table_intervals_are_over_warm_ups():
    from mrl.reports.claims import endpoint_table

    numbers, table = endpoint_table(make_evals({"sgt": 0.03}, noise=0.002))
    sgt = numbers[(numbers.probe == "sgt") & (numbers.policy == "A")].iloc[0]
    assert sgt["weak Δ n"] == 5 and sgt["weak Δ real"] and sgt["weak Δ diff"] == pytest.approx(0.03, abs=0.003)
    assert set(table.columns) >= {"warm-ups", "Δ weak vs grpo [95% CI]", "Δ overall vs grpo [95% CI]"}


def test_the_base_rate_figure_has_a_point_per_policy_and_warm_up():
    import matplotlib

    matplotlib.use("Agg")
    from mrl.reports.claims import base_rate_figure

    fig = base_rate_figure(make_evals({"sgt": 0.03, "prp": 0.01}))
    assert len(fig.axes) == 2
    assert sum(len(c.get_offsets()) for c in fig.axes[0].collections) == 10   # 2 policies x 5 warm-ups
