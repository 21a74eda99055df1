"""The measurement of what the canonical tokenization drops (mrl.experiments.marginal_gap) and its report
(mrl.reports.marginal): the gap is never negative and is zero for a tokenizer with one tokenization per text, HACPO's
ratio definitions differ by exactly the gap over the THL groups, the cost is both sides of one call, and the tables
count what they say on small hand-made inputs; the marginal arms of the ledger are read by the ledger's rule."""
import dataclasses
import math
import types
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from mrl.core.config import ConfigError, FamilyConfig, GrpoConfig, TaskConfig
from mrl.core.probes import probe_config
from mrl.core.tasks import ArithTask
from mrl.experiments.marginal_gap import (draw_samples, measure_policies, score_samples, scoring_cost, stepwise_bounds)
from mrl.reports.claims import CLAIMS
from mrl.reports.marginal import (cost_table, gap_figure, gap_figure_inputs, gap_table, marginal_arms_table,
                                  marginal_ledger_verdicts, ratio_table, with_arm_replaced)
from mrl.runtime.zoo import Policy, build_model, train_tokenizer

TINY = dict(d_model=32, n_layers=2, n_heads=2, n_kv_heads=1, d_ff=64, warmup_mix={"S1": 1.0})
KINDS = {"A": ("bpe", 64, "gpt2"), "B": ("unigram", 24, "llama"), "C": ("char", 48, "mistral")}


def sampling(group_size: int, max_new_tokens: int) -> GrpoConfig:
    """The draws' settings: G completions per prompt at T = 1 on the transformers loop."""
    return GrpoConfig(group_size=group_size, max_new_tokens=max_new_tokens, temperature=1.0, engine="hf")


@pytest.fixture(scope="module")
def task():
    return ArithTask(TaskConfig(name="arith-forms", max_operand=99, test_per_skill=4, pool_per_skill=0, leak_n=5))


@pytest.fixture(scope="module")
def policies(task):
    """{name: Policy}: the held-out pair's tokenizer kinds (BPE, Unigram) and characters, on tiny random models
    (spread distributions: non-canonical tokenizations carry mass)."""
    out = {}
    for name, (kind, vocab, arch) in KINDS.items():
        tok = train_tokenizer(kind, task.corpus, vocab, 40)
        family = FamilyConfig(name=name, arch=arch, tokenizer=kind, vocab_size=vocab, **TINY)
        out[name] = Policy(family, build_model(family, len(tok), 64, seed=0).eval(), tok, Path(name), {})
    return out


@pytest.fixture(scope="module")
def problems(task):
    return [p for skill in sorted(task.test) for p in task.test[skill][:2]]


def test_draws_are_seeded_and_only_ended_samples_are_rewarded(policies, problems, task):
    a = draw_samples(policies["A"], problems, sampling(4, 6), task.verify, seed=3)
    b = draw_samples(policies["A"], problems, sampling(4, 6), task.verify, seed=3)
    assert a == b and len(a) == 4 * len(problems)
    assert all(s.reward == 0.0 for s in a if not s.ended)
    assert [s.prompt for s in a] == [p.prompt for p in problems for _ in range(4)]


def test_the_gap_is_never_negative_and_the_ratios_differ_by_it_over_the_groups(policies, problems, task):
    samples = draw_samples(policies["B"], problems, sampling(8, 6), task.verify, seed=0)
    rows = score_samples(policies["A"], policies["B"], samples)
    assert len(rows) == sum(s.ended for s in samples) > 0
    writable = np.isfinite(rows["log marginal"])
    assert (rows.gap[writable] >= -1e-9).all()
    assert (rows.tokenizations > 1).any(), "BPE writes some of these texts more than one way"
    with_groups = writable & np.isfinite(rows.groups)
    moved = rows["log s marginal"] - rows["log s canonical"]
    assert np.allclose(moved[with_groups], (rows.gap / rows.groups)[with_groups], atol=1e-9)
    share = np.exp(-rows.gap[writable])
    assert np.allclose(rows["canonical share"][writable], share)


