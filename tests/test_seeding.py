"""RL seeds are nested in warm-ups: two warm-ups with the same RL seed draw different prompt streams and sampling
seeds, warm-up 0 keeps the streams its runs drew before the nesting, and every (warm-up, RL seed) pair a profile
names draws its own stream."""
import itertools

import pytest

from mrl.core.probes import probe_config
from mrl.core.seeding import nested_rl_seed, step_generator, step_prompts
from mrl.core.tasks import make_task
from mrl.experiments.heldout import heldout_config
from mrl.experiments.runs import Run
from mrl.profiles import load_profile


def run_on(config, zoo_seed: int, rl_seed: int) -> Run:
    return Run(heldout_config(config, zoo_seed), {"A": "A-x", "B": "B-x"}, probe_config("grpo"), rl_seed, 4)


def test_two_warmups_with_the_same_rl_seed_draw_different_streams():
    config = load_profile("smoke")
    task = make_task(heldout_config(config, 1).task)
    first, second = (run_on(config, zoo, 0).grpo().seed for zoo in (1, 2))
    assert first != second
    prompts = [[p.prompt for p in step_prompts(task, seed, 0, 16)] for seed in (first, second)]
    assert prompts[0] != prompts[1]
    draws = [step_generator(seed, 0, "A").initial_seed() for seed in (first, second)]
    assert draws[0] != draws[1]


def test_warmup_zero_keeps_the_rl_seed_and_its_run_identity():
    config = load_profile("smoke")
    assert run_on(config, 0, 1).grpo().seed == 1
    assert nested_rl_seed(0, 3) == 3 and nested_rl_seed(3, 0) != 0


@pytest.mark.parametrize("profile", ["smoke", "default", "full"])
def test_every_warmup_and_rl_seed_of_a_profile_draws_its_own_stream(profile):
    heldout = load_profile(profile).experiment("heldout")
    pairs = list(itertools.product([*heldout.zoo_seeds, *heldout.replication_zoo_seeds], heldout.seeds))
    if heldout.confirmatory is not None:
        pairs += itertools.product(heldout.confirmatory.zoo_seeds, heldout.confirmatory.seeds)
    seeds = [nested_rl_seed(z, s) for z, s in pairs]
    assert len(set(seeds)) == len(seeds)
