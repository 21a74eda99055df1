"""What the canonical tokenization drops from a peer's probability, and what the marginal costs, on the held-out
pair at its warm-up and after training: 80_beyond's marginal section without the notebook (docs/marginal.md).

A thin caller of mrl.experiments.beyond.run_marginal_gap (the measurement, mrl.experiments.marginal_gap) and
mrl.reports.marginal's tables: prints the gap, ratio and cost tables as markdown; writes nothing but the trained
policies run_marginal_gap needs (results/trained/<key>/, when missing).

    .venv/bin/python benchmarks/marginal_gap.py [--profile default] [--threads 1]
    .venv/bin/python benchmarks/marginal_gap.py --smoke    # the smoke profile's pair, a tiny warm-up, 1 RL step
"""
import argparse
import dataclasses
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
import mrl  # noqa: E402, F401  (first: the numerics contract, mrl.numerics, before torch and numpy)

from mrl.experiments.beyond import run_marginal_gap  # noqa: E402
from mrl.experiments.marginal_gap import stepwise_bounds  # noqa: E402
from mrl.core.probes import probe_config  # noqa: E402
from mrl.profiles import load_profile  # noqa: E402
from mrl.reports.marginal import cost_table, gap_table, ratio_table  # noqa: E402
from mrl.core.seeding import torch_threads  # noqa: E402
from smoke import add_smoke_flag, tiny_grpo, tiny_task, tiny_zoo  # noqa: E402


def tiny_marginal(config):
    """The profile with the held-out experiment tiny (its test split, its zoo, 1 RL step) and 1 prompt per skill."""
    heldout = config.heldout
    heldout = dataclasses.replace(heldout, task=tiny_task(heldout.task), zoo=tiny_zoo(heldout.zoo), steps=1)
    beyond = dataclasses.replace(config.beyond, marginal_prompts=1)
    return dataclasses.replace(config, grpo=tiny_grpo(config.grpo),
                               experiments={**config.experiments, "heldout": heldout, "beyond": beyond})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", default="default")
    parser.add_argument("--threads", type=int, default=1)
    add_smoke_flag(parser)
    args = parser.parse_args()
    if args.smoke:
        args.profile, args.threads = "smoke", 1
    config = load_profile(args.profile)
    if args.smoke:
        config = tiny_marginal(config)
    with torch_threads(args.threads):
        rows, cost = run_marginal_gap(config)
    bounds = stepwise_bounds(probe_config("hacpo", minibatches=4))   # the ledger's HACPO arm
    print(f"profile {args.profile}, {config.experiment('beyond').marginal_prompts} test prompts per skill, "
          f"{args.threads} thread(s)\n")
    for title, table in (("Gap, log marginal - log canonical (nats)", gap_table(rows)),
                         ("HACPO's log s (ratio thl) by definition", ratio_table(rows, bounds)),
                         ("Cost: CPU milliseconds and ratio, measured in one run", cost_table(cost))):
        print(f"{title}\n\n{table.to_markdown(index=False, floatfmt='.4f')}\n")


if __name__ == "__main__":
    main()