def test_a_character_learner_has_no_gap_and_its_ratios_agree(policies, problems, task):
    samples = draw_samples(policies["A"], problems, sampling(8, 6), task.verify, seed=1)
    rows = score_samples(policies["C"], policies["A"], samples)
    writable = rows.tokenizations > 0
    assert writable.any() and (rows.tokenizations[writable] == 1).all()
    assert (rows.gap[writable] == 0).all()
    assert np.array_equal(rows["log s canonical"][writable], rows["log s marginal"][writable])


def test_the_cost_is_both_scorings_of_one_call(policies, problems, task):
    samples = [s for s in draw_samples(policies["B"], problems, sampling(4, 6), task.verify, seed=2) if s.ended][:8]
    calls = []

    def clock():
        calls.append(len(calls))
        return float(len(calls) ** 2)   # every interval differs: the medians show which call timed what

    cost = scoring_cost(policies["C"], [s.prompt for s in samples], [s.text for s in samples], repeats=3, clock=clock)
    assert len(calls) == 2 * 4 * 3   # four scorings, three rounds, a start and an end each: all in this call
    for kind in ("probe", "search"):
        assert cost[f"{kind} ratio"] == cost[f"{kind} marginal s"] / cost[f"{kind} canonical s"] > 0
    assert cost["texts"] == len(samples) and cost["rows per text"] == 2.0   # characters: the canonical and its twin


def test_measure_policies_scores_every_ordered_pair(policies, problems, task):
    pair = {name: policies[name] for name in ("A", "B")}
    rows, cost = measure_policies(pair, problems, dataclasses.replace(sampling(8, 8), seed=0), task.verify,
                                  cost_texts=4)
    assert set(zip(rows.learner, rows.source)) == {("A", "B"), ("B", "A")}
    assert list(zip(cost.learner, cost.source)) == [("A", "B"), ("B", "A")] and (cost.texts <= 4).all()
    assert list(rows.columns[:2]) == ["learner", "source"]


def test_stepwise_bounds_are_the_first_and_last_update_of_the_ledger_arm():
    assert stepwise_bounds(probe_config("hacpo", minibatches=4)) == pytest.approx((0.8, 0.875))
    assert stepwise_bounds(probe_config("hacpo")) == pytest.approx((0.8, 0.8))
    with pytest.raises(ValueError, match="stepwise"):
        stepwise_bounds(probe_config("hacpo", clipping="fixed"))


def synthetic_rows() -> pd.DataFrame:
    """Four texts of A scored from B: two with one tokenization (gap 0), two with a gap (0.05: canonical share
    95%; 1.0: 37%); log s chosen around HACPO's first bound 0.8 (log 0.8 = -0.223)."""
    return pd.DataFrame({
        "point": "warm-up", "learner": "A", "source": "B", "outcome": ["success", "failure", "failure", "failure"],
        "tokenizations": [1, 1, 3, 2], "gap": [0.0, 0.0, 0.05, 1.0],
        "canonical share": [1.0, 1.0, math.exp(-0.05), math.exp(-1.0)], "groups": [2.0, 2.0, 2.0, np.nan],
        "log s canonical": [0.0, -0.5, -0.25, 0.0], "log s marginal": [0.0, -0.5, -0.225 + 0.02, 0.5],
        "log s exact": [0.0, -0.5, -0.2, 0.5]})


def test_the_gap_table_counts_shares_per_outcome():
    table = gap_table(synthetic_rows()).set_index("outcome")
    assert table.loc["successes", "texts"] == 1 and table.loc["failures", "texts"] == 3
    assert table.loc["failures", "more than one tokenization"] == pytest.approx(2 / 3)
    assert table.loc["failures", "canonical share < 90%"] == pytest.approx(1 / 3)
    assert table.loc["failures", "mean gap"] == pytest.approx(1.05 / 3)
    assert table.loc["failures", "max gap"] == 1.0 and table.loc["successes", "max gap"] == 0.0


