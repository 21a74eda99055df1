"""A Run (mrl.runtime.spec) is the runner's one input: how it executes (backend, tracker, checkpoint interval) may
change without changing its identity or its key; what it computes may not; and a placement of a config built in
Python names the run's own policies."""
import dataclasses

import pytest

from mrl.core.config import ConfigError, PlacementConfig, RunnerConfig, TaskConfig
from mrl.core.probes import probe_config
from mrl.core.run_config import RunConfig
from mrl.runtime.runner import plan_run
from mrl.runtime.spec import Run, Variant, run_identity
from testsupport import TINY_TASK

PATHS = {"A": "models/A-x", "B": "models/B-x"}
"""folders named, never read: a Run's identity and its plan's checks come before any worker loads one"""


def sgt_run(variant: Variant = Variant(), **config) -> Run:
    return Run(RunConfig(task=TaskConfig(**TINY_TASK), **config), PATHS, probe_config("sgt"), 0, 4, variant)


def test_how_a_run_executes_changes_neither_its_identity_nor_its_key():
    run = sgt_run()
    key = run.key()
    moved = run.with_runner(backend="process", report_to="tensorboard", checkpoint_every=2, keep_checkpoints=1)
    assert (moved.runner().backend, moved.runner().report_to) == ("process", "tensorboard")
    assert run_identity(moved) == run_identity(run) and moved.key() == key
    assert dataclasses.replace(moved, config=moved.config).key() == key   # computed afresh, not only carried over


def test_what_a_run_computes_cannot_change_through_with_runner():
    with pytest.raises(ConfigError, match=r"Run.with_runner.*mode.*outside the run's identity.*clock"):
        sgt_run().with_runner(mode="async")
    dropping = sgt_run(runner=RunnerConfig(failure_policy="continue"))   # its identity names the failure policy
    with pytest.raises(ConfigError, match=r"failure_policy"):
        dropping.with_runner(failure_policy="fail")   # the default, which the identity leaves out


def test_a_variant_that_pins_its_backend_keeps_it():
    pinned = sgt_run(Variant(runner={"backend": "process", "mode": "async"}))
    assert pinned.with_runner(backend="inline").runner().backend == "process"
    assert run_identity(pinned)["backend"] == "process" and "backend" not in run_identity(sgt_run())


def test_a_placement_naming_no_policy_of_the_run_is_refused_before_any_worker_starts():
    run = sgt_run(placement={"Z": PlacementConfig(dtype="bfloat16")}, runner=RunnerConfig())
    with pytest.raises(ConfigError, match=r"RunConfig.placement names \['Z'\], which are not policies of this run"):
        plan_run(run)
