"""The claims ledger: each claim of the papers, tested on the held-out experiment with the warm-up as the unit.

The pre-registered analysis (fixed before the runs were read; docs/claims.md gives the reasons):

- **Endpoint.** Per run and policy, the mean held-out accuracy over the last ENDPOINT_EVALS evaluations: overall (as
  the papers report accuracy: the primary endpoint) and on the policy's weak form (the mechanism: secondary).
- **Unit.** A claim compares `probe` with `reference` paired on the shared RL seeds. Within one warm-up (zoo seed),
  d_z is the mean over its policies and RL seeds of value(probe) - value(reference). The t interval is taken over
  the zoo seeds (df = zoos - 1): the warm-up is what varies most, so RL seeds within a warm-up are not independent
  evidence. A hierarchical bootstrap (zoo seeds, then RL seeds within each) is the check beside it.
- **Tests.** Directional claims get a one-sided t test of H0: d <= 0 in the claimed direction ("support"), and
  one of H0: the effect is at least the paper's own size ("contradiction"). A no-loss claim (non-inferiority,
  margin MARGIN) tests H0: d <= -MARGIN and H0: d >= -MARGIN; a no-gain claim (non-superiority) H0: d >= +MARGIN
  and H0: d <= +MARGIN. All the ledger's tests on one endpoint form one Holm family.
- **Verdict** (at least MIN_WARMUPS warm-ups). supported: the support test passes after Holm ("smaller than the
  paper's" when the contradiction test passes too). contradicted: the contradiction test passes after Holm, a
  smaller effect than the paper's or the opposite sign. inconclusive: neither.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import t as student_t

from mrl.reports.paired import interval_cell, paired_differences, t_interval
from mrl.reports.probes import rescue_skills, with_overall

ENDPOINT_EVALS = 3
"""the endpoint averages a run's last this many held-out evaluations"""
MARGIN = 0.01
"""non-inferiority and non-superiority margin, in accuracy (docs/claims.md: below the smallest gain the papers
attribute to sharing, SGT's +0.013, so a loss the margin allows is smaller than any such gain)"""
MIN_WARMUPS = 3
"""a claim gets a verdict only on at least this many warm-ups (with fewer, the t interval has df < 2)"""
ALPHA = 0.05
"""family-wise error rate of each kind of test (Holm)"""
BOOTSTRAP = 2000
"""hierarchical bootstrap resamples"""


@dataclass(frozen=True)
class Claim:
    """A claim of a paper about `probe` against `reference`.

    kind: "better" (probe beats reference), "worse" (probe trails reference), "no_loss" (non-inferiority), "no_gain"
    (non-superiority, within MARGIN). paper_effect: the paper's own difference, probe - reference, in accuracy (None: not
    reported); docs/papers.md gives each one's source."""

    paper: str
    claim: str
    probe: str
    reference: str
    kind: str
    paper_effect: float | None
    source: str

    def __post_init__(self):
        effect = self.paper_effect
        if self.kind not in ("better", "worse", "no_loss", "no_gain"):
            raise ValueError(f"Claim.kind = {self.kind!r}; expected better, worse, no_loss or no_gain")
        if effect is not None and self.kind in ("better", "worse") and effect * self.sign <= 0:
            raise ValueError(f"claim {self.claim!r}: the paper's effect {effect:+} has the other sign than the claim")

    @property
    def sign(self) -> int:
        return -1 if self.kind == "worse" else 1


HACPO4 = {name: f"{name} (minibatches=4)" for name in ("hacpo", "gspo", "gspo_x2", "naive")}
"""HACPO and its baselines as the paper runs them: 4 optimizer updates per step"""

