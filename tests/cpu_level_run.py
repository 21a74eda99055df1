"""One run of tests/test_numerics.py's cross-level check, in a process of its own (the numerics are fixed per process).

Warms up the smoke profile's A and B (their architectures, tokenizers, sizes and fp32 warm-up, fewer steps) into
OUT/zoo, runs SGT between them for a few steps, and prints one JSON line: the numerics state, a sha256 of every
checkpoint file and of the run's metrics (step rows without their timings, evals).

    python tests/cpu_level_run.py OUT
"""
import dataclasses
import hashlib
import json
import sys
from pathlib import Path

import mrl  # noqa: F401  (the numerics contract first, as every mrl process)
from mrl.core.config import RunnerConfig
from mrl.core.probes import probe_config
from mrl.numerics import state
from mrl.profiles import load_profile
from mrl.runtime.runner import run_concurrent
from mrl.runtime.spec import Run
from mrl.runtime.zoo import build_zoo

WARMUP_STEPS, RL_STEPS = 40, 4


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def main(out: Path) -> None:
    config = load_profile("smoke")
    zoo_cfg = dataclasses.replace(config.zoo, families=[f for f in config.zoo.families if f.name in ("A", "B")],
                                  warmup=dataclasses.replace(config.zoo.warmup, steps=WARMUP_STEPS, lr_warmup_steps=10),
                                  workers=2)
    zoo = build_zoo(config.task, zoo_cfg, root=out / "zoo", progress=False)
    checkpoints = {f"{name}/{file.name}": digest(file.read_bytes()) for name, policy in sorted(zoo.items())
                   for file in sorted(policy.path.iterdir()) if file.suffix in (".safetensors", ".json")
                   and file.name != "zoo.json"}
    run = Run(dataclasses.replace(config, runner=RunnerConfig()), {name: str(policy.path) for name, policy in zoo.items()},
              probe_config("sgt"), config.grpo.seed, RL_STEPS)
    record = run_concurrent(run, progress=False)
    steps = [{k: v for k, v in row.items() if not k.endswith("seconds")} for row in record.steps]
    print(json.dumps({"numerics": state(), "checkpoints": checkpoints,
                      "rescues": sum(row.get("rescue_size", 0) for row in steps),
                      "steps": digest(json.dumps(steps, sort_keys=True, default=str).encode()),
                      "evals": digest(json.dumps(record.evals, sort_keys=True, default=str).encode())}))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
