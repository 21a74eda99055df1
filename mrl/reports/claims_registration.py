"""The second registration's check (docs/registration_claims.md, Integrity): one checksum over what it fixes, wider
than the first's (mrl.reports.registration), whose three gaps an audit named:

- the page's own registered text (its design, tests, multiplicity, plan and integrity sections, up to the line that
  ends them), not the line that records the checksum, so the page's design cannot change unseen;
- the arms' probes and their helpers whole (the probe contract, the shared terms, the advantage estimators, HACPO's
  primitives, GRPO's loss, THL, SEE, the task and the streams), beside the block's runs and the analysis;
- the runner's settings that move a run's numbers (the clock, the staleness bound, the peers' honesty, the failure
  policy), beside the held-out settings and the block; and the numerics mode the runs must have, which the analysis
  enforces (mrl.reports.claims_confirmatory.block_values).

Code enters as its syntax tree without docstrings (mrl.reports.registration.canonical_code), so rewording a docstring
or a newer Python changes nothing.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import re
from pathlib import Path

import mrl.core.grpo as grpo_core
import mrl.core.probes.advantages as advantages
import mrl.core.probes.contract as contract
import mrl.core.probes.graft as graft_probe
import mrl.core.probes.grpo as grpo_probe
import mrl.core.probes.hacpo as hacpo_probe
import mrl.core.probes.hacpo_primitives as hacpo_primitives
import mrl.core.probes.prp as prp_probe
import mrl.core.probes.sgt as sgt_probe
import mrl.core.probes.terms as terms
import mrl.core.probes.xgrpo as xgrpo_probe
import mrl.core.see as see
import mrl.core.seeding as seeding
import mrl.core.tasks as tasks
import mrl.core.thl as thl
import mrl.core.token_bytes as token_bytes
import mrl.experiments.record as record
import mrl.reports.claims_confirmatory as analysis
from mrl.core.run_config import RunConfig
from mrl.core.validation import to_dict
from mrl.experiments import heldout
from mrl.paths import PACKAGE
from mrl.reports import claims, claims_rule, confirmatory, probes, statistics
from mrl.reports.registration import canonical_code
from mrl.runtime.spec import Run, run_identity

REGISTERED_FUNCTIONS = (
    Run.grpo, run_identity, heldout.heldout_config, heldout.heldout_zoos, heldout.claims_block_runs,
    heldout.run_claims_block,
    claims.endpoint_values, claims.unit_differences, probes.with_overall, probes.rescue_skills,
    confirmatory.complete_warmups, claims_rule.claim_hypotheses, claims_rule.Claim, claims_rule.Hypothesis,
    statistics._check_alternative, statistics.t_p_value, statistics.t_p_value_at_df, statistics.t_interval,
    statistics.sign_flip_p_value, statistics.holm_adjusted, statistics.expected_power, statistics.t_power,
)
"""the functions and classes outside the modules below that the block's runs and the analysis go through: where the
RL seed is nested (Run.grpo) and what a run's numbers depend on (run_identity), the block's runs, the per-run endpoint,
d_z, the claims and their tests, the t and sign-flip tests, Holm and the plan's power"""
PLAN_INPUTS = PACKAGE.parent / "docs" / "measurements" / "registration_claims_plan.json"
"""the plan's inputs as frozen at the registration (mrl.reports.claims_confirmatory.plan_inputs)"""
REGISTERED_MODULES = (
    analysis, record, seeding, tasks, grpo_core, thl, token_bytes, see, contract, terms, advantages, grpo_probe,
    sgt_probe, prp_probe, xgrpo_probe, graft_probe, hacpo_probe, hacpo_primitives,
)
"""whole: the analysis (comparisons, tests, labels, plan), the record the runs are read from, the streams, the task,
GRPO's loss, THL, SEE, and every arm's probe with the helpers they share"""
RUNNER_FIELDS = ("mode", "staleness", "max_staleness", "failure_policy", "poisoned", "attack", "reverify")
"""the runner's settings that move a run's numbers (run_identity's clock, peers and failure policy)"""
END_OF_REGISTERED_TEXT = "<!-- the registered text ends here -->"
"""the line of docs/registration_claims.md after which nothing is registered (the checksum, amendments, results)"""
CHECKSUM_LINE = re.compile(r"^checksum: sha256:([0-9a-f]{64})$", re.MULTILINE)


