"""The confirmatory test's registration check: one checksum over what the registration fixes (docs/registration.md,
Integrity): the profile's confirmatory block and the held-out settings its runs depend on, the analysis's design
record and labels, and the code of every function the analysis runs through (docstrings and comments left out, so
rewording one changes nothing). A test compares it with the checksum the registration commit wrote into the page, so
a shallow clone checks it without git history.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import re
import textwrap
from pathlib import Path

from mrl.core.config import RunConfig
from mrl.core.seeding import nested_rl_seed
from mrl.core.validation import to_dict
from mrl.fingerprint import code_without_docs
from mrl.reports import claims, confirmatory, probes, statistics

REGISTERED_FUNCTIONS = (
    nested_rl_seed, claims.endpoint_values, claims.unit_differences, probes.with_overall, probes.rescue_skills,
    confirmatory.complete_warmups, confirmatory.gatekeeper, confirmatory.size_test, confirmatory.confirmatory_test,
    confirmatory.leave_one_out, statistics.t_p_value, statistics.t_interval, statistics.sign_flip_p_value,
)
"""every function the registered analysis runs through, from the runs' streams (nested_rl_seed) and per-run
evaluations to the labels"""
CHECKSUM_LINE = re.compile(r"^checksum: sha256:([0-9a-f]{64})$", re.MULTILINE)
"""how docs/registration.md records the checksum"""


def registered_settings(config: RunConfig) -> dict:
    """What the confirmatory runs compute from, as plain values: the confirmatory block, the held-out experiment's
    task, zoo, pairing, steps and evaluation cadence, and the profile's GRPO settings (the RL seed is the block's)."""
    heldout = config.experiment("heldout")
    grpo = to_dict(config.grpo)
    grpo.pop("seed")
    return {"confirmatory": None if heldout.confirmatory is None else to_dict(heldout.confirmatory),
            "task": to_dict(heldout.task), "zoo": to_dict(heldout.zoo), "pairing": list(heldout.pairing),
            "steps": heldout.steps, "eval_every": heldout.eval_every, "grpo": grpo}


def registered_code() -> list[str]:
    """The docstring-free code of each REGISTERED_FUNCTIONS entry, with the design record and the labels."""
    code = [code_without_docs(textwrap.dedent(inspect.getsource(function))) for function in REGISTERED_FUNCTIONS]
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
