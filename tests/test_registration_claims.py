"""The second registration: docs/registration_claims.md records the checksum of what it fixes (its own registered
text, the block, the held-out and runner settings, the probes with their helpers, the record and the analysis), and
the checksum holds; it moves with a setting, the code or the page's design and not with a docstring or a rewrap; the
page's plan is the one mrl.reports.claims_confirmatory computes from the committed inputs."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import mrl.reports.claims_confirmatory as analysis
from mrl.core.validation import ConfigError
from mrl.experiments import record
from mrl.experiments.heldout import claims_block_runs
from mrl.paths import repo_root
from mrl.profiles import load_profile
from mrl.reports import claims_registration as registration
from mrl.reports.registration import amended_checksum
from mrl.reports.claims_rule import claim_hypotheses
from mrl.reports import statistics
from mrl.reports.statistics import t_p_value

PAGE = repo_root() / "docs" / "registration_claims.md"
TABLES = repo_root() / "paper_tables"
COSTS = repo_root() / "docs" / "measurements" / "arm_costs.json"
RECORD = repo_root() / "paper_tables" / "confirmatory_claims_record"


def test_the_recorded_checksum_holds_or_the_page_says_it_is_not_registered():
    """Until the block's last run is recorded, the live checksum is the recorded one; after, every recorded run of the
    block carries it and one code fingerprint (docs/registration_claims.md, Integrity), and the code may move on."""
    config = load_profile("default")
    recorded = registration.recorded_checksum(PAGE)
    if recorded is None:
        assert "not yet registered" in PAGE.read_text()
        return
    planned = claims_block_runs(config)
    runs, _ = record.read_record(RECORD)
    keys = record.readable(planned, runs, recorded)
    if all(key is not None for key in keys):
        chosen = runs[runs.key.isin(keys)]
        assert set(chosen.stamp) == {recorded} and chosen.code.nunique() == 1
        amended = amended_checksum(PAGE)   # a refactor after the results, shown to move no registered number
        assert amended is None or registration.registration_checksum(config, PAGE) == amended, (
            "the second registration's code or settings changed since its latest amendment "
            "(docs/registration_claims.md): record a refactor's checksum in an amendment with its evidence")
        return
    assert registration.registration_checksum(config, PAGE) == recorded, (
        "the second registration's block, settings, code or registered text changed before the block's last run "
        "(docs/registration_claims.md): a confirmatory test cannot change once registered")


def test_the_checksum_moves_with_a_setting_the_code_or_the_page_and_not_with_a_docstring_or_a_rewrap(
        monkeypatch, tmp_path):
    config = load_profile("default")
    page = tmp_path / "page.md"
    page.write_text(PAGE.read_text())
    before = registration.registration_checksum(config, page)
    heldout = config.experiment("heldout")
    block = heldout.confirmatory_claims

    def with_heldout(**fields):
        return dataclasses.replace(config, experiments={**config.experiments,
                                                        "heldout": dataclasses.replace(heldout, **fields)})

    fewer = with_heldout(confirmatory_claims=dataclasses.replace(block, zoo_seeds=block.zoo_seeds[:-1]))
    assert registration.registration_checksum(fewer, page) != before
    native = with_heldout(confirmatory_claims=dataclasses.replace(block, numerics="native"))
    assert registration.registration_checksum(native, page) != before
    stale = dataclasses.replace(config, runner=dataclasses.replace(config.runner, max_staleness=2))
    assert registration.registration_checksum(stale, page) != before
    faster = dataclasses.replace(config, runner=dataclasses.replace(config.runner, step_timeout=1.0))
    assert registration.registration_checksum(faster, page) == before   # how a run executes, not what it computes

    text = page.read_text()
    page.write_text(text.replace("one Holm family at a family-wise", "one Holm family\n  at a family-wise", 1)
                    .replace("| questions |", "|   questions |", 1))
    assert registration.registration_checksum(config, page) == before          # a rewrap
    page.write_text(text.replace("12 fresh zoo seeds, 200-211", "12 fresh zoo seeds, 200-211 or others", 1))
    assert registration.registration_checksum(config, page) != before          # the design
    page.write_text(text.replace("No checksum is recorded yet", "Anything below the line", 1)
                    if "No checksum is recorded yet" in text else text + "\nresults, later\n")
    assert registration.registration_checksum(config, page) == before          # below the registered text
    page.write_text(text)

    def holm_adjusted(p_values) -> np.ndarray:
        """A reworded docstring: the code is the registered one."""
        p = np.asarray(p_values, dtype=float)
        out = np.full_like(p, np.nan)
        finite = np.flatnonzero(~np.isnan(p))
        order = finite[np.argsort(p[finite], kind="stable")]
        steps = p[order] * (len(order) - np.arange(len(order)))
        out[order] = np.minimum(1.0, np.maximum.accumulate(steps))
        return out

    def bonferroni(p_values):
        return np.minimum(1.0, np.asarray(p_values, dtype=float) * len(p_values))

    functions = list(registration.REGISTERED_FUNCTIONS)
    at = functions.index(statistics.holm_adjusted)
    for replacement, moves in ((holm_adjusted, False), (bonferroni, True)):
        monkeypatch.setattr(registration, "REGISTERED_FUNCTIONS",
                            tuple(functions[:at] + [replacement] + functions[at + 1:]))
        assert (registration.registration_checksum(config, page) != before) is moves, replacement.__name__


def test_the_checksum_covers_the_probes_helpers_and_the_record():
    covered = {module.__name__ for module in registration.REGISTERED_MODULES}
    for name in ("mrl.core.probes.terms", "mrl.core.probes.advantages", "mrl.core.probes.contract", "mrl.core.grpo",
                 "mrl.core.thl", "mrl.core.see", "mrl.core.tasks", "mrl.core.seeding", "mrl.experiments.record",
                 "mrl.reports.claims_confirmatory"):
        assert name in covered
    arms = {entry if isinstance(entry, str) else entry["name"]
            for entry in load_profile("default").experiment("heldout").confirmatory_claims.probes}
    for arm in arms:   # every arm's probe module (gspo, gspo_x2 and naive live in hacpo's)
        module = "hacpo" if arm in ("gspo", "gspo_x2", "naive") else arm
        assert f"mrl.core.probes.{module}" in covered


def test_the_block_is_fresh_and_holds_every_comparisons_arms():
    heldout = load_profile("default").experiment("heldout")
    block = heldout.confirmatory_claims
    used = {*heldout.zoo_seeds, *heldout.replication_zoo_seeds, *heldout.confirmatory.zoo_seeds,
            *range(5, 9), *range(10, 30), *range(30, 100)}
    assert not set(block.zoo_seeds) & used and len(block.zoo_seeds) >= analysis.MIN_WARMUPS
    from mrl.core.probes import as_probe_config, probe_label
    labels = {probe_label(as_probe_config(entry)) for entry in block.probes}
    assert {arm for c in analysis.COMPARISONS for arm in (c.probe, c.reference)} == labels
    with pytest.raises(ConfigError, match="confirmatory_claims.zoo_seeds"):
        dataclasses.replace(heldout, confirmatory_claims=dataclasses.replace(block, zoo_seeds=[100, 200]))


def planning_inputs():
    """The plan's inputs frozen at the registration: (the block, effects, planning SDs, costs)."""
    frozen = json.loads(registration.PLAN_INPUTS.read_text())
    block = load_profile("default").experiment("heldout").confirmatory_claims
    return (block, frozen["effects"], [analysis.PlanningSd(**sd) for sd in frozen["sds"]],
            analysis.Costs(**frozen["costs"]))