CLAIMS = (
    Claim("MRL", "SGT, outcome-level sharing, beats independent GRPO", "sgt", "grpo", "better", 0.013,
          "MRL main figure, MATH reward@1 at step ~105, mean of two models: 0.669 vs 0.656"),
    Claim("MRL", "PRP, data-level sharing, trails SGT", "prp", "sgt", "worse", -0.050,
          "MRL main figure, mean of two models: 0.6195 vs 0.669 (per model +0.003 and -0.102)"),
    Claim("MRL", "XGRPO, value-level sharing, loses nothing against GRPO", "xgrpo", "grpo", "no_loss", 0.005,
          "MRL main figure, mean of two models: 0.661 vs 0.656"),
    Claim("MRL", "XGRPO gives no rescue: no gain over GRPO beyond the margin", "xgrpo", "grpo", "no_gain", 0.0,
          "MRL's bandit analysis: a peer-mixed baseline adds no support on prompts a policy never solves"),
    Claim("HACPO", "HACPO beats GSPO trained alone", HACPO4["hacpo"], HACPO4["gspo"], "better", 0.032,
          "HACPO Table 1, mean of 6 models: +3.2 points over GSPO"),
    Claim("HACPO", "HACPO at half the rollouts beats GSPO with twice the samples", HACPO4["hacpo"], HACPO4["gspo_x2"],
          "better", 0.033, "HACPO Table 1, mean of 6 models: +3.3 points over GSPOx2"),
    Claim("HACPO", "Naive sharing is worse than single-agent training", HACPO4["naive"], HACPO4["gspo"], "worse",
          -0.069, "HACPO Table 1, mean of 6 models: naive 6.9 points below GSPO, below it in every setting"),
    Claim("GRAFT", "HACPO trails GRPO across families (GRAFT's re-implementation)", HACPO4["hacpo"], "grpo", "worse",
          None, "GRAFT Table 1: HACPO below GRPO in 5 of 6 pairs, by up to 4.17 points (no mean reported)"),
)
VALUES = {"overall": "overall held-out accuracy", "weak": "weak-form held-out accuracy"}


def endpoint_values(evals: pd.DataFrame) -> pd.DataFrame:
    """One row per run and policy (pairing, probe, policy, seed, zoo_seed): the pre-registered endpoint, the mean
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


def hierarchical_bootstrap(values: pd.DataFrame, probe: str, reference: str, column: str, draws: int = BOOTSTRAP,
                           seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of the mean paired difference, resampling zoo seeds, then RL seeds within each (a
    zoo's policies share its seeds, so a seed is drawn for all of them)."""
    index = ["pairing", "policy", "zoo_seed", "seed"]
    a = values[values.probe == probe].set_index(index)[column]
    b = values[values.probe == reference].set_index(index)[column]
    paired = (a - b).dropna().groupby(["zoo_seed", "seed"]).mean()   # over policies
    zoos = {z: group.to_numpy() for z, group in paired.groupby(level="zoo_seed")}
    if len(zoos) < 2:
        return float("nan"), float("nan")
    rng = np.random.default_rng(seed)
    keys = sorted(zoos)
    means = np.empty(draws)
    for i in range(draws):
        picked = rng.choice(len(keys), len(keys))
        means[i] = np.mean([rng.choice(zoos[keys[k]], len(zoos[keys[k]])).mean() for k in picked])
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def t_p_value(values: np.ndarray, null: float, alternative: str) -> float:
    """One-sided p-value of the t test of mean(values) against `null`: alternative "greater" (H0: mean <= null) or
    "less" (H0: mean >= null); NaN below two values or with no spread."""
    values = np.asarray(values, dtype=float)
    n = len(values)
    sd = values.std(ddof=1) if n > 1 else float("nan")
    if n < 2 or not sd > 0:
        return float("nan")
    stat = (values.mean() - null) / (sd / np.sqrt(n))
    return float(student_t.sf(stat, n - 1) if alternative == "greater" else student_t.cdf(stat, n - 1))


def claim_tests(claim: Claim, d: np.ndarray) -> dict:
    """The one-sided p-values of a claim's support and contradiction tests over the warm-ups' differences d."""
    if claim.kind == "no_loss":
        return {"p support": t_p_value(d, -MARGIN, "greater"), "p contradiction": t_p_value(d, -MARGIN, "less")}
    if claim.kind == "no_gain":   # non-superiority: a loss is the no-loss claim's business
        return {"p support": t_p_value(d, MARGIN, "less"), "p contradiction": t_p_value(d, MARGIN, "greater")}
    toward = "greater" if claim.sign > 0 else "less"
    away = "less" if claim.sign > 0 else "greater"
    against = 0.0 if claim.paper_effect is None else claim.paper_effect
    return {"p support": t_p_value(d, 0.0, toward), "p contradiction": t_p_value(d, against, away)}


def holm(p_values) -> np.ndarray:
    """Holm's step-down adjustment of p-values (NaNs kept as NaN, left out of the family)."""
    p = np.asarray(p_values, dtype=float)
    out = np.full_like(p, np.nan)
    finite = np.flatnonzero(~np.isnan(p))
    order = finite[np.argsort(p[finite])]
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(order) - rank) * p[i]))
        out[i] = running
    return out