def registered_settings(config: RunConfig) -> dict:
    """What the block's runs compute from, as plain values: the block (its numerics mode included), the held-out
    experiment's task, zoo (but its worker count), pairing, steps and evaluation cadence, the profile's GRPO settings
    (but the RL seed and the evaluation's batch size), the runner's RUNNER_FIELDS, and every run's identity
    (run_identity, but its policies' folder names, which the zoo's code moves: placement, probe knobs, clock and
    peers included)."""
    held = config.experiment("heldout")
    grpo = to_dict(config.grpo)
    grpo.pop("seed")
    grpo.pop("eval_batch")
    zoo = to_dict(held.zoo)
    zoo.pop("workers")
    runner = to_dict(config.runner)
    identities = [{key: value for key, value in run_identity(run).items() if key != "policies"}
                  for _, run in heldout.claims_block_runs(config)]
    return {"block": None if held.confirmatory_claims is None else to_dict(held.confirmatory_claims),
            "task": to_dict(held.task), "zoo": zoo, "pairing": list(held.pairing), "steps": held.steps,
            "eval_every": held.eval_every, "grpo": grpo, "runner": {name: runner[name] for name in RUNNER_FIELDS},
            "runs": identities}


def registered_text(page: Path) -> str:
    """The page's registered text: everything above END_OF_REGISTERED_TEXT, its whitespace collapsed (a rewrap
    changes nothing); a page without that line registers nothing yet ("")."""
    text = page.read_text()
    if END_OF_REGISTERED_TEXT not in text:
        return ""
    return " ".join(text.split(END_OF_REGISTERED_TEXT)[0].split())


def registered_code() -> list[str]:
    """canonical_code of each REGISTERED_FUNCTIONS entry and REGISTERED_MODULES file, with the comparisons, the
    labels, the statistics' constants, the margin, the endpoint's number of evaluations and the plan's frozen inputs
    (PLAN_INPUTS)."""
    code = [canonical_code(inspect.getsource(function)) for function in REGISTERED_FUNCTIONS]
    code += [canonical_code(Path(module.__file__).read_text()) for module in REGISTERED_MODULES]
    labels = [member.value for kind in (analysis.Reading, analysis.SizeReading) for member in kind]
    constants = [statistics.ALTERNATIVES, statistics.EXACT_SIGN_FLIPS, statistics.TIE_DECIMALS,
                 statistics.SIGN_FLIP_DRAWS, claims_rule.MARGIN, claims.ENDPOINT_EVALS]
    plan = json.loads(PLAN_INPUTS.read_text()) if PLAN_INPUTS.exists() else None
    return [*code, repr(analysis.COMPARISONS), repr(labels), repr(constants), json.dumps(plan, sort_keys=True)]


def registration_checksum(config: RunConfig, page: Path) -> str:
    """sha256 of registered_settings, registered_code and the page's registered_text, as canonical JSON."""
    payload = json.dumps({"settings": registered_settings(config), "code": registered_code(),
                          "page": registered_text(page)}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def recorded_checksum(page: Path) -> str | None:
    """The checksum the page records below its registered text; None before the registration."""
    found = CHECKSUM_LINE.search(page.read_text())
    return found.group(1) if found else None


def registered_stamp(config: RunConfig, page: Path) -> str:
    """The checksum the page records, which every run of the block carries, once the live checksum is checked equal
    to it: a registered block runs only under the code, settings and text it registered (a ValueError otherwise)."""
    recorded, live = recorded_checksum(page), registration_checksum(config, page)
    if recorded != live:
        raise ValueError(f"the second registration's checksum here, {live[:12]}, is not the one {page.name} records, "
                         f"{(recorded or 'none')[:12]}: a registered block runs only under the code, settings and "
                         f"text it registered (docs/registration_claims.md, Integrity)")
    return recorded
