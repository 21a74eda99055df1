"""A run leaves its trained policies as transformers folders: save_policy's folder loads with from_pretrained, with
the trained weights, the tokenizer and its chat template, every stop id and a model card; a 4-step `mrl run
--output-dir` leaves folders whose greedy completions equal the trained actor's at its last step; a run SIGKILLed
after step 3 of 6 and continued with `mrl run --resume` ends with an uninterrupted run's metrics; a saved folder or
a Hub model in the local cache trains beside a zoo policy (`--policies <folder>+A`); TRL's trainer saves its policy
as TRL does, with every stop id."""
import dataclasses
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

from mrl import cli, command
from mrl.core.batch import encode_prompts
from mrl.core.probes import probe_config
from mrl.core.stop_tokens import stop_ids
from mrl.core.tasks import make_task
import mrl.experiments.runs
import mrl.runtime.spec
from mrl.profiles import load_profile
from mrl.runtime import checkpoint
from mrl.runtime.actor import PolicyActor
from mrl.runtime.experience_log import replay
from mrl.runtime.runner import run_concurrent
from mrl.runtime.saving import RunCard, save_policy
from mrl.runtime.zoo import load_policy

TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}{% if add_generation_prompt %}={% endif %}"


@pytest.fixture
def smoke_run(monkeypatch, tmp_path, tiny_zoo_paths):
    """`mrl run` on the smoke profile's settings with the tests' tiny zoo, its run cache under tmp_path."""
    monkeypatch.setattr(mrl.experiments.runs, "repo_root", lambda: tmp_path)
    monkeypatch.setattr(mrl.runtime.spec, "repo_root", lambda: tmp_path)
    monkeypatch.setattr(cli, "policy_paths", lambda config, progress=True: dict(tiny_zoo_paths))
    return tmp_path


def perturbed_weights(model) -> dict:
    """The model's state dict after every parameter moved, as a step of training would (tied ones stay tied)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.01 * torch.randn(parameter.shape, generator=generator))
    return {name: value.clone() for name, value in model.state_dict().items()}


@pytest.mark.parametrize("name, dtype", [("A", torch.float32), ("B", torch.bfloat16)])
def test_a_saved_policy_loads_with_its_weights_tokenizer_stops_and_card(tiny_zoo_paths, tmp_path, name, dtype):
    """A (GPT-2, tied embeddings) saved as float32; B (Llama) from a checkpoint that declares bfloat16 and has a chat
    template, as a pretrained instruct model does."""
    source = tmp_path / "source"
    shutil.copytree(tiny_zoo_paths[name], source)
    policy = load_policy(source)
    policy.tokenizer.chat_template = TEMPLATE
    policy.tokenizer.save_pretrained(source)
    policy.model.config.dtype = dtype
    policy.model.config.save_pretrained(source)
    weights = perturbed_weights(policy.model)
    card = RunCard(run_key="0123abcd4567", profile="smoke", probe="sgt (lam=0.3)", seed=2, steps=4)

    folder = save_policy(weights, source, tmp_path / "out" / name, name, ["A", "B"], card)

    assert folder == tmp_path / "out" / name and not (tmp_path / "out" / f"{name}.tmp").exists()
    assert (folder / "model.safetensors").is_file()
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.dtype == dtype
    for key, value in model.state_dict().items():
        assert torch.equal(value, weights[key].to(dtype)), key
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert tokenizer.chat_template == TEMPLATE
    assert tokenizer("12+3=")["input_ids"] == policy.tokenizer("12+3=")["input_ids"]
    assert GenerationConfig.from_pretrained(folder).eos_token_id == list(stop_ids(policy.tokenizer))
    loaded = ModelCard.load(folder / "README.md")
    assert loaded.data.library_name == "transformers" and "mrl" in loaded.data.tags
    for fact in ("smoke", "sgt (lam=0.3)", "| seed | 2 |", "| steps | 4 |", "0123abcd4567", "A+B", source.name):
        assert fact in loaded.text, fact


class GreedyAtTheEnd(PolicyActor):
    """Records its greedy completions of 8 held-out prompts (transformers' generate on the model it samples with,
    stopping at every stop id) at the run's last step, in the class, for the inline backend's test to read."""

    completions: dict = {}

    def evaluate(self, step: int) -> list[dict]:
        if step == self.cfg.steps:
            GreedyAtTheEnd.completions[self.name] = greedy(self.sampler, self.tokenizer, eight_prompts(self.task),
                                                           self.cfg.max_new_tokens, list(stop_ids(self.tokenizer)))
        return super().evaluate(step)


def eight_prompts(task) -> list[str]:
    return [p.prompt for skill, n in (("S1", 3), ("S2", 3), ("S3", 2)) for p in task.test[skill][:n]]


def greedy(model, tokenizer, prompts: list[str], max_new_tokens: int, eos: list[int] | None = None) -> list:
    """Each prompt's greedy completion ids up to and including its first stop id (eos None: the model's generation
    config's)."""
    tokenizer.padding_side = "left"
    ids, mask = encode_prompts(tokenizer, prompts)
    stops = eos or model.generation_config.eos_token_id
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=max_new_tokens,
                             **({"eos_token_id": eos, "pad_token_id": tokenizer.pad_token_id} if eos else {}))
    completions = []
    for row in out[:, ids.shape[1]:].tolist():
        ends = [i for i, token in enumerate(row) if token in stops]
        completions.append(row[:ends[0] + 1] if ends else row)
    return completions


