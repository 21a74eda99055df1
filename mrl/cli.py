"""What the `mrl` commands do, once mrl.command has parsed their arguments (its USAGE lists the commands and
examples): `mrl run` (RunRequest, run_request: one concurrent run, cached, its trained policies saved), `mrl bench`
and `mrl plan`. A run's steps, evaluations and events are read back with `mrl.runtime.results.load_runs()`; its
trained policies are transformers folders (`AutoModelForCausalLM.from_pretrained(out/A)`, mrl.runtime.saving).
"""
from __future__ import annotations

import dataclasses
import re
import shutil
import subprocess
import sys
import types
import typing
from dataclasses import field
from pathlib import Path
from typing import Annotated, Literal

import yaml

from mrl.core.choices import BACKENDS, BENCHMARKS, REPORT_TO
from mrl.core.probes import as_probe_config
from mrl.core.run_config import RunConfig
from mrl.core.validation import ConfigError, Count, PositiveInt, StrictLoader, Str, config_dataclass, to_dict
from mrl.experiments import Run, policy_paths, run_one
from mrl.experiments.runs import trained_folder
from mrl.paths import repo_root
from mrl.profiles import PROFILES, load_profile
from mrl.runtime.checkpoint import latest as latest_checkpoint
from mrl.runtime.resources import parse_gpus, plan_resources, plan_trl



@config_dataclass
class RunRequest:
    """One concurrent run, as `mrl run` takes it from a YAML file or its flags."""

    profile: Literal[PROFILES] = "smoke"
    """the profile whose zoo, task and GRPO settings the run uses: smoke, default or paper"""
    policies: Str = "A+B"
    """the policies trained together, joined by '+': each a name of the profile's policies (its zoo, or the paper
    profile's checkpoints), a local transformers folder (named by its folder's name) or a Hub id in the local cache
    (named by the part after '/'), e.g. A+B, out/A+B or Qwen/Qwen2.5-0.5B-Instruct+A"""
    probe: Str | dict = "grpo"
    """a registered probe name, or a mapping {name: ..., knob: value} (e.g. {name: sgt, lam: 0.3})"""
    steps: PositiveInt | None = None
    """RL steps (default: the profile's grpo.steps)"""
    seed: Count | None = None
    """RL seed (default: the profile's grpo.seed)"""
    backend: Literal[BACKENDS] | None = None
    """inline, process or ray (default: the profile's runner.backend)"""
    report_to: Literal[REPORT_TO] = "none"
    """live metrics: none, tensorboard, trackio or wandb"""
    set: list[Str] = field(default_factory=list)
    """settings of the profile's config by dotted path, e.g. [grpo.lr=1e-6, grpo.group_size=8,
    runner.checkpoint_every=2], each validated as the profile's YAML is (set_settings)"""


SETTING = re.compile(r"^(?P<path>[A-Za-z_][\w+]*(\.[\w+]+)*)=(?P<value>.*)$", re.DOTALL)
HUB_ID = re.compile(r"^[\w.-]+/[\w.-]+$")
REQUEST = "request.yaml"
"""the RunRequest a run's output folder records, which `mrl run --resume` reads back"""


def field_type(cls: type, keys: list[str]):
    """The type at a dotted path below a config class (through nested configs and mappings' values), without
    Annotated and Optional; None where the path names no field."""
    tp = cls
    for key in keys:
        tp = _bare(tp)
        if dataclasses.is_dataclass(tp):
            tp = typing.get_type_hints(tp, include_extras=True).get(key)
        elif typing.get_origin(tp) is dict:
            tp = typing.get_args(tp)[1]
        else:
            return None
    return _bare(tp)


def _bare(tp):
    while True:
        if typing.get_origin(tp) is Annotated:
            tp = tp.__origin__
        elif typing.get_origin(tp) in (typing.Union, types.UnionType) and type(None) in typing.get_args(tp) \
                and len(typing.get_args(tp)) == 2:
            tp = next(arg for arg in typing.get_args(tp) if arg is not type(None))
        else:
            return tp


