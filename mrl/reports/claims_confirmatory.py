"""The second registration: every claim of the papers tested on warm-ups never run before it was fixed
(docs/registration_claims.md gives the design, its reasons and the power plan).

Nine comparisons (COMPARISONS), each on its primary endpoint with its like-for-like arms. The unit is the warm-up: d_z
is the mean over its policies and its RL seeds (nested in it) of the paired difference on the endpoint
(mrl.reports.claims.endpoint_values). Each comparison's tests are the ledger's (mrl.reports.claims_rule.
claim_hypotheses): a directional claim gets a two-sided t test against 0, read by its sign, and a one-sided test
against the paper's size where the paper gives one; a no-loss or no-rescue claim gets a two-sided test against its
margin, read by its side. All of them form one Holm family at alpha 0.05 (15 tests). The labels mean what the first
registration's mean (mrl.reports.confirmatory). The sign-flip p, the warm-ups above 0 and each warm-up left out sit
beside the tests and decide nothing.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy import stats

from mrl.reports.claims import CLAIMS, endpoint_values
from mrl.reports.claims_rule import MARGIN, Claim, claim_hypotheses
from mrl.reports.confirmatory import Comparison, Design, complete_warmups
from mrl.reports.probes import rescue_skills
from mrl.reports.statistics import (expected_power, holm_adjusted, sign_flip_p_value, t_interval, t_p_value,
                                    t_p_value_at_df)

GRAFT_CLAIM = Claim("GRAFT", "GRAFT beats SGT (GRAFT's own claim, on the package's reconstruction)", "graft", "sgt",
                    "better", 0.015, "GRAFT Table 1, pass@1 averaged over five math benchmarks and six receivers: "
                                     "GRAFT above SGT by 1.5 points on average")
COMPARISONS = (*CLAIMS, GRAFT_CLAIM)
"""the registered comparisons: the ledger's eight claims (mrl.reports.claims.CLAIMS: the headline again, PRP, XGRPO
twice, HACPO's three and GRAFT's reading of HACPO) and GRAFT's own claim"""
ALPHA = 0.05
"""the family-wise error rate of the one Holm family"""
MIN_WARMUPS = 10
"""the fewest complete warm-ups that give a comparison a result (fewer: "no result", its tests counted with p = 1)"""
SEEDS_PER_WARMUP = 2
"""RL seeds per warm-up the plan assumes (the block's `seeds`)"""
PLAN_WARMUPS = (10, 12, 16, 20, 24)
"""the numbers of warm-ups the plan weighs"""


class Reading(enum.Enum):
    """The test against 0 (a directional claim) or against the margin (a no-loss or no-rescue claim), after Holm."""

    CONFIRMED = "confirmed"
    NOT_CONFIRMED = "not confirmed"
    OPPOSITE = "contradicted: the opposite sign"
    OUTSIDE_MARGIN = "contradicted: outside the margin"
    NO_RESULT = "no result: too few complete warm-ups"


class SizeReading(enum.Enum):
    """The test against the paper's size, after Holm."""

    RULED_OUT = "not reproduced at the paper's size"
    NOT_RULED_OUT = "the paper's size not ruled out"
    NO_SIZE = "no size test"
    NO_RESULT = "no result: too few complete warm-ups"


@dataclass(frozen=True)
class ClaimResult:
    """One comparison's outcome: the warm-ups that entered (of `planned`), the mean of d_z with its two-sided 95% t
    interval (not adjusted), the raw and Holm-adjusted p of its test against 0 or the margin ("main") and of its size
    test (NaN where it has none), the exact sign-flip p of the main test, how many d_z lie above 0, and the labels."""

    claim: Claim
    warmups: int
    planned: int
    mean: float
    low: float
    high: float
    p_main: float
    p_main_holm: float
    p_size: float
    p_size_holm: float
    p_sign_flip: float
    positive: int
    reading: Reading
    size: SizeReading


def design_of(claim: Claim) -> Design:
    """The comparison as the first registration's Design, so complete_warmups reads it as it read the headline."""
    return Design(Comparison(claim.probe, claim.reference), claim.endpoint,
                  0.0 if claim.paper_effect is None else claim.paper_effect, ALPHA, min_warmups=MIN_WARMUPS)