def verdict(claim: Claim, low: float, high: float, p_support: float, p_contradiction: float) -> str:
    """supported / contradicted / inconclusive from the Holm-adjusted one-sided p-values. A directional claim's
    verdict says whether a supported effect is smaller than the paper's (both tests pass), and whether a
    contradiction is a smaller effect or the opposite sign (its unadjusted 95% interval wholly beyond 0 the other
    way)."""
    directional = claim.kind in ("better", "worse")
    if p_support < ALPHA:
        return "supported, smaller than the paper's" if directional and p_contradiction < ALPHA else "supported"
    if p_contradiction < ALPHA:
        if not directional:
            return "contradicted"
        opposite = high < 0 if claim.sign > 0 else low > 0
        return "contradicted: the opposite sign" if opposite or claim.paper_effect is None else \
            "contradicted: smaller than the paper's"
    return "inconclusive"


def claims_ledger(evals: pd.DataFrame, column: str = "overall") -> pd.DataFrame:
    """One row per claim on one endpoint column ("overall": primary; "weak": the mechanism): the warm-ups, the
    mean difference over them with its t interval and the hierarchical bootstrap's, the sign counts per (policy,
    zoo), the paper's effect, the Holm-adjusted p-values and the verdict. A claim whose arms did not run is
    "not run"."""
    values = endpoint_values(evals)
    rows = []
    for claim in CLAIMS:
        row = {"paper": claim.paper, "claim": claim.claim, "comparison": f"{claim.probe} - {claim.reference}",
               "endpoint": VALUES[column], "paper's effect": claim.paper_effect}
        units = unit_differences(values, claim.probe, claim.reference, column)
        if units.empty:
            rows.append({**row, "zoos": 0, "verdict": "not run"})
            continue
        d = zoo_means(units).to_numpy()
        mean, low, high = t_interval(d)
        boot_low, boot_high = hierarchical_bootstrap(values, claim.probe, claim.reference, column)
        positive = int((units["diff"] > 0).sum())
        rows.append({**row, "zoos": len(d), "seeds per zoo": int(units.seeds.min()), "diff": mean, "low": low,
                     "high": high, "bootstrap low": boot_low, "bootstrap high": boot_high,
                     "positive units": f"{positive}/{len(units)}", **claim_tests(claim, d)})
    ledger = pd.DataFrame(rows)
    if "p support" in ledger:   # one Holm family: every test of the ledger on this endpoint
        tested = ledger.zoos >= MIN_WARMUPS
        family = np.concatenate([ledger["p support"].where(tested), ledger["p contradiction"].where(tested)])
        adjusted = holm(family)
        ledger["p support (Holm)"], ledger["p contradiction (Holm)"] = adjusted[:len(ledger)], adjusted[len(ledger):]
    ledger["verdict"] = [
        "not run" if not row["zoos"] else f"too few warm-ups ({row['zoos']})" if row["zoos"] < MIN_WARMUPS else
        verdict(claim, row["low"], row["high"], row["p support (Holm)"], row["p contradiction (Holm)"])
        for claim, row in zip(CLAIMS, ledger.to_dict("records"))]
    return ledger


def ledger_table(ledger: pd.DataFrame) -> pd.DataFrame:
    """The ledger as the paper shows it: each claim, its warm-ups x seeds, the mean difference with the t interval
    over warm-ups and the hierarchical bootstrap's, the sign counts, the paper's effect, the Holm-adjusted p-values
    and the verdict."""
    def interval(row, low, high):
        return "" if not row["zoos"] or np.isnan(row[low]) else f"[{row[low]:+.3f}, {row[high]:+.3f}]"

    out = pd.DataFrame({
        "paper": ledger["paper"], "claim": ledger["claim"], "comparison": ledger["comparison"],
        "warm-ups x seeds": [f"{int(r['zoos'])} x {int(r['seeds per zoo'])}" if r["zoos"] else "0"
                             for r in ledger.to_dict("records")],
        "difference": [f"{r['diff']:+.3f}" if r["zoos"] else "" for r in ledger.to_dict("records")],
        "95% t over warm-ups": [interval(r, "low", "high") for r in ledger.to_dict("records")],
        "95% bootstrap": [interval(r, "bootstrap low", "bootstrap high") for r in ledger.to_dict("records")],
        "positive units": ledger.get("positive units", ""),
        "paper's effect": ["not reported" if e is None or e != e else f"{e:+.3f}" for e in ledger["paper's effect"]],
        "p support (Holm)": ledger.get("p support (Holm)", np.nan).round(3),
        "p contradiction (Holm)": ledger.get("p contradiction (Holm)", np.nan).round(3),
        "verdict": ledger["verdict"]})
    return out


