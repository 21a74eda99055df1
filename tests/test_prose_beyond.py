"""The generated Result prose of 60_bandit and 80_beyond on hand-made frames with known values: each sentence carries
the frame's numbers, and the functions survive the smoke profile's thin outputs (one pair, NaN, a missing arm)."""
import math

import numpy as np
import pandas as pd

from mrl.reports.bandit import bandit_result, dynamics_result, plane_result
from mrl.reports.beyond import beyond_result, methods_result, poison_result, scaling_result
from mrl.reports.paired import chance_note, interval_cell


def plane_rows(kappa: float, scale: float = 1.0) -> list[dict]:
    """A small plane at one kappa: grpo, xgrpo over gamma (listed out of knob order), sgt over lambda."""
    points = [("grpo", "grpo", math.nan, 0.001, 0.2),
              ("xgrpo (gamma)", "xgrpo (gamma=1)", 1.0, 0.0014, 0.4),
              ("xgrpo (gamma)", "xgrpo (gamma=0)", 0.0, 0.001, 0.2),
              ("xgrpo (gamma)", "xgrpo (gamma=0.5)", 0.5, 0.0012, 0.18),
              ("sgt (lambda)", "sgt (lambda=0.1, eta=0)", 0.1, 0.1, 0.2),
              ("sgt (lambda)", "sgt (lambda=1, eta=0)", 1.0, 1.0, 0.3)]
    return [{"kappa": kappa, "overlap": 0.8, "curve": curve, "label": label, "knob": knob, "support": support * scale,
             "instability": instability} for curve, label, knob, support, instability in points]


def test_plane_result_gives_each_default_point_and_its_knob_trade_off_at_the_largest_kappa():
    plane = pd.DataFrame(plane_rows(0.25, scale=-1.0) + plane_rows(1.0))
    text = plane_result(plane)
    assert "kappa = 1 (B's mass on A's support 0.80)" in text
    assert "GRPO sits at support gain S = 0.001 and instability 0.2" in text
    assert "`xgrpo (gamma=0.5)`: S = 0.0012, instability 0.18 (0.90× GRPO's)" in text
    assert "gamma 0 → 1: S 0.001 → 0.0014, instability 1.00× → 2.00× GRPO's" in text
    assert "`sgt (lambda=0.1, eta=0)`: S = 0.1, instability 0.2 (1.00× GRPO's)" in text
    assert "lambda 0.1 → 1: S 0.1 → 1, instability 1.00× → 1.50× GRPO's" in text
    assert "-0.001" not in text   # the other kappa's points stay out
    assert "S = -0.001" in plane_result(plane, kappa=0.25)


def test_plane_result_without_grpo_or_points_does_not_crash():
    plane = pd.DataFrame(plane_rows(0.5))
    plane = plane[plane.label != "grpo"].assign(instability=lambda f: f.instability.where(f.knob != 1.0))
    text = plane_result(plane)
    assert "GRPO is not on the plane" in text and "instability 0.2 → n/a" in text and "×" not in text
    assert plane_result(plane.iloc[:0]) == "The plane has no points."


def dynamics_rows() -> pd.DataFrame:
    """summarise's rows at one kappa: grpo rescues little, sgt more and with the most harmful steps (B's)."""
    rows = []
    for method, rescue, negative in (("grpo", (0.0, 0.2), (0.0, 0.0)), ("sgt (lambda=0.1, eta=0)", (0.4, 0.6),
                                                                         (0.1, 0.25))):
        for policy, value, share in zip("AB", rescue, negative):
            rows.append({"kappa": 0.5, "method": method, "policy": policy, "rescue-type accuracy": value,
                         "negative steps": share})
    return pd.DataFrame(rows)