def setting_value(text: str, tp):
    """A --set value as YAML, read for the field's type: a number field takes 1e-6 (YAML 1.1 reads it as text), a
    text field keeps what was typed (task.instruction=42 is the text '42')."""
    try:
        value = yaml.load(text, Loader=StrictLoader)
    except yaml.YAMLError as err:
        raise ConfigError(f"{text!r} is not valid YAML: {err}") from None
    if tp is float and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return value
    return text if tp is str and value is not None and not isinstance(value, str) else value


def set_settings(config: RunConfig, assignments: list[str]) -> RunConfig:
    """The profile's config with `path=value` settings applied (grpo.lr=1e-6, placement.A.dtype=bfloat16), then
    validated whole as a profile's YAML is: a bad value or an unknown field raises ConfigError naming the field and
    what is allowed (RunConfig.grpo.lr = 'abc' is not allowed; expected a number)."""
    if not assignments:
        return config
    values = to_dict(config)
    for assignment in assignments:
        match = SETTING.match(assignment)
        if match is None:
            raise ConfigError(f"--set {assignment!r} is not allowed; expected a dotted path into the profile's "
                              f"config and a value, e.g. grpo.lr=1e-6")
        keys, node = match["path"].split("."), values
        for depth, key in enumerate(keys[:-1], 1):
            kind = field_type(RunConfig, keys[:depth])
            if kind is None or not (dataclasses.is_dataclass(kind) or typing.get_origin(kind) is dict
                                    or isinstance(node.get(key), dict)):
                owner = field_type(RunConfig, keys[:depth - 1])
                allowed = sorted(f.name for f in dataclasses.fields(owner)) if dataclasses.is_dataclass(owner) \
                    else "the keys of a mapping"
                raise ConfigError(f"--set {assignment}: RunConfig.{'.'.join(keys[:depth])} is not a group of "
                                  f"settings; allowed keys at RunConfig{''.join('.' + k for k in keys[:depth - 1])} "
                                  f"are {allowed}")
            if not isinstance(node.get(key), dict):
                node[key] = {}
            node = node[key]
        node[keys[-1]] = setting_value(match["value"], field_type(RunConfig, keys))
    return RunConfig(**values)


def resolve_policies(spec: str, config: RunConfig, profile: str, progress: bool = True) -> tuple[dict, bool]:
    """({name: checkpoint folder}, whether the run cache may be read) of RunRequest.policies: a profile's policy by
    name, a local transformers folder (named by its folder), or a Hub id loaded from the local cache (named by the
    part after '/'). A local folder's name does not identify its weights (out/A today and after another run), so a
    run of one is always computed."""
    known = list(config.policies) if config.policies else [f.name for f in config.zoo.families] if config.zoo else []
    entries, paths, cacheable = spec.split("+"), {}, True
    unknown = [e for e in entries if e not in known and not Path(e).is_dir() and not HUB_ID.match(e)]
    if unknown:   # before the zoo is built (minutes on a CPU)
        raise ConfigError(f"RunRequest.policies = {spec!r} is not allowed: {unknown[0]!r} is neither one of the "
                          f"{profile} profile's policies {known}, nor a local folder, nor a Hub id (org/name)")
    zoo = policy_paths(config, progress) if set(entries) & set(known) else {}
    for entry in entries:
        if entry in known:
            name, path = entry, zoo[entry]
        elif Path(entry).is_dir():
            name, path, cacheable = Path(entry).resolve().name, str(Path(entry).resolve()), False
            if not (Path(path) / "config.json").is_file():
                raise ConfigError(f"RunRequest.policies: the folder {entry!r} holds no config.json; expected a "
                                  f"transformers checkpoint folder (save_pretrained's)")
        else:
            name, path = entry.split("/")[-1], hub_snapshot(entry)
        if name in paths:
            raise ConfigError(f"RunRequest.policies = {spec!r} is not allowed: two policies are named {name!r}; "
                              f"expected distinct names joined by '+'")
        paths[name] = path
    return paths, cacheable


