"""The claims ledger: each claim of the two papers, our paired evidence in each regime, and a verdict from a rule.

A claim is a comparison "probe beats reference" on a per-run value, paired on the shared seeds
(`mrl.reports.paired`), within each zoo seed where a regime has several (two warm-ups can start a policy's weak
skill at different levels, so each (policy, zoo seed) is its own unit, its interval over the RL seeds). Verdicts,
per regime, over the units:
  not run         the grid of that regime has no runs of one of the two probes;
  inconclusive    fewer than MIN_PAIRS (3) shared seeds for some policy: too few to call anything;
  reproduced      every policy's difference is in the claimed direction and real (its 95% interval excludes 0);
  mixed           real in the claimed direction for some policies, not for others;
  not reproduced  no policy's difference is real in the claimed direction.
A "no loss" claim (XGRPO keeps support) is a non-inferiority test with margin NO_LOSS_MARGIN: reproduced when every
policy's interval lies above -margin, not reproduced when some policy shows a real loss beyond it (its interval
below 0 and its mean below -margin), inconclusive otherwise.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from mrl.reports.paired import MIN_PAIRS, final_values, interval_cell, pair_columns, paired_differences
from mrl.reports.probes import KEYS, final_accuracy


@dataclass(frozen=True)
class Claim:
    """'probe beats reference on value' (direction +1), or 'probe loses nothing against reference' (no_loss)."""

    paper: str
    claim: str
    probe: str
    reference: str
    value: str       # a column of claim_values: weak, overall, own, grad_norm_std
    no_loss: bool = False


CLAIMS = (
    Claim("MRL", "SGT is the favourable point: it beats independent GRPO", "sgt", "grpo", "weak"),
    Claim("MRL", "PRP pays density-ratio variance and the THL residual: it trails SGT", "sgt", "prp", "weak"),
    Claim("MRL", "XGRPO keeps on-policy support: no loss (beyond 0.05) on the policy's own skills against GRPO",
          "xgrpo", "grpo",
          "own", no_loss=True),
    Claim("MRL", "PRP is less stable than GRPO: larger spread of the gradient norm", "prp", "grpo",
          "grad_norm_std"),
    Claim("HACPO", "HACPO beats GSPO trained alone", "hacpo", "gspo", "weak"),
    Claim("HACPO", "HACPO at half the rollouts: it beats GSPO with twice the samples per prompt", "hacpo",
          "gspo_x2", "weak"),
    Claim("GRAFT", "HACPO trails GRPO across families (GRAFT's re-implementation)", "grpo", "hacpo", "weak"),
)

NO_LOSS_MARGIN = 0.05  # accuracy: a loss on own skills smaller than 5 points counts as no loss

VALUE_NAMES = {"weak": "weak-skill held-out accuracy", "overall": "overall held-out accuracy",
               "own": "held-out accuracy on own skills", "grad_norm_std": "grad-norm std over steps"}


def claim_values(evals: pd.DataFrame, steps: pd.DataFrame) -> pd.DataFrame:
    """One row per run and policy: final held-out accuracy on the weak skill, overall and on the policy's own
    skills (the others), the std of its gradient norm over steps and its mean ESS fraction (PRP)."""
    values = final_values(evals, "held-out")
    keys = KEYS + pair_columns(values)
    final = final_accuracy(evals)
    final = final[(final.split == "held-out") & (final.skill != "overall")]
    weak = values.set_index(keys)
    own = []
    for key, group in final.groupby(keys, sort=False):
        total = group.accuracy.sum() - weak.loc[key, "weak"]
        own.append({**dict(zip(keys, key)), "own": total / max(len(group) - 1, 1)})
    values = values.merge(pd.DataFrame(own), on=keys)
    per_run = steps.groupby(keys, sort=False)
    stats = pd.DataFrame({"grad_norm_std": per_run.grad_norm.std()})
    if "ess_fraction" in steps.columns:
        stats["ess_fraction"] = per_run.ess_fraction.mean()
    return values.merge(stats.reset_index(), on=keys, how="left")


def verdict(diffs: pd.DataFrame, no_loss: bool) -> str:
    """The ledger's rule over the policies' paired differences (columns diff, low, high, n, real)."""
    if diffs.empty:
        return "not run"
    if (diffs.n < MIN_PAIRS).any():
        return "inconclusive"
    if no_loss:
        if (diffs.low > -NO_LOSS_MARGIN).all():
            return "reproduced"
        return "not reproduced" if (diffs.real & (diffs["diff"] < -NO_LOSS_MARGIN)).any() else "inconclusive"
    hits = diffs.real & (diffs["diff"] > 0)
    if hits.all():
        return "reproduced"
    return "mixed" if hits.any() else "not reproduced"


def unit_differences(pair: pd.DataFrame, claim: Claim) -> pd.DataFrame:
    """Paired differences of a claim per policy, and per zoo seed where the runs have several (column `zoo`)."""
    if "zoo_seed" not in pair.columns or pair.zoo_seed.nunique() == 1:
        return paired_differences(pair, claim.value, baseline=claim.reference).assign(zoo=None)
    shared = [z for z, runs in pair.groupby("zoo_seed") if set(runs.probe) == {claim.probe, claim.reference}]
    return pd.concat([paired_differences(pair[pair.zoo_seed == z], claim.value, baseline=claim.reference).assign(zoo=z)
                      for z in shared], ignore_index=True)


def evidence(diffs: pd.DataFrame, claim: Claim, values: pd.DataFrame, weak: dict) -> str:
    """'A (S2): +0.120 [+0.050, +0.190]; B (S3): ...' (per zoo seed where there are several) with n runs, the ESS
    fraction where PRP is involved."""
    parts = []
    for row in diffs.itertuples(index=False):
        skill = f" ({weak.get((row.pairing, row.policy), '')})" if claim.value == "weak" else ""
        zoo = f", zoo {row.zoo}" if row.zoo is not None and row.zoo == row.zoo else ""
        parts.append(f"{row.policy}{skill}{zoo}: {interval_cell(row.diff, row.low, row.high, row.real)}")
    text = "; ".join(parts) + (f" (n={int(diffs.n.min())})" if len(diffs) else "")
    if "prp" in (claim.probe, claim.reference) and "ess_fraction" in values.columns:
        ess = values[values.probe == "prp"].ess_fraction
        if ess.notna().any():
            text += f"; PRP's ESS fraction {ess.mean():.2f} (min over runs {ess.min():.2f})"
    return text


def claims_ledger(regimes: dict[str, tuple[pd.DataFrame, pd.DataFrame]], weak_skills: dict[str, dict]) -> pd.DataFrame:
    """One row per claim and regime: the comparison, our evidence and the verdict.

    regimes: {regime name: (evals, steps)} of a grid; weak_skills: {regime name: {(pairing, policy): skill}}."""
    rows = []
    for claim in CLAIMS:
        for regime, (evals, steps) in regimes.items():
            values = claim_values(evals, steps)
            pair = values[values.probe.isin([claim.probe, claim.reference])]
            if set(pair.probe) != {claim.probe, claim.reference}:
                diffs = pd.DataFrame(columns=KEYS + ["diff", "low", "high", "n", "real", "zoo"])
            else:
                diffs = unit_differences(pair, claim)
            rows.append({"paper": claim.paper, "claim": claim.claim, "regime": regime,
                         "comparison": f"{claim.probe} - {claim.reference}, {VALUE_NAMES[claim.value]}",
                         "evidence (paired difference, 95% CI)": evidence(diffs, claim, values,
                                                                          weak_skills.get(regime, {})),
                         "verdict": verdict(diffs, claim.no_loss)})
    return pd.DataFrame(rows)


def verdict_counts(ledger: pd.DataFrame) -> pd.DataFrame:
    """How many claims got each verdict, per regime."""
    return ledger.pivot_table(index="verdict", columns="regime", values="claim", aggfunc="count",
                              fill_value=0).astype(np.int64)