def evidence_table(evals: pd.DataFrame, column: str = "overall") -> pd.DataFrame:
    """The ledger's per-warm-up evidence: per claim and policy, the mean paired difference over the RL seeds on each
    zoo seed (one column per zoo seed), the weak form's start on that zoo, and the sign count."""
    values = endpoint_values(evals)
    rows = []
    for claim in CLAIMS:
        units = unit_differences(values, claim.probe, claim.reference, column)
        for policy, group in units.groupby("policy"):
            row = {"claim": claim.claim, "comparison": f"{claim.probe} - {claim.reference}", "policy": policy}
            row.update({f"zoo {z}": f"{d:+.3f}" for z, d in zip(group.zoo_seed, group["diff"])})
            row["positive"] = f"{int((group['diff'] > 0).sum())}/{len(group)}"
            rows.append(row)
    return pd.DataFrame(rows)


def verdict_counts(ledger: pd.DataFrame) -> pd.Series:
    """How many claims got each verdict."""
    return ledger.verdict.value_counts().sort_index()


KIND_LABELS = {"no_loss": " (no loss)", "no_gain": " (no gain)"}
"""how a claim tested as a margin reads beside its comparison: xgrpo - grpo is tested twice"""


def claim_labels(rows: pd.DataFrame) -> list[str]:
    """Each ledger row's comparison, with the claim's kind where a comparison is tested more than once."""
    kinds = {c.claim: c.kind for c in CLAIMS}
    return [f"{comparison}{KIND_LABELS.get(kinds.get(claim), '')}" for comparison, claim in zip(rows.comparison,
                                                                                                 rows.claim)]


def ledger_sentence(ledger: pd.DataFrame, endpoint: str) -> str:
    """The ledger in one sentence, from the table: how many claims got a verdict on how many warm-ups, and how many
    were supported, contradicted and inconclusive on `endpoint`."""
    ran = ledger[ledger.verdict != "not run"]
    judged = ran[ran.zoos >= MIN_WARMUPS]
    if judged.empty:
        return (f"No claim has a verdict on {endpoint}: " + (f"{len(ran)} ran on {int(ran.zoos.max())} warm-up(s), "
                f"fewer than {MIN_WARMUPS}." if len(ran) else "their arms did not run."))
    kinds = judged.verdict.str.split(r"[,:]", regex=True).str[0]
    named = lambda kind: "; ".join(claim_labels(judged[kinds == kind])) or "none"  # noqa: E731
    return (f"On {endpoint}, {len(judged)} claims were judged on {int(judged.zoos.max())} warm-ups: "
            f"{int((kinds == 'supported').sum())} supported ({named('supported')}), "
            f"{int((kinds == 'contradicted').sum())} contradicted ({named('contradicted')}) and "
            f"{int((kinds == 'inconclusive').sum())} inconclusive.")


def claim_sentence(row: dict) -> str:
    """One ledger row as a sentence: the comparison, the mean difference and its t interval over the warm-ups, the
    paper's effect, and the verdict."""
    head = f"`{row['comparison']}`"
    if not row["zoos"] or row["verdict"] == "not run":
        return f"{head}: not run."
    effect = row["paper's effect"]
    paper = "the paper gives no size" if effect is None or effect != effect else f"the paper's effect is {effect:+.3f}"
    return (f"{head}: {row['diff']:+.3f} [{row['low']:+.3f}, {row['high']:+.3f}] over {int(row['zoos'])} warm-ups x "
            f"{int(row['seeds per zoo'])} RL seeds; {paper}; **{row['verdict']}**.")


