"""mrl: Mutual Reinforcement Learning for heterogeneous language models (a reproduction package).

From the bottom up: grpo (the GRPO loss, equal to TRL), thl (tokenizer heterogeneity layer), see (shared
experience exchange), mwra (workers on inline / process / ray backends), config (typed configs), tasks,
rollout (sampling and the RolloutBatch), zoo, probes (the sharing probes and their contract), actor (one policy),
runner (n >= 1 policies together), experiment (cached grids), bandit (the bandit analysis), reports, notebook,
reproduce. docs/architecture.md has the picture.
"""
__version__ = "0.1.0"

from mrl import numerics as _numerics

_numerics.apply()  # before any mrl module imports torch: the same fp32 bits on every x86-64 CPU (mrl.numerics)