def test_the_pages_plan_is_the_computed_one():
    block = load_profile("default").experiment("heldout").confirmatory_claims
    frozen = json.loads(registration.PLAN_INPUTS.read_text())
    text = PAGE.read_text()
    shown = text.split("<!-- generated:plan -->\n")[1].split("<!-- /generated:plan -->")[0]
    assert shown == analysis.plan_markdown(frozen)
    assert frozen["registered"] == len(block.zoo_seeds)
    assert f"{len(block.zoo_seeds)} fresh zoo seeds, {block.zoo_seeds[0]}-{block.zoo_seeds[-1]}" in text
    tests = sum(len(claim_hypotheses(c)) for c in analysis.COMPARISONS)
    assert f"The {tests} tests of the table form" in text and f"0.05/{tests}" in text
    assert 2 / 2 ** len(block.zoo_seeds) < 0.05 / tests
    assert f"2/{2 ** len(block.zoo_seeds)}" in text


def test_the_frozen_plan_costs_are_the_committed_measurements():
    block, _, _, costs = planning_inputs()
    from mrl.core.probes import as_probe_config, probe_label
    measured = analysis.measured_costs(json.loads(COSTS.read_text()),
                                       [probe_label(as_probe_config(entry)) for entry in block.probes])
    assert measured == costs


def test_the_family_keeps_its_error_rate_when_every_difference_is_0():
    """Holm over the 15 tests, wrong signs included, at the ledger's SDs: the simulated family error at 0 stays
    within Monte Carlo error of 0.05 or below (4000 draws: SE about 0.0035)."""
    _, _, sds, _ = planning_inputs()
    at_zero = analysis.simulated_family(12, [0.0] * len(analysis.COMPARISONS), sds, draws=4000, seed=1)
    assert at_zero.attrs["family error"] <= 0.05 + 3 * 0.0035


def test_the_simulation_is_the_registered_family_draw_by_draw():
    rng = np.random.default_rng(3)
    effects = [0.013, -0.05, 0.0, 0.0, 0.032, 0.0, -0.069, -0.01, 0.0]
    samples = [e + 0.012 * rng.standard_normal((150, 10)) for e in effects]
    vectorised = analysis.simulated_readings(samples, analysis.COMPARISONS)
    for k in range(150):
        ds = [s[k] for s in samples]
        family = analysis.family_tests(analysis.COMPARISONS, ds)
        for i, claim in enumerate(analysis.COMPARISONS):
            reading, size = analysis.readings(claim, ds[i], family[i], True)
            assert (reading.value, size.value) == (vectorised[i][0][k], vectorised[i][1][k])
    assert t_p_value(samples[0][0], 0.0, "two-sided") == pytest.approx(
        analysis.family_tests(analysis.COMPARISONS, [s[0] for s in samples])[0]["sign"])