def test_dynamics_result_ranks_the_methods_and_names_the_most_harmful_run():
    text = dynamics_result(dynamics_rows())
    assert "at kappa = 0.5, sgt (lambda=0.1, eta=0) 0.500, grpo 0.100." in text
    assert "is 0.250 (sgt (lambda=0.1, eta=0), policy B, kappa = 0.5)" in text


def test_dynamics_result_on_one_row_without_harmful_steps():
    text = dynamics_result(dynamics_rows().iloc[:1].assign(**{"negative steps": np.nan}))
    assert text.endswith("at kappa = 0.5, grpo 0.000.") and "harmful" not in text
    assert "**The plane.**" in bandit_result(pd.DataFrame(plane_rows(1.0)), dynamics_rows())


def paired_numbers(n: int) -> pd.DataFrame:
    """paired_table's numbers for grpo, trrd, graft (offline) and sgt on A and B, with known differences."""
    rows = []
    cells = {"trrd": ((0.05, 0.01, 0.09), (-0.02, -0.06, 0.02)), "graft (offline)": ((0.01, -0.03, 0.05),
                                                                                    (0.0, -0.01, 0.01)),
             "sgt": ((0.04, 0.02, 0.06), (0.03, -0.01, 0.07))}
    for probe in ("grpo", *cells):
        for policy, skill in (("A", "S2"), ("B", "S3")):
            row = {"pairing": "A+B", "probe": probe, "weak skill": skill, "policy": policy}
            for metric, (diff, low, high) in zip(("weak", "overall"), cells.get(probe, [(np.nan,) * 3] * 2)):
                one = n < 2 and not np.isnan(diff)
                low, high = (np.nan, np.nan) if one else (low, high)
                excludes = low > 0 or high < 0
                row.update({f"{metric} Δ diff": diff, f"{metric} Δ low": low, f"{metric} Δ high": high,
                            f"{metric} Δ n": n if probe != "grpo" else np.nan,
                            f"{metric} Δ real": (excludes and n >= 3) if probe != "grpo" else np.nan})
            rows.append(row)
    return pd.DataFrame(rows)


def formatted(numbers: pd.DataFrame) -> pd.DataFrame:
    """The interval columns of paired_table's formatted table."""
    return pd.DataFrame({f"Δ {m} vs grpo [95% CI]": [interval_cell(*r) for r in numbers[
        [f"{m} Δ diff", f"{m} Δ low", f"{m} Δ high", f"{m} Δ real"]].fillna(
            {f"{m} Δ real": False}).itertuples(index=False)] for m in ("weak", "overall")})


def test_methods_result_gives_trrd_and_graft_with_intervals_and_the_chance_count():
    numbers = paired_numbers(3)
    text = methods_result(numbers, formatted(numbers))
    assert "`trrd` against GRPO, on the weak form: A (S2) **+0.050 [+0.010, +0.090]**" in text
    assert "overall: A -0.020 [-0.060, +0.020]" in text
    assert "`graft (offline)` against GRPO" in text and "(n = 3 pairs per policy)" in text
    assert "`sgt` against" not in text
    # 12 intervals, of which trrd's and sgt's weak ones exclude 0 (4), all with n = 3
    assert chance_note(12) in text and "4 of them exclude 0, 4 with n >= 3 (bold)" in text


def test_methods_result_with_one_pair_or_no_method_run():
    numbers = paired_numbers(1)
    text = methods_result(numbers, formatted(numbers))
    assert "A (S2) +0.050," in text and "one pair gives no interval" in text and "holds no interval" in text
    two = paired_numbers(2)
    assert "0 with n >= 3" in methods_result(two, formatted(two))
    none = numbers[~numbers.probe.isin(["trrd", "graft (offline)"])]
    assert "No run of `trrd`, `graft` in this profile." in methods_result(none, formatted(none))


