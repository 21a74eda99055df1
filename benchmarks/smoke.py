"""`--smoke`: a benchmark at a tiny size, in seconds, so that CI runs every script (tests/test_benchmarks.py).

A smoke run goes through the script's whole code path (its zoo, runs, engines and printed table) on sizes that
measure nothing: its figures mean nothing, only that they are printed. Imported by the scripts that build a zoo or
load a profile; the others shrink their own sizes under their --smoke flag.
"""
from __future__ import annotations

import dataclasses

SMOKE_HELP = "a tiny size, seconds not minutes: checks that the script runs and prints its figure (meaningless)"

WARMUP_STEPS, WARMUP_BATCH = 2, 8
"""the smoke zoo's warm-up: a few supervised steps of a few examples (the models stay near random)"""

PROMPTS, GROUP, NEW_TOKENS = 2, 2, 4
"""the smoke GRPO step: prompts per step x completions per prompt, of at most NEW_TOKENS tokens"""

TEST_PER_SKILL = 4
"""the smoke task's test prompts per skill: what a run's final greedy evaluation answers"""


def add_smoke_flag(parser) -> None:
    """The --smoke flag, with its help."""
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)


def tiny_zoo(zoo):
    """A ZooConfig's families warmed up WARMUP_STEPS steps of WARMUP_BATCH examples, built inline (one worker)."""
    warmup = dataclasses.replace(zoo.warmup, steps=WARMUP_STEPS, batch_size=WARMUP_BATCH, lr_warmup_steps=1)
    return dataclasses.replace(zoo, warmup=warmup, workers=1)


def tiny_grpo(grpo):
    """A GrpoConfig's step at PROMPTS x GROUP completions of at most NEW_TOKENS tokens."""
    return dataclasses.replace(grpo, prompts_per_step=PROMPTS, group_size=GROUP, max_new_tokens=NEW_TOKENS)


def tiny_task(task):
    """A TaskConfig with TEST_PER_SKILL test prompts per skill (the evaluation at a run's last step)."""
    return dataclasses.replace(task, test_per_skill=TEST_PER_SKILL)


def tiny_profile(config):
    """A profile (RunConfig) with its zoo, its GRPO step and its test split tiny: same families, same code path."""
    return dataclasses.replace(config, task=tiny_task(config.task), zoo=tiny_zoo(config.zoo),
                               grpo=tiny_grpo(config.grpo))
