"""The confirmatory test of MRL's headline claim, SGT beats independent GRPO, on warm-ups never run before it was fixed
(docs/registration.md gives the design, its reasons and the power plan).

The unit is the warm-up: d_z is the mean over its policies and its RL seeds (nested in it) of sgt - grpo on overall
held-out accuracy (mrl.reports.claims.endpoint_values). The gatekeeper tests E[d] = 0 two-sided at alpha 0.05, read
by the sign ("confirmed", "contradicted: the opposite sign", "not confirmed"); the size test, E[d] >= the paper's
+0.013 one-sided at 0.05 ("not reproduced at the paper's size"). Their nulls are disjoint, so each runs at the full
0.05. The sign-flip p, the warm-ups above 0 and leave-one-out sit beside them and decide nothing.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from mrl.reports.claims import endpoint_values, unit_differences
from mrl.reports.statistics import expected_power, sign_flip_p_value, t_interval, t_p_value, t_power


class Reading(enum.Enum):
    """The gatekeeper's label."""

    CONFIRMED = "confirmed"
    NOT_CONFIRMED = "not confirmed"
    OPPOSITE = "contradicted: the opposite sign"
    NO_RESULT = "no result: too few complete warm-ups"


class SizeReading(enum.Enum):
    """The size test's label."""

    RULED_OUT = "not reproduced at the paper's size"
    NOT_RULED_OUT = "the paper's size not ruled out"
    NO_RESULT = "no result: too few complete warm-ups"


@dataclass(frozen=True)
class Comparison:
    """probe - reference, paired run by run."""

    probe: str
    reference: str

    def __str__(self) -> str:
        return f"{self.probe} - {self.reference}"


@dataclass(frozen=True)
class Design:
    """What the registration fixes of the analysis (the runs' part is the profile's `confirmatory` block)."""

    comparison: Comparison
    endpoint: str
    """the endpoint_values column: "overall" (held-out accuracy over all forms)"""
    paper_effect: float
    """the paper's own difference, probe - reference, in accuracy (docs/papers.md: MRL's main figure)"""
    alpha: float
    min_warmups: int
    """the fewest complete warm-ups that give a result (fewer: "no result", whatever the data say)"""


DESIGN = Design(Comparison("sgt", "grpo"), "overall", 0.013, 0.05, min_warmups=10)
"""the registered analysis (docs/registration.md)"""


@dataclass(frozen=True)
class Result:
    """The confirmatory test's outcome: the warm-ups that entered (of `planned`), the mean of d_z with its two-sided
    (1 - alpha) t interval, the gatekeeper's and the size test's p, the sign-flip p, how many d_z lie above 0, and the
    two labels."""

    warmups: int
    planned: int
    mean: float
    low: float
    high: float
    p_zero: float
    p_size: float
    p_sign_flip: float
    positive: int
    reading: Reading
    size: SizeReading


def complete_warmups(values: pd.DataFrame, design: Design, seeds: list[int], policies: list[str]) -> pd.Series:
    """d_z (indexed by zoo seed) over the warm-ups where both arms of the comparison finished on exactly the RL seeds
    `seeds` for every policy of `policies` (the pairing): the mean over those policies of each one's mean paired
    difference over the seeds. values: endpoint_values rows (pairing, probe, policy, seed, zoo_seed, the endpoint);
    rows of other probes, seeds or policies are left out first, and a duplicated or NaN row leaves its warm-up out."""
    arms = (design.comparison.probe, design.comparison.reference)
    chosen = values[values.probe.isin(arms) & values.seed.isin(seeds) & values.policy.isin(policies)]
    chosen = chosen[~chosen.duplicated(["probe", "policy", "seed", "zoo_seed"], keep=False)]
    units = unit_differences(chosen, design.comparison.probe, design.comparison.reference, design.endpoint)
    complete = units[units.seeds == len(set(seeds))].groupby("zoo_seed").filter(
        lambda g: sorted(g.policy) == sorted(set(policies)))
    return complete.groupby("zoo_seed")["diff"].mean()


def gatekeeper(d, design: Design = DESIGN) -> tuple[float, Reading]:
    """(two-sided p of H0: E[d] = 0, its reading by the sign of mean(d)). d: (n,) warm-up differences."""
    p = t_p_value(d, 0.0, "two-sided")
    if not p < design.alpha:
        return p, Reading.NOT_CONFIRMED
    return p, Reading.CONFIRMED if float(np.mean(d)) > 0 else Reading.OPPOSITE