def weak_forms(families) -> dict[str, str]:
    """{family: the form its warm-up leaks only}: the weak form each policy is registered to have (A lacks S2, B
    lacks S3 in the held-out zoo). families: FamilyConfig records whose warmup_mix names a leaked form 'leak:<form>'."""
    out = {}
    for family in families:
        leaked = [key.removeprefix("leak:") for key in family.warmup_mix if key.startswith("leak:")]
        if len(leaked) == 1:
            out[family.name] = leaked[0]
    return out


def block_values(evals: pd.DataFrame, runs: pd.DataFrame, numerics: str, weak: dict[str, str],
                 registered: str) -> pd.DataFrame:
    """The per-run endpoint values of the block (mrl.reports.claims.endpoint_values) from its record: evals, the
    held-out evaluation rows with their labels; runs, the record's rows of the runs read. Refuses runs made in another
    numerics mode than the registered one or under another code than the registered one (their stamp is not the
    checksum `registered`), and weak forms the data read otherwise than the registration fixes them."""
    other = runs[runs.numerics != numerics]
    if len(other):
        raise ValueError(f"the registered block's runs must be made in numerics mode {numerics!r}; {len(other)} of "
                         f"the record's runs were made in {sorted(set(other.numerics))} (MRL_NUMERICS)")
    unstamped = runs[runs.stamp != registered]
    if len(unstamped):
        raise ValueError(f"{len(unstamped)} of the record's runs were not made under the registered checksum "
                         f"{registered[:12]}... (their stamps: {sorted(set(unstamped.stamp.astype(str)))})")
    absent = sorted(set(weak) - set(evals.policy))
    found = {} if absent else {policy: skill for (_, policy), skill in rescue_skills(evals).items()}
    if found != weak:
        raise ValueError(f"the weak forms the runs show at step 0, {found}, are not the registered ones, {weak}")
    return endpoint_values(evals)


def family_tests(claims: tuple[Claim, ...], differences: list[np.ndarray], dfs: list[int] | None = None,
                 tested: list[bool] | None = None) -> list[dict[str, float]]:
    """Every claim's tests (claim_hypotheses) as one Holm family: per claim {role: raw p} and {role (Holm): p}. A claim
    not tested (by default: fewer than MIN_WARMUPS warm-ups) keeps its tests in the family at p = 1, so the family's
    size is the registered one whatever finished. dfs: the t tests' degrees of freedom per claim in place of n - 1
    (leave_one_out)."""
    tested = [len(d) >= MIN_WARMUPS for d in differences] if tested is None else tested
    tests, raw = [], []
    for i, (claim, d) in enumerate(zip(claims, differences)):
        for h in claim_hypotheses(claim):
            tests.append((i, h.role))
            if not tested[i]:
                raw.append(1.0)
                continue
            p = t_p_value(d, h.null, h.alternative) if dfs is None else \
                t_p_value_at_df(d, h.null, h.alternative, dfs[i])
            raw.append(1.0 if math.isnan(p) else p)   # no spread: no evidence, and the family keeps its size
    adjusted = holm_adjusted(raw)
    rows = [{} for _ in claims]
    for (i, role), p, p_holm in zip(tests, raw, adjusted):
        rows[i][role] = float(p)
        rows[i][f"{role} (Holm)"] = float(p_holm)
    return rows


def readings(claim: Claim, d: np.ndarray, tests: dict[str, float], tested: bool) -> tuple[Reading, SizeReading]:
    """The two labels of one claim from its Holm-adjusted p (family_tests) and the sign of mean(d); not tested: no
    result."""
    if not tested:
        return Reading.NO_RESULT, SizeReading.NO_RESULT
    mean = float(np.mean(d))
    if not claim.directional:
        if not tests["margin (Holm)"] < ALPHA:
            return Reading.NOT_CONFIRMED, SizeReading.NO_SIZE
        inside = mean > -MARGIN if claim.kind == "no_loss" else mean < MARGIN
        return (Reading.CONFIRMED if inside else Reading.OUTSIDE_MARGIN), SizeReading.NO_SIZE
    reading = Reading.NOT_CONFIRMED
    if tests["sign (Holm)"] < ALPHA:
        reading = Reading.CONFIRMED if mean * claim.sign > 0 else Reading.OPPOSITE
    if "size" not in tests:
        return reading, SizeReading.NO_SIZE
    return reading, SizeReading.RULED_OUT if tests["size (Holm)"] < ALPHA else SizeReading.NOT_RULED_OUT


