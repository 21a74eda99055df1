"""The claims ledger: each claim of the papers, tested on the held-out experiment with the warm-up as the unit.

The analysis (docs/claims.md gives its reasons and history; the decision rule is mrl.reports.claims_rule):

- **Endpoint.** Per run and policy, the mean held-out accuracy over the last ENDPOINT_EVALS evaluations: overall
  (primary, as the papers report accuracy) and on the policy's weak form (the mechanism: secondary). These per-run
  values (`endpoint_values`) are committed as `paper_tables/claims_runs.csv`; every verdict is recomputed from them.
- **Unit.** d_z, per warm-up (zoo seed), is the mean over its policies and RL seeds of value(probe) - value(reference),
  paired on the RL seeds; the t interval and tests are over the zoo seeds (df = zoos - 1).
- **Verdicts.** Rule v2 (claims_rule.judge): one Holm family of every claim's tests per endpoint, with the
  leave-one-warm-up-out verdicts, an exact sign-flip p beside the t test's, and rule v1's verdict beside it.
"""
from __future__ import annotations

import math

import numpy as np
import pandas as pd

from mrl.reports.claims_rule import (ALPHA, MARGIN, MIN_WARMUPS, Claim, Verdict, VerdictKind, claim_hypotheses,
                                     fragility, judge, judge_v1, leave_one_out)
from mrl.reports.paired import interval_cell, paired_differences, t_interval
from mrl.reports.palette import policy_colour, probe_colour
from mrl.reports.probes import rescue_skills, with_overall
from mrl.reports.statistics import (nested_variance_components, seed_label_swap_p_value, seed_main_effect, t_power,
                                    warmups_for_power)

__all__ = ["ALPHA", "MARGIN", "MIN_WARMUPS", "Claim"]   # re-exported: the ledger's constants live with its rule

ENDPOINT_EVALS = 3
"""the endpoint averages a run's last this many held-out evaluations"""
BOOTSTRAP = 2000
"""hierarchical bootstrap resamples"""
POWER_TARGET = 0.8
"""the power the confirmatory ledger's number of warm-ups is chosen for (claims_power)"""

HACPO4 = {name: f"{name} (minibatches=4)" for name in ("grpo", "hacpo", "gspo", "gspo_x2", "naive")}
"""HACPO, its baselines and GRPO as HACPO's paper runs them: 4 optimizer updates per step"""

CLAIMS = (
    Claim("MRL", "SGT, outcome-level sharing, beats independent GRPO", "sgt", "grpo", "better", 0.013,
          "MRL main figure, MATH reward@1 at step ~105, mean of two models: 0.669 vs 0.656"),
    Claim("MRL", "PRP, data-level sharing, trails SGT", "prp", "sgt", "worse", -0.050,
          "MRL main figure, mean of two models: 0.6195 vs 0.669 (per model +0.003 and -0.102)"),
    Claim("MRL", "XGRPO, value-level sharing, loses nothing against GRPO", "xgrpo", "grpo", "no_loss", 0.005,
          "MRL main figure, mean of two models: 0.661 vs 0.656"),
    Claim("MRL", "XGRPO gives no rescue: no gain over GRPO beyond the margin", "xgrpo", "grpo", "no_gain", 0.0,
          "MRL's bandit analysis: a peer-mixed baseline adds no support on prompts a policy never solves",
          endpoint="weak"),
    Claim("HACPO", "HACPO beats GSPO trained alone", HACPO4["hacpo"], HACPO4["gspo"], "better", 0.032,
          "HACPO Table 1, mean of 6 models: +3.2 points over GSPO"),
    Claim("HACPO", "HACPO at half the rollouts beats GSPO with twice the samples", HACPO4["hacpo"], HACPO4["gspo_x2"],
          "better", 0.033, "HACPO Table 1, mean of 6 models: +3.3 points over GSPOx2"),
    Claim("HACPO", "Naive sharing is worse than single-agent training", HACPO4["naive"], HACPO4["gspo"], "worse",
          -0.069, "HACPO Table 1, mean of 6 models: naive 6.9 points below GSPO, below it in every setting"),
    Claim("GRAFT", "HACPO trails GRPO across families (GRAFT's re-implementation)", HACPO4["hacpo"], HACPO4["grpo"],
          "worse", None, "GRAFT Table 1: HACPO below GRPO in 5 of 6 pairs, by up to 4.17 points (no mean reported); "
          "read against GRPO at HACPO's 4 updates per step"),
)
LIKE_FOR_LIKE = (("grpo (minibatches=4)", "grpo", "what 4 updates per step cost GRPO"),
                 ("gspo (minibatches=4)", "grpo", "what 4 updates per step cost GSPO (at one update GSPO is GRPO)"),
                 ("hacpo (minibatches=4)", "grpo (minibatches=4)", "GRAFT's claim, like for like: 4 updates each"),
                 ("hacpo (minibatches=4)", "grpo", "GRAFT's claim as rule v1 read it: HACPO at 4 updates, GRPO at 1"))