def size_test(d, design: Design = DESIGN) -> tuple[float, SizeReading]:
    """(one-sided p of H0: E[d] >= paper_effect, its reading). d: (n,) warm-up differences."""
    p = t_p_value(d, design.paper_effect, "less")
    return p, SizeReading.RULED_OUT if p < design.alpha else SizeReading.NOT_RULED_OUT


def confirmatory_test(d: pd.Series, planned: int, design: Design = DESIGN) -> Result:
    """The registered test on d_z (complete_warmups): both labels, the interval and the checks beside them; with
    fewer than design.min_warmups warm-ups, both labels say "no result"."""
    values = d.to_numpy(dtype=float)
    mean, low, high = t_interval(values, 1 - design.alpha)
    p_zero, reading = gatekeeper(values, design)
    p_size, size = size_test(values, design)
    if len(values) < design.min_warmups:
        reading, size = Reading.NO_RESULT, SizeReading.NO_RESULT
    return Result(warmups=len(values), planned=planned, mean=mean, low=low, high=high, p_zero=p_zero, p_size=p_size,
                  p_sign_flip=sign_flip_p_value(values, 0.0, "two-sided"), positive=int((values > 0).sum()),
                  reading=reading, size=size)


def confirmatory_analysis(evals: pd.DataFrame, seeds: list[int], policies: list[str], planned: int,
                          design: Design = DESIGN) -> tuple[pd.DataFrame, pd.Series, Result]:
    """The whole registered analysis from the confirmatory runs' evaluation rows: (the per-run endpoint values,
    d_z per complete warm-up, the Result). seeds: the block's RL seeds; policies: the pairing; planned: the block's
    warm-ups."""
    values = endpoint_values(evals)
    d = complete_warmups(values, design, seeds, policies)
    return values, d, confirmatory_test(d, planned, design)


def leave_one_out(d: pd.Series, design: Design = DESIGN) -> pd.DataFrame:
    """Per warm-up left out: the mean of the others, their t against 0, and whether that t passes the FULL sample's
    two-sided critical value (t_{1 - alpha/2, n - 1}): a verdict that changes only because one degree of freedom was
    lost passes it still, so "influential" flags a warm-up whose removal moves the estimate, not the df."""
    n = len(d)
    critical = float(stats.t.ppf(1 - design.alpha / 2, n - 1)) if n > 1 else math.nan
    rows = []
    for zoo in d.index:
        rest = d.drop(zoo).to_numpy(dtype=float)
        t = rest.mean() / (rest.std(ddof=1) / math.sqrt(len(rest))) if len(rest) > 1 else math.nan
        rows.append({"zoo seed left out": zoo, "mean without it": float(rest.mean()), "t without it": float(t),
                     "passes the full sample's critical t": bool(abs(t) > critical)})
    return pd.DataFrame(rows)


def result_table(result: Result, design: Design = DESIGN) -> pd.DataFrame:
    """The confirmatory result as the paper shows it (one row; cells formatted from the record)."""
    level = f"{1 - design.alpha:.0%}"
    return pd.DataFrame([{
        "comparison": str(design.comparison), "endpoint": design.endpoint,
        "warm-ups (planned)": f"{result.warmups} ({result.planned})",
        "difference": f"{result.mean:+.4f}", f"{level} t interval": f"[{result.low:+.4f}, {result.high:+.4f}]",
        "p vs 0 (two-sided)": f"{result.p_zero:.3g}", f"p vs {design.paper_effect:+.3f} (one-sided)":
            f"{result.p_size:.3g}", "p sign-flip (exact)": f"{result.p_sign_flip:.3g}",
        "warm-ups above 0": f"{result.positive}/{result.warmups}",
        "gatekeeper": result.reading.value, "paper's size": result.size.value}])


def result_sentence(result: Result, design: Design = DESIGN) -> str:
    """The confirmatory result in one sentence, every number from the record."""
    return (f"Confirmatory test ({design.comparison}, {design.endpoint} held-out accuracy, {result.warmups} "
            f"warm-ups never run before the registration, RL seeds nested in them): {result.reading.value}; the "
            f"difference is {result.mean:+.4f} [{result.low:+.4f}, {result.high:+.4f}] ({1 - design.alpha:.0%} t "
            f"interval over warm-ups, two-sided p {result.p_zero:.3g}), {result.positive} of {result.warmups} "
            f"warm-ups above 0; against the paper's {design.paper_effect:+.3f}: {result.size.value} (one-sided p "
            f"{result.p_size:.3g}). On this substrate: two tiny models on arithmetic, not the papers' setting.")


