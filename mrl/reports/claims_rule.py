"""The claims ledger's decision rule: the tests of each claim, one Holm family, the verdicts, and their power.

Pure functions over the warm-ups' paired differences d_z (one value per zoo seed); `mrl.reports.claims` reads the runs
into them. Rule v2 is the ledger's rule; rule v1 (the first five-warm-up ledger's) is kept beside it until the ledger
is regenerated. docs/claims.md gives both rules, the reason for every change and the ledger's history.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats

from mrl.reports.statistics import holm_adjusted, sign_flip_p_value, t_p_value

MARGIN = 0.01
"""non-inferiority and non-superiority margin, in accuracy (docs/claims.md: below the smallest gain the papers
attribute to sharing, SGT's +0.013, so a loss the margin allows is smaller than any such gain)"""
ALPHA = 0.05
"""family-wise error rate of the ledger's one Holm family (per endpoint)"""
MIN_WARMUPS = 3
"""a claim gets a verdict only on at least this many warm-ups (with fewer, the t interval has df < 2)"""
NEAR_EDGE = 2.0
"""a deciding Holm-adjusted p within this factor of ALPHA (0.025 to 0.1) is reported as near the edge"""


@dataclass(frozen=True)
class Claim:
    """A claim of a paper about `probe` against `reference`.

    kind: "better" (probe beats reference), "worse" (probe trails reference), "no_loss" (non-inferiority), "no_gain"
    (non-superiority, within MARGIN). paper_effect: the paper's own difference, probe - reference, in accuracy (None:
    not reported); docs/papers.md gives each one's source."""

    paper: str
    claim: str
    probe: str
    reference: str
    kind: str
    paper_effect: float | None
    source: str
    endpoint: str = "overall"
    """the primary endpoint its verdict reads: "overall" or "weak" (the weak form); chosen after a pilot had been seen
    (docs/claims.md, History)"""

    def __post_init__(self):
        effect = self.paper_effect
        if self.kind not in ("better", "worse", "no_loss", "no_gain"):
            raise ValueError(f"Claim.kind = {self.kind!r}; expected better, worse, no_loss or no_gain")
        if self.endpoint not in ("overall", "weak"):
            raise ValueError(f"Claim.endpoint = {self.endpoint!r}; expected overall or weak")
        if effect is not None and self.kind in ("better", "worse") and effect * self.sign <= 0:
            raise ValueError(f"claim {self.claim!r}: the paper's effect {effect:+} has the other sign than the claim")

    @property
    def sign(self) -> int:
        return -1 if self.kind == "worse" else 1

    @property
    def directional(self) -> bool:
        return self.kind in ("better", "worse")


@dataclass(frozen=True)
class Hypothesis:
    """One test of a claim in the ledger's family: H0 is rejected when d_z's mean differs from `null` in the direction
    `alternative` ("two-sided", "greater", "less"). role: "sign" (against 0: supported or the opposite sign), "size"
    (against the paper's effect: smaller than it) or "margin" (against the no-loss or no-gain margin)."""

    role: str
    null: float
    alternative: str


def claim_hypotheses(claim: Claim) -> tuple[Hypothesis, ...]:
    """Rule v2's tests of a claim. A one-sided test and its complement on one statistic are one two-sided test, read
    by the estimate's sign (a directional two-sided test), so the opposite-sign label has its own test and no claim
    counts twice:

    better/worse: sign, H0: d = 0 (two-sided); size, H0: d = paper effect, one-sided toward 0 (when reported).
    no_loss: margin, H0: d = -MARGIN (two-sided). no_gain: margin, H0: d = +MARGIN (two-sided)."""
    if claim.kind == "no_loss":
        return (Hypothesis("margin", -MARGIN, "two-sided"),)
    if claim.kind == "no_gain":
        return (Hypothesis("margin", MARGIN, "two-sided"),)
    tests = [Hypothesis("sign", 0.0, "two-sided")]
    if claim.paper_effect is not None:
        tests.append(Hypothesis("size", claim.paper_effect, "less" if claim.sign > 0 else "greater"))
    return tuple(tests)


SUPPORTED, SMALLER = "supported", "supported, smaller than the paper's"
OPPOSITE, SIZE_RULED_OUT = "contradicted: the opposite sign", \
    "contradicted: the paper's size ruled out, sign undetermined"
VERDICTS = (SUPPORTED, SMALLER, "contradicted", OPPOSITE, SIZE_RULED_OUT, "inconclusive")
"""rule v2's verdicts (a margin claim is supported, contradicted or inconclusive)"""


def verdict_v2(claim: Claim, diff: float, adjusted: dict[str, float]) -> str:
    """Rule v2's verdict from the Holm-adjusted p-values of the claim's tests ({role: p}) and the mean difference,
    whose sign reads a rejected two-sided test. A margin claim: supported when d is inside the margin, contradicted
    outside it. A directional claim: supported (smaller than the paper's when the size test rejects too), the
    opposite sign, the paper's size ruled out with the sign undetermined, or inconclusive."""
    passes = {role: p < ALPHA for role, p in adjusted.items()}
    if not claim.directional:
        if not passes["margin"]:
            return "inconclusive"
        inside = diff > -MARGIN if claim.kind == "no_loss" else diff < MARGIN
        return SUPPORTED if inside else "contradicted"
    if passes["sign"]:
        if diff * claim.sign < 0:
            return OPPOSITE
        return SMALLER if passes.get("size", False) else SUPPORTED
    return SIZE_RULED_OUT if passes.get("size", False) else "inconclusive"


def deciding_role(claim: Claim, verdict: str) -> str:
    """The test whose adjusted p decides the verdict's label (for the near-the-edge flag)."""
    if not claim.directional:
        return "margin"
    return "size" if verdict == SIZE_RULED_OUT else "sign"


def judge(claims: tuple[Claim, ...], differences: list[np.ndarray]) -> list[dict]:
    """Rule v2 over one endpoint: every claim's tests (claim_hypotheses) on its warm-ups' differences form one Holm
    family (claims with fewer than MIN_WARMUPS warm-ups left out). Per claim: {"p <role>": raw t p, "p <role> (Holm)",
    "p <role> (sign-flip)": raw exact sign-flip p, "verdict", "tests": the family's size, "near edge": bool}."""
    tests = [(i, h) for i, claim in enumerate(claims) for h in claim_hypotheses(claim)
             if len(differences[i]) >= MIN_WARMUPS]
    raw = [t_p_value(differences[i], h.null, h.alternative) for i, h in tests]
    adjusted = holm_adjusted(raw)
    family = int(np.isfinite(raw).sum())
    rows = [{"tests": family} for _ in claims]
    for (i, h), p, p_holm in zip(tests, raw, adjusted):
        rows[i].update({f"p {h.role}": p, f"p {h.role} (Holm)": p_holm,
                        f"p {h.role} (sign-flip)": sign_flip_p_value(differences[i], h.null, h.alternative)})
    for i, (claim, row) in enumerate(zip(claims, rows)):
        d = differences[i]
        if len(d) < MIN_WARMUPS:
            row["verdict"] = "not run" if len(d) == 0 else f"too few warm-ups ({len(d)})"
            continue
        holm_p = {h.role: row[f"p {h.role} (Holm)"] for h in claim_hypotheses(claim)}
        row["verdict"] = verdict_v2(claim, float(np.mean(d)), holm_p)
        deciding = holm_p[deciding_role(claim, row["verdict"])]
        row["near edge"] = bool(ALPHA / NEAR_EDGE <= deciding < ALPHA * NEAR_EDGE)
    return rows


def leave_one_out(claims: tuple[Claim, ...], differences: list, warmups: list) -> list[dict[object, str]]:
    """Per claim, {dropped warm-up: rule v2's verdict with that warm-up left out of every claim} (the whole family is
    re-judged on the remaining warm-ups). differences: per claim a pandas Series of d_z indexed by zoo seed."""
    out = [{} for _ in claims]
    for dropped in warmups:
        kept = [d.drop(dropped, errors="ignore").to_numpy() for d in differences]
        for i, row in enumerate(judge(claims, kept)):
            out[i][dropped] = row["verdict"]
    return out


def fragility(verdict: str, without: dict[object, str]) -> str:
    """"stable" when no single warm-up's removal changes the verdict, else "fragile: without zoo 0 or 3,
    <verdict>; ..." (the warm-ups whose removal gives each other verdict)."""
    changed: dict[str, list] = {}
    for zoo, other in without.items():
        if other != verdict:
            changed.setdefault(other, []).append(str(zoo))
    if not changed:
        return "stable"
    named = lambda zoos: ", ".join(zoos[:-1]) + f" or {zoos[-1]}" if len(zoos) > 1 else zoos[0]  # noqa: E731
    return "fragile: " + "; ".join(f"without zoo {named(zoos)}, {other}" for other, zoos in changed.items())


# ---- rule v1, kept beside rule v2 until the ledger is regenerated (docs/claims.md) ----

def v1_tests(claim: Claim, d: np.ndarray) -> dict[str, float]:
    """Rule v1's one-sided support and contradiction p-values (a margin claim's two tests are complements)."""
    if claim.kind == "no_loss":
        return {"support": t_p_value(d, -MARGIN, "greater"), "contradiction": t_p_value(d, -MARGIN, "less")}
    if claim.kind == "no_gain":
        return {"support": t_p_value(d, MARGIN, "less"), "contradiction": t_p_value(d, MARGIN, "greater")}
    toward, away = ("greater", "less") if claim.sign > 0 else ("less", "greater")
    against = 0.0 if claim.paper_effect is None else claim.paper_effect
    return {"support": t_p_value(d, 0.0, toward), "contradiction": t_p_value(d, against, away)}


def judge_v1(claims: tuple[Claim, ...], differences: list[np.ndarray]) -> list[str]:
    """Rule v1's verdicts: every support and contradiction test in one Holm family; the opposite-sign label from the
    unadjusted two-sided 95% t interval."""
    tested = [len(d) >= MIN_WARMUPS for d in differences]
    p = [v1_tests(c, d) if ok else {"support": np.nan, "contradiction": np.nan}
         for c, d, ok in zip(claims, differences, tested)]
    adjusted = holm_adjusted([row["support"] for row in p] + [row["contradiction"] for row in p])
    support, contradiction = adjusted[:len(claims)], adjusted[len(claims):]
    verdicts = []
    for claim, d, ok, p_s, p_c in zip(claims, differences, tested, support, contradiction):
        if not ok:
            verdicts.append("not run" if len(d) == 0 else f"too few warm-ups ({len(d)})")
        elif p_s < ALPHA:
            verdicts.append(SMALLER if claim.directional and p_c < ALPHA else SUPPORTED)
        elif p_c < ALPHA:
            half = stats.t.ppf(0.975, len(d) - 1) * np.std(d, ddof=1) / np.sqrt(len(d))
            beyond = np.mean(d) + half < 0 if claim.sign > 0 else np.mean(d) - half > 0
            verdicts.append("contradicted" if not claim.directional else OPPOSITE
                            if beyond or claim.paper_effect is None else "contradicted: smaller than the paper's")
        else:
            verdicts.append("inconclusive")
    return verdicts
