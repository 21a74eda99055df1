"""The substrate notebooks' result prose (mrl.reports.substrate's *_result functions) on tiny hand-made frames: each
sentence carries the numbers the frame holds, and a frame that is empty or holds NaN gives prose, not an exception."""
from types import SimpleNamespace

import pandas as pd
import pytest

from mrl.reports.substrate import (grpo_baseline_result, mix_roles, mix_text, mwra_result, skill_legend,
                                   thl_result, warmup_caption, zoo_result)

NAN = float("nan")


def long_accuracy(cells: dict[tuple[str, str, str], float]) -> pd.DataFrame:
    """warmup_accuracy's shape from {(split, policy, skill): accuracy}."""
    return pd.DataFrame([{"policy": p, "split": split, "skill": s, "accuracy": a}
                         for (split, p, s), a in cells.items()])


FAMILIES = pd.DataFrame({"policy": ["A", "B"],
                         "warm-up mix": [mix_text({"S1": 0.75, "S3.half0": 0.22, "leak:S2": 0.03}),
                                         mix_text({"S2": 0.75, "S3.half1": 0.22, "leak:S1": 0.03})]})


@pytest.mark.parametrize("text, roles", [
    ("S1 0.75, S3.half0 0.22, leak:S2 0.03", (["S1"], ["S2"])),
    ("S3 0.94, leak:S1 0.03, leak:S2 0.03", (["S3"], ["S1", "S2"])),
    ("S1 0.49, S3 0.49, leak:S2 0.02", (["S1", "S3"], ["S2"])),   # a tie: both are its own
    ("S1 0.40, S3.half0 0.30, S3.half1 0.30", (["S3"], [])),      # halves add up
])
def test_mix_roles_reads_own_and_lacked_skills(text, roles):
    assert mix_roles(text) == roles


def test_warmup_caption_names_the_skills_by_their_templates():
    task = SimpleNamespace(templates={"S1": "{a}+{b}=", "S3": "{b}*{a}="})
    assert skill_legend(task) == "S1 `a+b=`, S3 `b*a=`"
    assert warmup_caption(task, "pool") == ("Greedy accuracy per skill after the warm-up, RL pool prompts "
                                            "(S1 `a+b=`, S3 `b*a=`).")
    assert skill_legend(SimpleNamespace(skills=("gsm8k", "math"))) == "gsm8k, math"


def test_zoo_result_states_own_and_lacked_skill_per_policy():
    accuracy = long_accuracy({("held-out", "A", "S1"): 0.9, ("held-out", "A", "S2"): 0.1,
                              ("held-out", "B", "S1"): 0.05, ("held-out", "B", "S2"): 0.8,
                              ("pool", "A", "S1"): 0.7, ("pool", "A", "S2"): 0.2,
                              ("pool", "B", "S1"): 0.0, ("pool", "B", "S2"): 0.6})
    text = zoo_result(accuracy, FAMILIES)
    assert "A scores 0.900 on S1 (its own skill) and 0.100 on S2 (seen only as a leak); B 0.800 on S2 and 0.050 on S1" \
        in text
    assert "On the RL pool: A 0.700 on S1 and 0.200 on S2; B 0.600 on S2 and 0.000 on S1." in text
    # margins over the best peer: A 0.9 - 0.05 on S1, B 0.8 - 0.1 on S2
    assert "2 of 2 policies lead the zoo on their own skill held out; the smallest margin over the best peer is B's " \
           "on S2, +0.700." in text


def test_zoo_result_names_a_policy_that_does_not_lead():
    accuracy = long_accuracy({("held-out", "A", "S1"): 0.2, ("held-out", "A", "S2"): 0.5,
                              ("held-out", "B", "S1"): 0.3, ("held-out", "B", "S2"): 0.6})
    text = zoo_result(accuracy, FAMILIES)
    assert "1 of 2 policies lead the zoo on their own skill held out (not A); the smallest margin over the best peer " \
           "is A's on S1, -0.100." in text
    assert "RL pool" not in text   # no pool rows, no pool sentence


def test_zoo_result_on_empty_and_missing_values():
    assert zoo_result(long_accuracy({}), FAMILIES) == "No warm-up accuracy was measured."
    text = zoo_result(long_accuracy({("held-out", "A", "S1"): NAN, ("held-out", "B", "S2"): 0.4}), FAMILIES)
    assert "n/a on S1" in text and "nan" not in text


def grpo_evals(cells: dict[tuple[int, str, str, str], float]) -> pd.DataFrame:
    """run_one's evaluations from {(step, split, policy, skill): accuracy}."""
    return pd.DataFrame([{"policy": p, "step": step, "split": split, "skill": s, "accuracy": a, "rollouts": 0}
                         for (step, split, p, s), a in cells.items()])


