"""Paired statistics against GRPO, the rollouts-to-reach metric and the held-out experiment's split (hand-made cases
with known answers); the claims ledger's tests are in tests/test_claims.py."""
import math
import random

import numpy as np
import pandas as pd
import pytest
from scipy.stats import t as student_t

from mrl.core.config import SKILLS
from mrl.core.tasks import ArithTask
from mrl.experiments.heldout import heldout_config
from mrl.profiles import load_profile
from mrl.reports.paired import (final_values, paired_differences, paired_table, reach_table, rollouts_to_reach,
                                t_interval)


def test_t_interval_by_hand():
    mean, low, high = t_interval([1.0, 2.0, 3.0])
    half = student_t.ppf(0.975, 2) * 1.0 / math.sqrt(3)   # sd of 1, 2, 3 is 1
    assert mean == 2.0 and low == pytest.approx(2.0 - half) and high == pytest.approx(2.0 + half)
    assert math.isnan(t_interval([0.5])[1])


def _values(grpo, probe, name="sgt", order=None):
    rows = [{"pairing": "A+B", "probe": "grpo", "policy": "A", "seed": s, "v": v} for s, v in enumerate(grpo)]
    rows += [{"pairing": "A+B", "probe": name, "policy": "A", "seed": s, "v": v} for s, v in enumerate(probe)]
    frame = pd.DataFrame(rows)
    return frame.sample(frac=1.0, random_state=order) if order is not None else frame


def test_paired_difference_pairs_by_seed_and_calls_it_real_only_outside_zero():
    # diffs 0.10, 0.15, 0.10: mean 0.1167, sd 0.0289, half-width 4.303 * 0.0289 / sqrt(3) = 0.0717
    row = paired_differences(_values([0.1, 0.2, 0.3], [0.2, 0.35, 0.4], order=3), "v").iloc[0]
    assert row["diff"] == pytest.approx(0.35 / 3) and row.n == 3 and row.real
    half = student_t.ppf(0.975, 2) * np.std([0.1, 0.15, 0.1], ddof=1) / math.sqrt(3)
    assert row.low == pytest.approx(0.35 / 3 - half)
    # the same means unpaired-looking: diffs +0.2, -0.1, +0.05 straddle 0
    row = paired_differences(_values([0.1, 0.4, 0.3], [0.3, 0.3, 0.35]), "v").iloc[0]
    assert not row.real and row.low < 0 < row.high
    # pairs that agree exactly give an interval of width 0: no evidence, with two pairs or three
    row = paired_differences(_values([0.1, 0.2], [0.2, 0.3]), "v").iloc[0]
    assert row.low == pytest.approx(0.1) and not row.real
    assert not paired_differences(_values([0.1, 0.2, 0.3], [0.2, 0.3, 0.4]), "v").iloc[0].real


def test_paired_difference_uses_only_shared_zoo_seeds():
    values = pd.DataFrame([{"pairing": "A+B", "probe": p, "policy": "A", "seed": s, "zoo_seed": z, "v": v}
                           for p, z, s, v in [("grpo", 0, 0, .1), ("grpo", 0, 1, .2), ("grpo", 1, 0, .9),
                                              ("xgrpo", 0, 0, .2), ("xgrpo", 0, 1, .3)]])
    values = values.iloc[[2, 4, 1, 3, 0]]   # GRPO's other zoo seed first: rows never pair by order
    row = paired_differences(values, "v").iloc[0]
    assert row.n == 2 and row["diff"] == pytest.approx(0.1)


def test_rollouts_to_reach_interpolates():
    assert rollouts_to_reach([0, 100, 200], [0.1, 0.3, 0.5], 0.4) == pytest.approx(150.0)
    assert rollouts_to_reach([0, 100, 200], [0.1, 0.3, 0.5], 0.5) == pytest.approx(200.0)


def test_rollouts_to_reach_never_and_at_start():
    assert math.isnan(rollouts_to_reach([0, 100, 200], [0.1, 0.3, 0.35], 0.4))
    assert rollouts_to_reach([0, 100, 200], [0.5, 0.3, 0.6], 0.4) == 0.0
    assert math.isnan(rollouts_to_reach([0, 100], [0.5, 0.6], float("nan")))
    # the first crossing counts, not a later one after a dip
    assert rollouts_to_reach([0, 100, 200, 300], [0.0, 0.6, 0.2, 0.8], 0.3) == pytest.approx(50.0)


