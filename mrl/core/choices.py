"""The allowed values of the settings that name things, in a module that imports nothing (so that `mrl --help` can
offer them without importing torch): the MWRA backends, the trackers, the built-in probes. mrl.core.config and
mrl.core.probes hold the same values (tests/test_cli.py checks the probes against the registry)."""

BACKENDS = ("inline", "process", "ray")
"""MWRA's backends (mrl.runtime.mwra.make_backend): actors in this process, one worker process each, one Ray actor
each"""
REPORT_TO = ("none", "tensorboard", "trackio", "wandb")
"""the trackers that can receive a run's live metrics (mrl.runtime.tracking.make_reporters)"""
BUILTIN_PROBES = ("graft", "grpo", "gspo", "gspo_x2", "hacpo", "naive", "prp", "prp_naive", "sgt", "trrd", "xgrpo")
"""the probes the package registers (mrl/core/probes/); a user's join them through register_probe or the mrl.probes
entry-point group"""