def ledger_result(ledgers: dict[str, pd.DataFrame]) -> str:
    """The ledger's result as the notebook's prose (Markdown), generated from the ledgers on both endpoints
    ({"overall": ..., "weak": ...}, claims_ledger): the counts of verdicts, then one sentence per claim."""
    blocks = []
    for column, ledger in ledgers.items():
        lines = [f"- {claim.paper}: {claim.claim}. {claim_sentence(row)}"
                 for claim, row in zip(CLAIMS, ledger.to_dict("records"))]
        blocks.append(f"**{VALUES[column].capitalize()}.** {ledger_sentence(ledger, VALUES[column])}\n\n"
                      + "\n".join(lines))
    return "\n\n".join(blocks)


def ledger_discussion(ledger: pd.DataFrame) -> str:
    """What the primary ledger (overall accuracy) says about the papers, as prose generated from its verdicts: which
    claims the data support, which they contradict at the papers' own effect sizes, and which this design cannot
    decide."""
    judged = ledger[ledger.zoos >= MIN_WARMUPS]
    if judged.empty:
        return (f"No claim reached {MIN_WARMUPS} warm-ups, so the ledger decides nothing here: the profile's runs "
                f"are too few for a verdict.")
    kinds = judged.verdict.str.split(r"[,:]", regex=True).str[0]
    listed = lambda kind: ", ".join(f"`{c}`" for c in claim_labels(judged[kinds == kind]))  # noqa: E731
    sentences = [f"The data support {listed('supported') or 'no claim'}."]
    if (kinds == "contradicted").any():
        sentences.append(f"They rule out the papers' effect sizes for {listed('contradicted')}: on this substrate, "
                         f"at this budget, these effects are smaller than the papers report, or of the other sign.")
    if (kinds == "inconclusive").any():
        sentences.append(f"For {listed('inconclusive')} neither test passes after Holm's correction over "
                         f"{int(judged.zoos.max())} warm-ups: the data neither confirm these claims nor rule out the "
                         f"papers' effects. More warm-ups, not more RL seeds, would narrow the intervals, since the "
                         f"warm-up is the unit.")
    return " ".join(sentences)


def ledger_interval_count(ledger: pd.DataFrame) -> int:
    """The distinct t intervals a ledger table shows (a comparison tested by two claims shows one interval twice;
    the bootstrap's are a check, not counted)."""
    shown = ledger[ledger.zoos >= 2] if "zoos" in ledger else ledger.iloc[:0]
    return int(shown.comparison.nunique())


def base_rate_units(values: pd.DataFrame, probe: str) -> pd.DataFrame:
    """Per (policy, zoo_seed): `diff`, the probe's paired gain over GRPO on the weak form at the endpoint (mean over
    the RL seeds), and `start`, the weak form's held-out accuracy after the warm-up. values: endpoint_values."""
    start = values[values.probe == "grpo"].groupby(["policy", "zoo_seed"])["weak start"].mean()
    units = unit_differences(values, probe, "grpo", "weak").set_index(["policy", "zoo_seed"])
    return units.assign(start=start)


def base_rate_sentence(evals: pd.DataFrame, probes: tuple[str, ...] = ("sgt", "prp")) -> str:
    """The base-rate figure in words, per probe: where its largest weak-form gain came from, and the rank correlation
    between the warm-up's start and the gain over the (policy, warm-up) units (the prediction tested: sharing helps
    most at a low but non-zero base rate)."""
    values = endpoint_values(evals)
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


def base_rate_figure(evals: pd.DataFrame, probes: tuple[str, ...] = ("sgt", "prp")):
    """Each (policy, warm-up)'s paired gain over GRPO on its weak form (the endpoint, mean over the RL seeds)
    against the weak form's accuracy after the warm-up, one panel per probe: does sharing help most at a low but
    non-zero base rate?"""
    import matplotlib.pyplot as plt

    from mrl.reports.palette import policy_colour, probe_colour

    values = endpoint_values(evals)
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
    """(numbers, formatted table) per policy and probe at the pre-registered endpoint: the mean held-out accuracy on
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
                          "warm-ups": ["" if n != n else str(int(n)) for n in numbers["weak Δ n"]],
                          "weak": numbers.weak.round(3)})
    for column in ("weak", "overall"):
        if column == "overall":
            table["overall"] = numbers.overall.round(3)
        table[f"Δ {column} vs grpo [95% CI]"] = [
            interval_cell(*r) for r in numbers[[f"{column} Δ {k}" for k in ("diff", "low", "high", "real")]]
            .itertuples(index=False)]
    return numbers, table
