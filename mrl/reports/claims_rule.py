"""The claims ledger's decision rule: the tests of each claim, one Holm family, the verdicts, and their power.

Pure functions over the warm-ups' paired differences d_z (one value per zoo seed); `mrl.reports.claims` reads the runs
into them. Rule v2 is the ledger's rule; rule v1 (the first five-warm-up ledger's) is kept beside it until the ledger
is regenerated. docs/claims.md gives both rules, the reason for every change and the ledger's history.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

import numpy as np
from scipy import stats

from mrl.reports.statistics import holm_adjusted, sign_flip_p_value, t_p_value, t_p_value_at_df

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


class VerdictKind(Enum):
    """Rule v2's verdicts; the value is the label the primary family shows. A margin claim (no_loss, no_gain) is
    supported, contradicted or inconclusive; a directional one (better, worse) is supported (smaller than the paper's
    when the size test rejects too), of the opposite sign, not reproduced at the paper's size (the size test rejects,
    the sign test does not), or inconclusive."""

    SUPPORTED = "supported"
    SMALLER = "supported, smaller than the paper's"
    CONTRADICTED = "contradicted"
    OPPOSITE = "contradicted: the opposite sign"
    NOT_AT_PAPER_SIZE = "not reproduced at the paper's size"
    INCONCLUSIVE = "inconclusive"
    TOO_FEW = "too few warm-ups"
    NOT_RUN = "not run"

    @property
    def outcome(self) -> str:
        """What the verdict says of the claim, in the ledger's counts: supported, contradicted, not reproduced at the
        paper's size, inconclusive or not judged."""
        return OUTCOMES[self]


OUTCOMES = {VerdictKind.SUPPORTED: "supported", VerdictKind.SMALLER: "supported",
            VerdictKind.CONTRADICTED: "contradicted", VerdictKind.OPPOSITE: "contradicted",
            VerdictKind.NOT_AT_PAPER_SIZE: "not reproduced at the paper's size",
            VerdictKind.INCONCLUSIVE: "inconclusive", VerdictKind.TOO_FEW: "not judged",
            VerdictKind.NOT_RUN: "not judged"}
"""each verdict's outcome (VerdictKind.outcome)"""
DESCRIPTIVE = {VerdictKind.SUPPORTED: "in the claim's direction",
               VerdictKind.SMALLER: "in the claim's direction, below the paper's overall effect",
               VerdictKind.OPPOSITE: "against the claim's direction",
               VerdictKind.NOT_AT_PAPER_SIZE: "below the paper's overall effect, direction undetermined",
               VerdictKind.INCONCLUSIVE: "direction undetermined after Holm"}
DESCRIPTIVE_MARGIN = {VerdictKind.SUPPORTED: "inside the margin", VerdictKind.CONTRADICTED: "outside the margin",
                      VerdictKind.INCONCLUSIVE: "undetermined against the margin after Holm"}
"""the secondary family's labels: the same tests read as descriptions of the other endpoint, not as verdicts on the
claim (the claim's verdict is its primary endpoint's). Its size test holds the weak form against the paper's effect on
overall accuracy (the papers size no weak-form effect), and the labels say so."""
NEAR_EDGE_NOTE = " (near the alpha edge)"
"""what a label adds when its deciding Holm-adjusted p lies near alpha"""


@dataclass(frozen=True)
class Verdict:
    """One claim's verdict as data; tables and sentences format it (label).

    kind: rule v2's verdict. near_edge: its deciding Holm-adjusted p lies within NEAR_EDGE of ALPHA. warmups: the
    warm-ups it read (named in "too few warm-ups (2)"). margin: the claim is a no_loss or no_gain one. descriptive:
    it belongs to the secondary family, whose labels describe (DESCRIPTIVE) rather than judge."""

    kind: VerdictKind
    near_edge: bool = False
    warmups: int = 0
    margin: bool = False
    descriptive: bool = False

    def label(self, edge: bool = True) -> str:
        """The verdict as a table shows it, with the near-the-edge note when `edge`."""
        if self.kind is VerdictKind.TOO_FEW:
            return f"too few warm-ups ({self.warmups})"
        text = (DESCRIPTIVE_MARGIN if self.margin else DESCRIPTIVE).get(self.kind, self.kind.value) \
            if self.descriptive else self.kind.value
        return text + (NEAR_EDGE_NOTE if edge and self.near_edge else "")

    def __str__(self) -> str:
        return self.label()


