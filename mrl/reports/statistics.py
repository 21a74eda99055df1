"""The statistics the ledgers use, from the field's libraries where they do the job: the one-sample t test and its interval (scipy), the exact sign-flip test (scipy `permutation_test`), the t test's
power (statsmodels `TTestPower`), its average over the SD's own uncertainty, the variance components of a paired
difference with RL seeds nested in warm-ups (statsmodels `MixedLM`) and the seed main effect of a crossed design
(statsmodels two-way ANOVA).

Written here by hand: `expected_power`, because no library has it (the power averaged over the sampling
distribution of an SD estimated on few warm-ups, the "assurance" of a design); and Holm's adjustment, which
statsmodels' `multipletests` computes too but with a gc.collect() on every call (holm_adjusted says what it costs),
so the tests hold this one equal to statsmodels'. tests/test_statistics.py holds each
function against the hand-written version the ledger used before, on the committed runs.
"""
from __future__ import annotations

import math
import warnings

import numpy as np
import pandas as pd
from scipy import stats
from statsmodels.stats.power import TTestPower

ALTERNATIVES = ("two-sided", "greater", "less")
EXACT_SIGN_FLIPS = 20
"""sign-flip p-values enumerate all 2^n flips up to this many values (Monte Carlo with a fixed seed above)"""
TIE_DECIMALS = 12
"""sign-flip means equal to this many decimals are ties (far below any accuracy difference: 1/1200 per prompt)"""
SIGN_FLIP_DRAWS = 100_000
"""Monte Carlo sign flips above EXACT_SIGN_FLIPS values"""


def _check_alternative(alternative: str) -> None:
    if alternative not in ALTERNATIVES:
        raise ValueError(f"alternative = {alternative!r}; expected one of {list(ALTERNATIVES)}")


def holm_adjusted(p_values) -> np.ndarray:
    """Holm's step-down adjusted p-values: p_(i) -> min(1, max_{j<=i} (m - j + 1) p_(j)). NaNs stay NaN and are left
    out of the family (m counts the finite ones). Computed here, not by statsmodels' multipletests (method "holm"),
    because that branch calls gc.collect() on every call: 0.3 s in a process holding torch, 2.4 s of a ledger's 6.5;
    tests/test_statistics.py holds the two equal."""
    p = np.asarray(p_values, dtype=float)
    out = np.full_like(p, np.nan)
    finite = np.flatnonzero(~np.isnan(p))
    order = finite[np.argsort(p[finite], kind="stable")]
    steps = p[order] * (len(order) - np.arange(len(order)))
    out[order] = np.minimum(1.0, np.maximum.accumulate(steps))
    return out


def t_p_value(d, null: float, alternative: str) -> float:
    """p of the one-sample t test of mean(d) against `null` (scipy ttest_1samp, df = n - 1): "greater" (H0: mean <=
    null), "less" (H0: mean >= null) or "two-sided"; NaN below two values or with no spread."""
    _check_alternative(alternative)
    d = np.asarray(d, dtype=float)
    if len(d) < 2 or not d.std(ddof=1) > 0:
        return float("nan")
    return float(stats.ttest_1samp(d, null, alternative=alternative).pvalue)


def t_p_value_at_df(d, null: float, alternative: str, df: int) -> float:
    """p of the one-sample t statistic of mean(d) against `null`, t = (mean - null) / (s / sqrt(n)), read on `df`
    degrees of freedom in place of n - 1 (scipy's t distribution): a reduced sample judged at the full sample's
    critical values; NaN below two values or with no spread."""
    _check_alternative(alternative)
    d = np.asarray(d, dtype=float)
    if len(d) < 2 or not d.std(ddof=1) > 0:
        return float("nan")
    t = (d.mean() - null) / (d.std(ddof=1) / math.sqrt(len(d)))
    if alternative == "greater":
        return float(stats.t.sf(t, df))
    if alternative == "less":
        return float(stats.t.cdf(t, df))
    return float(min(1.0, 2 * stats.t.sf(abs(t), df)))