@pytest.mark.slow
def test_mrl_run_leaves_folders_whose_greedy_completions_are_the_trained_actors(smoke_run, monkeypatch, capsys):
    monkeypatch.setattr(mrl.experiments.runs, "run_concurrent",
                        lambda run, **kw: run_concurrent(run, **kw, actor_cls=GreedyAtTheEnd))
    out = smoke_run / "out"
    assert command.main(["run", "--policies", "A+B", "--probe", "sgt", "--steps", "4", "--output-dir", str(out)]) == 0
    assert str(out / "A") in capsys.readouterr().out

    smoke = load_profile("smoke")
    task = make_task(smoke.task)
    assert set(GreedyAtTheEnd.completions) == {"A", "B"}
    for name, actor_completions in GreedyAtTheEnd.completions.items():
        model = AutoModelForCausalLM.from_pretrained(out / name).eval()
        tokenizer = AutoTokenizer.from_pretrained(out / name)
        assert greedy(model, tokenizer, eight_prompts(task), smoke.grpo.max_new_tokens) == actor_completions
        assert any(len(c) > 1 for c in actor_completions)   # the completions say something
    steps = pd.read_csv(out / "steps.csv")
    assert sorted(set(steps.policy)) == ["A", "B"] and steps.step.max() == 4
    assert (out / "evals.csv").is_file() and json.loads((out / "run.json").read_text())["grpo"]["steps"] == 4
    assert ModelCard.load(out / "A" / "README.md").text.count("| profile | smoke |") == 1
    assert json.loads((out / "run.json").read_text())["profile"] == "smoke"


def test_a_profile_names_itself_outside_every_run_key():
    """load_profile records the profile's name (model cards and run.json name it); a run's key does not hold it, so
    renaming a profile re-runs nothing."""
    smoke = load_profile("smoke")
    assert smoke.profile == "smoke"
    run = mrl.experiments.runs.Run(smoke, {"A": "A-x"}, probe_config("grpo"), 0, 2)
    renamed = mrl.experiments.runs.Run(dataclasses.replace(smoke, profile="renamed"), {"A": "A-x"},
                                       probe_config("grpo"), 0, 2)
    assert run.key() == renamed.key()


KILLED_RUN = """
import dataclasses, os, signal, sys
from pathlib import Path

import mrl
from mrl import cli, command
import mrl.experiments.runs
import mrl.runtime.spec
from mrl.profiles import load_profile
from mrl.runtime.actor import PolicyActor
from mrl.runtime.runner import run_concurrent


class KilledInStep4(PolicyActor):
    def rollout(self, step, problems):
        if step == 4:   # after step 3's checkpoint: the whole run is killed, as by an out-of-memory killer
            os.kill(os.getpid(), signal.SIGKILL)
        return super().rollout(step, problems)


if __name__ == "__main__":
    mrl.experiments.runs.repo_root = mrl.runtime.spec.repo_root = lambda: Path({root!r})
    mrl.experiments.runs.run_concurrent = lambda run, **kw: run_concurrent(run, **kw, actor_cls=KilledInStep4)
    cli.policy_paths = lambda config, progress=True: {paths!r}
    command.main(sys.argv[1:])
"""


