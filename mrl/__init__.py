"""mrl: Mutual Reinforcement Learning for heterogeneous language models (a reproduction package).

The folders are the layers, each importing only those below it (docs/architecture.md has the picture):
    mrl/core/         the algorithm: settings, GRPO, THL, SEE, tasks, the rollout's record, the probes, the bandit
    mrl/runtime/      running it: sampling, the actor, the runner and its backends, placement, checkpoints, the zoo
    mrl/experiments/  the claims as data: cached grids of runs, one module per experiment
    mrl/integrations/ TRL's GRPOTrainer and the file exchange between separate trainers
    mrl/reports/      tables, figures and the sentences that quote them
and beside them the ground every layer may import (paths, numerics: the fp32 contract, applied first; fingerprint:
the code in every cache key) and the front door (profiles, notebook: a notebook's first cell, cli, reproduce).
"""
__version__ = "0.1.0"

from mrl import numerics as _numerics

_numerics.apply()  # before any mrl module imports torch: the same fp32 bits on every x86-64 CPU (mrl.numerics)