def test_the_ratio_table_counts_the_bound_and_who_changes_side():
    table = ratio_table(synthetic_rows(), (0.8, 0.875)).set_index("definition")
    assert (table.texts == 3).all()   # the text without a THL alignment is left out
    # canonical log s 0, -0.5, -0.25: outside [0.8, 1] are -0.5 and -0.25 (0.779); marginal -0.205 (0.815) is inside
    assert table.loc["canonical", "outside [0.8, 1]"] == pytest.approx(2 / 3)
    assert table.loc["marginal", "outside [0.8, 1]"] == pytest.approx(1 / 3)
    assert table.loc["marginal", "changes side"] == pytest.approx(1 / 3)
    assert table.loc["marginal", "outside [0.875, 1]"] == pytest.approx(2 / 3)   # 0.815 < 0.875
    assert table.loc["canonical", "changes side"] == 0


def test_the_cost_table_reports_milliseconds_and_the_measured_ratio():
    cost = pd.DataFrame([{"point": "warm-up", "learner": "A", "source": "B", "texts": 10, "rows per text": 2.5,
                          "probe canonical s": 0.1, "probe marginal s": 0.25, "probe ratio": 2.5,
                          "search canonical s": 0.02, "search marginal s": 0.03, "search ratio": 1.5}])
    row = cost_table(cost).iloc[0]
    assert row["probe canonical ms"] == pytest.approx(100) and row["probe ratio"] == 2.5
    assert row["search marginal ms"] == pytest.approx(30) and row["search ratio"] == 1.5


def test_the_gap_figure_has_a_panel_per_point():
    rows = pd.concat([synthetic_rows(), synthetic_rows().assign(point="after training")])
    fig = gap_figure(**gap_figure_inputs(rows))
    assert [ax.get_title() for ax in fig.axes] == ["warm-up", "after training"]
    assert all(ax.get_xscale() == "log" for ax in fig.axes)


ARMS = [("hacpo (tokenization=marginal, minibatches=4)", "hacpo (minibatches=4)")]


SPREAD = (0.004, -0.004, 0.002, -0.002, 0.0)
"""per warm-up deviations of a marginal arm from its shift: mean 0, so a shift of 0 is no difference at all"""


def endpoint_rows(probe: str, shift: float = 0.0, spread=(0.0,) * 5) -> list[dict]:
    """Endpoint values of one arm on 5 warm-ups x 2 seeds x 2 policies: a warm-up's level + shift + its spread."""
    return [{"pairing": "A+B", "probe": probe, "policy": policy, "seed": seed, "zoo_seed": zoo,
             "overall": 0.5 + 0.01 * zoo + 0.001 * seed + shift + spread[zoo],
             "weak": 0.2 + 0.01 * zoo + 0.001 * seed + shift + spread[zoo], "weak start": 0.1}
            for zoo in range(5) for seed in range(2) for policy in ("A", "B")]


@pytest.mark.parametrize("shift, reading", [(0.05, "higher with the marginal"), (-0.05, "lower with the marginal"),
                                            (0.0, "no difference detected")])
def test_the_marginal_arm_is_read_by_the_ledgers_rule(shift, reading):
    values = pd.DataFrame(endpoint_rows(ARMS[0][1]) + endpoint_rows(ARMS[0][0], shift, SPREAD))
    table = marginal_arms_table(values, ARMS)
    assert list(table.endpoint) == ["overall", "weak"]
    assert (table.reading == reading).all() and (table["warm-ups x seeds"] == "5 x 2").all()
    assert (table["inside +-0.01"] == ("yes" if shift == 0 else "no")).all()


