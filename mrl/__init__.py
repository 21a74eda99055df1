"""mrl: Mutual Reinforcement Learning for heterogeneous language models (a reproduction package).

Modules: grpo (GRPO core, equal to TRL), tasks (verifiable tasks), zoo (tiny heterogeneous models),
policy (sampling and updates), runner (training loops), evaluation, reports, results, reproduce.
"""
__version__ = "0.1.0"