def _evals(curves):
    """Hand-made evals of a pair: A strong on S1, B strong on S2 (so A's weak skill is S2); curves gives A's
    held-out S2 accuracy per (probe, seed) at rollouts 0, 100, 200."""
    rows = []
    for (probe, seed), curve in curves.items():
        for step, (rollouts, acc) in enumerate(zip([0, 100, 200], curve)):
            for policy, own in (("A", "S1"), ("B", "S2")):
                for skill in ("S1", "S2"):
                    value = acc if (policy, skill) == ("A", "S2") else (0.9 if skill == own else 0.05)
                    rows.append({"pairing": "A+B", "probe": probe, "seed": seed, "policy": policy, "step": step,
                                 "rollouts": rollouts, "split": "held-out", "skill": skill, "accuracy": value})
    return pd.DataFrame(rows)


def test_reach_table_targets_grpos_final_weak_skill_and_counts_who_reaches():
    evals = _evals({("grpo", 0): [0.1, 0.3, 0.4], ("grpo", 1): [0.1, 0.2, 0.4],
                    ("sgt", 0): [0.1, 0.5, 0.6], ("sgt", 1): [0.1, 0.2, 0.3]})
    table = reach_table(evals).loc[("A+B", "sgt", "A")]
    # target 0.4: seed 0 crosses between 0.1 @ 0 and 0.5 @ 100 -> 75 rollouts; seed 1 never does
    assert table["rollouts to GRPO's final (weak)"] == pytest.approx(75.0) and table["reached"] == "1/2"
    assert reach_table(evals).loc[("A+B", "grpo", "A"), "reached"] == "2/2"


def test_paired_table_reads_the_weak_skill():
    evals = _evals({("grpo", 0): [0.1, 0.3, 0.4], ("grpo", 1): [0.1, 0.2, 0.4],
                    ("sgt", 0): [0.1, 0.5, 0.6], ("sgt", 1): [0.1, 0.2, 0.5]})
    steps = pd.DataFrame([{"pairing": "A+B", "probe": p, "seed": s, "policy": q, "step": 1, "reward": 0.5,
                           "grad_norm": 1.0, "rescue_size": 2 if p == "sgt" else np.nan}
                          for p in ("grpo", "sgt") for s in (0, 1) for q in ("A", "B")])
    numbers, table = paired_table(evals, steps)
    a = numbers.set_index(["policy", "probe"]).loc[("A", "sgt")]
    assert a["weak skill"] == "S2" and a["weak Δ diff"] == pytest.approx(0.15) and a["peer used"] == 2
    assert numbers.set_index(["policy", "probe"]).loc[("B", "sgt"), "weak skill"] == "S1"


@pytest.mark.parametrize("profile", ["smoke", "default"])
def test_heldout_split_never_meets_training_or_leak_prompts(profile):
    config = heldout_config(load_profile(profile), zoo_seed=0)
    task = ArithTask(config.task)
    pair = lambda p: tuple(p.pid.split("/")[2:])  # noqa: E731  (a, b) of a problem, whatever its form
    held_out = {pair(p) for s in SKILLS for p in task.test[s]}
    assert len(held_out) == config.task.test_per_skill
    for family in config.zoo.families:
        for key in family.warmup_mix:
            assert not held_out & {pair(p) for p in task.source(key)}, (family.name, key)
    rl = task.rl_prompts(random.Random(0), 5000)
    assert not held_out & {pair(p) for p in rl} and config.task.pool_per_skill == 0


def test_heldout_runs_have_their_own_cache_keys():
    from mrl.experiments import Run
    from mrl.core.probes import probe_config

    profile = load_profile("smoke")
    grpo = probe_config("grpo")
    def paths(c):
        return {f.name: f"/zoo/{f.name}-{c.zoo.warmup.seed}-{c.task.name}" for f in c.zoo.families[:2]}
    keys = {Run(c, paths(c), grpo, 0, 4).key()
            for c in (profile, heldout_config(profile, 0), heldout_config(profile, 1))}
    assert len(keys) == 3