def test_the_ledger_verdicts_with_the_marginal_arm_in_the_canonicals_place():
    arms = {c.probe for c in CLAIMS} | {c.reference for c in CLAIMS}
    values = pd.DataFrame([row for k, arm in enumerate(sorted(arms))
                           for row in endpoint_rows(arm, 0.01 * k, SPREAD[k % 5:] + SPREAD[:k % 5])])
    same = pd.concat([values, values[values.probe == ARMS[0][1]].assign(probe=ARMS[0][0])])
    swapped = with_arm_replaced(same, ARMS)
    assert ARMS[0][0] not in set(swapped.probe) and len(swapped) == len(values)
    verdicts = marginal_ledger_verdicts(same, ARMS)
    reading_hacpo4 = [c for c in CLAIMS if ARMS[0][1] in (c.probe, c.reference)]
    assert len(verdicts) == 2 * len(reading_hacpo4) and (verdicts["same verdict"] == "yes").all()
    better = pd.concat([values, values[values.probe == ARMS[0][1]].assign(probe=ARMS[0][0],
                                                                          overall=lambda f: f.overall + 0.2)])
    changed = marginal_ledger_verdicts(better, ARMS)
    assert (changed[changed.family == "primary"]["same verdict"] == "no").any()


def test_the_training_table_reads_each_arms_step_metrics():
    from mrl.reports.marginal import arms_training_result, arms_training_table

    def steps(probe: str, seconds: float, kept: int, gap: float | None) -> list[dict]:
        return [{"probe": probe, "policy": policy, "seed": seed, "zoo_seed": zoo, "step": step,
                 "update_seconds": seconds * (1 + step), "peer_samples": 8 if step else 0, "peer_kept": kept,
                 **({} if gap is None else {"marginal_gap_from_B" if policy == "A" else "marginal_gap_from_A":
                                            gap * (policy == "A")})}
                for policy in ("A", "B") for zoo in (0, 1) for seed in (0, 1) for step in range(3)]

    frame = pd.DataFrame(steps(ARMS[0][1], 0.1, 6, None) + steps(ARMS[0][0], 0.2, 4, 0.05))
    table = arms_training_table(frame, ARMS).set_index("learner")
    assert list(table.index) == ["A", "B"] and (table.runs == 4).all()
    assert table.loc["A", "update s canonical"] == pytest.approx(0.2)   # 0.1 x (1 + 2 + 3) / 3
    assert table.loc["A", "update ratio"] == pytest.approx(2.0)
    assert table.loc["A", "peer kept canonical"] == pytest.approx(0.75)   # steps without peers left out
    assert table.loc["A", "peer kept marginal"] == pytest.approx(0.5)
    assert table.loc["A", "gap in training"] == pytest.approx(0.05) and table.loc["B", "gap in training"] == 0.0
    assert arms_training_result(table.reset_index()).splitlines()[0] == (
        f"- `{ARMS[0][0]} - {ARMS[0][1]}`, learner A (4 runs): update 2.00x the canonical's wall time per step; peer "
        f"samples kept inside the clip range 75.0% canonical, 50.0% marginal; mean gap 0.0500 nats.")
    bare = frame.drop(columns=["peer_kept", "peer_samples", "marginal_gap_from_A", "marginal_gap_from_B"])
    assert arms_training_table(bare, ARMS)[["peer kept marginal", "gap in training"]].isna().all().all()
    assert arms_training_result(arms_training_table(bare, ARMS)).endswith("the canonical's wall time per step.")


