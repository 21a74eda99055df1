"""The generated prose of 40_probe and 50_hacpo (mrl.reports.paired.probe_result, hacpo_result and their parts): on
hand-made frames with known values, each sentence carries the right numbers, and a profile with one seed (smoke)
gives sentences, not a crash."""
import math

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as student_t

from mrl.reports.paired import (hacpo_comparisons, hacpo_result, interval_count, interval_phrase, paired_table,
                                probe_result, seeds_phrase, significance_sentence, transfer_sentence,
                                weak_skill_lines)
from mrl.reports.cells import Count
from mrl.reports.probes import stability_sentence

NAN = float("nan")


def _numbers(rows):
    """paired_table's numbers by hand: (probe, policy, weak skill, weak Δ (diff, low, high, n, real), overall Δ)."""
    frame = []
    for probe, policy, skill, weak, overall in rows:
        row = {"pairing": "A+B", "probe": probe, "policy": policy, "weak skill": skill}
        for column, values in (("weak", weak), ("overall", overall)):
            row.update({f"{column} Δ {k}": v for k, v in zip(("diff", "low", "high", "n", "real"), values)})
        frame.append(row)
    return pd.DataFrame(frame)


NONE = (NAN, NAN, NAN, NAN, NAN)
HAND = _numbers([("grpo", "A", "S2", NONE, NONE), ("grpo", "B", "S1", NONE, NONE),
                 ("sgt", "A", "S2", (0.1, 0.05, 0.15, 3, True), (0.01, -0.02, 0.04, 3, False)),
                 ("sgt", "B", "S1", (0.02, -0.01, 0.05, 3, False), (0.0, -0.01, 0.01, 3, False)),
                 ("xgrpo", "A", "S2", (-0.02, -0.05, 0.01, 3, False), (-0.03, -0.04, -0.02, 3, True)),
                 ("xgrpo", "B", "S1", (0.0, -0.02, 0.02, 3, False), (0.0, -0.01, 0.01, 3, False))])
ONE_SEED = _numbers([("grpo", "A", "S2", NONE, NONE),
                     ("sgt", "A", "S2", (0.02, NAN, NAN, 1, False), (0.0, NAN, NAN, 1, False))])


def test_interval_phrase_reads_as_the_table_cell():
    assert interval_phrase(0.1, 0.05, 0.15, 3, True) == "**+0.100 [+0.050, +0.150]**"
    assert interval_phrase(-0.02, -0.05, 0.01, 3, False) == "-0.020 [-0.050, +0.010]"
    assert interval_phrase(0.02, NAN, NAN, 1, False) == "+0.020 (one pair: no interval)"
    assert interval_phrase(NAN, NAN, NAN, 0, False) == "no pair"


def test_weak_skill_lines_give_each_probe_and_policy_its_interval():
    lines = weak_skill_lines(HAND)
    assert lines == ["- `sgt`: A (S2) **+0.100 [+0.050, +0.150]**; B (S1) +0.020 [-0.010, +0.050].",
                     "- `xgrpo`: A (S2) -0.020 [-0.050, +0.010]; B (S1) +0.000 [-0.020, +0.020]."]
    assert seeds_phrase(HAND) == "3 RL seeds" and seeds_phrase(ONE_SEED) == "1 RL seed"


def test_significance_counts_intervals_against_chance_and_names_the_real_ones():
    sentence = significance_sentence(HAND)
    assert sentence.startswith("The table holds 8 intervals; at 95%, about 0.4 of them would exclude 0")
    assert sentence.endswith("2 do: `sgt`, A, weak skill S2 **+0.100 [+0.050, +0.150]**; "
                             "`xgrpo`, A, overall **-0.030 [-0.040, -0.020]**.")
    assert significance_sentence(HAND, named=["xgrpo"], who="XGRPO").endswith(
        "2 do, 1 of them XGRPO's: `xgrpo`, A, overall **-0.030 [-0.040, -0.020]**.")
    assert significance_sentence(HAND, named=["prp"], who="PRP").endswith("2 do, none of them PRP's.")
    assert significance_sentence(ONE_SEED).startswith("No arm has two seeds paired with GRPO")


def test_transfer_sentence_sets_pool_gains_beside_held_out_ones():
    def main(values):   # main_table's numbers: A's weak skill is S2, B's S1; the strong skills must be ignored
        return pd.DataFrame([{"pairing": "A+B", "probe": p, "policy": q, "skill": s, "mean": v, "ci95": NAN,
                              "seeds": 3} for (p, q, s), v in values.items()])
    held_out = main({("grpo", "A", "S2"): 0.1, ("sgt", "A", "S2"): 0.15, ("grpo", "B", "S1"): 0.2,
                     ("sgt", "B", "S1"): 0.2, ("grpo", "A", "S1"): 0.9, ("sgt", "A", "S1"): 0.1})
    pool = main({("grpo", "A", "S2"): 0.3, ("sgt", "A", "S2"): 0.6, ("grpo", "B", "S1"): 0.2,
                 ("sgt", "B", "S1"): 0.4})
    sentence = transfer_sentence(held_out, pool, HAND[HAND.probe != "xgrpo"])
    assert "`sgt` +0.250 / +0.025;" in sentence and sentence.endswith("`grpo` itself ends at 0.250 / 0.150.")
    assert transfer_sentence(held_out[held_out.probe != "grpo"], pool, HAND) == ""


