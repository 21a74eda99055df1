"""A trained policy as a `transformers` folder, the one `AutoModelForCausalLM.from_pretrained` loads.

`save_policy` writes what TRL's `GRPOTrainer.save_model` leaves in its output_dir, for one policy of a run: the
weights as safetensors (`save_pretrained`), the tokenizer with its chat template, a generation config whose
`eos_token_id` lists every stop id the run ended completions at (mrl.runtime.rollout.stop_ids) and a model card
(README.md, `huggingface_hub.ModelCard`) naming the run that trained it: profile, probe, seed, steps, run key, the
policies trained together and the package version. The folder is written in a staging folder of this process's own
(`<folder>.tmp-<pid>`) and renamed into place (`publish_folder`), so a folder under its own name is complete, and two
processes that save the same run (two notebooks asking for one run) never rename away each other's staging.

The weights are the actor's state dict (the runner asks every worker for it, as for a checkpoint), placed into a
model built on the meta device from the source checkpoint's config, so saving takes no second copy of the weights;
they are saved in the source checkpoint's dtype (a bf16 checkpoint stays bf16; the zoo's are float32).
"""
from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

import torch

from mrl.core.stop_tokens import stop_ids

CARD_TEMPLATE = """---
{{ card_data }}
---

# {{ policy }}, trained by mrl

Policy `{{ policy }}` of a Mutual Reinforcement Learning run (mrl {{ mrl_version }}), trained with GRPO and the
`{{ probe }}` probe beside {{ peers }}, starting from `{{ base_model }}`.

| setting | value |
|---|---|
| profile | {{ profile }} |
| probe | {{ probe }} |
| seed | {{ seed }} |
| steps | {{ steps }} |
| run key | {{ run_key }} |
| policies trained together | {{ policies }} |
| mrl version | {{ mrl_version }} |

The run's metrics are in `results/runs/<run key>/` of the mrl checkout that ran it (`mrl.runtime.results.load_runs()`).
`eos_token_id` in `generation_config.json` lists every id that ended a completion in training.

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("path/to/this/folder")
tokenizer = AutoTokenizer.from_pretrained("path/to/this/folder")
```
"""


@dataclass(frozen=True)
class RunCard:
    """What a saved policy's model card says of the run that trained it."""

    run_key: str = ""
    """the run's key (mrl.runtime.spec.Run.key: its folder in the run cache, results/runs/<key>/, where run_one
    keeps it); '' for a run the cache cannot hold (a probe written in notebook cells)"""
    profile: str = ""
    """the profile the run's settings came from; '' when the caller does not name one"""
    probe: str = "grpo"
    """the probe's label with its changed knobs (mrl.core.probes.probe_label)"""
    seed: int = 0
    """the RL seed"""
    steps: int = 0
    """the RL steps the run was asked for"""


def package_version() -> str:
    """mrl's installed version ('unknown' when it runs from a checkout that was never installed)."""
    try:
        return version("mrl")
    except PackageNotFoundError:
        return "unknown"


def saved_dtype(config) -> torch.dtype:
    """The dtype a checkpoint declares in its config (`dtype`, formerly `torch_dtype`), float32 when it names none."""
    declared = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
    return getattr(torch, declared) if isinstance(declared, str) else declared


def model_card(policy: str, base_model: str, policies: list[str], card: RunCard):
    """The huggingface_hub ModelCard of one trained policy: YAML metadata (library, base model, tags) and the run's
    settings as a table."""
    from huggingface_hub import ModelCard, ModelCardData

    data = ModelCardData(library_name="transformers", base_model=base_model if "/" in base_model else None,
                         tags=["mrl", "grpo", "reinforcement-learning", card.probe.split(" ")[0]],
                         license=None, pipeline_tag="text-generation")
    peers = [name for name in policies if name != policy]
    return ModelCard.from_template(
        data, template_str=CARD_TEMPLATE, policy=policy, probe=card.probe, base_model=base_model,
        peers=", ".join(f"`{name}`" for name in peers) if peers else "no peer", profile=card.profile or "(not named)",
        seed=card.seed, steps=card.steps, run_key=card.run_key or "(outside the run cache)",
        policies="+".join(policies), mrl_version=package_version())


def hub_id(folder: str | Path) -> str:
    """The Hub id of a folder in the Hugging Face cache (.../models--org--name/snapshots/<revision> -> org/name),
    else the folder's name."""
    folder = Path(folder)
    cached = [part for part in folder.parts if part.startswith("models--")]
    return cached[-1].removeprefix("models--").replace("--", "/") if cached else folder.name


def save_policy(weights: dict, source: str | Path, folder: str | Path, policy: str, policies: list[str],
                card: RunCard) -> Path:
    """Write one trained policy as a transformers folder (module docstring); returns the folder.

    weights: the model's state dict after training (tensors on the CPU); source: the checkpoint folder the policy
    started from (its config, tokenizer and generation config); policies: every policy of the run, in order."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig, PreTrainedTokenizerFast

    source, folder = Path(source), Path(folder)
    staging = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    config = AutoConfig.from_pretrained(source)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    model.load_state_dict(weights, strict=True, assign=True)
    model.tie_weights()
    model.to(saved_dtype(config)).save_pretrained(staging)
    tokenizer = PreTrainedTokenizerFast.from_pretrained(source)
    tokenizer.save_pretrained(staging)
    generation = (GenerationConfig.from_pretrained(source) if (source / "generation_config.json").is_file()
                  else GenerationConfig.from_model_config(config))
    generation.eos_token_id = list(stop_ids(tokenizer))   # the tokenizer read from `source`, as the actor's
    generation.pad_token_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    generation.save_pretrained(staging)
    model_card(policy, hub_id(source), policies, card).save(staging / "README.md")
    return publish_folder(staging, folder)


def publish_folder(staging: Path, folder: Path) -> Path:
    """Put a complete `staging` folder under `folder`'s name by renames alone (each atomic on one filesystem): a folder
    already there is first moved aside (`<folder>.old-<pid>`) and removed after. When another process puts its own
    folder there in between (two processes saving one run at once), the rename fails, that folder wins and this
    staging is dropped: the caller reads the winner's, as the run cache's readers do. Returns `folder`."""
    aside = folder.with_name(f"{folder.name}.old-{os.getpid()}")
    try:
        folder.rename(aside)
    except FileNotFoundError:
        aside = None
    try:
        staging.rename(folder)
    except OSError:
        if not folder.is_dir():
            raise
        shutil.rmtree(staging, ignore_errors=True)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)
    return folder
