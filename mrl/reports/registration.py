"""The confirmatory test's registration check: one checksum over what the registration fixes (docs/registration.md,
Integrity): the profile's confirmatory block and the held-out settings its runs depend on, the analysis's design
record and labels, and the code from the runs' streams and the arms' probes to the labels (docstrings and comments
left out, so rewording one changes nothing; the syntax tree written out the same way on every Python version). A test
compares it with the checksum the registration wrote into the page, so a shallow clone checks it without git history.
"""
from __future__ import annotations

import ast
import hashlib
import inspect
import json
import re
import textwrap
from pathlib import Path

import mrl.core.probes.grpo as grpo_probe
import mrl.core.probes.sgt as sgt_probe
from mrl.core import seeding
from mrl.core.run_config import RunConfig
from mrl.core.validation import to_dict
from mrl.experiments import heldout, runs
from mrl.fingerprint import tree_without_docs
from mrl.reports import claims, confirmatory, probes, statistics

REGISTERED_FUNCTIONS = (
    seeding.derived_seed, seeding.nested_rl_seed, seeding.step_prompts, seeding.step_generator, runs.Run.grpo,
    heldout.heldout_config, heldout.heldout_zoos, heldout.confirmatory_runs,
    claims.endpoint_values, claims.unit_differences, probes.with_overall, probes.rescue_skills,
    confirmatory.complete_warmups, confirmatory.gatekeeper, confirmatory.size_test, confirmatory.confirmatory_test,
    confirmatory.confirmatory_analysis, confirmatory.leave_one_out,
    statistics.t_p_value, statistics.t_interval, statistics.sign_flip_p_value,
)
"""every function the registered runs and analysis go through: the streams (seeding) and where the RL seed is nested
(Run.grpo), the runs of the block, the per-run endpoint, d_z, the tests and their labels"""
REGISTERED_MODULES = (grpo_probe, sgt_probe)
"""the arms' probes, whole: what grpo and sgt compute from a batch (the runtime below them is held to the same numbers
by the smoke notebooks' checks, not by this checksum)"""
CHECKSUM_LINE = re.compile(r"^checksum: sha256:([0-9a-f]{64})$", re.MULTILINE)
"""how docs/registration.md records the checksum"""


def registered_settings(config: RunConfig) -> dict:
    """What the confirmatory runs compute from, as plain values: the confirmatory block, the held-out experiment's
    task, zoo (but its worker count, which changes only how fast it is built), pairing, steps and evaluation cadence,
    and the profile's GRPO settings (but the RL seed, the block's, and the evaluation's batch size, which changes only
    how the greedy evaluation is chunked)."""
    held = config.experiment("heldout")
    grpo = to_dict(config.grpo)
    grpo.pop("seed")
    grpo.pop("eval_batch")
    zoo = to_dict(held.zoo)
    zoo.pop("workers")
    return {"confirmatory": None if held.confirmatory is None else to_dict(held.confirmatory),
            "task": to_dict(held.task), "zoo": zoo, "pairing": list(held.pairing), "steps": held.steps,
            "eval_every": held.eval_every, "grpo": grpo}


def canonical_code(source: str) -> str:
    """A function's or module's syntax tree, docstrings left out, written out field by field with empty fields and
    type parameters omitted: the same text on Python 3.11, 3.12 and 3.13 (ast.dump's own format differs between them),
    and the same whatever the comments, blank lines or line breaks."""
    tree = tree_without_docs(textwrap.dedent(source))

    def written(value) -> str:
        if isinstance(value, ast.AST):
            fields = [f"{name}={written(item)}" for name, item in ast.iter_fields(value)
                      if name != "type_params" and item is not None and not (isinstance(item, list) and not item)]
            return f"{type(value).__name__}({', '.join(fields)})"
        if isinstance(value, list):
            return "[" + ", ".join(written(item) for item in value) + "]"
        return repr(value)

    return written(tree)


def registered_code() -> list[str]:
    """canonical_code of each REGISTERED_FUNCTIONS entry and REGISTERED_MODULES file, with the design record, the
    labels and the endpoint's number of evaluations."""
    code = [canonical_code(inspect.getsource(function)) for function in REGISTERED_FUNCTIONS]
    code += [canonical_code(Path(module.__file__).read_text()) for module in REGISTERED_MODULES]
    labels = [member.value for kind in (confirmatory.Reading, confirmatory.SizeReading) for member in kind]
    return [*code, repr(confirmatory.DESIGN), repr(labels), repr(claims.ENDPOINT_EVALS)]


def registration_checksum(config: RunConfig) -> str:
    """sha256 of registered_settings and registered_code, as canonical JSON."""
    payload = json.dumps({"settings": registered_settings(config), "code": registered_code()}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def recorded_checksum(page: Path) -> str | None:
    """The checksum docs/registration.md records (its `checksum: sha256:<hex>` line); None before the registration."""
    found = CHECKSUM_LINE.search(page.read_text())
    return found.group(1) if found else None


AMENDED_LINE = re.compile(r"^amended checksum: sha256:([0-9a-f]{64})$", re.MULTILINE)
"""how a registration page's amendment after the results records the checksum of a refactor shown not to move a
registered number (the recorded checksum stays: it is the stamp the block's runs carry)"""


def amended_checksum(page: Path) -> str | None:
    """The checksum the page's latest amendment records (its last `amended checksum: sha256:<hex>` line); None
    where no amendment records one."""
    found = AMENDED_LINE.findall(page.read_text())
    return found[-1] if found else None
