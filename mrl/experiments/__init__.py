"""The notebooks' experiments as data: each experiment's config class is in mrl.core.grids (RunConfig validates a
profile's `experiments:` by it); each module here holds the functions that expand one into runs, [(label, Run)];
`run_many` (mrl.experiments.runs) runs, caches and labels them.

    runs.py     run_many, run_one, policy_paths, probe_label, grid_runs; re-exports Run (config, policies, probe,
                seed, steps, variant; .key(), .folder(), .label()) and Variant from mrl.runtime.spec
    probe.py    40_probe: probe_runs (30_mwra and 60_bandit need no runs of their own here)
    hacpo.py    50_hacpo: hacpo_runs, ablation_runs
    heldout.py  70_heldout: heldout_config, heldout_zoos, heldout_runs, marginal_arm_runs, knob_runs
    beyond.py   80_beyond: beyond_runs, offline_sources, offline_runs, poison_runs, scaling_runs
"""
from mrl.experiments.runs import (HONEST, Run, Variant, grid_runs, panel_labels, policy_paths,  # noqa: F401
                                  probe_label, run_many, run_one, save_run)