def poison_numbers(equal: str = "yes") -> pd.DataFrame:
    """poison_table's numbers: sgt honest, trusting (a real loss on the weak form) and re-verified (`equal`); xgrpo
    honest and beside lying statistics (no shared seed on the weak form)."""
    rows = [("sgt", "honest peer", None, None, 0.0, ""),
            ("sgt", "forged_success, trusting", (-0.1, -0.15, -0.05, True), (-0.04, -0.08, 0.0, False), 0.0, "no"),
            ("sgt", "forged_success, re-verified", (0.0, np.nan, np.nan, False), (0.0, np.nan, np.nan, False), 503.0,
             equal),
            ("xgrpo", "honest peer", None, None, 0.0, ""),
            ("xgrpo", "lying_stats", None, (0.02, np.nan, np.nan, False), np.nan, "no")]
    return pd.DataFrame([{"policy": "A", "probe": probe, "arm": arm, "re-verified": arm.endswith("re-verified"),
                          "runs": 3 if "trusting" in arm else 1,
                          "weak": 0.1, "overall": 0.2, "weak Δ": weak, "overall Δ": overall,
                          "rejected claims": claims, "equals honest": same}
                         for probe, arm, weak, overall, claims, same in rows])


def test_poison_result_gives_the_damage_per_attack_and_the_re_verified_check():
    text = poison_result(poison_numbers())
    assert ("`sgt` with `forged_success, trusting`: weak **-0.100 [-0.150, -0.050]**, overall -0.040 [-0.080, "
            "+0.000] (A, 3 runs)") in text
    assert "`xgrpo` with `lying_stats`: weak no shared seed, overall +0.020 (A, 1 run)" in text
    assert ("the re-verified arm equals the honest run in every evaluation: `sgt` with `forged_success, "
            "re-verified` (503 claims turned away per run)") in text


def test_poison_result_names_a_re_verified_run_that_differs_and_survives_no_attack():
    text = poison_result(poison_numbers(equal="no"))
    assert "0 of 1 re-verified arms equal the honest run" in text
    assert "Differs from it: `sgt` with `forged_success, re-verified`." in text
    honest = poison_numbers()
    assert poison_result(honest[honest.arm == "honest peer"]) == "No run beside a poisoned peer in this profile."


def scaling_rows(seeds=(0,)) -> pd.DataFrame:
    """scaling_table's rows for n = 2, 3 sync and async; each seed adds 1 to the wall time and A's weak accuracy."""
    rows = []
    for seed in seeds:
        for n, clock, wall, weak_a, overall in ((2, "async", 10.0, 0.1, 0.3), (2, "sync", 12.0, 0.2, 0.4),
                                                (3, "async", 20.0, 0.3, 0.5), (3, "sync", 30.0, 0.4, 0.6)):
            rows.append({"n": n, "clock": clock, "seed": seed, "policies": "A+B", "A weak (S2)": weak_a + seed,
                         "B weak (S3)": np.nan, "mean overall, all policies": overall, "wall seconds": wall + seed})
    return pd.DataFrame(rows)


def test_scaling_result_gives_wall_time_and_accuracy_per_n_and_clock():
    text = scaling_result(scaling_rows())
    assert ("Sync: n = 2 ran in 12.0 s, mean overall accuracy 0.400 (A weak (S2) 0.200, B weak (S3) n/a); n = 3 ran "
            "in 30.0 s, mean overall accuracy 0.600") in text
    assert "Async: n = 2 ran in 10.0 s" in text and "Each point is one run" in text
    means = scaling_result(scaling_rows(seeds=(0, 1)))
    assert "n = 2 ran in 10.5 s" in means and "A weak (S2) 0.600" in means and "the mean of 2 runs" in means
    assert scaling_result(None) == "This profile runs no n-policy runs."


def test_beyond_result_joins_the_three_sections():
    numbers = paired_numbers(3)
    text = beyond_result(numbers, formatted(numbers), poison_numbers(), None)
    assert text.index("**TRRD and GRAFT.**") < text.index("**A poisoned peer.**") < text.index(
        "**More than two policies.**")
