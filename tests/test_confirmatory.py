"""The confirmatory test on hand-made warm-up differences with known answers: the gatekeeper's three readings, the
size test, the disjoint-null design's error rate by simulation, complete warm-ups only, leave-one-out at the full
sample's critical t, and the plan's choice of warm-ups."""
import numpy as np
import pandas as pd
import pytest

from mrl.reports.confirmatory import (DESIGN, PlanInputs, Reading, SizeReading, complete_warmups, confirmatory_test,
                                      design_table, fewest_warmups, gatekeeper, leave_one_out, result_sentence,
                                      result_table, size_test)


def series(values) -> pd.Series:
    return pd.Series(values, index=pd.Index(range(100, 100 + len(values)), name="zoo_seed"), dtype=float)


def test_a_clear_gain_is_confirmed_and_the_papers_size_not_ruled_out():
    d = series([0.010, 0.016, 0.012, 0.020, 0.008, 0.014, 0.015, 0.011, 0.018, 0.013, 0.009, 0.017])
    result = confirmatory_test(d, planned=12)
    assert result.reading is Reading.CONFIRMED and result.size is SizeReading.NOT_RULED_OUT
    assert result.low > 0 and result.positive == 12 and result.p_sign_flip == pytest.approx(2 / 4096)


def test_a_null_result_is_not_confirmed_and_rules_out_the_papers_size():
    d = series([0.002, -0.001, 0.000, 0.001, -0.002, 0.001, 0.000, -0.001, 0.002, -0.001, 0.001, 0.000])
    result = confirmatory_test(d, planned=12)
    assert result.reading is Reading.NOT_CONFIRMED and result.size is SizeReading.RULED_OUT


def test_a_clear_loss_reads_the_opposite_sign():
    result = confirmatory_test(series([-0.01, -0.02, -0.015, -0.012, -0.018, -0.011, -0.014, -0.016, -0.013, -0.017]),
                               planned=12)
    assert result.reading is Reading.OPPOSITE and result.warmups == 10


def test_fewer_complete_warmups_than_registered_give_no_result_whatever_the_data_say():
    result = confirmatory_test(series([0.02, 0.021, 0.019, 0.022, 0.02, 0.018, 0.021, 0.02, 0.019]), planned=12)
    assert result.low > 0 and result.warmups == DESIGN.min_warmups - 1
    assert result.reading is Reading.NO_RESULT and result.size is SizeReading.NO_RESULT
    assert confirmatory_test(series([]), planned=12).reading is Reading.NO_RESULT


def test_the_two_tests_keep_the_family_wise_error_at_alpha_on_either_null():
    """At E[d] = 0 only the gatekeeper's null is true, at E[d] = 0.013 only the size test's: each errs at most at
    alpha (simulated, 2000 designs of 12 warm-ups; the bound is alpha plus 4 Monte Carlo standard errors)."""
    rng = np.random.default_rng(0)
    for truth, wrong in ((0.0, lambda d: gatekeeper(d)[1] is not Reading.NOT_CONFIRMED),
                         (DESIGN.paper_effect, lambda d: size_test(d)[1] is SizeReading.RULED_OUT
                          or gatekeeper(d)[1] is Reading.OPPOSITE)):
        errors = np.mean([wrong(truth + 0.013 * rng.standard_normal(12)) for _ in range(2000)])
        assert errors < DESIGN.alpha + 4 * np.sqrt(DESIGN.alpha * (1 - DESIGN.alpha) / 2000)


def test_only_warmups_with_both_arms_on_every_seed_for_every_policy_of_the_pairing_enter():
    rows = []
    for zoo in (100, 101, 102, 103, 104):
        for seed in (0, 1, 2):
            for probe, value in (("grpo", 0.5), ("sgt", 0.52), ("prp", 0.9)):
                for policy in ("A", "B", "C"):
                    missing = (zoo == 102 and seed == 1 and probe == "sgt") or (zoo == 103 and policy == "B")
                    if not missing:
                        rows.append({"pairing": "A+B", "probe": probe, "policy": policy, "seed": seed,
                                     "zoo_seed": zoo, "overall": value + (0.01 if policy == "C" else 0.0)})
    rows.append({**rows[0]})   # warm-up 100's first row twice: that warm-up is left out
    d = complete_warmups(pd.DataFrame(rows), DESIGN, seeds=[0, 1], policies=["A", "B"])
    assert list(d.index) == [101, 104] and d.to_numpy() == pytest.approx([0.02, 0.02])