def t_interval(d, level: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the two-sided `level` t interval of mean(d) over its n values (scipy ttest_1samp's
    confidence_interval, df = n - 1); NaN bounds below two values."""
    d = np.asarray(d, dtype=float)
    mean = float(d.mean()) if len(d) else float("nan")
    if len(d) < 2:
        return mean, float("nan"), float("nan")
    ci = stats.ttest_1samp(d, 0.0).confidence_interval(level)
    return mean, float(ci.low), float(ci.high)


def sign_flip_p_value(d, null: float, alternative: str, seed: int = 0) -> float:
    """Sign-flip (one-sample permutation) p of mean(d - null) (scipy permutation_test, permutation_type "samples"):
    the share of the 2^n sign patterns of d - null whose mean is at least as extreme as the observed one; exact up
    to EXACT_SIGN_FLIPS values, Monte Carlo with a fixed seed above. Valid when d - null is symmetric about 0 under H0;
    its smallest two-sided value is 2 / 2^n (0.0625 with 5 warm-ups, 2/4096 with 12)."""
    _check_alternative(alternative)
    centred = np.asarray(d, dtype=float) - null
    if len(centred) < 2:
        return float("nan")
    exact = len(centred) <= EXACT_SIGN_FLIPS
    # two-sided: |mean| against its flips (scipy's own two-sided doubles the smaller tail, which counts a mean of 0
    # once); means are rounded to TIE_DECIMALS, so that two patterns whose means differ by float rounding tie
    two_sided = alternative == "two-sided"
    result = stats.permutation_test((centred,), lambda x, axis: np.round(np.abs(np.mean(x, axis=axis)) if two_sided
                                                                         else np.mean(x, axis=axis), TIE_DECIMALS),
                                    vectorized=True,
                                    permutation_type="samples", alternative="greater" if two_sided else alternative,
                                    n_resamples=np.inf if exact else SIGN_FLIP_DRAWS,
                                    rng=None if exact else np.random.default_rng(seed))
    return float(result.pvalue)


def t_power(n: int, effect: float, sd: float, alpha: float, alternative: str = "two-sided") -> float:
    """Power of the one-sample t test over n values at level alpha to detect a true mean `effect` away from the null,
    with SD `sd` between the values (statsmodels TTestPower: a noncentral t with df = n - 1 and noncentrality
    |effect| sqrt(n) / sd; two-sided counts both tails). NaN below two values or with no spread."""
    _check_alternative(alternative)
    if n < 2 or not sd > 0:
        return float("nan")
    solver, shift = TTestPower(), abs(effect) / sd
    if alternative != "two-sided":
        return float(min(1.0, solver.power(effect_size=shift, nobs=n, alpha=alpha, alternative="larger")))
    near = solver.power(effect_size=shift, nobs=n, alpha=alpha / 2, alternative="larger")
    far = solver.power(effect_size=shift, nobs=n, alpha=alpha / 2, alternative="smaller")
    # the far tail, summed tail by tail: statsmodels' own two-sided power is NaN where the noncentral t's far tail
    # underflows (few values, a large shift), and that tail is then 0
    return float(min(1.0, near + np.nan_to_num(far)))


def expected_power(n: int, effect: float, sd: float, sd_df: int, alpha: float, alternative: str = "two-sided",
                   points: int = 400) -> float:
    """The t test's power averaged over what the true SD may be, given an estimate `sd` on `sd_df` degrees of
    freedom: E[t_power(n, effect, sigma)] with sigma^2 = sd^2 sd_df / X, X ~ chi^2(sd_df) (the fiducial, or Jeffreys
    posterior, distribution of sigma), by the mean over `points` equiprobable quantiles of X. It is below the plug-in
    power t_power(n, effect, sd) where that is high: a design planned at the plug-in SD is underpowered on average.
    Hand-written: statsmodels and scipy give the power at one SD only."""
    quantiles = stats.chi2.ppf((np.arange(points) + 0.5) / points, sd_df)
    sigmas = sd * np.sqrt(sd_df / quantiles)
    return float(np.mean([t_power(n, effect, sigma, alpha, alternative) for sigma in sigmas]))


def warmups_for_power(effect: float, sd: float, alpha: float, target: float = 0.8, alternative: str = "two-sided",
                      fewest: int = 3, most: int = 200, sd_df: int | None = None) -> int | None:
    """The fewest values (at least `fewest`) whose t test reaches `target` power at the plug-in SD (sd_df None) or on
    average over the SD's uncertainty (expected_power with sd_df degrees of freedom); None above `most`."""
    for n in range(fewest, most + 1):
        power = t_power(n, effect, sd, alpha, alternative) if sd_df is None else \
            expected_power(n, effect, sd, sd_df, alpha, alternative)
        if power >= target:
            return n
    return None


def nested_variance_components(seed_values: pd.Series) -> dict[str, float]:
    """Variance components of a paired difference with RL seeds nested in warm-ups, d_zs = mu + u_z + e_zs (u_z:
    the warm-up's effect, SD sigma_w; e_zs: the RL seed's, SD sigma_s), fitted by REML (statsmodels MixedLM, a
    random intercept per warm-up). seed_values: indexed by (zoo_seed, seed). Returns {"between-warm-up SD",
    "RL-seed SD", "seeds": the fewest seeds of a warm-up}; NaN with fewer than 2 warm-ups or 2 seeds in one. A warm-up's
    mean over k seeds has variance sigma_w^2 + sigma_s^2 / k, which is what trading RL seeds for warm-ups trades."""
    frame = seed_values.rename("d").reset_index()
    seeds = int(frame.groupby("zoo_seed").size().min()) if len(frame) else 0
    if frame.zoo_seed.nunique() < 2 or seeds < 2:
        return {"between-warm-up SD": float("nan"), "RL-seed SD": float("nan"), "seeds": seeds}
    import statsmodels.formula.api as smf   # the formula API imports patsy: only when a split is asked for
    with warnings.catch_warnings():   # a between variance on the boundary (0) warns; it is a valid REML estimate
        warnings.simplefilter("ignore")
        fit = smf.mixedlm("d ~ 1", frame, groups=frame["zoo_seed"]).fit(reml=True)
    return {"between-warm-up SD": math.sqrt(max(0.0, float(fit.cov_re.iloc[0, 0]))),
            "RL-seed SD": math.sqrt(float(fit.scale)), "seeds": seeds}


def seed_main_effect(seed_values: pd.Series) -> dict[str, float]:
    """The RL seed's main effect in a design where RL seed s means the same streams on every warm-up (crossed):
    the two-way ANOVA without interaction d_zs = mu + a_z + b_s + e_zs (statsmodels ols and anova_lm, type II) over
    complete warm-ups. Returns {"F", "df": (seed df, residual df) as two columns "df seed" and "df residual", "p",
    "seed means": the mean over warm-ups of each seed}. Under nested seeds (nested_rl_seed) a seed label means
    nothing shared, so the same F test is a check that no seed effect remains."""
    import statsmodels.formula.api as smf
    from statsmodels.stats.anova import anova_lm
    frame = seed_values.rename("d").reset_index()
    counts = frame.groupby("zoo_seed").seed.nunique()
    frame = frame[frame.zoo_seed.isin(counts[counts == frame.seed.nunique()].index)]
    means = frame.groupby("seed").d.mean()
    if frame.zoo_seed.nunique() < 2 or frame.seed.nunique() < 2:
        return {"F": float("nan"), "df seed": float("nan"), "df residual": float("nan"), "p": float("nan"),
                "seed means": means.to_dict()}
    table = anova_lm(smf.ols("d ~ C(zoo_seed) + C(seed)", frame).fit(), typ=2)
    row = table.loc["C(seed)"]
    return {"F": float(row["F"]), "df seed": float(row["df"]), "df residual": float(table.loc["Residual", "df"]),
            "p": float(row["PR(>F)"]), "seed means": means.to_dict()}


def seed_label_swap_p_value(seed_values: pd.Series) -> float:
    """The exact p of no RL-seed effect where seeds are nested in warm-ups: under the null the two seeds' labels are
    exchangeable within each warm-up, so the 2^n swaps of the labels are equally likely, and a swap flips the sign of
    the warm-up's seed difference d_z0 - d_z1. Two-sided sign-flip p of the mean of those differences
    (sign_flip_p_value) over the warm-ups that have both seeds (the others are left out). seed_values: indexed by
    (zoo_seed, seed). NaN where the design has other than two seeds or fewer than 2 warm-ups have both."""
    frame = seed_values.rename("d").reset_index()
    seeds = sorted(frame.seed.unique())
    if len(seeds) != 2:
        return float("nan")
    wide = frame.pivot_table(index="zoo_seed", columns="seed", values="d").dropna()
    if len(wide) < 2:
        return float("nan")
    return sign_flip_p_value((wide[seeds[0]] - wide[seeds[1]]).to_numpy(), 0.0, "two-sided")
