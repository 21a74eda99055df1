"""The confirmatory test's registration: docs/registration.md records the checksum of what it fixes, and the
checksum holds (a changed analysis function or setting fails here, a reworded docstring does not); before the
registration commit the page says so and the default profile has no confirmatory block; the page's plan is the one
mrl.reports.confirmatory computes."""
from __future__ import annotations

import dataclasses
import re

import numpy as np

import mrl.reports.confirmatory as confirmatory
from mrl.core.grids import ConfirmatoryConfig
from mrl.paths import repo_root
from mrl.profiles import load_profile
from mrl.reports import registration
from mrl.reports.confirmatory import (DESIGN, PLAN, Design, Reading, fewest_warmups, registered_plan, sd_at_seeds,
                                      t_p_value)
from mrl.reports.statistics import expected_power, t_power

PAGE = repo_root() / "docs" / "registration.md"


def test_the_recorded_checksum_holds_or_the_page_says_it_is_not_registered():
    config = load_profile("default")
    recorded = registration.recorded_checksum(PAGE)
    if recorded is None:
        assert "not yet registered" in PAGE.read_text()
        assert config.experiment("heldout").confirmatory is None   # the block lands with its checksum
    else:   # the latest amendment's checksum, where a refactor after the results was shown to move no number
        assert registration.registration_checksum(config) == (registration.amended_checksum(PAGE) or recorded), (
            "the registered confirmatory block, held-out settings or analysis code changed after the registration "
            "(docs/registration.md): a confirmatory test cannot change once registered; a refactor shown to move "
            "no registered number records its checksum in an amendment")


def with_block(config):
    heldout = config.experiment("heldout")
    block = ConfirmatoryConfig(zoo_seeds=list(range(100, 112)), probes=["grpo", "sgt"], seeds=[0, 1])
    return dataclasses.replace(config, experiments={**config.experiments,
                                                    "heldout": dataclasses.replace(heldout, confirmatory=block)})


def test_the_checksum_moves_with_a_setting_or_the_code_and_not_with_a_docstring(monkeypatch):
    config = with_block(load_profile("default"))
    before = registration.registration_checksum(config)
    block = config.experiment("heldout").confirmatory
    fewer = dataclasses.replace(config, experiments={**config.experiments, "heldout": dataclasses.replace(
        config.experiment("heldout"), confirmatory=dataclasses.replace(block, zoo_seeds=block.zoo_seeds[:-1]))})
    assert registration.registration_checksum(fewer) != before

    def gatekeeper(d, design: Design = DESIGN) -> tuple[float, Reading]:
        """A reworded docstring: the code is the registered one."""
        p = t_p_value(d, 0.0, "two-sided")
        if not p < design.alpha:
            return p, Reading.NOT_CONFIRMED
        return p, Reading.CONFIRMED if float(np.mean(d)) > 0 else Reading.OPPOSITE

    def lenient_gatekeeper(d, design: Design = DESIGN) -> tuple[float, Reading]:
        p = t_p_value(d, 0.0, "greater")
        return p, Reading.CONFIRMED if p < design.alpha else Reading.NOT_CONFIRMED

    functions = list(registration.REGISTERED_FUNCTIONS)
    at = functions.index(confirmatory.gatekeeper)
    for replacement, moves in ((gatekeeper, False), (lenient_gatekeeper, True)):
        monkeypatch.setattr(registration, "REGISTERED_FUNCTIONS",
                            tuple(functions[:at] + [replacement] + functions[at + 1:]))
        assert (registration.registration_checksum(config) != before) is moves, replacement.__name__


def test_the_code_is_written_the_same_whatever_its_comments_and_docstrings():
    plain = "def f(x):\n    return x + 1\n"
    noted = 'def f(x):\n    """Adds one."""\n    # a comment\n\n    return (x\n            + 1)\n'
    assert registration.canonical_code(plain) == registration.canonical_code(noted)
    assert registration.canonical_code(plain) != registration.canonical_code(plain.replace("+ 1", "+ 2"))
    assert "type_params" not in registration.canonical_code(plain)


def test_the_pages_plan_is_the_computed_one():
    """Every number docs/registration.md's plan states, from mrl.reports.confirmatory."""
    text = " ".join(PAGE.read_text().split())
    plan = registered_plan()
    two, one = fewest_warmups(plan, seeds=2), fewest_warmups(plan, seeds=1)
    assert f"With 2 RL seeds that is {two} warm-ups ({two * 2 * PLAN.arms} runs)" in text
    assert f"With 1 RL seed it is {one}" in text
    assert f"{two} fresh zoo seeds, 100-{99 + two}" in text
    half = t_power(two, confirmatory.DESIGN.paper_effect / 2, PLAN.sd, confirmatory.DESIGN.alpha)
    assert f"{two} warm-ups have about {half:.0%} power" in text
    size = t_power(two, confirmatory.DESIGN.paper_effect, PLAN.sd, confirmatory.DESIGN.alpha, "less")
    size_averaged = expected_power(two, confirmatory.DESIGN.paper_effect, PLAN.sd, PLAN.sd_df,
                                   confirmatory.DESIGN.alpha, "less")
    assert f"with about {size:.0%} power at the plug-in SD ({size_averaged:.0%} averaged over it)" in text
    nested = expected_power(two, confirmatory.DESIGN.paper_effect, sd_at_seeds(PLAN, 1), PLAN.sd_df,
                            confirmatory.DESIGN.alpha)
    assert f"{sd_at_seeds(PLAN, 1):.4f}, the plan's 1-RL-seed SD, at which {two} warm-ups have {nested:.0%}" in text
    assert f"fewer than {confirmatory.DESIGN.min_warmups} complete warm-ups" in text
    assert "is 6.75 + 11.5 minutes of one core" in text and 6.75 + 11.5 == PLAN.zoo_core_minutes
    assert f"about {PLAN.run_core_minutes} minutes of one core" in text
    assert f"as much as about {round(PLAN.zoo_core_minutes / PLAN.run_core_minutes)} runs" in text
    assert re.search(rf"smallest two-sided value is 2/{2 ** two}\b", text)


def test_the_pages_numbers_from_the_committed_ledger_are_its_tables():
    """The ledger's SD of d_z and the crossed seed effect of sgt - grpo, as the ledger the registration read holds
    them: its crossed runs (paper_tables/claims_runs_crossed.csv; the ledger re-ran on nested seeds afterwards)."""
    from mrl.reports.claims import claims_ledger, read_endpoint_values, seed_differences
    from mrl.reports.statistics import seed_main_effect

    text = " ".join(PAGE.read_text().split())
    crossed = read_endpoint_values(repo_root() / "paper_tables" / "claims_runs_crossed.csv")
    ledger = claims_ledger(crossed).set_index("comparison")
    assert f"the ledger's {ledger.loc['sgt - grpo', 'sd']:.4f} on {ledger.loc['sgt - grpo', 'zoos'] - 1} df" in text
    effect = seed_main_effect(seed_differences(crossed, "sgt", "grpo", "overall"))
    assert f"F(1, 4) = {effect['F']:.2f}" in text
    assert f"{PLAN.sd} on {PLAN.sd_df} df" in text and f"({PLAN.rl_seed_sd}," in text
