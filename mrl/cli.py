"""The `mrl` command line: reproduce a profile, run one concurrent run, run the benchmarks.

    mrl reproduce --profile smoke                  # every notebook of a profile (python -m mrl.reproduce)
    mrl run --policies A+B --probe sgt --steps 20  # one run of the profile's zoo into results/runs/<key>/
    mrl run --config my_run.yaml --seed 1          # the same from a YAML file (flags override it)
    mrl bench rollout thl                          # benchmarks/bench_<name>.py; no name: all of them
    mrl plan --profile paper --gpus 2x80           # each policy's GPU memory and GPU (mrl.resources)

`mrl <command> --help` lists each command's options and their allowed values. A run's steps, evaluations and
events are read back with `mrl.results.load_runs()`.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import yaml

from typing import Literal

from mrl.experiments import Run, policy_paths, run_one
from mrl.mwra import BACKENDS
from mrl.probes import PROBES, as_probe_config
from mrl.profiles import PROFILES, load_profile
from mrl.tracking import REPORT_TO
from mrl.validation import ConfigError, Count, PositiveInt, Str, config_dataclass

BENCHMARKS = ("grpo_step", "rollout", "thl", "probes", "packing", "warmup", "mwra")
"""benchmarks/bench_<name>.py, in the order `make bench` runs them"""


@config_dataclass
class RunRequest:
    """One concurrent run, as `mrl run` takes it from a YAML file or its flags."""

    profile: Literal[PROFILES] = "smoke"
    """the profile whose zoo, task and GRPO settings the run uses: smoke, default or paper"""
    policies: Str = "A+B"
    """the policies trained together, their names joined by '+' (from the profile's zoo)"""
    probe: Str | dict = "grpo"
    """a registered probe name, or a mapping {name: ..., knob: value} (e.g. {name: sgt, lam: 0.3})"""
    steps: PositiveInt | None = None
    """RL steps (default: the profile's grpo.steps)"""
    seed: Count = 0
    backend: Literal[BACKENDS] | None = None
    """inline, process or ray (default: the profile's runner.backend)"""
    report_to: Literal[REPORT_TO] = "none"
    """live metrics: none, tensorboard or trackio"""


def run_request(request: RunRequest, recompute: bool = False, progress: bool = True):
    """Run (or read from the cache) one run; returns (its cache folder, steps, evals)."""
    config = load_profile(request.profile)
    names = request.policies.split("+")
    known = list(config.policies) if config.policies else [f.name for f in config.zoo.families] if config.zoo else []
    unknown = [name for name in names if name not in known]
    if unknown or len(set(names)) != len(names):
        raise ConfigError(f"RunRequest.policies = {request.policies!r} is not allowed; expected distinct names of "
                          f"the {request.profile} profile's policies {known} joined by '+'")
    paths = {name: path for name, path in policy_paths(config, progress).items() if name in names}
    run = Run(config, paths, as_probe_config(request.probe), request.seed, request.steps or config.grpo.steps)
    steps_df, evals_df = run_one(run, backend=request.backend, cache=not recompute, progress=progress,
                                 report_to=request.report_to)
    return run.folder(), steps_df, evals_df


def _run(args) -> int:
    values = yaml.safe_load(Path(args.config).read_text()) if args.config else {}
    if not isinstance(values, dict):
        raise SystemExit(f"mrl run: {args.config} must hold a mapping of RunRequest fields")
    for name in ("profile", "policies", "probe", "steps", "seed", "backend", "report_to"):
        value = getattr(args, name)
        if value is not None:
            values[name] = yaml.safe_load(value) if name == "probe" and value.lstrip().startswith("{") else value
    folder, _, evals = run_request(RunRequest(**values), recompute=args.recompute)
    last = evals[evals.step == evals.step.max()]
    print(last.pivot_table(index="policy", columns=["split", "skill"], values="accuracy").round(3).to_string())
    print(f"[mrl run] steps, evals and run.json in {folder} (mrl.results.load_runs() reads every run)")
    return 0


def _bench(args) -> int:
    from mrl.results import repo_root

    folder = repo_root() / "benchmarks"
    if not folder.is_dir():
        raise SystemExit(f"mrl bench: no benchmarks/ folder under {repo_root()}: run it from an mrl checkout")
    for name in args.names or BENCHMARKS:
        extra = ["--no-skip"] if name == "probes" and not args.names else []
        print(f"[mrl bench] {name}", flush=True)
        done = subprocess.run([sys.executable, str(folder / f"bench_{name}.py"), *extra])
        if done.returncode:
            return done.returncode
    return 0


def _plan(args) -> int:
    from mrl.resources import parse_gpus, plan_resources, plan_trl

    config, policies = load_profile(args.profile), args.pairing.split("+") if args.pairing else None
    if args.trainer == "trl":
        plan = plan_trl(config, parse_gpus(args.gpus), use_vllm=args.vllm, vllm_share=args.vllm_share,
                        prompt_tokens=args.prompt_tokens, policies=policies)
    else:
        plan = plan_resources(config, parse_gpus(args.gpus), prompt_tokens=args.prompt_tokens,
                              teachers=args.teachers, policies=policies)
    print(plan.round(2).to_string(index=False))
    print(f"[mrl plan] GB per policy on {args.gpus} GB GPUs (10% of each reserved); estimates, see mrl/resources.py")
    return 0


def parser() -> argparse.ArgumentParser:
    main = argparse.ArgumentParser(prog="mrl", description=__doc__,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = main.add_subparsers(dest="command", required=True, metavar="{reproduce,run,bench,plan}")
    commands.add_parser("reproduce", help="run every notebook of a profile (papermill) and regenerate its outputs",
                        add_help=False)
    run = commands.add_parser("run", help="one concurrent run of the profile's policies under one probe",
                              description="One concurrent run into results/runs/<key>/ (cached: the same run "
                                          "is read back unless --recompute). Flags override the --config file.")
    run.add_argument("--config", help="a YAML file of these fields (profile, policies, probe, steps, seed, "
                                      "backend, report_to)")
    run.add_argument("--profile", choices=PROFILES, help="whose zoo, task and GRPO settings (default smoke)")
    run.add_argument("--policies", help="policy names joined by '+', e.g. A+B (default A+B)")
    run.add_argument("--probe", help=f"a probe name ({', '.join(PROBES)}) or a YAML mapping of one and its knobs, "
                                     "e.g. '{name: sgt, lam: 0.3}' (default grpo)")
    run.add_argument("--steps", type=int, help="RL steps (default: the profile's)")
    run.add_argument("--seed", type=int, help="seed (default 0)")
    run.add_argument("--backend", choices=BACKENDS, help="MWRA backend (default: the profile's)")
    run.add_argument("--report-to", dest="report_to", choices=REPORT_TO, help="live metrics (default none)")
    run.add_argument("--recompute", action="store_true", help="run again even when the cache holds the run")
    bench = commands.add_parser("bench", help="run benchmarks/bench_<name>.py (all when no name is given)")
    bench.add_argument("names", nargs="*", metavar="NAME", help=f"benchmarks to run, from {list(BENCHMARKS)}")
    plan = commands.add_parser("plan", help="the GPU memory of each policy of a profile and the GPU that holds it",
                               description="Each policy's weights, gradients, Adam states, frozen models, KV "
                                           "cache and activations (GB, estimated from its architecture and the "
                                           "profile's batch and placement) and its GPU; a plan that does not fit "
                                           "is refused, naming the policy and the shortfall.")
    plan.add_argument("--profile", choices=PROFILES, default="paper", help="a profile with pretrained policies")
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
    argv = sys.argv[1:] if argv is None else list(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    if argv[:1] == ["reproduce"]:
        from mrl import reproduce

        return reproduce.main(argv[1:], prog="mrl reproduce")
    cli = parser()
    args = cli.parse_args(argv)
    if args.command == "bench" and set(args.names) - set(BENCHMARKS):
        cli.error(f"bench: {sorted(set(args.names) - set(BENCHMARKS))} not allowed; expected names from "
                  f"{list(BENCHMARKS)}")
    try:
        return {"run": _run, "bench": _bench, "plan": _plan}[args.command](args)
    except (ConfigError, FileNotFoundError) as err:
        cli.exit(2, f"mrl {args.command}: error: {err}\n")


if __name__ == "__main__":
    sys.exit(main())