def test_the_arms_result_reads_each_pair_from_its_table():
    from mrl.reports.marginal import marginal_arms_result

    values = pd.DataFrame(endpoint_rows(ARMS[0][1]) + endpoint_rows(ARMS[0][0], 0.05, SPREAD))
    arms = marginal_arms_table(values, ARMS)
    verdicts = pd.DataFrame([{"family": "primary", "claim": "c", "comparison": "hacpo (minibatches=4) - grpo",
                              "endpoint": "overall", "canonical: verdict": "inconclusive",
                              "marginal: verdict": "supported", "same verdict": "no",
                              "near the alpha edge only with": ""},
                             {"family": "secondary", "claim": "c", "comparison": "hacpo (minibatches=4) - grpo",
                              "endpoint": "weak", "canonical: verdict": "inconclusive",
                              "marginal: verdict": "inconclusive (near the alpha edge)",
                              "same verdict": "yes", "near the alpha edge only with": "marginal"}])
    text = marginal_arms_result(arms, verdicts)
    interval = arms.set_index("endpoint")["95% t over warm-ups"]
    assert text.splitlines()[0] == (
        f"- `{ARMS[0][0]} - {ARMS[0][1]}`, 5 x 2 warm-ups x seeds: overall +0.050 {interval['overall']}, higher with "
        f"the marginal (inside +-0.01: no); weak +0.050 {interval['weak']}, higher with the marginal (inside +-0.01: "
        f"no), on this substrate.")
    assert text.splitlines()[1] == ("- The ledger's claims on these arms: 1 of 2 verdicts are the same with the "
                                    "marginal arm: `hacpo (minibatches=4) - grpo` (primary) goes from inconclusive "
                                    "to supported; `hacpo (minibatches=4) - grpo` (secondary) is near the alpha edge "
                                    "with the marginal.")
    graft_only = [("graft (tokenization=marginal)", "graft")]
    none_read = marginal_ledger_verdicts(pd.DataFrame(endpoint_rows("graft") + endpoint_rows(graft_only[0][0])),
                                         graft_only)
    assert none_read.empty and list(none_read.columns)[-2:] == ["same verdict", "near the alpha edge only with"]
    assert marginal_arms_result(arms, none_read).endswith("No claim of the ledger reads these arms.")


def test_a_verdict_that_only_moves_near_the_alpha_edge_is_the_same_verdict():
    from mrl.reports.claims_rule import Fragility, Verdict, VerdictKind
    from mrl.reports.marginal import fragility_reading, near_edge_only, same_verdict

    unsized = Verdict(VerdictKind.NOT_AT_PAPER_SIZE)
    assert (same_verdict(unsized, unsized), near_edge_only(unsized, unsized)) == ("yes", "")
    edge = Verdict(VerdictKind.NOT_AT_PAPER_SIZE, near_edge=True)
    assert (same_verdict(unsized, edge), near_edge_only(unsized, edge)) == ("yes", "marginal")
    assert near_edge_only(Verdict(VerdictKind.INCONCLUSIVE, near_edge=True), Verdict(VerdictKind.INCONCLUSIVE)) == (
        "canonical")
    assert same_verdict(Verdict(VerdictKind.INCONCLUSIVE), Verdict(VerdictKind.SUPPORTED)) == "no"
    assert fragility_reading(Fragility(((Verdict(VerdictKind.SUPPORTED), (1,)),))) == (
        "fragile: without zoo 1, higher with the marginal")
    assert fragility_reading(Fragility(((Verdict(VerdictKind.OPPOSITE), (0, 2)),))) == (
        "fragile: without zoo 0 or 2, lower with the marginal")
    assert fragility_reading(Fragility()) == "stable" and fragility_reading(None) == ""


def test_a_marginal_arm_needs_its_canonical_twin():
    from mrl.core.grids import HeldoutConfig, marginal_arms
    from mrl.profiles import load_profile

    heldout = load_profile("smoke").experiment("heldout")
    assert marginal_arms(heldout) == ARMS   # the smoke profile runs HACPO's, so nbval reads the comparison
    fields = dataclasses.asdict(heldout)
    canonical = [p for p in fields["probes"] if not (isinstance(p, dict) and p.get("tokenization") == "marginal")]
    assert marginal_arms(HeldoutConfig(**{**fields, "probes": canonical})) == []
    with pytest.raises(ConfigError, match="HeldoutConfig.probes"):
        HeldoutConfig(**{**fields, "probes": [*canonical, {"name": "graft", "tokenization": "marginal"}]})


