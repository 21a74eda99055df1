"""How the confirmatory results read: the table of every registered comparison with the first registration's result
beside it, its sentences, and each row's leave-one-out, formatted last from the records of
mrl.reports.claims_confirmatory and mrl.reports.confirmatory (the registered analyses, which this module only shows:
it is outside both checksums, so its wording can change).
"""
from __future__ import annotations

import math

import pandas as pd

from mrl.reports.claims_confirmatory import ALPHA, ClaimResult, Reading, SizeReading
from mrl.reports.claims_rule import claim_hypotheses
from mrl.reports.confirmatory import DESIGN, Result


def comparison_name(result: ClaimResult) -> str:
    """'hacpo4 - gspo4 (overall)': a comparison as the tables name it (4 updates per step written as a 4)."""
    short = lambda label: label.replace(" (minibatches=4)", "4")  # noqa: E731
    return f"{short(result.claim.probe)} - {short(result.claim.reference)}"


def fragility_cell(result: ClaimResult, without: dict) -> str:
    """'stable', or 'fragile: without zoo 203, not confirmed; ...': the warm-ups whose removal changes a label."""
    if not without:
        return "" if result.reading is Reading.NO_RESULT else "stable"
    changed: dict[str, list] = {}
    for zoo, (reading, size) in without.items():
        if (reading, size) != (result.reading, result.size):
            words = reading.value if reading is not result.reading else size.value
            changed.setdefault(words, []).append(str(zoo))
    if not changed:
        return "stable"
    return "fragile: " + "; ".join(f"without zoo {', '.join(zoos)}, {words}" for words, zoos in changed.items())


def p_cell(p: float) -> str:
    return "" if p is None or math.isnan(p) else f"{p:.3g}"


def claims_table(results: list[ClaimResult], without: list[dict], first: Result | None) -> pd.DataFrame:
    """One row per registered comparison: its claim, endpoint, complete (planned) warm-ups, the mean of d_z with its
    95% t interval, the raw and Holm p of its test against 0 or the margin and of its size test, the exact sign-flip
    p, the warm-ups above 0, the two labels and leave-one-out; the first registration's result as a last row, its own
    test (not in this family)."""
    rows = []
    for result, dropped in zip(results, without):
        main = claim_hypotheses(result.claim)[0]
        rows.append({
            "registration": "second", "paper": result.claim.paper, "claim": result.claim.claim,
            "comparison": comparison_name(result), "endpoint": result.claim.endpoint,
            "warm-ups (planned)": f"{result.warmups} ({result.planned})",
            "difference [95% t]": "" if math.isnan(result.mean) else
            f"{result.mean:+.4f} [{result.low:+.4f}, {result.high:+.4f}]",
            "tested against": f"{main.null:+.2f}" if main.role == "margin" else "0",
            "p (Holm)": f"{p_cell(result.p_main)} ({p_cell(result.p_main_holm)})",
            "paper's size": "" if result.claim.paper_effect is None else f"{result.claim.paper_effect:+.3f}",
            "p vs size (Holm)": "" if math.isnan(result.p_size) else
            f"{p_cell(result.p_size)} ({p_cell(result.p_size_holm)})",
            "p sign-flip": p_cell(result.p_sign_flip), "above 0": f"{result.positive}/{result.warmups}",
            "label": result.reading.value, "size label": result.size.value,
            "leave one warm-up out": fragility_cell(result, dropped)})
    if first is not None:
        rows.append({
            "registration": "first", "paper": "MRL", "claim": "SGT, outcome-level sharing, beats independent GRPO",
            "comparison": str(DESIGN.comparison), "endpoint": DESIGN.endpoint,
            "warm-ups (planned)": f"{first.warmups} ({first.planned})",
            "difference [95% t]": f"{first.mean:+.4f} [{first.low:+.4f}, {first.high:+.4f}]",
            "tested against": "0", "p (Holm)": f"{p_cell(first.p_zero)} (its own test)",
            "paper's size": f"{DESIGN.paper_effect:+.3f}", "p vs size (Holm)": f"{p_cell(first.p_size)} (its own)",
            "p sign-flip": p_cell(first.p_sign_flip), "above 0": f"{first.positive}/{first.warmups}",
            "label": first.reading.value, "size label": first.size.value, "leave one warm-up out": ""})
    return pd.DataFrame(rows)


def claims_sentence(results: list[ClaimResult]) -> str:
    """The family's outcome in a few sentences, every number from the records."""
    done = [r for r in results if r.reading is not Reading.NO_RESULT]
    if not done:
        return (f"No comparison has its {min(r.planned for r in results)} warm-ups' runs yet: the registered block "
                f"has no result (docs/registration_claims.md).")
    parts = []
    for r in done:
        size = "" if r.size is SizeReading.NO_SIZE else f"; against the paper's {r.claim.paper_effect:+.3f}: " \
                                                         f"{r.size.value}"
        parts.append(f"`{comparison_name(r)}` ({r.claim.endpoint}, {r.warmups} warm-ups): {r.reading.value}, "
                     f"{r.mean:+.4f} [{r.low:+.4f}, {r.high:+.4f}]{size}")
    waiting = len(results) - len(done)
    return (f"The second registration (one Holm family of {sum(len(claim_hypotheses(r.claim)) for r in results)} "
            f"tests at a family-wise {ALPHA}; 95% t intervals over warm-ups, not adjusted): " + "; ".join(parts)
            + "." + (f" {waiting} comparisons have too few complete warm-ups yet." if waiting else "")
            + " On this substrate: two tiny models on arithmetic, not the papers' setting.")
