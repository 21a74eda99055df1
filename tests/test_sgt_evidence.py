"""The evidence on SGT, whole (mrl.reports.sgt_evidence): every set's warm-ups with their design and provenance, the
outside checks read from their README, the pooled estimate taking each warm-up once; and the exact seed-label swap p
that replaces the F test's under nested seeds (mrl.reports.statistics.seed_label_swap_p_value)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from mrl.paths import repo_root
from mrl.reports.claims import read_endpoint_values, seed_differences, seed_effect_table
from mrl.reports.sgt_evidence import (EvidenceSet, forest_table, outside_checks, pooled_random_effects,
                                      warmup_rows)
from mrl.reports.statistics import seed_label_swap_p_value

ROOT = repo_root()


def test_the_outside_checks_keep_their_design_and_provenance():
    sets = {s.name: s for s in outside_checks(ROOT / "data" / "outside_checks", read_endpoint_values)}
    assert set(sets) == {"outside check, 5-8", "outside check, 20-25", "outside check, 26-29"}
    assert sets["outside check, 20-25"].design == "crossed" and "2cb37d8" in sets["outside check, 20-25"].provenance
    assert sets["outside check, 26-29"].design == "nested" and "35c3139" in sets["outside check, 26-29"].provenance
    assert set(sets["outside check, 20-25"].values.zoo_seed) == set(range(20, 26))


def test_the_forest_and_its_pool_take_each_warmup_once():
    ledger = read_endpoint_values(ROOT / "paper_tables" / "claims_runs.csv")
    first = read_endpoint_values(ROOT / "paper_tables" / "confirmatory_runs.csv")
    sets = [EvidenceSet("ledger", "exploratory", "nested", "here", ledger),
            EvidenceSet("first", "confirmatory", "nested", "here", first)]
    rows = warmup_rows(sets, [0, 1], ["A", "B"])
    assert len(rows) == 17 and rows["zoo seed"].is_unique
    pooled = pooled_random_effects(sets, rows)
    assert pooled["warm-ups"] == 17 and pooled["low"] < pooled["mean"] < pooled["high"]
    table = forest_table(rows, pooled)
    assert list(table.set) == ["ledger", "first", "random-effects pooled (descriptive)"]
    assert table.loc[1, "mean d_z [95% t]"] == "+0.0175 [+0.0091, +0.0259]"   # the first registration's own numbers
    twice = [*sets, EvidenceSet("again", "outside check", "nested", "x", ledger)]
    with pytest.raises(ValueError, match="appear in two sets"):
        pooled_random_effects(twice, warmup_rows(twice, [0, 1], ["A", "B"]))


def test_the_seed_label_swap_p_is_exact_and_has_its_floor():
    """With 5 warm-ups there are 2^5 label swaps: the p cannot fall below 2/32, whatever the F test says."""
    frame = pd.DataFrame([{"zoo_seed": z, "seed": s, "d": 0.01 * (s + 1) + 0.001 * z} for z in range(5)
                          for s in (0, 1)]).set_index(["zoo_seed", "seed"]).d
    assert seed_label_swap_p_value(frame) == pytest.approx(2 / 32)
    ledger = read_endpoint_values(ROOT / "paper_tables" / "claims_runs.csv")
    table = seed_effect_table({"nested": ledger}, nested=("nested",))
    row = table.set_index("comparison").loc["sgt - grpo"]
    assert row.test == "exact label swap within warm-ups" and float(row.p) >= 2 / 32
    crossed = seed_effect_table({"crossed": ledger}).set_index("comparison").loc["sgt - grpo"]
    assert crossed.test == "F test (normal theory)" and float(crossed.p) < 2 / 32
    seeds = seed_differences(ledger, "sgt", "grpo", "overall")
    assert np.isnan(seed_label_swap_p_value(seeds[seeds.index.get_level_values("seed") == 0]))