def warmup_differences(values: pd.DataFrame, claims: tuple[Claim, ...], seeds: list[int],
                       policies: list[str]) -> list[pd.Series]:
    """Per claim, d_z over its complete warm-ups (the first registration's complete_warmups: both arms on exactly
    `seeds` for every policy of `policies`, no duplicated or missing row)."""
    return [complete_warmups(values, design_of(claim), seeds, policies) for claim in claims]


def claims_test(differences: list[pd.Series], planned: int,
                claims: tuple[Claim, ...] = COMPARISONS) -> list[ClaimResult]:
    """The registered family on each claim's d_z: labels, intervals and the checks beside them."""
    arrays = [d.to_numpy(dtype=float) for d in differences]
    family = family_tests(claims, arrays)
    results = []
    for claim, d, tests in zip(claims, arrays, family):
        main = "sign" if claim.directional else "margin"
        null = claim_hypotheses(claim)[0].null
        mean, low, high = t_interval(d, 1 - ALPHA) if len(d) > 1 else (math.nan,) * 3
        reading, size = readings(claim, d, tests, len(d) >= MIN_WARMUPS)
        results.append(ClaimResult(
            claim=claim, warmups=len(d), planned=planned, mean=mean, low=low, high=high, p_main=tests[main],
            p_main_holm=tests[f"{main} (Holm)"], p_size=tests.get("size", math.nan),
            p_size_holm=tests.get("size (Holm)", math.nan),
            p_sign_flip=sign_flip_p_value(d, null, "two-sided") if len(d) > 1 else math.nan,
            positive=int((d > 0).sum()), reading=reading, size=size))
    return results


def claims_analysis(evals: pd.DataFrame, runs: pd.DataFrame, numerics: str, weak: dict[str, str], registered: str,
                    seeds: list[int], policies: list[str], planned: int,
                    claims: tuple[Claim, ...] = COMPARISONS) -> tuple[pd.DataFrame, list[pd.Series], list[ClaimResult]]:
    """The whole registered analysis from the block's record: (the per-run endpoint values, d_z per claim over its
    complete warm-ups, the results). runs: the record's rows of the runs read (block_values checks them against the
    numerics mode and the checksum `registered`); seeds: the block's RL seeds; policies: the pairing; planned: its
    warm-ups."""
    values = block_values(evals, runs, numerics, weak, registered)
    differences = warmup_differences(values, claims, seeds, policies)
    return values, differences, claims_test(differences, planned, claims)


def leave_one_out(differences: list[pd.Series], claims: tuple[Claim, ...] = COMPARISONS) -> list[dict]:
    """Per claim with a result, {warm-up left out: its labels (Reading, SizeReading)}: the whole family judged again
    without that warm-up (in every claim that has it), each t read at the full sample's degrees of freedom, so a
    change flags what the warm-up moves, not the degree of freedom its removal costs; the claims tested are the full
    sample's. Descriptive: it decides nothing."""
    full = [max(len(d) - 1, 1) for d in differences]
    tested = [len(d) >= MIN_WARMUPS for d in differences]
    warmups = sorted(set().union(*(d.index for d in differences)))
    out = [{} for _ in claims]
    for dropped in warmups:
        kept = [d.drop(dropped, errors="ignore").to_numpy(dtype=float) for d in differences]
        family = family_tests(claims, kept, dfs=full, tested=tested)
        for i, claim in enumerate(claims):
            if tested[i] and dropped in differences[i].index:
                out[i][dropped] = readings(claim, kept[i], family[i], True)
    return out