# ---- the plan: how many warm-ups, at what cost ----

@dataclass(frozen=True)
class PlanInputs:
    """What the number of warm-ups was chosen from (docs/registration.md, The plan, gives each one's source)."""

    sd: float
    """SD of d_z (sgt - grpo, overall, 2 RL seeds per warm-up) on warm-ups held out from the ledger"""
    sd_df: int
    """its degrees of freedom (warm-ups - 1)"""
    rl_seed_sd: float
    """the RL seeds' SD within a warm-up, which moves the SD of d_z to another number of RL seeds"""
    zoo_core_minutes: float
    """one warm-up's zoo build (every family), in minutes of one core"""
    run_core_minutes: float
    """one RL run, in minutes of one core"""
    arms: int
    """the arms every warm-up runs"""


PLAN = PlanInputs(sd=0.0128, sd_df=9, rl_seed_sd=0.0098, zoo_core_minutes=6.75 + 11.5, run_core_minutes=0.75, arms=2)
"""the registration's planning inputs (docs/registration.md)"""
PLAN_WARMUPS = range(8, 17)
PLAN_SEEDS = (1, 2)
POWER_TARGET = 0.8


def sd_at_seeds(plan: PlanInputs, seeds: int, measured_seeds: int = 2) -> float:
    """The SD of d_z with `seeds` RL seeds per warm-up, from the one measured at `measured_seeds`:
    sd_k^2 = sd^2 + sigma_s^2 (1/k - 1/k_measured) (a warm-up's mean over k seeds has variance
    sigma_w^2 + sigma_s^2 / k)."""
    return math.sqrt(plan.sd ** 2 + plan.rl_seed_sd ** 2 * (1 / seeds - 1 / measured_seeds))


def registered_plan(plan: PlanInputs = PLAN, design: Design = DESIGN, cores: int = 2) -> pd.DataFrame:
    """design_table over PLAN_WARMUPS x PLAN_SEEDS at the paper's effect, from the registration's inputs."""
    return design_table(design.paper_effect, design.alpha, plan, PLAN_WARMUPS,
                        {k: sd_at_seeds(plan, k) for k in PLAN_SEEDS}, cores)


def plan_table(plan: pd.DataFrame) -> pd.DataFrame:
    """design_table's rows formatted for the paper."""
    out = plan.copy()
    out["SD of d_z"] = out["SD of d_z"].map(lambda v: f"{v:.4f}")
    for name in ("power (plug-in SD)", "power (averaged over the SD)", "size test's power at 0"):
        out[name] = out[name].map(lambda v: f"{v:.0%}")
    out["minutes"] = out["minutes"].map(lambda v: f"{v:.0f}")
    return out

def design_table(effect: float, alpha: float, plan: PlanInputs, warmups, seeds_sd: dict[int, float],
                 cores: int = 2) -> pd.DataFrame:
    """Per (RL seeds k, warm-ups n): the gatekeeper's power at `effect` at the plug-in SD of d_z and averaged over
    that SD's uncertainty (statistics.expected_power on plan.sd_df degrees of freedom), the size test's plug-in power
    when the true difference is 0, and the design's cost on `cores` cores: n zoo builds plus n * k * plan.arms runs
    (plan.zoo_core_minutes, plan.run_core_minutes each). seeds_sd: {k: the SD of d_z with k RL seeds per warm-up}
    (the one measured, and others moved by the RL-seed variance, sd_at_seeds)."""
    rows = []
    for seeds, sd_k in sorted(seeds_sd.items()):
        for n in warmups:
            rows.append({"RL seeds": seeds, "warm-ups": n, "SD of d_z": sd_k,
                         "power (plug-in SD)": t_power(n, effect, sd_k, alpha),
                         "power (averaged over the SD)": expected_power(n, effect, sd_k, plan.sd_df, alpha),
                         "size test's power at 0": t_power(n, effect, sd_k, alpha, "less"),
                         "runs": n * seeds * plan.arms,
                         "minutes": (n * plan.zoo_core_minutes + n * seeds * plan.arms * plan.run_core_minutes)
                         / cores})
    return pd.DataFrame(rows)


def fewest_warmups(plan: pd.DataFrame, seeds: int, target: float = 0.8) -> int | None:
    """The fewest warm-ups of the plan (design_table) with `seeds` RL seeds whose power averaged over the SD reaches
    `target`; None when none does."""
    rows = plan[(plan["RL seeds"] == seeds) & (plan["power (averaged over the SD)"] >= target)]
    return int(rows["warm-ups"].min()) if len(rows) else None
