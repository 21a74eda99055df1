"""The ledger's statistics from the field's libraries (mrl.reports.statistics: statsmodels, scipy) against the
hand-written versions the ledger used before them, on the committed runs (paper_tables/claims_runs.csv): every claim's
warm-up differences on both endpoints give the same p-values, adjustments, power and variance split. The hand-written
versions live here, as the independent reference."""
import itertools

import numpy as np
import pytest
from scipy import stats

from mrl.paths import repo_root
from mrl.reports.claims import CLAIMS, read_endpoint_values, seed_differences, warmup_differences
from mrl.reports.claims_rule import MARGIN
from mrl.reports.statistics import (expected_power, holm_adjusted, nested_variance_components, seed_main_effect,
                                    sign_flip_p_value, t_interval, t_p_value, t_power, warmups_for_power)

RUNS = repo_root() / "paper_tables" / "claims_runs.csv"


# ---- the hand-written versions (as mrl.reports.claims_rule had them) ----

def hand_t_p(d, null, alternative):
    d = np.asarray(d, dtype=float)
    n, sd = len(d), d.std(ddof=1)
    stat = (d.mean() - null) / (sd / np.sqrt(n))
    if alternative == "greater":
        return float(stats.t.sf(stat, n - 1))
    if alternative == "less":
        return float(stats.t.cdf(stat, n - 1))
    return float(min(1.0, 2 * stats.t.sf(abs(stat), n - 1)))


def hand_sign_flip(d, null, alternative):
    centred = np.asarray(d, dtype=float) - null
    signs = np.array(list(itertools.product((1.0, -1.0), repeat=len(centred))))
    means, observed = signs @ centred / len(centred), centred.mean()
    tolerance = 1e-12 * max(1.0, np.abs(centred).max())
    if alternative == "greater":
        return float((means >= observed - tolerance).mean())
    if alternative == "less":
        return float((means <= observed + tolerance).mean())
    return float((np.abs(means) >= abs(observed) - tolerance).mean())


def hand_holm(p):
    p = np.asarray(p, dtype=float)
    out, order, running = np.full_like(p, np.nan), np.argsort(p, kind="stable"), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(p) - rank) * p[i]))
        out[i] = running
    return out


def hand_power(n, effect, sd, alpha, alternative="two-sided"):
    df, shift = n - 1, abs(effect) / (sd / np.sqrt(n))
    critical = stats.t.ppf(1 - (alpha / 2 if alternative == "two-sided" else alpha), df)
    power = stats.nct.sf(critical, df, shift)
    if alternative == "two-sided":
        power += np.nan_to_num(stats.nct.cdf(-critical, df, shift))
    return float(min(1.0, power))


def hand_variance_split(paired):
    groups = [g.to_numpy() for _, g in paired.groupby(level="zoo_seed")]
    k = min(len(g) for g in groups)
    within = float(np.mean([np.var(g[:k], ddof=1) for g in groups]))
    between = float(k * np.var([g[:k].mean() for g in groups], ddof=1))
    return np.sqrt(max(0.0, (between - within) / k)), np.sqrt(within)


# ---- the committed runs ----

@pytest.fixture(scope="module")
def values():
    return read_endpoint_values(RUNS)


def committed_differences(values):
    """(claim, endpoint, d_z as an array) for every claim on both endpoints."""
    return [(claim, column, warmup_differences(values, claim, column).to_numpy())
            for claim in CLAIMS for column in ("overall", "weak")]


@pytest.mark.parametrize("null", [0.0, -MARGIN, MARGIN, 0.013])
@pytest.mark.parametrize("alternative", ["two-sided", "greater", "less"])
def test_t_test_and_sign_flip_equal_the_hand_written_on_the_committed_runs(values, null, alternative):
    for claim, column, d in committed_differences(values):
        assert t_p_value(d, null, alternative) == pytest.approx(hand_t_p(d, null, alternative), rel=1e-9, abs=1e-15)
        assert sign_flip_p_value(d, null, alternative) == hand_sign_flip(d, null, alternative), (claim.claim, column)


def test_holm_equals_statsmodels_and_the_hand_written_on_the_ledgers_family(values):
    from statsmodels.stats.multitest import multipletests

    raw = [t_p_value(d, 0.0, "two-sided") for _, _, d in committed_differences(values)]
    assert holm_adjusted(raw) == pytest.approx(hand_holm(raw), rel=1e-12)
    assert holm_adjusted(raw) == pytest.approx(multipletests(raw, method="holm")[1], rel=1e-12)
    ties = [0.01, 0.01, 0.03, 0.2, 0.04]
    assert holm_adjusted(ties) == pytest.approx(multipletests(ties, method="holm")[1], rel=1e-12)
    with_nan = holm_adjusted([0.01, np.nan, 0.04])
    assert np.isnan(with_nan[1]) and with_nan[[0, 2]] == pytest.approx([0.02, 0.04])


