"""The claims ledger's analysis on hand-made runs with known answers: the endpoint, the warm-up as the unit, rule
v2's one Holm family and its verdicts, leave-one-warm-up-out, the sign-flip p, the power and the committed per-run
values from which every verdict is recomputed."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as student_t

from mrl.profiles import load_profile
from mrl.reports.claims import (CLAIMS, claims_ledger, claims_power, endpoint_values, evidence_table,
                                hierarchical_bootstrap, ledger_interval_count, ledger_sentence, ledger_table,
                                like_for_like_table, read_endpoint_values, replication_column, unit_differences,
                                variance_split)
from mrl.reports.claims_rule import (MARGIN, Claim, Verdict, VerdictKind, claim_hypotheses, judge, leave_one_out,
                                     v1_tests, verdict_v2)
from mrl.reports.statistics import holm_adjusted as holm
from mrl.reports.statistics import sign_flip_p_value as sign_flip_p
from mrl.reports.statistics import t_p_value, t_p_value_at_df, t_power, warmups_for_power
from mrl.reports.paired import chance_note
from mrl.runtime.results import repo_root

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
    ledger = claims_ledger(endpoint_values(evals)).set_index("comparison")
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
    by_zoo = t_p_value(units.groupby("zoo_seed")["diff"].mean().to_numpy(), 0.0, "greater")
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


@pytest.mark.parametrize("diff, p_sign, p_size, expected", [
    (0.08, 0.001, 0.9, "supported"),
    (0.02, 0.01, 0.01, "supported, smaller than the paper's"),        # real, and below the paper's effect
    (-0.005, 0.4, 0.001, "not reproduced at the paper's size"),     # the paper's +0.05 ruled out, sign open
    (-0.06, 0.001, 0.001, "contradicted: the opposite sign"),         # its own two-sided test, read by the sign
    (0.03, 0.3, 0.4, "inconclusive"),                                 # holds both 0 and +0.05
])
def test_rule_v2_verdicts_read_each_label_from_a_holm_adjusted_test(diff, p_sign, p_size, expected):
    assert verdict_v2(BETTER, diff, {"sign": p_sign, "size": p_size}).value == expected


def test_a_claim_is_never_tested_twice_on_one_statistic():
    """Rule v2: a test and its complement are one two-sided test, so the family counts each question once."""
    assert [h.role for h in claim_hypotheses(BETTER)] == ["sign", "size"]
    assert claim_hypotheses(BETTER)[0].alternative == "two-sided"
    assert [h.role for h in claim_hypotheses(Claim("P", "", "x", "y", "worse", None, ""))] == ["sign"]
    for kind, null in (("no_loss", -MARGIN), ("no_gain", MARGIN)):
        (test,) = claim_hypotheses(Claim("P", "", "x", "y", kind, 0.0, ""))
        assert (test.role, test.null, test.alternative) == ("margin", null, "two-sided")
    assert sum(len(claim_hypotheses(c)) for c in CLAIMS) == 13


def test_no_loss_and_no_gain_claims_use_the_margin():
    no_loss = Claim("P", "", "x", "y", "no_loss", 0.0, "")
    no_gain = Claim("P", "", "x", "y", "no_gain", 0.0, "")
    assert verdict_v2(no_loss, 0.001, {"margin": 0.01}) is VerdictKind.SUPPORTED
    assert verdict_v2(no_loss, -0.05, {"margin": 0.01}) is VerdictKind.CONTRADICTED
    assert verdict_v2(no_gain, 0.001, {"margin": 0.01}) is VerdictKind.SUPPORTED
    assert verdict_v2(no_gain, 0.05, {"margin": 0.01}) is VerdictKind.CONTRADICTED
    assert verdict_v2(no_gain, 0.001, {"margin": 0.2}) is VerdictKind.INCONCLUSIVE
    small = np.array([0.001, -0.002, 0.0015, 0.0, -0.001])   # rule v1's complements, kept for the side-by-side
    assert v1_tests(no_loss, small)["support"] < 0.05 and v1_tests(no_gain, small)["support"] < 0.05
    assert MARGIN == 0.01


def test_the_two_sided_p_is_twice_the_smaller_one_sided_p():
    d = np.array([0.01, 0.02, 0.015, 0.03, 0.005])
    one = t_p_value(d, 0.0, "greater")
    assert t_p_value(d, 0.0, "two-sided") == pytest.approx(2 * one)
    assert t_p_value(d, 0.0, "less") == pytest.approx(1 - one)


def test_the_sign_flip_p_enumerates_every_sign_pattern():
    d = np.array([0.03, 0.02, 0.01, 0.04, 0.05])
    assert sign_flip_p(d, 0.0, "greater") == pytest.approx(1 / 32)   # only all-positive is as large
    assert sign_flip_p(d, 0.0, "two-sided") == pytest.approx(2 / 32)  # five warm-ups cannot pass at 0.05
    mixed = np.array([0.03, -0.02, 0.01, 0.04, -0.05])
    flips = [np.mean(np.array(s) * mixed) for s in __import__("itertools").product((1, -1), repeat=5)]
    assert sign_flip_p(mixed, 0.0, "two-sided") == pytest.approx(np.mean(np.abs(flips) >= abs(mixed.mean()) - 1e-15))
    assert sign_flip_p(d, 0.03, "two-sided") == pytest.approx(1.0)   # d - 0.03 has mean 0: every flip is as extreme


def test_power_agrees_with_simulated_t_tests():
    """The noncentral-t power against a Monte Carlo of the same test; tolerance: 4 binomial standard errors."""
    n, effect, sd, alpha, draws = 6, 0.013, 0.0076, 0.05 / 13, 20000
    rng = np.random.default_rng(0)
    samples = rng.normal(effect, sd, size=(draws, n))
    stat = samples.mean(1) / (samples.std(1, ddof=1) / np.sqrt(n))
    simulated = np.mean(np.abs(stat) > student_t.ppf(1 - alpha / 2, n - 1))
    assert t_power(n, effect, sd, alpha) == pytest.approx(simulated,
                                                          abs=4 * np.sqrt(simulated * (1 - simulated) / draws))
    assert warmups_for_power(effect, sd, alpha) == min(m for m in range(3, 50) if t_power(m, effect, sd, alpha) >= 0.8)


def test_the_ledger_on_known_effects():
    """SGT +0.03 over GRPO everywhere; PRP 0.05 below SGT; nothing else ran."""
    evals = make_evals({"sgt": 0.03, "prp": -0.02}, noise=0.002)
    ledger = claims_ledger(endpoint_values(evals)).set_index("comparison")
    assert ledger.loc["sgt - grpo", "verdict"].kind is VerdictKind.SUPPORTED
    assert ledger.loc["prp - sgt", "verdict"].kind is VerdictKind.SUPPORTED   # -0.05, as the paper's -0.050
    assert not ledger.loc["sgt - grpo", "leave-one-out"].fragile and ledger.loc["sgt - grpo", "tests"] == 4
    assert all(v.kind is VerdictKind.NOT_RUN for v in ledger.drop(index=["sgt - grpo", "prp - sgt"]).verdict)
    table = ledger_table(ledger.reset_index())
    assert table.loc[0, "warm-ups x seeds"] == "5 x 2" and table.loc[0, "paper's effect"] == "+0.013"
    sentence = ledger_sentence(ledger.reset_index(), "overall held-out accuracy")
    assert sentence.startswith("On overall held-out accuracy, 2 claims were judged on 5 warm-ups, their 4 tests in "
                               "one Holm family: 2 supported")
    assert ledger_interval_count(ledger.reset_index()) == 2
    assert table.loc[0, "p sign-flip (raw)"] == "0.0625" and table.loc[0, "rule v1"] == "supported"
    evidence = evidence_table(endpoint_values(evals))
    assert list(evidence.columns[-6:]) == ["zoo 0", "zoo 1", "zoo 2", "zoo 3", "zoo 4", "positive"]


def test_an_effect_far_below_the_papers_is_not_reproduced_at_its_size():
    evals = make_evals({"hacpo (minibatches=4)": 0.0, "gspo (minibatches=4)": 0.0, "naive (minibatches=4)": 0.0},
                       noise=0.002)
    ledger = claims_ledger(endpoint_values(evals)).set_index("comparison")
    # the paper's +0.032 lies far above an interval around 0; so does its -0.069 for naive sharing, below it
    for comparison in ("hacpo (minibatches=4) - gspo (minibatches=4)", "naive (minibatches=4) - gspo (minibatches=4)"):
        assert ledger.loc[comparison, "verdict"].label(edge=False) == "not reproduced at the paper's size"
    assert "1 not reproduced at the paper's size" not in ledger_sentence(ledger.reset_index(), "x")
    assert "2 not reproduced at the paper's size (hacpo" in ledger_sentence(ledger.reset_index(), "x")


def test_fewer_than_three_warm_ups_get_no_verdict():
    ledger = claims_ledger(endpoint_values(make_evals({"sgt": 0.05}, zoos=(0, 1), noise=0.001))).set_index(
        "comparison")
    assert ledger.loc["sgt - grpo", "verdict"].label() == "too few warm-ups (2)"
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

    fig = base_rate_figure(endpoint_values(make_evals({"sgt": 0.03, "prp": 0.01})))
    assert len(fig.axes) == 2
    assert sum(len(c.get_offsets()) for c in fig.axes[0].collections) == 10   # 2 policies x 5 warm-ups


def test_one_warm_up_that_carries_a_verdict_is_flagged_fragile():
    """Four warm-ups agree on about +0.02 and one goes the other way: inconclusive on five, supported without it."""
    values = endpoint_values(make_evals({"sgt": 0.0}))
    gain = {0: 0.020, 1: 0.021, 2: 0.019, 3: 0.022, 4: -0.010}
    sgt = values.probe == "sgt"
    values.loc[sgt, "overall"] += values.loc[sgt, "zoo_seed"].map(gain)
    row = claims_ledger(values).set_index("comparison").loc["sgt - grpo"]
    assert row.verdict.kind is VerdictKind.INCONCLUSIVE
    assert row["leave-one-out"].label() == "fragile: without zoo 4, supported"


def test_leave_one_out_reads_the_reduced_sample_at_the_full_samples_critical_value():
    """Dropping a warm-up that does not move the estimate or its SD changes nothing: the four left are read on the
    five's 4 df, so the lost degree of freedom alone cannot flip a verdict."""
    d = pd.Series([0.010, 0.022, 0.016, 0.016, 0.016], index=range(5))
    claim = (Claim("P", "x beats y", "x", "y", "better", None, ""),)
    (full,) = judge(claim, [d.to_numpy()])
    (without,) = leave_one_out(claim, [d], [2])
    assert full["verdict"].kind is VerdictKind.SUPPORTED and without[2].kind is VerdictKind.SUPPORTED
    reduced = d.drop(2).to_numpy()
    assert t_p_value_at_df(reduced, 0.0, "two-sided", 4) < t_p_value(reduced, 0.0, "two-sided")
    assert t_p_value_at_df(reduced, 0.0, "two-sided", 3) == pytest.approx(t_p_value(reduced, 0.0, "two-sided"))


