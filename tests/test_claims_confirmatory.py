"""The second registration's analysis and its record: the labels each test gives on data built to give them, the
family's fixed size when a comparison has too few warm-ups, the refusals (another numerics mode, another weak form),
and the committed record of finished runs (read back bit for bit, and only under the run's own key)."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

import mrl.reports.claims_confirmatory as analysis
from mrl.experiments import record
from mrl.experiments.heldout import claims_block_runs
from mrl.profiles import load_profile
from mrl.reports.claims_confirmatory import COMPARISONS, Reading, SizeReading
from mrl.runtime.spec import Run


def claim(probe: str, reference: str, endpoint: str = "overall"):
    return next(c for c in COMPARISONS if (c.probe, c.reference, c.endpoint) == (probe, reference, endpoint))


def series(values, start=200):
    return pd.Series(np.asarray(values, dtype=float), index=range(start, start + len(values)))


def spread(mean, n=12, sd=0.004, seed=0):
    rng = np.random.default_rng(seed)
    noise = rng.standard_normal(n)
    return mean + sd * (noise - noise.mean()) / noise.std(ddof=1)


def results_for(differences: dict):
    """claims_test with the given d_z for some claims and a null-looking d_z for the others."""
    ds = [series(differences.get((c.probe, c.reference, c.endpoint), spread(0.0, sd=0.02, seed=i)))
          for i, c in enumerate(COMPARISONS)]
    return {(r.claim.probe, r.claim.reference, r.claim.endpoint): r for r in analysis.claims_test(ds, 12)}


def test_each_label_on_data_built_to_give_it():
    hacpo, gspo, gspo2 = "hacpo (minibatches=4)", "gspo (minibatches=4)", "gspo_x2 (minibatches=4)"
    got = results_for({
        ("sgt", "grpo", "overall"): spread(0.015),                  # above 0, the paper's +0.013 not ruled out
        ("prp", "sgt", "overall"): spread(-0.010),                  # below 0, smaller than the paper's -0.05
        ("xgrpo", "grpo", "overall"): spread(-0.030),               # a loss beyond the margin
        ("xgrpo", "grpo", "weak"): spread(0.0),                     # inside the no-gain margin
        (hacpo, gspo, "overall"): spread(-0.02),                    # the opposite sign, and below the paper's
        (hacpo, gspo2, "overall"): spread(0.001, sd=0.03),          # nothing
    })
    assert (got["sgt", "grpo", "overall"].reading, got["sgt", "grpo", "overall"].size) == \
        (Reading.CONFIRMED, SizeReading.NOT_RULED_OUT)
    assert (got["prp", "sgt", "overall"].reading, got["prp", "sgt", "overall"].size) == \
        (Reading.CONFIRMED, SizeReading.RULED_OUT)
    assert got["xgrpo", "grpo", "overall"].reading is Reading.OUTSIDE_MARGIN
    assert got["xgrpo", "grpo", "overall"].size is SizeReading.NO_SIZE
    assert got["xgrpo", "grpo", "weak"].reading is Reading.CONFIRMED
    assert (got[hacpo, gspo, "overall"].reading, got[hacpo, gspo, "overall"].size) == \
        (Reading.OPPOSITE, SizeReading.RULED_OUT)
    assert got[hacpo, gspo2, "overall"].reading is Reading.NOT_CONFIRMED
    assert got["hacpo (minibatches=4)", "grpo (minibatches=4)", "overall"].size is SizeReading.NO_SIZE
    row = got["sgt", "grpo", "overall"]
    assert row.low < row.mean < row.high and row.positive == 12 and row.warmups == row.planned == 12
    assert row.p_main <= row.p_main_holm and row.p_sign_flip == pytest.approx(2 / 4096)


def test_too_few_warmups_give_no_result_and_the_family_keeps_its_size():
    ds = [series(spread(0.02, n=12, seed=i)) for i in range(len(COMPARISONS))]
    full = analysis.claims_test(ds, 12)
    short = list(ds)
    short[1] = short[1].iloc[:9]
    cut = analysis.claims_test(short, 12)
    assert (cut[1].reading, cut[1].size) == (Reading.NO_RESULT, SizeReading.NO_RESULT) and cut[1].warmups == 9
    assert cut[1].p_main == 1.0
    for a, b in zip(full[2:], cut[2:]):   # the other claims' Holm p: the same family size, one test at p = 1
        assert b.p_main_holm >= a.p_main_holm


def test_leave_one_out_names_the_warmup_that_moves_a_label():
    ds = [series(spread(0.0, sd=0.02, seed=i)) for i in range(len(COMPARISONS))]
    ds[0] = series([0.02] * 10 + [0.021, 0.5])   # one warm-up carries the headline
    assert analysis.claims_test(ds, 12)[0].reading is Reading.NOT_CONFIRMED    # the outlier widens the interval
    without = analysis.leave_one_out(ds)[0]
    assert without[211][0] is Reading.CONFIRMED and without[200][0] is Reading.NOT_CONFIRMED


def test_block_values_refuse_another_numerics_mode_and_another_weak_form():
    evals = pd.DataFrame([{"pairing": "A+B", "probe": "grpo", "policy": policy, "seed": 0, "zoo_seed": 200,
                           "step": step, "split": "held-out", "skill": skill, "accuracy": acc}
                          for policy, weak in (("A", "S2"), ("B", "S3"))
                          for step in (0, 10, 20, 30) for skill in ("S1", "S2", "S3")
                          for acc in [0.1 if skill == weak else 0.8]])
    runs = pd.DataFrame({"key": ["k"], "numerics": ["portable"], "stamp": ["c" * 64]})
    weak = {"A": "S2", "B": "S3"}
    values = analysis.block_values(evals, runs, "portable", weak, "c" * 64)
    assert set(values.policy) == {"A", "B"} and (values.weak < values.overall).all()
    with pytest.raises(ValueError, match="numerics mode 'portable'"):
        analysis.block_values(evals, runs.assign(numerics="native"), "portable", weak, "c" * 64)
    with pytest.raises(ValueError, match="registered checksum"):
        analysis.block_values(evals, runs, "portable", weak, "d" * 64)
    with pytest.raises(ValueError, match="weak forms"):
        analysis.block_values(evals, runs, "portable", {"A": "S3", "B": "S3"}, "c" * 64)
    with pytest.raises(ValueError, match="weak forms"):   # a registered policy the data lack
        analysis.block_values(evals[evals.policy == "A"], runs, "portable", weak, "c" * 64)
    families = load_profile("default").experiment("heldout").zoo.families
    assert analysis.weak_forms(families) == weak


def test_the_blocks_runs_are_keyed_before_their_zoos_exist():
    runs = claims_block_runs(load_profile("default"))
    block = load_profile("default").experiment("heldout").confirmatory_claims
    assert len(runs) == len(block.zoo_seeds) * len(block.seeds) * len(block.probes)
    assert len({run.key() for _, run in runs}) == len(runs)
    assert [label["zoo_seed"] for label, _ in runs] == sorted(label["zoo_seed"] for label, _ in runs)
    assert claims_block_runs(load_profile("smoke")) == []


def test_the_record_reads_back_bit_for_bit_and_only_under_the_runs_key(tmp_path, monkeypatch):
    monkeypatch.setattr(Run, "folder", lambda self: tmp_path / "cache" / self.key())
    labelled = claims_block_runs(load_profile("default"))[:2]
    rng = np.random.default_rng(0)
    frames = []
    for label, run in labelled:
        run.folder().mkdir(parents=True)
        (run.folder() / "run.json").write_text(json.dumps({"wall_seconds": 61.5}))
        frames.append(pd.DataFrame([{"step": step, "policy": policy, "split": split, "skill": "S1",
                                     "accuracy": float(rng.random()), "rollouts": 0, **label}
                                    for step in (0, 10) for policy in ("A", "B") for split in ("held-out", "pool")]))
    evals = pd.concat(frames, ignore_index=True)
    folder = tmp_path / "record"
    assert record.missing_runs(labelled, folder) == labelled
    record.append_runs(folder, labelled[:1], evals, stamp="s1")
    record.append_runs(folder, labelled, evals, stamp="s1")          # the first run is not added twice
    runs, _ = record.read_record(folder)
    assert list(runs.key) == [run.key() for _, run in labelled] and set(runs.numerics) == {"portable"}
    assert set(runs.stamp) == {"s1"} and runs.code.nunique() == 1
    assert record.missing_runs(labelled, folder) == []
    back = record.recorded_evals(labelled, folder)
    held = evals[evals.split == "held-out"]
    columns = [*record.EVAL_COLUMNS, *labelled[0][0]]
    pd.testing.assert_frame_equal(back[columns].reset_index(drop=True), held[columns].reset_index(drop=True))
    other = [(label, dataclasses.replace(run, steps=run.steps + 1)) for label, run in labelled]   # other keys
    assert record.recorded_evals(other, folder).empty and record.missing_runs(other, folder) == other
    assert record.missing_runs(other, folder, stamp="s2") == other        # a stamp the runs do not carry
    by_label = record.recorded_evals(other, folder, stamp="s1")            # the code moved on: read by label
    pd.testing.assert_frame_equal(by_label[columns].reset_index(drop=True), held[columns].reset_index(drop=True))
    assert not list(folder.glob(".*tmp*"))


def test_a_kill_between_the_two_files_leaves_the_runs_to_run_again(tmp_path, monkeypatch):
    monkeypatch.setattr(Run, "folder", lambda self: tmp_path / "cache" / self.key())
    labelled = claims_block_runs(load_profile("default"))[:1]
    label, run = labelled[0]
    run.folder().mkdir(parents=True)
    (run.folder() / "run.json").write_text(json.dumps({"wall_seconds": 1.0}))
    evals = pd.DataFrame([{"step": 0, "policy": "A", "split": "held-out", "skill": "S1", "accuracy": 0.5, **label}])
    folder = tmp_path / "record"
    calls = []
    real = record.replace_csv

    def killed_after_the_evaluations(frame, path):
        calls.append(path.name)
        if path.name == record.RUNS:
            raise KeyboardInterrupt
        real(frame, path)

    monkeypatch.setattr(record, "replace_csv", killed_after_the_evaluations)
    with pytest.raises(KeyboardInterrupt):
        record.append_runs(folder, labelled, evals, stamp="s")
    assert calls == [record.EVALS, record.RUNS]
    assert record.missing_runs(labelled, folder) == labelled     # evaluations alone mark nothing as done
    monkeypatch.setattr(record, "replace_csv", real)
    with pytest.raises(ValueError, match="missing or repeated"):
        record.append_runs(folder, labelled, evals.assign(split="pool"), stamp="s")