def test_the_t_interval_is_the_one_the_tables_show(values):
    for _, _, d in committed_differences(values):
        mean, low, high = t_interval(d)
        half = stats.t.ppf(0.975, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
        assert (low, high) == pytest.approx((mean - half, mean + half), rel=1e-9)


@pytest.mark.parametrize("n, sd, alpha, alternative", [(5, 0.0076, 0.05 / 13, "two-sided"), (13, 0.013, 0.05,
                                                        "two-sided"), (10, 0.0128, 0.05, "less"), (3, 0.02, 0.05,
                                                                                                     "greater")])
def test_power_equals_the_noncentral_t_by_hand(n, sd, alpha, alternative):
    assert t_power(n, 0.013, sd, alpha, alternative) == pytest.approx(hand_power(n, 0.013, sd, alpha, alternative),
                                                                      abs=1e-7)


def test_power_with_few_values_and_a_large_shift_is_the_noncentral_t_by_hand():
    """statsmodels' two-sided power is NaN here (the far tail underflows): summed tail by tail it is the hand value,
    not 100%."""
    assert t_power(3, 0.05, 0.0051, 0.05 / 13) == pytest.approx(hand_power(3, 0.05, 0.0051, 0.05 / 13), abs=1e-7)
    assert t_power(3, 0.05, 0.0051, 0.05 / 13) < 0.7


def test_expected_power_is_below_a_high_plug_in_power_and_tends_to_it_with_many_df():
    plug_in = t_power(13, 0.013, 0.013, 0.05)
    assert expected_power(13, 0.013, 0.013, 9, 0.05) < plug_in
    assert expected_power(13, 0.013, 0.013, 10_000, 0.05) == pytest.approx(plug_in, abs=2e-3)
    assert warmups_for_power(0.013, 0.013, 0.05, sd_df=9) >= warmups_for_power(0.013, 0.013, 0.05)


def test_expected_power_matches_a_simulation_of_the_sd_estimate():
    """The average power over sigma drawn as the fiducial distribution says, by Monte Carlo: the quadrature's mean
    lies within 4 standard errors of the simulated mean."""
    rng = np.random.default_rng(0)
    sigmas = 0.013 * np.sqrt(9 / rng.chisquare(9, 4000))
    powers = np.array([t_power(12, 0.013, s, 0.05) for s in sigmas])
    assert abs(expected_power(12, 0.013, 0.013, 9, 0.05) - powers.mean()) < 4 * powers.std() / np.sqrt(len(powers))


def test_mixed_model_variance_components_equal_the_anova_split_on_the_committed_runs(values):
    """REML on a balanced nested design equals the one-way ANOVA estimator wherever that is inside the parameter
    space (a between variance above 0)."""
    compared = 0
    for claim in CLAIMS:
        paired = seed_differences(values, claim.probe, claim.reference, "overall")
        between, within = hand_variance_split(paired)
        fitted = nested_variance_components(paired)
        assert fitted["RL-seed SD"] == pytest.approx(within, rel=1e-3) or between == 0.0
        if between > 0:
            assert fitted["between-warm-up SD"] == pytest.approx(between, rel=1e-3, abs=1e-5)
            compared += 1
    assert compared >= 3


def test_the_seed_main_effect_of_the_crossed_committed_runs_is_the_two_way_anova(values):
    """prp - sgt on overall accuracy, the committed (crossed) runs: F(1, 4) from the two-way ANOVA without
    interaction, computed by hand from its sums of squares."""
    paired = seed_differences(values, "prp", "sgt", "overall")
    table = paired.unstack("seed")
    grand, rows, cols = table.to_numpy().mean(), table.mean(axis=1), table.mean(axis=0)
    ss_seed = len(table) * ((cols - grand) ** 2).sum()
    residual = table.to_numpy() - rows.to_numpy()[:, None] - cols.to_numpy()[None, :] + grand
    df_residual = (len(table) - 1) * (table.shape[1] - 1)
    f = (ss_seed / (table.shape[1] - 1)) / ((residual ** 2).sum() / df_residual)
    effect = seed_main_effect(paired)
    assert effect["F"] == pytest.approx(f, rel=1e-9)
    assert (effect["df seed"], effect["df residual"]) == (1, df_residual)
    assert effect["p"] == pytest.approx(stats.f.sf(f, 1, df_residual), rel=1e-9)


def test_a_bad_alternative_names_the_allowed_ones():
    with pytest.raises(ValueError, match="two-sided"):
        t_p_value([0.1, 0.2, 0.3], 0.0, "bigger")