"""descriptive comparisons that separate the method from the number of updates per step (not in the Holm family)"""
VALUES = {"overall": "overall held-out accuracy", "weak": "weak-form held-out accuracy"}
FAMILIES = {"primary": "each claim on its primary endpoint (overall accuracy; the weak form for the no-rescue "
                       "claim, whose mechanism acts there)",
            "secondary": "each claim on its other endpoint"}
"""the ledger's two Holm families"""


def family_endpoint(claim: Claim, family: str) -> str:
    """The endpoint column ("overall" or "weak") on which `family` ("primary", "secondary") reads the claim."""
    if family not in FAMILIES:
        raise ValueError(f"family = {family!r}; expected one of {list(FAMILIES)}")
    return claim.endpoint if family == "primary" else ({"overall", "weak"} - {claim.endpoint}).pop()


def endpoint_values(evals: pd.DataFrame) -> pd.DataFrame:
    """One row per run and policy (pairing, probe, policy, seed, zoo_seed): the primary endpoint, the mean
    held-out accuracy over the run's last ENDPOINT_EVALS evaluations after step 0 (fewer when the run has fewer),
    overall and on the policy's weak form ("overall", "weak"), and the weak form's accuracy at step 0 ("weak
    start"). The weak form is each (pairing, policy)'s over all warm-ups (mrl.reports.probes.rescue_skills)."""
    held = with_overall(evals[evals.split == "held-out"])
    run = ["pairing", "probe", "policy", "seed", "zoo_seed"]
    steps = held.groupby(run).step.transform(lambda s: s.isin(sorted(set(s) - {0})[-ENDPOINT_EVALS:]))
    weak = rescue_skills(evals)
    is_weak = np.array([weak.get((p, q)) == s for p, q, s in zip(held.pairing, held.policy, held.skill)])
    last = held[steps.astype(bool)]
    out = last[last.skill == "overall"].groupby(run).accuracy.mean().rename("overall").to_frame()
    out["weak"] = last[is_weak[steps.astype(bool).to_numpy()]].groupby(run).accuracy.mean()
    start = held[(held.step == 0) & is_weak]
    out["weak start"] = start.groupby(run).accuracy.mean()
    return out.reset_index()


def read_endpoint_values(path) -> pd.DataFrame:
    """The committed per-run endpoint values (`paper_tables/claims_runs.csv`, written from endpoint_values)."""
    return pd.read_csv(path, dtype={"pairing": str, "probe": str, "policy": str})


def unit_differences(values: pd.DataFrame, probe: str, reference: str, column: str) -> pd.DataFrame:
    """Per (policy, zoo seed): the mean paired difference probe - reference over the shared RL seeds and their
    number (columns policy, zoo_seed, diff, seeds), from endpoint_values rows."""
    index = ["pairing", "policy", "zoo_seed", "seed"]
    a = values[values.probe == probe].set_index(index)[column]
    b = values[values.probe == reference].set_index(index)[column]
    paired = (a - b).dropna().rename("diff").reset_index()
    return paired.groupby(["pairing", "policy", "zoo_seed"]).agg(diff=("diff", "mean"),
                                                                   seeds=("diff", "size")).reset_index()


def zoo_means(units: pd.DataFrame) -> pd.Series:
    """d_z: the mean over policies of each zoo seed's paired difference (one value per warm-up)."""
    return units.groupby("zoo_seed")["diff"].mean()


def seed_differences(values: pd.DataFrame, probe: str, reference: str, column: str) -> pd.Series:
    """Per (zoo_seed, seed): the paired difference probe - reference, averaged over the policies (a zoo's policies
    share its RL seeds)."""
    index = ["pairing", "policy", "zoo_seed", "seed"]
    a = values[values.probe == probe].set_index(index)[column]
    b = values[values.probe == reference].set_index(index)[column]
    return (a - b).dropna().groupby(["zoo_seed", "seed"]).mean()