# ---- the plan: how many warm-ups, at what cost ----

@dataclass(frozen=True)
class PlanningSd:
    """The SD of one comparison's d_z (2 nested RL seeds per warm-up) the plan assumes, its degrees of freedom and
    where it was measured."""

    sd: float
    df: int
    source: str


def planning_sds(ledger: pd.DataFrame, first_block: pd.DataFrame, seeds: list[int], policies: list[str],
                 claims: tuple[Claim, ...] = COMPARISONS) -> list[PlanningSd]:
    """Per claim, the SD of d_z measured on the nested ledger (ledger: its endpoint values, zoo seeds 0-4), pooled
    with the first registration's warm-ups (first_block: its endpoint values) where that block ran the comparison's
    arms (the headline): s^2 = sum df_i s_i^2 / sum df_i, on sum df_i degrees of freedom."""
    out = []
    for claim, here, there in zip(claims, warmup_differences(ledger, claims, seeds, policies),
                                  warmup_differences(first_block, claims, seeds, policies)):
        parts = [(d.std(ddof=1), len(d) - 1, name) for d, name in ((here, "the nested ledger"),
                                                                   (there, "the first registration"))
                 if len(d) > 1]
        df = sum(part[1] for part in parts)
        sd = math.sqrt(sum(part[1] * part[0] ** 2 for part in parts) / df)
        out.append(PlanningSd(sd, df, " and ".join(f"{name} ({k + 1} warm-ups)" for _, k, name in parts)))
    return out


def planning_effects(claims: tuple[Claim, ...], ledger_means: list[float]) -> list[float]:
    """The true difference each claim's sign test is planned to detect: the paper's effect; where the paper gives
    none, the ledger's estimate (exploratory, said so); a margin claim's: 0, where its test must rule the margin out."""
    return [0.0 if not claim.directional else claim.paper_effect if claim.paper_effect is not None else mean
            for claim, mean in zip(claims, ledger_means)]


def simulated_family(n: int, effects: list[float], sds: list[PlanningSd], claims: tuple[Claim, ...] = COMPARISONS,
                     draws: int = 4000, seed: int = 0) -> pd.DataFrame:
    """The registered family (family_tests, readings) run on simulated warm-ups: per draw, each claim's n values of
    d_z from N(effect, sigma^2) with sigma^2 = sd^2 df / X, X ~ chi^2(df) (the SD's uncertainty, as
    statistics.expected_power averages it), the claims independent of each other (they share arms, which Holm's
    guarantee does not need, but the simulated power leaves out). Vectorised over the draws; tests/test_claims_
    confirmatory.py holds it equal to family_tests and readings draw by draw. Returns per claim the share of draws
    giving each label (a column per label), with attrs["family error"]: the share of draws in which some label says
    something false (false_label)."""
    rng = np.random.default_rng(seed)
    samples = []
    for effect, planning in zip(effects, sds):
        sigma = planning.sd * np.sqrt(planning.df / rng.chisquare(planning.df, size=draws))
        samples.append(effect + sigma[:, None] * rng.standard_normal((draws, n)))
    labels = simulated_readings(samples, claims)
    rows, wrong = [], np.zeros(draws, dtype=bool)
    for claim, effect, (reading, size) in zip(claims, effects, labels):
        shares = pd.Series(np.concatenate([reading, size])).value_counts() / draws
        rows.append(shares.to_dict())
        wrong |= np.array([false_label(claim, effect, Reading(r), SizeReading(z)) for r, z in zip(reading, size)])
    table = pd.DataFrame(rows).fillna(0.0)
    table.insert(0, "comparison", [f"{c.probe} - {c.reference} ({c.endpoint})" for c in claims])
    table.attrs["family error"] = float(wrong.mean())
    return table