def hub_snapshot(repo_id: str) -> str:
    """The local folder of a Hub model in the Hugging Face cache; ConfigError naming it when it is not there (runs
    are offline: HF_HUB_OFFLINE)."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return snapshot_download(repo_id, local_files_only=True)
    except (LocalEntryNotFoundError, OSError, ValueError) as err:
        raise ConfigError(f"RunRequest.policies: the Hub model {repo_id!r} is not in the local Hugging Face cache "
                          f"({type(err).__name__}); download it first (`hf download {repo_id}`) or pass its "
                          f"local folder") from None


def run_request(request: RunRequest, recompute: bool = False, progress: bool = True,
                output_dir: str | Path | None = None, resume: bool = False):
    """Run one run (or read it from the cache); returns (the folder of its trained policies, steps, evals).

    The run leaves its trained policies as transformers folders <out>/<policy>/, its tables and request.yaml (what
    --resume reads back) in <out>, and, every runner.checkpoint_every steps, checkpoints in <out>/checkpoints/;
    <out> is output_dir, else results/trained/<key>/. Without an output_dir the run cache is read when it holds
    the run and <out> its policies. resume: continue from the newest intact checkpoint in <out> (a different
    experiment's is refused); recompute: start over, removing earlier checkpoints."""
    config = set_settings(load_profile(request.profile), request.set)
    paths, cacheable = resolve_policies(request.policies, config, request.profile, progress)
    seed = config.grpo.seed if request.seed is None else request.seed
    run = Run(config, paths, as_probe_config(request.probe), seed, request.steps or config.grpo.steps)
    out = Path(output_dir) if output_dir is not None else trained_folder(run)
    saved = all((out / name / "config.json").is_file() for name in paths)
    if output_dir is None and cacheable and saved and not recompute and not resume and run.is_cached():
        steps_df, evals_df = run_one(run, progress=progress)
        return out, steps_df, evals_df
    if resume and latest_checkpoint(out / "checkpoints") is None:
        raise ConfigError(f"--resume {out}: no checkpoint in {out}/checkpoints (the run writes one every "
                          f"runner.checkpoint_every steps: --set runner.checkpoint_every=N)")
    if recompute:
        shutil.rmtree(out / "checkpoints", ignore_errors=True)
    elif not resume and latest_checkpoint(out / "checkpoints") is not None:
        raise ConfigError(f"{out}/checkpoints holds an earlier run's checkpoints: --resume {out} continues it, "
                          f"--recompute starts over")
    out.mkdir(parents=True, exist_ok=True)
    recorded = dataclasses.replace(request, policies="+".join(
        entry if entry in paths else str(Path(entry).resolve()) if Path(entry).is_dir() else entry
        for entry in request.policies.split("+")))
    (out / REQUEST).write_text(yaml.safe_dump(to_dict(recorded), sort_keys=False))
    steps_df, evals_df = run_one(run, backend=request.backend, progress=progress, report_to=request.report_to,
                                 output_dir=out, resume=resume)
    return out, steps_df, evals_df


def _run(args) -> int:
    values = yaml.safe_load(Path(args.config).read_text()) if args.config else {}
    if not isinstance(values, dict):
        raise SystemExit(f"mrl run: {args.config} must hold a mapping of RunRequest fields")
    if args.resume:
        if args.output_dir and Path(args.output_dir).resolve() != Path(args.resume).resolve():
            raise ConfigError(f"--resume {args.resume} continues the run in that folder; --output-dir "
                              f"{args.output_dir} names another")
        recorded = Path(args.resume) / REQUEST
        if not recorded.is_file():
            raise FileNotFoundError(f"--resume {args.resume}: no {REQUEST} there; expected the --output-dir of an "
                                    f"`mrl run`")
        values = {**yaml.safe_load(recorded.read_text()), **values}
    for name in ("profile", "policies", "probe", "steps", "seed", "backend", "report_to"):
        value = getattr(args, name)
        if value is not None:
            values[name] = yaml.safe_load(value) if name == "probe" and value.lstrip().startswith("{") else value
    values["set"] = [*values.get("set", []), *(args.set or [])]
    folder, _, evals = run_request(RunRequest(**values), recompute=args.recompute,
                                   output_dir=args.resume or args.output_dir, resume=bool(args.resume))
    last = evals[evals.step == evals.step.max()]
    print(last.pivot_table(index="policy", columns=["split", "skill"], values="accuracy").round(3).to_string())
    names = sorted(set(evals.policy))
    print(f"[mrl run] trained policies in {', '.join(str(folder / name) for name in names)} "
          f"(AutoModelForCausalLM.from_pretrained loads each); steps.csv, evals.csv and run.json beside them "
          f"(mrl.runtime.results.load_runs() reads every run)")
    return 0


def _bench(args) -> int:
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
    if args.cores is not None or args.ray is not None:
        return _plan_cores(args)
    config, policies = load_profile(args.profile or "paper"), args.pairing.split("+") if args.pairing else None
    if args.trainer == "trl":
        plan = plan_trl(config, parse_gpus(args.gpus), use_vllm=args.vllm, vllm_share=args.vllm_share,
                        prompt_tokens=args.prompt_tokens, policies=policies)
    else:
        plan = plan_resources(config, parse_gpus(args.gpus), prompt_tokens=args.prompt_tokens,
                              teachers=args.teachers, policies=policies)
    print(plan.round(2).to_string(index=False))
    print(f"[mrl plan] GB per policy on {args.gpus} GB GPUs (10% of each reserved); "
          "estimates, see mrl/runtime/resources.py")
    return 0


def _plan_cores(args) -> int:
    """`mrl plan --cores N` or `--ray ADDRESS`: each notebook's expected wall time (mrl.reports.wall_time)."""
    from mrl.reports.wall_time import binding, profile_plan

    if args.cores is not None and args.ray is not None:
        raise ConfigError("mrl plan: --cores and --ray are not allowed together; --ray reads the cluster's CPUs")
    if args.cores is not None and args.cores < 1:
        raise ConfigError(f"mrl plan: --cores {args.cores} is not allowed; expected an integer >= 1")
    profile = args.profile or "default"
    if load_profile(profile).zoo is None:
        raise ConfigError(f"mrl plan --cores: the {profile} profile has pretrained policies, not a CPU zoo; expected "
                          f"a CPU profile (smoke, default, full)")
    cores = args.cores if args.ray is None else cluster_cpus(args.ray)
    table, costs = profile_plan(profile, (cores,))
    shown = table.drop(columns=["caps"]).assign(**{f"bound at {cores} cores": [
        getattr(kind, "value", "") for kind in table[f"bound at {cores} cores"]]})
    print(shown.round(1).to_string(index=False))
    total = table.iloc[-1]
    where = f"the Ray cluster at {args.ray} ({cores} CPUs)" if args.ray else f"{cores} cores"
    notebook, share, kind = binding(table, cores)
    print(f"[mrl plan] the {profile} profile from a fresh clone on {where}: {total[f'{cores} cores (min)']:.0f} "
          f"minutes expected, bound by {notebook} ({share:.0%} of it; {kind.value}); its critical path "
          f"{total['critical path (min)']:.0f} minutes (the longest job of each phase, phase after phase); no notebook "
          f"gets faster beyond {int(total['no faster beyond (cores)'])} cores. "
          f"Per-job costs measured on {costs.machine} (docs/measurements/arm_costs.json), one core each; the "
          f"notebooks' own work beside their jobs is not counted (docs/performance.md, The plan before the run)")
    if costs.profile != profile:
        print(f"[mrl plan] the costs were measured on the {costs.profile} profile's jobs: the {profile} profile's "
              f"models, batches and steps differ, so its plan is an estimate of their order only")
    return 0


def cluster_cpus(address: str) -> int:
    """The CPUs of the Ray cluster at `address` (joined as a driver, mrl.runtime.cluster.connect)."""
    import ray

    from mrl.runtime.cluster import connect

    connect(address)
    return int(ray.cluster_resources().get("CPU", 0))


COMMANDS = {"run": _run, "bench": _bench, "plan": _plan}
"""what `mrl <command>` runs once mrl.command has parsed its arguments"""