def test_leave_one_out_reads_t_at_the_full_samples_critical_value():
    d = series([0.01, 0.012, 0.011, 0.013, 0.03])
    table = leave_one_out(d)
    assert list(table["zoo seed left out"]) == list(d.index)
    assert table["mean without it"].iloc[-1] == pytest.approx(0.0115)
    assert table["passes the full sample's critical t"].all()


def test_the_table_and_sentence_come_from_the_record():
    result = confirmatory_test(series([0.01, 0.02, 0.015, 0.012]), planned=12)
    cells = result_table(result).iloc[0]
    assert cells["gatekeeper"] == result.reading.value and cells["warm-ups (planned)"] == "4 (12)"
    assert f"{result.mean:+.4f}" in result_sentence(result) and "On this substrate" in result_sentence(result)


def test_the_plan_counts_the_zoos_cost_and_picks_the_fewest_warmups_for_the_average_power():
    inputs = PlanInputs(sd=0.0128, sd_df=9, rl_seed_sd=0.0098, zoo_core_minutes=18.25, run_core_minutes=0.6, arms=2)
    plan = design_table(0.013, 0.05, inputs, range(8, 17), {1: 0.0145, 2: 0.0128})
    chosen = fewest_warmups(plan, seeds=2)
    row = plan[(plan["RL seeds"] == 2) & (plan["warm-ups"] == chosen)].iloc[0]
    assert row["power (averaged over the SD)"] >= 0.8 > plan[(plan["RL seeds"] == 2) & (plan["warm-ups"] ==
                                                                                          chosen - 1)].iloc[0][
        "power (averaged over the SD)"]
    assert row["power (plug-in SD)"] > row["power (averaged over the SD)"]
    assert row["minutes"] == pytest.approx((chosen * 18.25 + chosen * 2 * 2 * 0.6) / 2)


def test_the_readme_block_reads_the_committed_result_or_says_it_is_pending(tmp_path):
    from mrl.reports.readme import confirmatory_block
    assert "has not run yet" in confirmatory_block(tmp_path)
    result = confirmatory_test(series([0.01, 0.02, 0.015, 0.012, 0.011, 0.018]), planned=12)
    result_table(result).to_csv(tmp_path / "confirmatory.csv", index=False)
    block = confirmatory_block(tmp_path)
    assert f"**{result.reading.value}**" in block and "6 (12)" in block and f"{result.mean:+.4f}" in block
    assert result.size.value in block


def test_the_committed_result_is_recomputed_from_its_committed_runs():
    """paper_tables/confirmatory.csv and confirmatory_leave_one_out.csv follow from confirmatory_runs.csv, on whatever
    CPU this runs (the numerics contract): the result table cell for cell, leave-one-out to 1e-12."""
    from mrl.profiles import load_profile
    from mrl.reports.claims import read_endpoint_values
    from mrl.runtime.results import repo_root

    tables = repo_root() / "paper_tables"
    if not (tables / "confirmatory_runs.csv").exists():
        pytest.skip("the confirmatory test has not run: `make reproduce` writes its runs and tables")
    heldout = load_profile("default").experiment("heldout")
    block = heldout.confirmatory
    d = complete_warmups(read_endpoint_values(tables / "confirmatory_runs.csv"), DESIGN, block.seeds,
                         heldout.pairing)
    committed = pd.read_csv(tables / "confirmatory.csv", dtype=str, keep_default_na=False)
    recomputed = result_table(confirmatory_test(d, planned=len(block.zoo_seeds)))
    assert recomputed.to_dict("records") == committed.to_dict("records")
    committed_loo = pd.read_csv(tables / "confirmatory_leave_one_out.csv")
    pd.testing.assert_frame_equal(leave_one_out(d), committed_loo, check_exact=False, rtol=1e-12, atol=0)