def simulated_readings(samples: list[np.ndarray], claims: tuple[Claim, ...]) -> list[tuple[np.ndarray, np.ndarray]]:
    """family_tests and readings over many draws at once: samples, per claim (draws, n) values of d_z (every claim
    tested). Returns per claim (its Reading values, its SizeReading values), each (draws,) of strings."""
    tests, raw = [], []
    for i, (claim, d) in enumerate(zip(claims, samples)):
        n = d.shape[1]
        mean, se = d.mean(axis=1), d.std(axis=1, ddof=1) / math.sqrt(n)
        for h in claim_hypotheses(claim):
            t = (mean - h.null) / se
            p = stats.t.sf(t, n - 1) if h.alternative == "greater" else stats.t.cdf(t, n - 1) \
                if h.alternative == "less" else np.minimum(1.0, 2 * stats.t.sf(np.abs(t), n - 1))
            tests.append((i, h.role))
            raw.append(p)
    p = np.stack(raw, axis=1)                                              # (draws, tests)
    order = np.argsort(p, axis=1, kind="stable")
    steps = np.take_along_axis(p, order, axis=1) * (p.shape[1] - np.arange(p.shape[1]))
    adjusted = np.empty_like(p)
    np.put_along_axis(adjusted, order, np.minimum(1.0, np.maximum.accumulate(steps, axis=1)), axis=1)
    out = []
    for i, (claim, d) in enumerate(zip(claims, samples)):
        holm = {role: adjusted[:, j] < ALPHA for j, (k, role) in enumerate(tests) if k == i}
        positive = d.mean(axis=1) * claim.sign > 0
        if not claim.directional:
            inside = d.mean(axis=1) > -MARGIN if claim.kind == "no_loss" else d.mean(axis=1) < MARGIN
            reading = np.where(holm["margin"], np.where(inside, Reading.CONFIRMED.value,
                                                        Reading.OUTSIDE_MARGIN.value), Reading.NOT_CONFIRMED.value)
            size = np.full(len(d), SizeReading.NO_SIZE.value)
        else:
            reading = np.where(holm["sign"], np.where(positive, Reading.CONFIRMED.value, Reading.OPPOSITE.value),
                               Reading.NOT_CONFIRMED.value)
            size = np.where(holm["size"], SizeReading.RULED_OUT.value, SizeReading.NOT_RULED_OUT.value) \
                if "size" in holm else np.full(len(d), SizeReading.NO_SIZE.value)
        out.append((reading, size))
    return out


def false_label(claim: Claim, effect: float, reading: Reading, size: SizeReading) -> bool:
    """Whether the labels say something false of a claim whose true difference is `effect`."""
    if not claim.directional:
        inside = effect > -MARGIN if claim.kind == "no_loss" else effect < MARGIN
        return (reading is Reading.CONFIRMED and not inside) or (reading is Reading.OUTSIDE_MARGIN and inside)
    if reading is Reading.CONFIRMED and effect * claim.sign <= 0:
        return True
    if reading is Reading.OPPOSITE and effect * claim.sign >= 0:
        return True
    return size is SizeReading.RULED_OUT and effect * claim.sign >= abs(claim.paper_effect or 0.0)


def power_bounds(n: int, claims: tuple[Claim, ...], effects: list[float], sds: list[PlanningSd],
                 alpha: float = ALPHA) -> pd.DataFrame:
    """Per test of each claim, its power averaged over the SD's uncertainty at Holm's first step (alpha over the
    family's size: the least it can have) and at its last (alpha: the most): the sign test at the planning effect,
    the size test and a margin test at a true difference of 0."""
    tests = sum(len(claim_hypotheses(claim)) for claim in claims)
    rows = []
    for claim, effect, planning in zip(claims, effects, sds):
        for h in claim_hypotheses(claim):
            distance = abs(effect) if h.role == "sign" else abs(h.null)
            alternative = "two-sided" if h.role != "size" else "less"
            rows.append({"comparison": f"{claim.probe} - {claim.reference}", "endpoint": claim.endpoint,
                         "test": h.role, "true difference": effect if h.role == "sign" else 0.0,
                         "warm-ups": n,
                         "power at alpha/m": expected_power(n, distance, planning.sd, planning.df, alpha / tests,
                                                            alternative),
                         "power at alpha": expected_power(n, distance, planning.sd, planning.df, alpha, alternative)})
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Costs:
    """What one warm-up of the block costs, in minutes of one core, measured on one warm-up of the ledger
    (benchmarks/arm_costs.py, docs/measurements/arm_costs.json)."""

    zoo: float
    """the zoo's warm-up, every family"""
    runs: dict
    """{arm label: one run of it}"""
    machine: str

    def warmup(self, seeds: int) -> float:
        """One warm-up with every arm on `seeds` RL seeds."""
        return self.zoo + seeds * sum(self.runs.values())


