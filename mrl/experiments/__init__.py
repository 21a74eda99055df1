"""The notebooks' experiments as data: each module holds one experiment's config class (registered with
mrl.core.config.register_experiment, so a profile's `experiments:` is validated by it) and the functions that expand it
into runs, [(label, Run)]; `run_many` (mrl.experiments.runs) runs, caches and labels them.

    runs.py     Run (config, policies, probe, seed, steps, variant; .key(), .folder(), .label()), Variant,
                run_many, run_one, policy_paths, probe_label, grid_runs
    mwra.py     30_mwra: MwraTimingConfig
    probe.py    40_probe: ProbeGridConfig, probe_runs
    hacpo.py    50_hacpo: HacpoGridConfig (its ablation axes included), hacpo_runs, ablation_runs
    bandit.py   60_bandit: BanditConfig
    heldout.py  70_heldout: HeldoutConfig, heldout_config, heldout_zoos, heldout_runs, marginal_arm_runs, knob_runs
    beyond.py   80_beyond: BeyondConfig, beyond_runs, offline_sources, offline_runs, poison_runs, scaling_runs

Importing this package registers every experiment.
"""
from mrl.experiments import bandit, beyond, hacpo, heldout, mwra, probe  # noqa: F401  (each registers its config)
from mrl.experiments.runs import (HONEST, Run, Variant, grid_runs, panel_labels, policy_paths,  # noqa: F401
                                  probe_label, run_many, run_one, save_run)
