"""The tour's choices and sentences (mrl.reports.tour): which zoo it runs on and why, and what its run learned."""
from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

from mrl.core.validation import ConfigError
from mrl.experiments.heldout import heldout_config, heldout_zoos
from mrl.paths import repo_root
from mrl.profiles import load_profile
from mrl.reports.tour import (TOUR_STEPS, heldout_zoo_cached, learning_sentence, tour_eval_every, tour_zoo,
                              weak_skills)
from mrl.runtime.zoo_grid import planned_zoos


def test_an_unknown_profile_is_refused_with_the_allowed_ones():
    with pytest.raises(ConfigError, match=r"profile.*'paper'.*auto.*default.*smoke"):
        tour_zoo("paper")


def test_auto_falls_back_to_the_smoke_zoo_and_says_why_until_the_heldout_zoo_is_cached(tmp_path):
    fallback = tour_zoo("auto", root=tmp_path)
    assert (fallback.zoo, fallback.profile) == ("smoke", "smoke")
    assert "not cached" in fallback.why and 'profile = "default"' in fallback.why
    with planned_zoos() as planned:
        heldout_zoos(load_profile("default"), False, [0])
    for folder, _, _ in planned:
        (tmp_path / Path(folder).relative_to(repo_root() / "data" / "models")).mkdir(parents=True)
    assert heldout_zoo_cached(tmp_path)
    chosen = tour_zoo("auto", root=tmp_path)
    assert (chosen.zoo, chosen.profile) == ("heldout", "default") and "weak skill" in chosen.why


def test_default_and_smoke_are_taken_as_asked(tmp_path):
    assert tour_zoo("default", root=tmp_path).zoo == "heldout"
    asked = tour_zoo("smoke")
    assert asked.zoo == "smoke" and "as asked" in asked.why


def test_the_run_is_evaluated_along_the_way_only_where_its_cadence_divides_it_in_several():
    heldout = load_profile("default").heldout
    config = load_profile("smoke")
    assert tour_eval_every(config, TOUR_STEPS["smoke"]) == TOUR_STEPS["smoke"]   # start and end only
    assert tour_eval_every(heldout_config(load_profile("default"), 0), TOUR_STEPS["heldout"]) == heldout.eval_every


def evals_of(rows: list[tuple]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["policy", "step", "split", "skill", "accuracy"])


def test_the_sentence_follows_each_policy_s_weak_skill_and_counts_its_rescues():
    evals = evals_of([("A", 0, "held-out", "S1", 0.9), ("A", 0, "held-out", "S2", 0.1),
                      ("A", 60, "held-out", "S1", 0.8), ("A", 60, "held-out", "S2", 0.3),
                      ("B", 0, "held-out", "S1", 0.2), ("B", 0, "held-out", "S2", 0.9),
                      ("B", 60, "held-out", "S1", 0.25), ("B", 60, "held-out", "S2", 0.9),
                      ("A", 0, "train", "S1", 0.0)])
    steps = pd.DataFrame({"policy": ["A", "A", "B"], "step": [1, 2, 1], "rescue_size": [2, 3, 4]})
    assert weak_skills(evals) == {"A": "S2", "B": "S1"}
    sentence = learning_sentence(steps, evals)
    assert sentence.startswith("In this run of 60 steps, ")
    assert "A's held-out accuracy on its weak skill S2 went from 0.100 to 0.300 (+0.200)" in sentence
    assert "its other skills' from 0.900 to 0.800, with 5 peer successes" in sentence
    assert "B's held-out accuracy on its weak skill S1 went from 0.200 to 0.250 (+0.050)" in sentence