def test_stability_sentence_counts_collapses_and_averages_over_policies():
    stability = pd.DataFrame([{"pairing": "A+B", "probe": p, "policy": q, "collapsed runs": c,
                               "strong-skill change": d, "ESS fraction": e}
                              for p, q, c, d, e in [("grpo", "A", Count(1, 3), -0.04, NAN),
                                                    ("grpo", "B", Count(0, 3), -0.06, NAN),
                                                    ("prp", "A", Count(0, 3), 0.0, 0.1),
                                                    ("prp", "B", Count(0, 3), 0.02, 0.2)]])
    sentence = stability_sentence(stability)
    assert sentence.startswith("1 of 12 policy runs collapsed.")
    assert "-0.050 under `grpo`, +0.010 under `prp`." in sentence
    assert sentence.endswith("effective sample size fraction of 0.100-0.200 (`prp`) of the peer samples.")
    assert stability_sentence(stability.iloc[:0]) == ""


def _hacpo_evals(finals, seeds=(0, 1, 2)):
    """A+B evals with A strong on S1 and B on S2 at step 0 (so A lacks S2, B lacks S1); finals: A's final held-out
    S2 accuracy per probe and seed (everything else fixed, so A's overall moves by half of it)."""
    rows = []
    for probe, values in finals.items():
        for seed, final in zip(seeds, values):
            for step in (0, 1):
                for policy, skill, value in (("A", "S1", 0.9), ("A", "S2", final if step else 0.05),
                                             ("B", "S1", 0.05), ("B", "S2", 0.9)):
                    rows.append({"pairing": "A+B", "probe": probe, "seed": seed, "policy": policy, "step": step,
                                 "rollouts": 64 * step, "split": "held-out", "skill": skill, "accuracy": value})
    return pd.DataFrame(rows)


def _steps(evals):
    runs = evals[["pairing", "probe", "seed", "policy"]].drop_duplicates()
    return runs.assign(step=1, reward=0.5, grad_norm=1.0)


FINALS = {"grpo": [0.1, 0.2, 0.3], "hacpo": [0.3, 0.4, 0.6], "gspo": [0.1, 0.3, 0.3],
          "gspo_x2": [0.2, 0.3, 0.5], "naive": [0.0, 0.15, 0.3]}


def _interval(diffs):
    diffs = np.asarray(diffs)
    half = student_t.ppf(0.975, len(diffs) - 1) * diffs.std(ddof=1) / math.sqrt(len(diffs))
    return diffs.mean(), diffs.mean() - half, diffs.mean() + half


def test_hacpo_is_paired_with_each_baseline_on_overall_accuracy():
    evals = _hacpo_evals(FINALS)
    direct = hacpo_comparisons(evals).set_index(["reference", "policy"])
    assert set(direct.index.get_level_values(0)) == {"gspo", "gspo_x2", "naive"}
    # overall = (0.9 + S2) / 2, so each overall difference is half the S2 one
    mean, low, high = _interval([(h - n) / 2 for h, n in zip(FINALS["hacpo"], FINALS["naive"])])
    assert direct.loc[("naive", "A"), "diff"] == pytest.approx(mean) and direct.loc[("naive", "A"), "real"]
    assert direct.loc[("gspo", "A"), "low"] == pytest.approx(_interval([0.1, 0.05, 0.15])[1])
    assert not direct.loc[("gspo_x2", "A"), "real"]   # three equal differences: width 0, no evidence
    numbers, table = paired_table(evals, _steps(evals))
    text = hacpo_result(evals, numbers)
    assert f"overall against `naive` A **{mean:+.3f} [{low:+.3f}, {high:+.3f}]**" in text
    weak = _interval([h - g for h, g in zip(FINALS["hacpo"], FINALS["grpo"])])
    assert f"on the weak skill against GRPO A (S2) **{weak[0]:+.3f} [{weak[1]:+.3f}, {weak[2]:+.3f}]**" in text
    # the count is the formatted table's, and the direct intervals are counted on their own
    assert f"The table holds {interval_count(table)} intervals" in text
    assert "Of the 6 intervals against GSPO, GSPO x2 and naive sharing, 1 excludes 0 (at 95%, about 0.3" in text


def test_a_hacpo_variant_meets_its_baselines_with_the_same_knobs():
    finals = {f"{p} (minibatches=4)": v for p, v in FINALS.items() if p != "grpo"} | {"grpo": FINALS["grpo"],
                                                                                      "gspo": FINALS["gspo"]}
    direct = hacpo_comparisons(_hacpo_evals(finals))
    assert set(direct.probe) == {"hacpo (minibatches=4)"}
    assert set(direct.reference) == {"gspo (minibatches=4)", "gspo_x2 (minibatches=4)", "naive (minibatches=4)"}


def test_one_seed_gives_sentences_without_intervals():
    evals = _hacpo_evals({p: v[:1] for p, v in FINALS.items()}, seeds=(0,))
    numbers, _ = paired_table(evals, _steps(evals))
    text = hacpo_result(evals, numbers)
    assert "paired on 1 RL seed " in text and "(one pair: no interval)" in text
    assert "No arm has two seeds paired with GRPO" in text and "Of the" not in text
    assert hacpo_result(evals, numbers[numbers.probe != "hacpo"]) == "HACPO did not run in this profile."
    held_out = pd.DataFrame({"pairing": "A+B", "probe": ["grpo", "sgt"], "policy": "A", "skill": "S2",
                             "mean": [0.1, 0.1], "ci95": NAN, "seeds": 1})
    stability = pd.DataFrame({"pairing": "A+B", "probe": ["grpo", "sgt"], "policy": "A",
                              "collapsed runs": Count(0, 1), "strong-skill change": [0.0, NAN], "ESS fraction": NAN})
    text = probe_result(ONE_SEED, held_out, held_out, stability)
    assert "A (S2) +0.020 (one pair: no interval)" in text and "0 of 2 policy runs collapsed" in text