def test_the_marginal_comparison_runs_its_pairs_warm_up_by_warm_up(monkeypatch):
    from mrl.experiments import heldout as heldout_module
    from mrl.profiles import load_profile

    full = load_profile("full")
    monkeypatch.setattr(heldout_module, "build_zoos", lambda task, zoos, root=None, progress=True: [
        {f.name: types.SimpleNamespace(path=f"/zoo/{f.name}-{zoo.warmup.seed}") for f in zoo.families} for zoo in zoos])
    labelled = heldout_module.marginal_arm_runs(full, progress=False)
    heldout = full.experiment("heldout")
    arms = [label for pair in heldout_module.marginal_arms(heldout) for label in pair]
    assert len(labelled) == len(arms) * len(heldout.zoo_seeds) * len(heldout.seeds)
    assert [label["zoo_seed"] for label, _ in labelled[:len(arms)]] == [heldout.zoo_seeds[0]] * len(arms)
    assert [label["probe"] for label, _ in labelled[:len(arms)]] == arms   # a whole pair set per seed, in order
    assert {label["zoo_seed"] for label, _ in labelled} == set(heldout.zoo_seeds)   # not the replication's
    same = {run.key(): label for label, run in heldout_module.heldout_runs(full, False, heldout.zoo_seeds)}
    assert all(same[run.key()] == label for label, run in labelled)   # the same runs, keys and labels
    canonical = [p for p in heldout.probes if not (isinstance(p, dict) and p.get("tokenization") == "marginal")]
    without = dataclasses.replace(full, experiments={**full.experiments,
                                                     "heldout": dataclasses.replace(heldout, probes=canonical)})
    assert heldout_module.marginal_arm_runs(without, progress=False) == []


def test_the_result_prose_carries_the_tables_numbers():
    from mrl.reports.marginal import marginal_result

    b_rows = synthetic_rows().assign(learner="B", source="A", tokenizations=1, gap=0.0, **{"canonical share": 1.0})
    rows = pd.concat([synthetic_rows(), b_rows], ignore_index=True)
    cost = pd.DataFrame([{"point": "warm-up", "learner": learner, "source": source, "texts": 10,
                          "rows per text": rows_per_text, "probe canonical s": 0.1, "probe marginal s": 0.1 * ratio,
                          "probe ratio": ratio, "search canonical s": 0.02, "search marginal s": 0.02,
                          "search ratio": 1.0} for learner, source, rows_per_text, ratio in
                         (("A", "B", 2.5, 2.5), ("B", "A", 2.0, 2.0))])
    text = marginal_result(gap_table(rows), ratio_table(rows, (0.8, 0.875)), cost, (0.8, 0.875))
    assert "**Warm-up**, on this substrate" in text
    assert "A scoring B's 4 texts: 50.0% have more than one tokenization and 25.0% a canonical tokenization" in text
    assert "over failures (3) mean 0.3500 nats, max 1.000" in text
    assert "HACPO's mean log s is -0.2500 canonical, -0.2350 marginal and -0.2333 exact" in text
    assert "bind on 66.7%, 33.3% and 33.3% of the samples, and the marginal moves 33.3% of them" in text
    assert "B scoring A's 4 texts: every text has one tokenization" in text
    assert "2.00x to 2.50x the canonical's (2.00 to 2.50 rows per text against 1)" in text


def test_the_committed_marginal_arms_are_recomputed_from_the_ledgers_runs():
    """The committed arms and verdicts tables follow from the committed per-run endpoint values (claims_runs.csv,
    70_heldout) on the ledger's warm-ups, as 80_beyond computes them."""
    from mrl.core.grids import marginal_arms
    from mrl.profiles import load_profile
    from mrl.reports.claims import read_endpoint_values
    from mrl.runtime.results import repo_root

    tables = repo_root() / "paper_tables"
    if not (tables / "beyond_marginal_arms.csv").exists():
        pytest.skip("no marginal arms committed yet: `make reproduce` writes them")
    heldout = load_profile("default").experiment("heldout")
    values = read_endpoint_values(tables / "claims_runs.csv")
    values = values[values.zoo_seed.isin(heldout.zoo_seeds)]
    pairs = marginal_arms(heldout)
    for name, recomputed in (("arms", marginal_arms_table(values, pairs)),
                             ("verdicts", marginal_ledger_verdicts(values, pairs))):
        committed = pd.read_csv(tables / f"beyond_marginal_{name}.csv", dtype=str, keep_default_na=False)
        recomputed = recomputed.astype(str).replace("nan", "")
        assert list(recomputed.columns) == list(committed.columns), name
        for column in committed.columns:
            assert list(recomputed[column]) == list(committed[column]), (name, column)