def assert_same_metrics(folder: Path, other: Path) -> None:
    """Two runs' step rows (without timings) and evaluation rows are equal, NaN where the other has NaN."""
    steps, other_steps = pd.read_csv(folder / "steps.csv"), pd.read_csv(other / "steps.csv")
    untimed = [c for c in steps.columns if not c.endswith("seconds")]
    pd.testing.assert_frame_equal(steps[untimed], other_steps[untimed], check_exact=True)
    pd.testing.assert_frame_equal(pd.read_csv(folder / "evals.csv"), pd.read_csv(other / "evals.csv"),
                                  check_exact=True)


@pytest.mark.slow
def test_a_sigkilled_run_resumed_with_resume_ends_as_an_uninterrupted_one(smoke_run, tiny_zoo_paths):
    args = ["run", "--policies", "A+B", "--probe", "sgt", "--steps", "6", "--set", "runner.checkpoint_every=1",
            "--set", "grpo.eval_every=2"]
    script = smoke_run / "killed.py"
    script.write_text(KILLED_RUN.format(root=str(smoke_run), paths=dict(tiny_zoo_paths)))
    killed = smoke_run / "killed"
    done = subprocess.run([sys.executable, str(script), *args, "--output-dir", str(killed)], capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == -9, done.stderr[-3000:]
    assert checkpoint.latest(killed / "checkpoints").name == "step-000003" and not (killed / "A").exists()

    assert command.main(["run", "--resume", str(killed)]) == 0
    assert command.main([*args, "--output-dir", str(smoke_run / "uninterrupted")]) == 0
    assert_same_metrics(killed, smoke_run / "uninterrupted")
    events = [e["event"] for e in json.loads((killed / "run.json").read_text())["events"]]
    assert "resumed from step-000003" in events
    logged = list(replay(killed / "checkpoints" / "experience"))   # the log beside the checkpoints, resumed too
    assert sorted({step for step, _ in logged}) == list(range(1, 7))
    assert logged == list(replay(smoke_run / "uninterrupted" / "checkpoints" / "experience"))
    for name in ("A", "B"):
        resumed = AutoModelForCausalLM.from_pretrained(killed / name).state_dict()
        uninterrupted = AutoModelForCausalLM.from_pretrained(smoke_run / "uninterrupted" / name).state_dict()
        assert all(torch.equal(resumed[key], uninterrupted[key]) for key in resumed)


def test_resume_refuses_another_experiment_and_a_folder_without_checkpoints(smoke_run, capsys):
    folder = smoke_run / "run"
    folder.mkdir()
    with pytest.raises(SystemExit):
        command.main(["run", "--resume", str(folder)])
    assert "request.yaml" in capsys.readouterr().err
    (folder / cli.REQUEST).write_text("policies: A+B\nsteps: 2\n")
    with pytest.raises(SystemExit):
        command.main(["run", "--resume", str(folder)])
    assert "no checkpoint" in capsys.readouterr().err


@pytest.mark.slow
def test_resume_refuses_a_different_experiment(smoke_run, capsys):
    out = smoke_run / "out"
    assert command.main(["run", "--steps", "2", "--set", "runner.checkpoint_every=1", "--output-dir", str(out)]) == 0
    with pytest.raises(SystemExit):
        command.main(["run", "--resume", str(out), "--seed", "3"])
    err = capsys.readouterr().err
    assert "another run" in err and "seed: the checkpoint has 0, this run has 3" in err
    with pytest.raises(SystemExit):   # a fresh run would write over its checkpoints
        command.main(["run", "--steps", "2", "--set", "runner.checkpoint_every=1", "--output-dir", str(out)])
    assert "--resume" in capsys.readouterr().err


@pytest.mark.slow
def test_a_transformers_folder_and_a_cached_hub_model_train_beside_a_zoo_policy(smoke_run, tiny_zoo_paths,
                                                                               monkeypatch):
    import huggingface_hub.constants

    folder = smoke_run / "my-model"   # a plain transformers folder (no zoo.json): B's weights
    load_policy(tiny_zoo_paths["B"]).model.save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(Path(tiny_zoo_paths["B"]) / name, folder / name)
    out = smoke_run / "out"
    assert command.main(["run", "--policies", f"{folder}+A", "--steps", "2", "--output-dir", str(out)]) == 0
    assert sorted(set(pd.read_csv(out / "steps.csv").policy)) == ["A", "my-model"]
    trained = AutoModelForCausalLM.from_pretrained(out / "my-model").state_dict()
    before = AutoModelForCausalLM.from_pretrained(folder).state_dict()
    assert any(not torch.equal(trained[key], before[key]) for key in before)   # it trained

    cache = smoke_run / "hub"   # C's checkpoint as the Hub's cache lays out mrl-test/tiny-qwen at one revision
    revision = "0" * 40
    shutil.copytree(tiny_zoo_paths["C"], cache / "models--mrl-test--tiny-qwen" / "snapshots" / revision)
    (cache / "models--mrl-test--tiny-qwen" / "refs").mkdir()
    (cache / "models--mrl-test--tiny-qwen" / "refs" / "main").write_text(revision)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    hub_out = smoke_run / "hub-out"
    assert command.main(["run", "--policies", "mrl-test/tiny-qwen+A", "--steps", "2", "--output-dir", str(hub_out)]) == 0
    assert sorted(set(pd.read_csv(hub_out / "steps.csv").policy)) == ["A", "tiny-qwen"]
    assert "mrl-test/tiny-qwen" in ModelCard.load(hub_out / "tiny-qwen" / "README.md").text


@pytest.mark.slow
def test_the_trl_trainer_saves_its_trained_policy(tiny_zoo_paths, tmp_path):
    from testsupport import TINY_TASK
    from mrl.core.config import GrpoConfig, PlacementConfig, TaskConfig
    from mrl.integrations.file_exchange import FileExchange
    from mrl.integrations.trl import MrlSharing
    from mrl.integrations.trl_train import train, trl_args
    from mrl.core.probes import probe_config

    grpo = GrpoConfig(steps=2, prompts_per_step=4, group_size=4, max_new_tokens=6, lr=1e-3, seed=0)
    out = tmp_path / "A"
    sharing = MrlSharing(task=make_task(TaskConfig(**TINY_TASK)), probe=probe_config("grpo"),
                         exchange=FileExchange(tmp_path / "exchange", "A", (), deadline=60),
                         peer_paths={"A": tiny_zoo_paths["A"]})
    trainer = train(sharing, trl_args(out, grpo, PlacementConfig(), save_steps=1))
    trained = {key: value.detach().cpu() for key, value in trainer.model.state_dict().items()}
    saved = AutoModelForCausalLM.from_pretrained(out).state_dict()
    source = AutoModelForCausalLM.from_pretrained(tiny_zoo_paths["A"]).state_dict()
    assert all(torch.equal(saved[key], trained[key]) for key in saved)
    assert any(not torch.equal(saved[key], source[key]) for key in saved)   # it trained
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert GenerationConfig.from_pretrained(out).eos_token_id == list(stop_ids(tokenizer))
    assert {"mrl", "grpo", "trl"} <= set(ModelCard.load(out / "README.md").data.tags)
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]   # TRL's own