def measured_costs(record: dict, arms: list[str]) -> Costs:
    """Costs from the arm_costs record (its families' CPU seconds, its runs' wall seconds, each run on one core) of
    the block's arms (their labels); an arm it lacks is named in the error."""
    runs = {row["arm"]: row["wall_seconds"] / 60 for row in record["runs"]}
    missing = sorted(set(arms) - set(runs))
    if missing:
        raise ValueError(f"the cost record has no run of {missing}; it has {sorted(runs)}")
    return Costs(zoo=sum(f["cpu_seconds"] for f in record["families"]) / 60,
                 runs={arm: runs[arm] for arm in arms}, machine=record["machine"]["cpu"])


def plan_table(warmups, effects: list[float], sds: list[PlanningSd], costs: Costs, cores: int = 2,
               claims: tuple[Claim, ...] = COMPARISONS) -> pd.DataFrame:
    """Per number of warm-ups: the runs, the cost (core-hours, and hours on `cores` cores), and the family's power
    as simulated_family gives it: the headline's replication confirmed at the paper's effect and its size ruled out at
    a true 0, the least power of the other sized claims to be confirmed at their paper's effects, the no-loss,
    no-rescue and unsized claims confirmed (at 0, 0 and the ledger's estimate), and the family error at 0."""
    rows = []
    headline = next(i for i, c in enumerate(claims) if (c.probe, c.reference) == ("sgt", "grpo"))
    sized = [i for i, c in enumerate(claims) if c.directional and c.paper_effect is not None and i != headline]
    other = [i for i, c in enumerate(claims) if not c.directional or c.paper_effect is None]
    for n in warmups:
        at_effects = simulated_family(n, effects, sds, claims)
        at_zero = simulated_family(n, [0.0] * len(claims), sds, claims)
        confirmed = at_effects.get(Reading.CONFIRMED.value, pd.Series(0.0, index=at_effects.index))
        ruled_out = at_zero.get(SizeReading.RULED_OUT.value, pd.Series(0.0, index=at_zero.index))
        rows.append({"warm-ups": n, "runs": n * SEEDS_PER_WARMUP * len(costs.runs),
                     "core-hours": n * costs.warmup(SEEDS_PER_WARMUP) / 60,
                     f"hours on {cores} cores": n * costs.warmup(SEEDS_PER_WARMUP) / 60 / cores,
                     "sgt - grpo confirmed at +0.013": confirmed[headline],
                     "sgt - grpo's size ruled out at 0": ruled_out[headline],
                     "other sized claims confirmed (least)": confirmed[sized].min(),
                     "no-loss, no-rescue and unsized claims confirmed": ", ".join(
                         f"{confirmed[i]:.0%}" for i in other),
                     "family error at 0": at_zero.attrs["family error"]})
    return pd.DataFrame(rows)


def power_table(n: int, effects: list[float], sds: list[PlanningSd], claims: tuple[Claim, ...] = COMPARISONS,
                alpha: float = ALPHA) -> pd.DataFrame:
    """Per test of each claim at n warm-ups: the true difference it is planned at, the planning SD and its df, the
    power averaged over the SD's uncertainty at Holm's first and last steps (power_bounds), and simulated in the
    family (simulated_family: the sign and margin tests at the planning effects, the size tests at 0)."""
    bounds = power_bounds(n, claims, effects, sds, alpha)
    at_effects = simulated_family(n, effects, sds, claims)
    at_zero = simulated_family(n, [0.0] * len(claims), sds, claims)
    simulated, planning = [], []
    for i, (claim, sd) in enumerate(zip(claims, sds)):
        for h in claim_hypotheses(claim):
            if h.role == "size":
                simulated.append(at_zero.get(SizeReading.RULED_OUT.value, pd.Series(0.0, index=at_zero.index))[i])
            else:
                simulated.append(at_effects.get(Reading.CONFIRMED.value,
                                                pd.Series(0.0, index=at_effects.index))[i])
            planning.append(f"{sd.sd:.4f} ({sd.df})")
    bounds.insert(4, "SD of d_z (df)", planning)
    bounds["power in the family (simulated)"] = simulated
    return bounds