def test_grpo_baseline_result_reads_the_weak_skills_and_the_largest_gain():
    start = {("held-out", "A", "S1"): 0.8, ("held-out", "A", "S2"): 0.1, ("held-out", "B", "S1"): 0.05,
             ("held-out", "B", "S2"): 0.9, ("pool", "A", "S1"): 0.7, ("pool", "A", "S2"): 0.0,
             ("pool", "B", "S1"): 0.1, ("pool", "B", "S2"): 0.8}
    end = {("held-out", "A", "S1"): 0.85, ("held-out", "A", "S2"): 0.1, ("held-out", "B", "S1"): 0.05,
           ("held-out", "B", "S2"): 0.95, ("pool", "A", "S1"): 0.9, ("pool", "A", "S2"): 0.3,
           ("pool", "B", "S1"): 0.1, ("pool", "B", "S2"): 0.85}
    evals = grpo_evals({(0, *k): v for k, v in start.items()} | {(10, *k): v for k, v in end.items()})
    text = grpo_baseline_result(evals)
    assert text.startswith("Over 10 steps of independent GRPO")
    assert "A on S2, 0.100 to 0.100 held out and 0.000 to 0.300 on the pool" in text
    assert "B on S1, 0.050 to 0.050 held out and 0.100 to 0.100 on the pool" in text
    # weak: (0 + 0) / 2 held out, (0.3 + 0) / 2 pool; others: (0.05 + 0.05) / 2, (0.2 + 0.05) / 2
    assert "the weak skills changed by +0.000 held out and +0.150 on the pool, the other skills by +0.050 held out " \
           "and +0.125 on the pool" in text
    assert "The largest gain on any skill is A's on S2 on the pool, +0.300." in text


def test_grpo_baseline_result_on_empty_one_policy_and_nan():
    assert grpo_baseline_result(grpo_evals({})) == "No evaluations were recorded."
    one = grpo_evals({(0, "held-out", "A", "S1"): 0.2, (5, "held-out", "A", "S1"): 0.4})
    assert "no weak skill to read" in grpo_baseline_result(one) and "+0.200" in grpo_baseline_result(one)
    gaps = grpo_evals({(0, "held-out", "A", "S1"): NAN, (0, "held-out", "B", "S1"): 0.5,
                       (5, "held-out", "A", "S1"): 0.1, (5, "held-out", "B", "S1"): NAN})
    assert "nan" not in grpo_baseline_result(gaps)


def thl_rows(corpus: str, rates: dict[tuple[str, str], tuple[float, float, float]]) -> pd.DataFrame:
    """thl_residual_table's columns that thl_result reads, from {(source, receiver): (inexact, round trip,
    non-canonical)}."""
    return pd.DataFrame([{"corpus": corpus, "source": s, "receiver": r, "inexact_rate": i,
                          "round_trip_failure_rate": f, "non_canonical_rate": c}
                         for (s, r), (i, f, c) in rates.items()])


def test_thl_result_counts_exact_pairs_and_names_the_worst():
    table = pd.concat([
        thl_rows("task", {("x", "x"): (0, 0, 0.1), ("x", "y"): (0.25, 0.5, 0.1), ("y", "x"): (0, 0, 0),
                          ("y", "y"): (0, 0, 0)}),
        thl_rows("mixed", {pair: (0, 0, 0) for pair in (("x", "x"), ("x", "y"), ("y", "x"), ("y", "y"))})])
    text = thl_result(table)
    assert ("On the task corpus, 3 of 4 ordered pairs (source -> receiver) align every sequence byte for byte: "
            "x -> x, y -> x, y -> y; the largest inexact rate is 0.250, x -> y.") in text
    assert "On the mixed corpus, all 4 ordered pairs" in text
    assert "Round trips fail most into y, on 0.250 of the task corpus's sequences" in text   # (0.5 + 0) / 2 sources
    assert "is x's, 0.100 on the task corpus." in text


def test_thl_result_on_empty_and_nan():
    assert thl_result(pd.DataFrame()) == "No THL residuals were measured."
    table = thl_rows("task", {("x", "x"): (NAN, NAN, NAN), ("x", "y"): (0, 0, 0)})
    text = thl_result(table)
    assert "all 1 ordered pairs" in text and "no round trip fails" in text and "nan" not in text
    none_exact = thl_result(thl_rows("task", {("x", "y"): (0.5, 0, 0), ("y", "x"): (0.5, 0, 0)}))
    assert "0 of 2 ordered pairs (source -> receiver) align every sequence byte for byte; the largest" in none_exact


def compute_rows(backend: str, step: float, wait: float, wall: float, startup: float) -> list[dict]:
    return [{"backend": backend, "worker": w, "steps": 4, "step seconds": step, "utilisation": 1 - wait,
             "wait fraction": wait, "wall seconds": wall, "startup seconds": startup} for w in ("A", "B")]


def test_mwra_result_compares_each_backend_with_inline():
    compute = pd.DataFrame(compute_rows("inline", 0.1, 0.6, 2.0, 0.1) + compute_rows("process", 0.2, 0.3, 1.5, 3.0))
    text = mwra_result(compute)
    assert ("Under inline (the reference), a worker's step (rollout and update) takes 0.100 s, mean over its 2 "
            "workers, and a worker waits 0.600 of the 2.000 s training loop; start-up, apart, takes 0.100 s.") in text
    assert ("Process: step 0.200 s, wait fraction 0.300, training loop 1.500 s, start-up 3.000 s; against inline, "
            "2.00x, 0.50x and 0.75x.") in text


def test_mwra_result_without_inline_on_empty_and_on_zero_wait():
    assert mwra_result(pd.DataFrame()) == "No MWRA timings were recorded."
    compute = pd.DataFrame(compute_rows("process", 0.2, 0.0, 1.0, 3.0) + compute_rows("ray", 0.3, 0.2, NAN, 9.0))
    text = mwra_result(compute)
    assert text.startswith("Under process (the reference)")
    assert "against process, 1.50x, n/a and n/a." in text and "nan" not in text