def test_the_secondary_family_describes_and_does_not_judge():
    evals = make_evals({"sgt": 0.03, "prp": -0.02}, noise=0.002)
    secondary = claims_ledger(endpoint_values(evals), "secondary").set_index("comparison")
    assert secondary.loc["sgt - grpo", "verdict"].label(edge=False) == "in the claim's direction"
    assert ledger_sentence(secondary.reset_index(), "x").startswith(
        "On x, 2 claims were described on 5 warm-ups, their 4 tests in one Holm family: 2 in the claim's direction")


def test_the_variance_split_recovers_warm_up_and_seed_spread():
    """Warm-up offsets with SD 0.02 and seed noise with SD 0.01, many warm-ups: the split finds both."""
    rng = np.random.default_rng(1)
    rows = []
    for zoo in range(400):
        offset = rng.normal(0, 0.02)
        for seed in (0, 1):
            noise = rng.normal(0, 0.01)
            for probe, value in (("grpo", 0.5), ("sgt", 0.5 + offset + noise)):
                rows.append({"pairing": "A+B", "probe": probe, "policy": "A", "seed": seed, "zoo_seed": zoo,
                             "overall": value})
    split = variance_split(pd.DataFrame(rows), "sgt", "grpo", "overall")
    assert split["seeds"] == 2
    assert split["between-warm-up SD"] == pytest.approx(0.02, rel=0.15)
    assert split["RL-seed SD"] == pytest.approx(0.01, rel=0.15)