@pytest.mark.parametrize("knobs, field", [({"zoo_seeds": [0, 1], "zoo_seed_probes": ["sgt"]}, "zoo_seed_probes"),
                                          ({"probes": ["sgt"], "zoo_seed_probes": []}, "probes"),
                                          ({"seeds": [0, 0]}, "seeds"), ({"pairing": ["A", "A"]}, "pairing")])
def test_heldout_config_names_the_bad_field(knobs, field):
    import dataclasses

    from mrl.core.config import ConfigError
    from mrl.core.grids import HeldoutConfig

    profile = dataclasses.asdict(load_profile("smoke").experiment("heldout"))
    with pytest.raises(ConfigError, match=f"HeldoutConfig.{field}"):
        HeldoutConfig(**{**profile, **knobs})


def test_paired_curves_end_at_the_tables_interval():
    from mrl.reports.paired import paired_curves, weak_skill_evals

    evals = _evals({("grpo", 0): [0.1, 0.3, 0.4], ("grpo", 1): [0.1, 0.2, 0.4], ("grpo", 2): [0.1, 0.3, 0.45],
                    ("sgt", 0): [0.1, 0.5, 0.6], ("sgt", 1): [0.1, 0.4, 0.6], ("sgt", 2): [0.1, 0.4, 0.7]})
    curves = paired_curves(weak_skill_evals(evals)).set_index(["policy", "step"])
    last = paired_differences(final_values(evals).rename(columns={"weak": "accuracy"}), "accuracy").set_index("policy")
    assert curves.loc[("A", 2), "diff"] == pytest.approx(last.loc["A", "diff"])
    assert curves.loc[("A", 2), "low"] == pytest.approx(last.loc["A", "low"])
    assert curves.loc[("A", 0), "diff"] == 0.0 and not curves.loc[("A", 0), "real"]


def test_the_ratio_statistics_table_averages_each_source_over_steps():
    from mrl.reports.probes import ratio_statistics_table

    steps = pd.DataFrame([{"pairing": "A+B", "probe": "hacpo", "policy": "A", "seed": 0, "step": t,
                           "log_s_mean_from_B": -0.1 * t, "inside_from_B": 0.5, "log_s_mean_self": 0.0}
                          for t in (1, 2, 3)] + [{"pairing": "A+B", "probe": "grpo", "policy": "A", "seed": 0,
                                                 "step": 1}])
    table = ratio_statistics_table(steps)
    row = table[(table.source == "B")].iloc[0]
    assert row["mean log s"] == pytest.approx(-0.2) and row["inside clip range"] == 0.5
    assert set(table.source) == {"B"} and set(table.probe) == {"hacpo"}  # self: no drift with one update


def test_a_knob_variant_is_paired_with_its_own_probes_defaults():
    from mrl.reports.paired import knob_table

    rows = []
    for probe, shift in (("sgt", 0.0), ("sgt (lam=0.3)", 0.05), ("prp", 0.0), ("prp (clip=None)", -0.02)):
        for seed in (0, 1, 2):
            for policy, weak, strong in (("A", "S2", "S1"), ("B", "S1", "S2")):
                for step in (0, 10):
                    gain = (shift + 0.002 * seed * (shift != 0)) * step / 10  # the variants vary by seed
                    rows += [{"pairing": "A+B", "probe": probe, "seed": seed, "zoo_seed": 0, "policy": policy,
                              "step": step, "split": "held-out", "skill": weak, "accuracy": 0.1 + gain},
                             {"pairing": "A+B", "probe": probe, "seed": seed, "zoo_seed": 0, "policy": policy,
                              "step": step, "split": "held-out", "skill": strong, "accuracy": 0.9}]
    table = knob_table(pd.DataFrame(rows)).set_index(["probe", "policy"])
    assert set(table.index.get_level_values(0)) == {"sgt (lam=0.3)", "prp (clip=None)"}
    assert table.loc[("sgt (lam=0.3)", "A"), "default"] == "sgt"
    assert str(table.loc[("sgt (lam=0.3)", "A"), "Δ weak vs default [95% CI]"]).startswith("**+0.052")
    assert str(table.loc[("prp (clip=None)", "B"), "Δ weak vs default [95% CI]"]).startswith("**-0.018")
    assert (table.pairs == 3).all()