@dataclass(frozen=True)
class Fragility:
    """Leave-one-warm-up-out as data: {other verdict: the warm-ups whose removal gives it}; empty when no single
    warm-up's removal changes the verdict (stable)."""

    changes: tuple[tuple[Verdict, tuple], ...] = ()

    @property
    def fragile(self) -> bool:
        return bool(self.changes)

    def label(self, reading=None) -> str:
        """"stable", or "fragile: without zoo 0 or 3, <verdict>; ..."; reading: a function from a Verdict to the
        words to show for it (its label by default)."""
        if not self.changes:
            return "stable"
        named = lambda zoos: ", ".join(zoos[:-1]) + f" or {zoos[-1]}" if len(zoos) > 1 else zoos[0]  # noqa: E731
        shown = reading or (lambda v: v.label(edge=False))
        return "fragile: " + "; ".join(f"without zoo {named([str(z) for z in zoos])}, {shown(verdict)}"
                                       for verdict, zoos in self.changes)

    def __str__(self) -> str:
        return self.label()


def verdict_v2(claim: Claim, diff: float, adjusted: dict[str, float]) -> VerdictKind:
    """Rule v2's verdict from the Holm-adjusted p-values of the claim's tests ({role: p}) and the mean difference,
    whose sign reads a rejected two-sided test. A margin claim: supported when d is inside the margin, contradicted
    outside it. A directional claim: supported (smaller than the paper's when the size test rejects too), the
    opposite sign, not reproduced at the paper's size (the size test alone rejects), or inconclusive."""
    passes = {role: p < ALPHA for role, p in adjusted.items()}
    if not claim.directional:
        if not passes["margin"]:
            return VerdictKind.INCONCLUSIVE
        inside = diff > -MARGIN if claim.kind == "no_loss" else diff < MARGIN
        return VerdictKind.SUPPORTED if inside else VerdictKind.CONTRADICTED
    if passes["sign"]:
        if diff * claim.sign < 0:
            return VerdictKind.OPPOSITE
        return VerdictKind.SMALLER if passes.get("size", False) else VerdictKind.SUPPORTED
    return VerdictKind.NOT_AT_PAPER_SIZE if passes.get("size", False) else VerdictKind.INCONCLUSIVE


def deciding_role(claim: Claim, kind: VerdictKind) -> str:
    """The test whose adjusted p decides the verdict's label (for the near-the-edge flag)."""
    if not claim.directional:
        return "margin"
    return "size" if kind is VerdictKind.NOT_AT_PAPER_SIZE else "sign"


