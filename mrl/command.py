"""The `mrl` command's front door: its arguments parsed, and `--help` answered, before anything heavy is imported
(torch, transformers and the runtime load only once a command runs: mrl.cli does the work, mrl.reproduce the
notebooks). The commands and examples: mrl.cli's docstring, which `mrl --help` shows."""
from __future__ import annotations

import argparse
import os
import sys

from mrl.core.choices import BACKENDS, BENCHMARKS, BUILTIN_PROBES, REPORT_TO
from mrl.profiles import PROFILES
USAGE = """The `mrl` command line: reproduce a profile, run one concurrent run, run the benchmarks.

    mrl reproduce --profile smoke                  # every notebook of a profile (python -m mrl.reproduce)
    mrl run --policies A+B --probe sgt --steps 20  # one run: results/runs/<key>/, its models in results/trained/<key>/
    mrl run --config my_run.yaml --seed 1          # the same from a YAML file (flags override it)
    mrl run --policies out/A+B --set grpo.lr=3e-5 --output-dir out2   # a trained folder, a setting, the models kept
    mrl run --resume out2                          # a killed run continues from its newest intact checkpoint
    mrl bench rollout thl                          # benchmarks/bench_<name>.py; no name: all of them
    mrl plan --profile paper --gpus 2x80           # each policy's GPU memory and GPU (mrl.runtime.resources)
    mrl plan --cores 32                            # each notebook's expected wall time on 32 cores, from a fresh clone

`mrl <command> --help` lists each command's options and their allowed values."""


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="mrl", description=USAGE,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = main.add_subparsers(dest="command", required=True, metavar="{reproduce,run,bench,plan}")
    commands.add_parser("reproduce", help="run every notebook of a profile (papermill) and regenerate its outputs",
                        add_help=False)
    run = commands.add_parser("run", help="one concurrent run of the profile's policies under one probe",
                              description="One concurrent run into results/runs/<key>/ (cached: the same run "
                                          "is read back unless --recompute), its trained policies saved as "
                                          "transformers folders into --output-dir (default results/trained/<key>/). "
                                          "Flags override the --config file.")
    run.add_argument("--config", help="a YAML file of these fields (profile, policies, probe, steps, seed, "
                                      "backend, report_to, set)")
    run.add_argument("--profile", choices=PROFILES, help="whose zoo, task and GRPO settings (default smoke)")
    run.add_argument("--policies", help="policies joined by '+', each a profile's policy name, a local transformers "
                                        "folder or a Hub id in the local cache, e.g. A+B, out/A+B (default A+B)")
    run.add_argument("--probe", help=f"a probe name ({', '.join(BUILTIN_PROBES)}, or a user's) or a YAML mapping of one and its knobs, "
                                     "e.g. '{name: sgt, lam: 0.3}' (default grpo)")
    run.add_argument("--steps", type=int, help="RL steps (default: the profile's)")
    run.add_argument("--seed", type=int, help="seed (default 0)")
    run.add_argument("--backend", choices=BACKENDS, help="MWRA backend (default: the profile's)")
    run.add_argument("--report-to", dest="report_to", choices=REPORT_TO, help="live metrics (default none)")
    run.add_argument("--set", action="append", metavar="PATH=VALUE",
                     help="a setting of the profile's config by dotted path, validated as its YAML is, e.g. --set "
                          "grpo.lr=1e-6 --set grpo.group_size=8 --set runner.checkpoint_every=2 (repeatable)")
    run.add_argument("--output-dir", dest="output_dir",
                     help="where the trained policies go, as transformers folders DIR/<policy>/, with the "
                          "checkpoints (DIR/checkpoints/), the tables and request.yaml (default: "
                          "results/trained/<key>/)")
    run.add_argument("--resume", metavar="DIR",
                     help="continue the run in DIR (an earlier --output-dir) from its newest intact checkpoint; a "
                          "checkpoint of another experiment is refused")
    run.add_argument("--recompute", action="store_true",
                     help="run again even when the cache holds the run, discarding earlier checkpoints")
    bench = commands.add_parser("bench", help="run benchmarks/bench_<name>.py (all when no name is given)")
    bench.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run, from {list(BENCHMARKS)}")
    plan = commands.add_parser("plan", help="the GPU memory of each policy of a profile and the GPU that holds it, "
                                            "or (--cores, --ray) each notebook's expected wall time on a CPU",
                               description="Each policy's weights, gradients, Adam states, frozen models, KV "
                                           "cache and activations (GB, estimated from its architecture and the "
                                           "profile's batch and placement) and its GPU; a plan that does not fit "
                                           "is refused, naming the policy and the shortfall. With --cores or --ray: "
                                           "a CPU profile's expected wall time per notebook from a fresh clone, its "
                                           "critical path and the cores beyond which it gets no faster, from the "
                                           "committed per-job costs (mrl.reports.wall_time).")
    plan.add_argument("--profile", choices=PROFILES,
                      help="a profile with pretrained policies (default paper), or with --cores/--ray a CPU profile "
                           "(default default)")
    plan.add_argument("--cores", type=int, metavar="N", help="plan the profile's wall time on N cores")
    plan.add_argument("--ray", metavar="ADDRESS", help="plan the profile's wall time on the CPUs of the Ray cluster "
                                                       "at ADDRESS (read from Ray)")
    plan.add_argument("--gpus", default="1x80", help="GB per GPU: NxGB (2x80) or GB,GB,... (default 1x80)")
    plan.add_argument("--prompt-tokens", dest="prompt_tokens", type=int, default=256,
                      help="tokens of a prompt with its chat template (default 256)")
    plan.add_argument("--teachers", action="store_true", help="plan for a probe with a teacher (trrd)")
    plan.add_argument("--pairing", help="plan only these policies, e.g. A+B (default: all the profile's)")
    plan.add_argument("--trainer", choices=("runner", "trl"), default="runner",
                      help="mrl's runner (default) or TRL's GRPOTrainer, one trainer per policy (docs/trl.md)")
    plan.add_argument("--vllm", action="store_true", help="with --trainer trl: sampling by a colocated vLLM engine")
    plan.add_argument("--vllm-share", dest="vllm_share", type=float, default=0.3,
                      help="with --vllm: the share of a GPU vLLM takes (TRL's vllm_gpu_memory_utilization, 0.3)")
    return main


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments (light), then run the command: `mrl reproduce` through mrl.reproduce, the others through
    mrl.cli.COMMANDS; a bad setting or a missing folder exits 2 with its message."""
    argv = sys.argv[1:] if argv is None else list(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    if argv[:1] == ["reproduce"]:
        from mrl import reproduce
        return reproduce.main(argv[1:], prog="mrl reproduce")
    command_line = parser()
    args = command_line.parse_args(argv)
    if args.command == "bench" and set(args.names) - set(BENCHMARKS):
        command_line.error(f"bench: {sorted(set(args.names) - set(BENCHMARKS))} not allowed; expected names from "
                           f"{list(BENCHMARKS)}")
    from mrl import cli
    from mrl.core.validation import ConfigError
    try:
        return cli.COMMANDS[args.command](args)
    except (ConfigError, FileNotFoundError) as err:
        command_line.exit(2, f"mrl {args.command}: error: {err}\n")


if __name__ == "__main__":
    sys.exit(main())