def hierarchical_bootstrap(values: pd.DataFrame, probe: str, reference: str, column: str, draws: int = BOOTSTRAP,
                           seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean paired difference, resampling zoo seeds, then RL seeds within each (a
    zoo's policies share its seeds, so a seed is drawn for all of them): per draw b, mean_j mean(resample of the RL
    seeds of zoo Z_bj), Z_b1..Z_bK drawn with replacement from the K zoos. All draws at once: each zoo's seed
    resamples are drawn for every (draw, slot), and each slot reads its picked zoo's."""
    paired = seed_differences(values, probe, reference, column)
    zoos = [group.to_numpy() for _, group in sorted(paired.groupby(level="zoo_seed"), key=lambda item: item[0])]
    if len(zoos) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    picked = rng.integers(0, len(zoos), size=(draws, len(zoos)))                 # (draws, K) zoo per slot
    resampled = np.stack([seeds[rng.integers(0, len(seeds), size=(draws, len(zoos), len(seeds)))].mean(axis=-1)
                          for seeds in zoos], axis=-1)                           # (draws, K slots, K zoos)
    means = np.take_along_axis(resampled, picked[..., None], axis=-1)[..., 0].mean(axis=1)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def variance_split(values: pd.DataFrame, probe: str, reference: str, column: str) -> dict[str, float]:
    """The paired difference's variance split into warm-ups and RL seeds (statistics.nested_variance_components, REML
    with a random intercept per warm-up): {"between-warm-up SD": sigma_w, "RL-seed SD": sigma_s, "seeds": k}."""
    return nested_variance_components(seed_differences(values, probe, reference, column))


def seed_effect_table(designs: dict[str, pd.DataFrame], column: str = "overall", nested: tuple[str, ...] = (),
                      claims: tuple[Claim, ...] = CLAIMS) -> pd.DataFrame:
    """The RL seed's main effect per primary claim under each design ({design name: endpoint_values rows}): F with
    its degrees of freedom and each seed's mean difference over the warm-ups, from the two-way ANOVA without
    interaction over complete warm-ups (statistics.seed_main_effect), and its p. Where RL seed s drew the same streams
    on every warm-up (crossed), the warm-ups' means share that seed effect and a t interval over them leaves it out:
    the p is the F test's. Where RL seeds are nested in warm-ups (the designs named in `nested`), a seed label means
    nothing shared, so the only valid reference is the labels' own exchangeability: the p is the exact one of
    swapping the two seeds' labels within each warm-up (2^n relabellings: the sign-flip p of the per-warm-up seed
    difference, statistics.seed_label_swap_p_value), whose floor with 5 warm-ups is 2/32; the F test's normal theory
    gives p below that floor."""
    rows = []
    for name, values in designs.items():
        for claim in claims:
            if claim.endpoint != column:
                continue
            seeds = seed_differences(values, claim.probe, claim.reference, column)
            if seeds.empty:   # the design did not run this claim's arms
                continue
            effect = seed_main_effect(seeds)
            means = ", ".join(f"seed {seed}: {mean:+.4f}" for seed, mean in effect["seed means"].items())
            if name in nested:   # the exact p; an F beside it would be read with it, so none is shown
                p, test, f_cell = seed_label_swap_p_value(seeds), "exact label swap within warm-ups", ""
            else:
                p, test = effect["p"], "F test (normal theory)"
                f_cell = "" if math.isnan(effect["F"]) else \
                    f"{effect['F']:.2f} ({effect['df seed']:.0f}, {effect['df residual']:.0f})"
            rows.append({"design": name, "comparison": f"{claim.probe} - {claim.reference}", "F (df)": f_cell,
                         "p": p_cell(p), "test": test, "mean difference per RL seed": means})
    return pd.DataFrame(rows)


def seed_effect_caption(table: pd.DataFrame) -> str:
    """seed_effect_table's caption: its designs, its tests, and what chance alone would give (the F tests' count
    below 0.05; an exact label swap on n warm-ups cannot fall below 2/2^n)."""
    crossed = int((table.test == "F test (normal theory)").sum())
    designs = ", ".join(dict.fromkeys(table.design))
    return (f"The RL seed's main effect per comparison on its overall accuracy, per design ({designs}): where RL seed "
            f"s drew the same streams on every warm-up (crossed), the F of the two-way ANOVA without interaction "
            f"(df) and its p; where each warm-up has its own seeds (nested), the exact p of swapping the two seeds' "
            f"labels within each warm-up (its floor is 2/2^n on n warm-ups: 2/32 on 5), and no F; and each seed's "
            f"mean difference. It holds {len(table)} tests, unadjusted (descriptive): of its {crossed} F tests, about "
            f"{0.05 * crossed:.1f} would fall below 0.05 by chance alone if no seed had an effect.")


def warmup_differences(values: pd.DataFrame, claim: Claim, column: str) -> pd.Series:
    """d_z of a claim: its paired difference per zoo seed (index), the mean over the warm-up's policies and seeds."""
    units = unit_differences(values, claim.probe, claim.reference, column)
    return zoo_means(units) if len(units) else pd.Series(dtype=float)


def p_cell(p: float) -> str:
    """A p-value with 3 significant digits ("" when not tested)."""
    return "" if p is None or math.isnan(p) else f"{p:.3g}"


def claims_ledger(values: pd.DataFrame, family: str = "primary", claims: tuple[Claim, ...] = CLAIMS) -> pd.DataFrame:
    """One row per claim in one Holm family ("primary": each claim on its primary endpoint; "secondary": on
    the other one; FAMILIES), from the per-run endpoint values (endpoint_values or the committed claims_runs.csv): the
    warm-ups, the mean difference with its t interval and the hierarchical bootstrap's, the sign counts per (policy,
    zoo), the paper's effect, every test's raw, Holm and sign-flip p (claims_rule.judge), the verdict under rule v2,
    as a Verdict (with whether it is near the alpha edge), its leave-one-warm-up-out Fragility, and rule v1's verdict.
    Arms that did not run: VerdictKind.NOT_RUN. The secondary family's verdicts carry descriptive labels.
    claims: the family's claims (the ledger's CLAIMS; another question judged by the same rule passes its own)."""
    columns = [family_endpoint(claim, family) for claim in claims]
    differences = [warmup_differences(values, claim, column) for claim, column in zip(claims, columns)]
    judged = judge(claims, [d.to_numpy() for d in differences], family)
    warmups = sorted(set().union(*(d.index for d in differences)))
    without = leave_one_out(claims, differences, warmups, family) if len(warmups) > MIN_WARMUPS else \
        [{} for _ in claims]
    v1 = judge_v1(claims, [d.to_numpy() for d in differences])
    rows = []
    for claim, column, d, result, dropped, old in zip(claims, columns, differences, judged, without, v1):
        row = {"paper": claim.paper, "claim": claim.claim, "kind": claim.kind,
               "comparison": f"{claim.probe} - {claim.reference}", "endpoint": VALUES[column], "column": column,
               "paper's effect": claim.paper_effect, "zoos": len(d), **result}
        if len(d):
            units = unit_differences(values, claim.probe, claim.reference, column)
            mean, low, high = t_interval(d.to_numpy())
            row.update({"seeds per zoo": int(units.seeds.min()), "diff": mean, "low": low, "high": high,
                        "sd": float(d.std(ddof=1)) if len(d) > 1 else float("nan"),
                        "positive units": f"{int((units['diff'] > 0).sum())}/{len(units)}"})
            row["bootstrap low"], row["bootstrap high"] = hierarchical_bootstrap(values, claim.probe, claim.reference,
                                                                                 column)
        row["leave-one-out"] = fragility(result["verdict"], dropped) if dropped else None
        row["rule v1 verdict"] = old
        rows.append(row)
    return pd.DataFrame(rows)


def deciding_p(row: dict, kind: str = "Holm") -> float:
    """The row's p ("Holm" or "sign-flip") of its test against 0, or against the margin for a no-loss or no-gain
    claim."""
    role = "margin" if row["kind"] in ("no_loss", "no_gain") else "sign"
    return row.get(f"p {role} ({kind})", float("nan"))


def ledger_table(ledger: pd.DataFrame) -> pd.DataFrame:
    """The ledger as the paper shows it: each claim, its warm-ups x seeds, the mean difference with the t interval
    over warm-ups and the hierarchical bootstrap's, the sign counts, the paper's effect, the Holm-adjusted p of the
    test against 0 (or the margin) and against the paper's size, the sign-flip p, the verdict (rule v2), its
    leave-one-warm-up-out fragility and rule v1's verdict."""
    records = ledger.to_dict("records")

    def interval(row, low, high):
        return "" if not row["zoos"] or np.isnan(row.get(low, np.nan)) else f"[{row[low]:+.3f}, {row[high]:+.3f}]"

    return pd.DataFrame({
        "paper": ledger["paper"], "claim": ledger["claim"], "comparison": ledger["comparison"],
        "endpoint": ledger["column"],
        "warm-ups x seeds": [f"{int(r['zoos'])} x {int(r['seeds per zoo'])}" if r["zoos"] else "0" for r in records],
        "difference": [f"{r['diff']:+.3f}" if r["zoos"] else "" for r in records],
        "95% t over warm-ups": [interval(r, "low", "high") for r in records],
        "95% bootstrap": [interval(r, "bootstrap low", "bootstrap high") for r in records],
        "positive units": [r.get("positive units", "") if r["zoos"] else "" for r in records],
        "paper's effect": ["not reported" if e is None or math.isnan(e) else f"{e:+.3f}"
                           for e in ledger["paper's effect"]],
        "p vs 0 or margin (Holm)": [p_cell(deciding_p(r)) for r in records],
        "p vs paper's size (Holm)": [p_cell(r.get("p size (Holm)")) for r in records],
        "p sign-flip (raw)": [p_cell(deciding_p(r, "sign-flip")) for r in records],
        "verdict": [r["verdict"].label() for r in records],
        "leave one warm-up out": ["" if f is None else f.label() for f in ledger["leave-one-out"]],
        "rule v1": ledger["rule v1 verdict"]})


def evidence_table(values: pd.DataFrame, column: str = "overall") -> pd.DataFrame:
    """The ledger's per-warm-up evidence: per claim and policy, the mean paired difference over the RL seeds on each
    zoo seed (one column per zoo seed), and the sign count."""
    rows = []
    for claim in CLAIMS:
        units = unit_differences(values, claim.probe, claim.reference, column)
        for policy, group in units.groupby("policy"):
            row = {"claim": claim.claim, "comparison": f"{claim.probe} - {claim.reference}", "policy": policy}
            row.update({f"zoo {z}": f"{d:+.3f}" for z, d in zip(group.zoo_seed, group["diff"])})
            row["positive"] = f"{int((group['diff'] > 0).sum())}/{len(group)}"
            rows.append(row)
    return pd.DataFrame(rows)


def claims_power(values: pd.DataFrame, ledger: pd.DataFrame) -> pd.DataFrame:
    """Per claim with a size to detect: the test against 0 (or the margin), the effect under the paper's size
    relative to its null, the variance split of the paired difference (variance_split), the observed SD of d_z, and
    the power of the two-sided t test at alpha / m (m: the ledger's family, Holm's strictest step, so the power is a
    lower bound) with today's warm-ups, and the warm-ups needed for POWER_TARGET with today's RL seeds k (at the
    observed SD of d_z) and with 1 (that SD's square plus the RL-seed variance times 1 - 1/k)."""
    rows = []
    for claim, row in zip(CLAIMS, ledger.to_dict("records")):
        column, test = row["column"], claim_hypotheses(claim)[0]
        effect = None if claim.paper_effect is None else claim.paper_effect - test.null
        if not row["zoos"] or effect is None or not effect:
            continue
        split = variance_split(values, claim.probe, claim.reference, column)
        level = ALPHA / row["tests"]
        out = {"comparison": row["comparison"], "claim": claim.claim, "endpoint": column,
               "test": "vs 0" if test.role == "sign" else f"vs {test.null:+.2f}",
               "effect to detect": round(abs(effect), 3), "between-warm-up SD": split["between-warm-up SD"],
               "RL-seed SD": split["RL-seed SD"], "SD of d_z": row["sd"], "warm-ups": int(row["zoos"]),
               "level": level, "power": t_power(int(row["zoos"]), effect, row["sd"], level)}
        k = split["seeds"] or 1
        for seeds in sorted({1, k}):   # var(d_z) at `seeds` seeds: the observed one, moved by the RL-seed term
            extra = split["RL-seed SD"] ** 2 * (1 / seeds - 1 / k) if seeds != k else 0.0
            sd = np.sqrt(row["sd"] ** 2 + extra)
            needed = None if math.isnan(sd) else warmups_for_power(effect, sd, level, POWER_TARGET, fewest=MIN_WARMUPS)
            out[f"warm-ups for {POWER_TARGET:.0%} ({seeds} RL seed{'s' * (seeds > 1)})"] = needed
        rows.append(out)
    return pd.DataFrame(rows)


def power_table(power: pd.DataFrame) -> pd.DataFrame:
    """claims_power rounded for the paper, each comparison named with its claim's kind where it has two."""
    out = power.assign(comparison=claim_labels(power)).drop(columns="claim")
    for name in ("between-warm-up SD", "RL-seed SD", "SD of d_z"):
        out[name] = out[name].map(lambda v: "" if math.isnan(v) else f"{v:.4f}")
    out["level"] = out["level"].map(lambda v: f"{v:.2g}")
    out["power"] = out["power"].map(lambda v: "" if math.isnan(v) else f"{v:.0%}")
    for name in [c for c in out if c.startswith("warm-ups for")]:
        out[name] = out[name].map(lambda v: "over 200" if v is None or math.isnan(v) else str(int(v)))
    return out


DECIDED = (VerdictKind.SUPPORTED, VerdictKind.SMALLER, VerdictKind.CONTRADICTED, VerdictKind.OPPOSITE,
           VerdictKind.NOT_AT_PAPER_SIZE)
"""the verdicts a replication can repeat (the others decide nothing)"""


def replication_kind(verdict: Verdict) -> VerdictKind:
    """The verdict's kind as a replication reads it: supported, smaller than the paper's, replicates supported."""
    return VerdictKind.SUPPORTED if verdict.kind is VerdictKind.SMALLER else verdict.kind


def replication_column(primary: pd.DataFrame, replication: pd.DataFrame) -> list[str]:
    """Per claim: "replicated" when the replication's rule v2 verdict has the primary's kind (replication_kind),
    "not replicated: <the replication's verdict>" when it does not, and for a primary that decided nothing (DECIDED),
    "primary <verdict>; replication <verdict>" (a claim the first set could not decide can still be decided by the
    second). primary, replication: claims_ledger of the two sets of warm-ups."""
    out = []
    for first, second in zip(primary.verdict, replication.verdict):
        shown = replication_kind(second).value
        if first.kind not in DECIDED:
            out.append(f"primary {first.label(edge=False)}; replication {shown}")
        else:
            out.append("replicated" if replication_kind(second) is replication_kind(first) else
                       f"not replicated: {shown}")
    return out


def like_for_like_table(values: pd.DataFrame) -> pd.DataFrame:
    """LIKE_FOR_LIKE's comparisons on both endpoints: the mean paired difference over the warm-ups with its 95% t
    interval (descriptive, outside the ledger's Holm family; bold: it excludes 0), for the comparisons whose arms
    ran."""
    rows = []
    for probe, reference, meaning in LIKE_FOR_LIKE:
        row = {"comparison": f"{probe} - {reference}", "what it measures": meaning}
        for column in ("overall", "weak"):
            d = zoo_means(unit_differences(values, probe, reference, column)) if probe in set(values.probe) and \
                reference in set(values.probe) else pd.Series(dtype=float)
            if d.empty:
                break
            mean, low, high = t_interval(d.to_numpy())
            row["warm-ups"] = len(d)
            row[f"Δ {column} [95% t]"] = interval_cell(mean, low, high, len(d) >= 2 and (low > 0 or high < 0))
        else:
            rows.append(row)
    return pd.DataFrame(rows)


def verdict_counts(ledger: pd.DataFrame) -> pd.Series:
    """How many claims got each verdict (its label without the near-the-edge note)."""
    return ledger.verdict.map(lambda v: v.label(edge=False)).value_counts().sort_index()


KIND_LABELS = {"no_loss": " (no loss)", "no_gain": " (no gain)"}
"""how a claim tested as a margin reads beside its comparison: xgrpo - grpo is tested twice"""


def claim_labels(rows: pd.DataFrame) -> list[str]:
    """Each ledger row's comparison, with the claim's kind where a comparison is tested more than once."""
    kinds = {c.claim: c.kind for c in CLAIMS}
    return [f"{comparison}{KIND_LABELS.get(kinds.get(claim), '')}" for comparison, claim in zip(rows.comparison,
                                                                                                 rows.claim)]


def verdict_kinds(ledger: pd.DataFrame) -> pd.Series:
    """Each verdict's outcome (VerdictKind.outcome): supported, contradicted, not reproduced at the paper's size,
    inconclusive or not judged."""
    return ledger.verdict.map(lambda v: v.kind.outcome)


OUTCOME_WORDS = {"supported": "supported", "contradicted": "contradicted",
                 "not reproduced at the paper's size": "not reproduced at the paper's size",
                 "inconclusive": "inconclusive"}
DESCRIPTIVE_OUTCOME_WORDS = {"supported": "in the claim's direction or inside its margin",
                             "contradicted": "against the claim's direction or outside its margin",
                             "not reproduced at the paper's size": "below the paper's overall effect with the "
                                                                   "direction undetermined",
                             "inconclusive": "undetermined after Holm"}
"""how ledger_sentence counts the outcomes of a family of verdicts, and of the secondary family's descriptions"""


def ledger_sentence(ledger: pd.DataFrame, endpoint: str) -> str:
    """The ledger in one sentence, from the table: how many claims got a verdict on how many warm-ups, in one Holm
    family of how many tests, and how many were supported, contradicted and inconclusive on `endpoint`."""
    ran = ledger[ledger.verdict.map(lambda v: v.kind is not VerdictKind.NOT_RUN)]
    judged = ran[ran.zoos >= MIN_WARMUPS]
    if judged.empty:
        return (f"No claim has a verdict on {endpoint}: " + (f"{len(ran)} ran on {int(ran.zoos.max())} warm-up(s), "
                f"fewer than {MIN_WARMUPS}." if len(ran) else "their arms did not run."))
    kinds = verdict_kinds(judged)
    descriptive = judged.verdict.iloc[0].descriptive
    words = DESCRIPTIVE_OUTCOME_WORDS if descriptive else OUTCOME_WORDS
    named = lambda kind: "; ".join(claim_labels(judged[kinds == kind])) or "none"  # noqa: E731
    counts = [f"{int((kinds == kind).sum())} {words[kind]}" + (f" ({named(kind)})" if kind != "inconclusive" else "")
              for kind in words if kind != "not reproduced at the paper's size" or (kinds == kind).any()]
    what = "claims were described" if descriptive else "claims were judged"
    return (f"On {endpoint}, {len(judged)} {what} on {int(judged.zoos.max())} warm-ups, their "
            f"{int(judged.tests.max())} tests in one Holm family: " + ", ".join(counts[:-1]) + f" and {counts[-1]}.")


def claim_sentence(row: dict) -> str:
    """One ledger row as a sentence: the comparison, the mean difference and its t interval over the warm-ups, the
    paper's effect, the deciding Holm p, the verdict on this substrate, and its fragility."""
    head, verdict = f"`{row['comparison']}`", row["verdict"]
    if not row["zoos"] or verdict.kind is VerdictKind.NOT_RUN:
        return f"{head}: not run."
    if row["zoos"] < MIN_WARMUPS:
        return f"{head}: {verdict.label()}."
    effect = row["paper's effect"]
    paper = "the paper gives no size" if effect is None or math.isnan(effect) else \
        f"the paper's effect is {effect:+.3f}"
    edge = ", near the alpha edge" if verdict.near_edge else ""
    without = row.get("leave-one-out")
    fragile = f"; {without.label()}" if without is not None and without.fragile else ""
    return (f"{head}: {row['diff']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}] over {int(row['zoos'])} warm-ups x "
            f"{int(row['seeds per zoo'])} RL seeds; {paper}; Holm p {p_cell(deciding_p(row))} against "
            f"{'the margin' if row['kind'] in ('no_loss', 'no_gain') else '0'}; **{verdict.label(edge=False)}** on "
            f"this substrate{edge}{fragile}.")


def ledger_result(ledgers: dict[str, pd.DataFrame]) -> str:
    """The ledger's result as the notebook's prose (Markdown), generated from its two families ({"primary": ...,
    "secondary": ...}, claims_ledger): the counts of verdicts, then one sentence per claim with its endpoint."""
    blocks = []
    for family, ledger in ledgers.items():
        lines = [f"- {claim.paper}: {claim.claim} ({row['endpoint']}). {claim_sentence(row)}"
                 for claim, row in zip(CLAIMS, ledger.to_dict("records"))]
        blocks.append(f"**The {family} family: {FAMILIES[family]}.** {ledger_sentence(ledger, 'its endpoints')}"
                      "\n\n" + "\n".join(lines))
    return "\n\n".join(blocks)


def ledger_discussion(ledger: pd.DataFrame, power: pd.DataFrame | None = None) -> str:
    """What the primary ledger (overall accuracy) says about the papers on this substrate, generated from its
    verdicts: which claims the data support (with their Holm p and fragility), which they contradict and how, which
    this design cannot decide, and the ledger's power for the papers' effects."""
    judged = ledger[ledger.zoos >= MIN_WARMUPS]
    if judged.empty:
        return (f"No claim reached {MIN_WARMUPS} warm-ups, so the ledger decides nothing here: the profile's runs "
                f"are too few for a verdict.")
    kinds = verdict_kinds(judged)

    def listed(kind: str) -> str:
        rows = judged[kinds == kind]
        return ", ".join(f"`{label}` (Holm p {p_cell(deciding_p(r))}"
                         + (", fragile" if r["leave-one-out"] is not None and r["leave-one-out"].fragile else "")
                         + ")"
                         for label, r in zip(claim_labels(rows), rows.to_dict("records")))

    sentences = [f"On this substrate the data support {listed('supported') or 'no claim'}."]
    verdicts = judged.verdict.map(lambda v: v.kind)
    opposite = judged[verdicts == VerdictKind.OPPOSITE]
    smaller = judged[verdicts == VerdictKind.SMALLER]
    unsigned = judged[verdicts == VerdictKind.NOT_AT_PAPER_SIZE]
    if len(opposite):
        sentences.append(f"They show the opposite sign to the claim for "
                         f"{', '.join(f'`{c}`' for c in claim_labels(opposite))}.")
    if len(smaller):
        sentences.append(f"For {', '.join(f'`{c}`' for c in claim_labels(smaller))} the effect is smaller than the "
                         f"paper's own, which is ruled out.")
    if len(unsigned):
        sentences.append(f"They do not reproduce the paper's size for "
                         f"{', '.join(f'`{c}`' for c in claim_labels(unsigned))}: the paper's effect is ruled out, "
                         f"and the sign of the effect here is undetermined.")
    if (kinds == "inconclusive").any():
        sized_claims = judged["paper's effect"].notna() & judged["kind"].isin(["better", "worse"])
        undecided = "the data neither confirm these claims nor rule out the papers' effects" \
            if sized_claims[kinds == "inconclusive"].all() else \
            "the data neither confirm these claims nor rule out the papers' effects where a paper gives one"
        sentences.append(f"For {listed('inconclusive')} no test passes after Holm's correction over "
                         f"{int(judged.zoos.max())} warm-ups: {undecided}.")
    if power is not None and len(power):
        sentences.append(power_sentence(power))
    return " ".join(sentences)


def power_sentence(power: pd.DataFrame) -> str:
    """The ledger's power in words, from claims_power: its range over the claims with a paper size, how many reach
    POWER_TARGET, and for the headline claim (the first, SGT's) the power and the warm-ups it would need."""
    needed = [c for c in power if c.startswith("warm-ups for")][-1]
    labels = claim_labels(power)
    low, high = power.power.idxmin(), power.power.idxmax()
    head = power.iloc[0]
    return (f"With {int(head['warm-ups'])} warm-ups the ledger's tests have {power.power.min():.0%} "
            f"(`{labels[low]}`) to {power.power.max():.0%} (`{labels[high]}`) power against the papers' own effects "
            f"at Holm's strictest level, and {int((power.power >= POWER_TARGET).sum())} of {len(power)} reach "
            f"{POWER_TARGET:.0%}; `{labels[0]}` has {head['power']:.0%} and would need {head[needed]} warm-ups "
            f"(`claims_power`)." + (f" Where the power is below {POWER_TARGET:.0%}, an inconclusive verdict is "
                                    f"mostly a lack of power, not evidence of no effect."
                                    if (power.power < POWER_TARGET).any() else ""))


def ledger_interval_count(ledger: pd.DataFrame) -> int:
    """The distinct t intervals a ledger table shows: one per (comparison, endpoint) (a comparison tested by two
    claims on one endpoint shows one interval twice; the bootstrap's are a check, not counted)."""
    shown = ledger[ledger.zoos >= 2] if "zoos" in ledger else ledger.iloc[:0]
    return int(len(shown[["comparison", "endpoint"]].drop_duplicates())) if "endpoint" in shown else \
        int(shown.comparison.nunique())


def base_rate_units(values: pd.DataFrame, probe: str) -> pd.DataFrame:
    """Per (policy, zoo_seed): `diff`, the probe's paired gain over GRPO on the weak form at the endpoint (mean over
    the RL seeds), and `start`, the weak form's held-out accuracy after the warm-up. values: endpoint_values."""
    start = values[values.probe == "grpo"].groupby(["policy", "zoo_seed"])["weak start"].mean()
    units = unit_differences(values, probe, "grpo", "weak").set_index(["policy", "zoo_seed"])
    return units.assign(start=start)


def base_rate_sentence(values: pd.DataFrame, probes: tuple[str, ...] = ("sgt", "prp")) -> str:
    """The base-rate figure in words, per probe: where its largest weak-form gain came from, and the rank correlation
    between the warm-up's start and the gain over the (policy, warm-up) units (the prediction tested: sharing helps
    most at a low but non-zero base rate). values: the per-run endpoint values (endpoint_values)."""
    sentences = []
    for probe in (p for p in probes if p in set(values.probe)):
        units = base_rate_units(values, probe).reset_index()
        if len(units) < 3:
            continue
        best = units.loc[units["diff"].idxmax()]
        rho = units.start.corr(units["diff"], method="spearman")
        sentences.append(f"`{probe} - grpo` on the weak form: the largest gain, {best['diff']:+.3f}, is policy "
                         f"{best.policy}'s on zoo seed {int(best.zoo_seed)}, whose weak form started at "
                         f"{best.start:.3f}; over the {len(units)} (policy, warm-up) units the rank correlation of "
                         f"start and gain is {rho:+.2f}, and {int((units['diff'] > 0).sum())} units gain.")
    return " ".join(sentences) or "Too few (policy, warm-up) units for the base-rate reading."


def base_rate_figure(values: pd.DataFrame, probes: tuple[str, ...] = ("sgt", "prp")):
    """Each (policy, warm-up)'s paired gain over GRPO on its weak form (the endpoint, mean over the RL seeds)
    against the weak form's accuracy after the warm-up, one panel per probe: does sharing help most at a low but
    non-zero base rate? values: the per-run endpoint values (endpoint_values, or the committed claims_runs.csv)."""
    import matplotlib.pyplot as plt

    probes = [p for p in probes if p in set(values.probe)]
    fig, axes = plt.subplots(1, max(len(probes), 1), figsize=(4.2 * max(len(probes), 1), 3.4), sharey=True,
                             squeeze=False)
    for ax, probe in zip(axes[0], probes):
        units = base_rate_units(values, probe)
        for (policy, group), marker in zip(units.groupby(level="policy"), "os^Dv"):
            ax.scatter(group.start, group["diff"], color=policy_colour(policy), marker=marker, s=40,
                       label=f"policy {policy} ({len(group)} warm-ups)")
        ax.axhline(0, color="0.4", linewidth=0.8)
        ax.set_title(f"{probe} - grpo, weak form", color=probe_colour(probe))
        ax.set_xlabel("weak form's held-out accuracy after warm-up")
        ax.set_xlim(left=0)
    axes[0][0].set_ylabel("paired gain at the endpoint\n(mean over RL seeds)")
    axes[0][0].legend(frameon=False, fontsize=8)
    fig.suptitle("Gain against the warm-up's base rate: one point per (policy, warm-up)", fontsize=10)
    fig.tight_layout()
    return fig


def endpoint_table(evals: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(numbers, formatted table) per policy and probe at the primary endpoint: the mean held-out accuracy on
    the weak form and overall over the row's runs, and the paired difference to GRPO with its 95% t interval over
    the warm-ups (each warm-up's mean over its RL seeds first; bold: the interval excludes 0)."""
    values = endpoint_values(evals)
    keys = ["pairing", "probe", "policy"]
    numbers = values.groupby(keys, sort=False)[["weak", "overall"]].mean()
    numbers["runs"] = values.groupby(keys, sort=False).size()
    for column in ("weak", "overall"):
        diff = paired_differences(values, column, by_zoo=True).set_index(keys)
        numbers = numbers.join(diff.add_prefix(f"{column} Δ "))
    numbers = numbers.reset_index()
    weak = rescue_skills(evals)
    table = pd.DataFrame({"policy": numbers.policy,
                          "weak form": [weak.get((p, q), "") for p, q in zip(numbers.pairing, numbers.policy)],
                          "probe": numbers.probe, "runs": numbers.runs,
                          "warm-ups": ["" if math.isnan(n) else str(int(n)) for n in numbers["weak Δ n"]],
                          "weak": numbers.weak.round(3)})
    for column in ("weak", "overall"):
        if column == "overall":
            table["overall"] = numbers.overall.round(3)
        table[f"Δ {column} vs grpo [95% CI]"] = [
            interval_cell(*r) for r in numbers[[f"{column} Δ {k}" for k in ("diff", "low", "high", "real")]]
            .itertuples(index=False)]
    return numbers, table