def judge(claims: tuple[Claim, ...], differences: list[np.ndarray], family: str = "primary",
          dfs: list[int] | None = None) -> list[dict]:
    """Rule v2 over one endpoint: every claim's tests (claim_hypotheses) on its warm-ups' differences form one Holm
    family (claims with fewer than MIN_WARMUPS warm-ups left out). Per claim: {"p <role>": raw t p, "p <role> (Holm)",
    "p <role> (sign-flip)": raw exact sign-flip p, "verdict": a Verdict, "tests": the family's size}.
    family: "secondary" gives descriptive labels (Verdict.descriptive). dfs: per claim, the t tests' degrees of
    freedom in place of n - 1 (leave_one_out reads a reduced sample at the full sample's critical values; no
    sign-flip p then)."""
    tests = [(i, h) for i, claim in enumerate(claims) for h in claim_hypotheses(claim)
             if len(differences[i]) >= MIN_WARMUPS]
    raw = [t_p_value(differences[i], h.null, h.alternative) if dfs is None else
           t_p_value_at_df(differences[i], h.null, h.alternative, dfs[i]) for i, h in tests]
    adjusted = holm_adjusted(raw)
    rows = [{"tests": int(np.isfinite(raw).sum())} for _ in claims]
    for (i, h), p, p_holm in zip(tests, raw, adjusted):
        rows[i].update({f"p {h.role}": p, f"p {h.role} (Holm)": p_holm})
        if dfs is None:
            rows[i][f"p {h.role} (sign-flip)"] = sign_flip_p_value(differences[i], h.null, h.alternative)
    for i, (claim, row) in enumerate(zip(claims, rows)):
        d = differences[i]
        record = dict(warmups=len(d), margin=not claim.directional, descriptive=family == "secondary")
        if len(d) < MIN_WARMUPS:
            row["verdict"] = Verdict(VerdictKind.NOT_RUN if len(d) == 0 else VerdictKind.TOO_FEW, **record)
            continue
        holm_p = {h.role: row[f"p {h.role} (Holm)"] for h in claim_hypotheses(claim)}
        kind = verdict_v2(claim, float(np.mean(d)), holm_p)
        deciding = holm_p[deciding_role(claim, kind)]
        row["verdict"] = Verdict(kind, near_edge=bool(ALPHA / NEAR_EDGE <= deciding < ALPHA * NEAR_EDGE), **record)
    return rows


def leave_one_out(claims: tuple[Claim, ...], differences: list, warmups: list, family: str = "primary") \
        -> list[dict[object, Verdict]]:
    """Per claim, {dropped warm-up: rule v2's verdict with that warm-up left out of every claim}: the whole family
    re-judged on the remaining warm-ups, each t statistic read at the full sample's degrees of freedom (n - 1, not
    n - 2), so that a change flags the dropped warm-up's influence on the estimate and its SD (net of one observation
    fewer, which still shrinks t by sqrt((n - 1) / n)), not the heavier tails of one df fewer. The reading is lenient
    toward a reduced sample: its own t distribution would have heavier tails.
    differences: per claim a pandas Series of d_z indexed by zoo seed."""
    full = [max(len(d) - 1, 1) for d in differences]
    out = [{} for _ in claims]
    for dropped in warmups:
        kept = [d.drop(dropped, errors="ignore").to_numpy() for d in differences]
        for i, row in enumerate(judge(claims, kept, family, dfs=full)):
            out[i][dropped] = row["verdict"]
    return out


def fragility(verdict: Verdict, without: dict[object, Verdict]) -> Fragility:
    """The warm-ups whose removal changes the verdict's kind, grouped by the verdict each gives (in the order they
    first appear); a move only across the near-the-edge line is no change."""
    changed: dict[Verdict, list] = {}
    for zoo, other in without.items():
        if other.kind is not verdict.kind:   # grouped by what the label says: its kind (and a too-few's count)
            shown = replace(other, near_edge=False, warmups=other.warmups if other.kind is VerdictKind.TOO_FEW else 0)
            changed.setdefault(shown, []).append(zoo)
    return Fragility(tuple((v, tuple(zoos)) for v, zoos in changed.items()))


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
            verdicts.append((VerdictKind.SMALLER if claim.directional and p_c < ALPHA else VerdictKind.SUPPORTED).value)
        elif p_c < ALPHA:
            half = stats.t.ppf(0.975, len(d) - 1) * np.std(d, ddof=1) / np.sqrt(len(d))
            beyond = np.mean(d) + half < 0 if claim.sign > 0 else np.mean(d) - half > 0
            verdicts.append("contradicted" if not claim.directional else VerdictKind.OPPOSITE.value
                            if beyond or claim.paper_effect is None else "contradicted: smaller than the paper's")
        else:
            verdicts.append("inconclusive")
    return verdicts