def plan_inputs(ledger: pd.DataFrame, first_block: pd.DataFrame, cost_record: dict, arms: list[str],
                registered: int, seeds: list[int], policies: list[str],
                claims: tuple[Claim, ...] = COMPARISONS) -> dict:
    """What the plan is computed from, as plain values (frozen at the registration in
    docs/measurements/registration_claims_plan.json, which the checksum covers): the planning SDs, the planning
    effects, the measured costs, the numbers of warm-ups weighed and the one registered."""
    sds = planning_sds(ledger, first_block, seeds, policies, claims)
    means = [d.mean() for d in warmup_differences(ledger, claims, seeds, policies)]
    costs = measured_costs(cost_record, arms)
    return {"sds": [{"sd": sd.sd, "df": sd.df, "source": sd.source} for sd in sds],
            "effects": [float(e) for e in planning_effects(claims, means)],
            "costs": {"zoo": costs.zoo, "runs": costs.runs, "machine": costs.machine},
            "warmups": list(PLAN_WARMUPS), "registered": registered}


def plan_markdown(inputs: dict, claims: tuple[Claim, ...] = COMPARISONS) -> str:
    """The plan as docs/registration_claims.md shows it (its generated block) from plan_inputs' values: the cost and
    power per number of warm-ups, and each test's power at the registered n, every number formatted from plan_table
    and power_table."""
    n, effects = inputs["registered"], inputs["effects"]
    sds = [PlanningSd(**sd) for sd in inputs["sds"]]
    costs = Costs(**inputs["costs"])
    plan = plan_table(inputs["warmups"], effects, sds, costs, claims=claims).copy()
    for name in ("sgt - grpo confirmed at +0.013", "sgt - grpo's size ruled out at 0",
                 "other sized claims confirmed (least)"):
        plan[name] = plan[name].map(lambda v: f"{v:.0%}")
    plan["family error at 0"] = plan["family error at 0"].map(lambda v: f"{v:.1%}")
    plan["core-hours"] = plan["core-hours"].map(lambda v: f"{v:.1f}")
    plan[plan.columns[3]] = plan[plan.columns[3]].map(lambda v: f"{v:.1f}")
    plan["warm-ups"] = [f"**{w}**" if w == n else str(w) for w in plan["warm-ups"]]
    plan["runs"] = plan["runs"].map(str)
    power = power_table(n, effects, sds, claims)
    power["true difference"] = power["true difference"].map(lambda v: f"{v:+.4f}")
    for name in ("power at alpha/m", "power at alpha", "power in the family (simulated)"):
        power[name] = power[name].map(lambda v: f"{v:.0%}")
    power = power.drop(columns=["warm-ups"]).rename(columns={
        "power at alpha/m": f"power at alpha/{sum(len(claim_hypotheses(c)) for c in claims)} (Holm's first step)",
        "power at alpha": "power at alpha (Holm's last step)"})
    per_warmup = costs.warmup(SEEDS_PER_WARMUP)
    runs = ", ".join(f"{arm} {minutes:.2f}" for arm, minutes in costs.runs.items())
    return (f"Costs measured on one warm-up of the ledger (benchmarks/arm_costs.py, {costs.machine}): the zoo "
            f"{costs.zoo:.1f} core-minutes; one run of each arm, in core-minutes: {runs}. One warm-up of the block "
            f"({SEEDS_PER_WARMUP} RL seeds) is {per_warmup:.0f} core-minutes.\n\n"
            + plan.to_markdown(index=False, disable_numparse=True) + "\n\n"
            + f"Each test at the registered {n} warm-ups:\n\n" + power.to_markdown(index=False, disable_numparse=True)
            + "\n")