def test_the_power_table_and_the_like_for_like_table():
    evals = make_evals({"sgt": 0.02, "grpo (minibatches=4)": -0.01, "hacpo (minibatches=4)": -0.02}, noise=0.004)
    values = endpoint_values(evals)
    ledger = claims_ledger(values)
    power = claims_power(values, ledger).set_index("comparison")
    assert list(power.index) == ["sgt - grpo"]   # the only claim with a size whose arms ran
    row = power.loc["sgt - grpo"]
    assert row["level"] == pytest.approx(0.05 / row_tests(ledger)) and 0 < row["power"] <= 1
    assert row["warm-ups for 80% (1 RL seed)"] >= row["warm-ups for 80% (2 RL seeds)"]
    like = like_for_like_table(values).set_index("comparison")
    assert set(like.index) == {"grpo (minibatches=4) - grpo", "hacpo (minibatches=4) - grpo (minibatches=4)",
                               "hacpo (minibatches=4) - grpo"}
    assert str(like.loc["grpo (minibatches=4) - grpo", "Δ overall [95% t]"]).startswith("**-0.01")


def row_tests(ledger: pd.DataFrame) -> int:
    return int(ledger.tests.max())


def test_replication_reads_each_verdict_kind():
    kinds = VerdictKind
    primary = pd.DataFrame({"verdict": [Verdict(k) for k in (kinds.SUPPORTED, kinds.OPPOSITE, kinds.INCONCLUSIVE,
                                                              kinds.SMALLER)]})
    second = pd.DataFrame({"verdict": [Verdict(kinds.SUPPORTED, near_edge=True), Verdict(kinds.INCONCLUSIVE),
                                       Verdict(kinds.SUPPORTED), Verdict(kinds.SUPPORTED)]})
    assert replication_column(primary, second) == ["replicated", "not replicated: inconclusive",
                                                   "primary inconclusive; replication supported",
                                                   "replicated"]


def test_the_committed_ledger_is_recomputed_from_its_runs():
    """Every verdict of the committed ledger follows from the committed per-run endpoint values."""
    tables = repo_root() / "paper_tables"
    if not (tables / "claims_runs.csv").exists():
        pytest.skip("the committed ledger predates claims_runs.csv (rule v1): `make reproduce` writes both")
    values = read_endpoint_values(tables / "claims_runs.csv")
    heldout = load_profile("default").experiment("heldout")
    for family, name in (("primary", "claims"), ("secondary", "claims_secondary")):
        committed = pd.read_csv(tables / f"{name}.csv", dtype=str, keep_default_na=False)
        ledger = claims_ledger(values[values.zoo_seed.isin(heldout.zoo_seeds)], family)
        recomputed = ledger_table(ledger).astype(str).replace("nan", "")
        for column in ("difference", "95% t over warm-ups", "p vs 0 or margin (Holm)", "verdict", "rule v1"):
            assert list(recomputed[column]) == list(committed[column]), (name, column)