SAVE_IN_A_LOOP = """
import sys
import torch
from transformers import AutoModelForCausalLM
from mrl.runtime.saving import RunCard, save_policy
source, folder = sys.argv[1], sys.argv[2]
weights = AutoModelForCausalLM.from_pretrained(source).state_dict()
for _ in range(6):
    save_policy(weights, source, folder, "A", ["A"], RunCard(probe="grpo", seed=0, steps=1))
    AutoModelForCausalLM.from_pretrained(folder)
"""


def test_two_processes_saving_one_run_both_succeed_and_leave_one_whole_folder(tiny_zoo_paths, tmp_path):
    """Two processes save the same policy into one folder six times each, at once: before, both staged in
    `<folder>.tmp` and one renamed away the other's staging (FileNotFoundError). Both exit 0, the folder loads with
    the source's weights and no staging or set-aside folder is left."""
    folder = tmp_path / "trained" / "A"
    folder.parent.mkdir()
    command = [sys.executable, "-c", SAVE_IN_A_LOOP, str(tiny_zoo_paths["A"]), str(folder)]
    processes = [subprocess.Popen(command, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    errors = [process.communicate(timeout=300)[1] for process in processes]
    assert [process.returncode for process in processes] == [0, 0], errors
    saved, source = (AutoModelForCausalLM.from_pretrained(path) for path in (folder, tiny_zoo_paths["A"]))
    assert all(torch.equal(a, b) for a, b in zip(saved.state_dict().values(), source.state_dict().values()))
    assert [path.name for path in folder.parent.iterdir()] == ["A"]
