"""Placement: every tensor of a step on the policy's device, bf16 against fp32, the micro-batched update, the
device and placement settings refused with their field named."""
import dataclasses
from pathlib import Path

import pytest
import torch

import mrl
from testsupport import TINY_TASK, run_of
from mrl.core.config import ConfigError, GrpoConfig, PlacementConfig, RunnerConfig, TaskConfig
from mrl.core.probes import PROBES, PeerView, probe_config
from mrl.core.run_config import RunConfig
from mrl.core.tasks import make_task
from mrl.runtime.actor import WorkerSpec, PolicyActor
from mrl.runtime.placement import DeviceGuard, PlacementError, precision, resolve_device
from mrl.runtime.runner import run_concurrent

GRPO = GrpoConfig(steps=2, prompts_per_step=4, group_size=4, lr=3e-4, eval_every=2, seed=0, beta=0.04)


class GuardedActor(PolicyActor):
    """A policy actor whose every phase runs under a DeviceGuard for the policy's device."""

    guards: list = []

    def _guarded(self, method, *args):
        guard = DeviceGuard(self.device)
        GuardedActor.guards.append(guard)
        with guard:
            return method(*args)

    def rollout(self, *args):
        return self._guarded(super().rollout, *args)

    def update(self, *args):
        return self._guarded(super().update, *args)

    def finish(self, *args, **kwargs):
        return self._guarded(lambda: super(GuardedActor, self).finish(*args, **kwargs))

    def evaluate(self, *args):
        return self._guarded(super().evaluate, *args)


@pytest.mark.parametrize("probe", sorted(PROBES))
def test_a_concurrent_step_of_every_probe_makes_every_tensor_on_the_policy_device(tiny_zoo_paths, probe):
    paths = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    GuardedActor.guards = []
    cpu = PlacementConfig(device="cpu")
    record = run_concurrent(run_of(paths, TaskConfig(**TINY_TASK), GRPO, RunnerConfig(), probe=probe_config(probe),
                                   placement={"A": cpu, "B": cpu}), actor_cls=GuardedActor, progress=False)
    assert {row["step"] for row in record.steps} == {1, 2} and record.evals
    assert all(g.device == torch.device("cpu") for g in GuardedActor.guards)
    assert sum(g.checked for g in GuardedActor.guards) > 1000  # the guard saw the step's work


def test_the_guard_catches_a_tensor_made_off_the_device_or_without_naming_one():
    with DeviceGuard("cpu"):
        with pytest.raises(PlacementError, match="zeros at .*test_placement.py:[0-9]+ made a tensor without naming"):
            torch.zeros(3)
        assert torch.zeros(3, device="cpu").exp().device.type == "cpu"
        assert torch.zeros(3, device="cpu").cpu().numpy().sum() == 0
    on_device = torch.zeros(3, device="meta")  # meta stands in for a GPU: a device that is not the CPU
    with DeviceGuard("meta"), pytest.raises(PlacementError, match="zeros_like at .* made a tensor on cpu; the "
                                                                  "policy's device is meta"):
        torch.zeros_like(on_device, device="cpu")


def test_auto_is_the_cpu_here_and_a_missing_gpu_is_refused():
    assert resolve_device("auto") == torch.device("cpu" if not torch.cuda.is_available() else "cuda")
    if not torch.cuda.is_available():
        with pytest.raises(ConfigError, match="PlacementConfig.device = 'cuda:1'.*no CUDA device"):
            resolve_device("cuda:1")


@pytest.mark.parametrize("values, named", [({"device": "gpu"}, "PlacementConfig.device = 'gpu'"),
                                           ({"dtype": "float16"}, "PlacementConfig.dtype = 'float16'"),
                                           ({"micro_batch": -1}, "PlacementConfig.micro_batch = -1"),
                                           ({"gpus": -0.5}, "PlacementConfig.gpus = -0.5")])
def test_bad_placements_are_refused_naming_the_field(values, named):
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        PlacementConfig(**values)


def test_a_placement_for_a_policy_the_profile_lacks_is_refused():
    zoo = {"families": [{"name": "A"}, {"name": "B"}]}
    with pytest.raises(ConfigError, match=r"RunConfig.placement = \['Z'\]"):
        RunConfig(zoo=zoo, placement={"Z": {"dtype": "bfloat16"}})
    assert RunConfig(zoo=zoo, placement={"B": {"dtype": "bfloat16"}}).placement_of("A") == PlacementConfig()


def _actor(path, **placement) -> PolicyActor:
    return PolicyActor(WorkerSpec("A", path, TaskConfig(**TINY_TASK), GRPO, placement=PlacementConfig(**placement)))


def test_bf16_keeps_fp32_master_weights_and_its_loss_is_within_tolerance_of_fp32(tiny_zoo_paths, tmp_path):
    from mrl.runtime.zoo import load_policy

    saved_in_bf16 = tmp_path / "bf16"  # as the paper profile's checkpoints are published
    policy = load_policy(tiny_zoo_paths["A"])
    policy.model.to(torch.bfloat16).save_pretrained(saved_in_bf16)
    policy.tokenizer.save_pretrained(saved_in_bf16)
    fp32, bf16 = _actor(tiny_zoo_paths["A"]), _actor(str(saved_in_bf16), dtype="bfloat16")
    problems = make_task(TaskConfig(**TINY_TASK)).rl_prompts(__import__("random").Random(0), 4)
    fp32.rollout(1, problems)
    batch = fp32.pending
    losses = {}
    for actor in (fp32, bf16):
        output = actor.probe.loss(batch, PeerView(), actor.learner(1), actor.config.probe)
        losses[actor.config.placement.dtype] = output.loss(0)
    assert losses["bfloat16"].dtype == torch.float32  # the loss in fp32 over bf16 matmuls
    assert losses["bfloat16"].item() == pytest.approx(losses["float32"].item(), rel=0.05, abs=0.02)
    assert losses["bfloat16"].item() != losses["float32"].item()  # bf16 did compute in bf16
    assert {p.dtype for p in bf16.model.parameters()} == {torch.float32}  # loaded from bf16 into fp32 masters
    assert {p.dtype for p in bf16.reference.parameters()} == {torch.bfloat16}
    assert {p.dtype for p in bf16.sampler.parameters()} == {torch.bfloat16} and fp32.sampler is fp32.model
    bf16.rollout(1, problems)
    bf16.update(1)
    assert all(s["exp_avg"].dtype == torch.float32 for s in bf16.optimizer.state.values())
    for copy_, master in zip(bf16.sampler.parameters(), bf16.model.parameters()):
        assert torch.equal(copy_, master.to(torch.bfloat16))  # the sampler follows the update
    assert all(p.grad is None for p in bf16.model.parameters())  # freed: the next rollout runs without them


@pytest.mark.parametrize("engine", ["hf", "generate"])
def test_bf16_runs_every_architecture_with_each_engine(five_zoo_paths, engine):
    """The sampler is a bf16 copy outside autocast, so transformers' static cache (one dtype for keys and values)
    works; the sampling log-probs are the fp32 masters' training forward under autocast."""
    paths = {name: five_zoo_paths[name] for name in ("A", "B", "C", "D", "E")}
    grpo = dataclasses.replace(GRPO, engine=engine, steps=1, eval_every=1)
    placement = {name: PlacementConfig(dtype="bfloat16", micro_batch=5) for name in paths}
    record = run_concurrent(run_of(paths, TaskConfig(**TINY_TASK), grpo, RunnerConfig(), probe=probe_config("sgt"),
                                    placement=placement), progress=False)
    assert {row["policy"] for row in record.steps} == set(paths)
    assert all(0 <= row["reward"] <= 1 and row["loss"] == row["loss"] for row in record.steps)


def test_micro_batching_a_model_with_dropout_is_refused(tiny_zoo_paths, tmp_path):
    from mrl.runtime.zoo import load_policy

    policy = load_policy(tiny_zoo_paths["B"])
    policy.model.config.attention_dropout = 0.1
    policy.model.save_pretrained(tmp_path)
    policy.tokenizer.save_pretrained(tmp_path)
    with pytest.raises(ConfigError, match=r"micro_batch = 4 .*dropout \(\['config.attention_dropout=0.1'\]\)"):
        _actor(str(tmp_path), micro_batch=4)


@pytest.mark.parametrize("probe", ["grpo", "prp", "xgrpo", "sgt", "graft", "trrd", "hacpo"])
def test_a_micro_batched_update_gives_the_whole_batch_gradient(tiny_zoo_paths, probe):
    paths = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    knobs = {"minibatches": 2} if probe == "hacpo" else {}
    rows = []
    for micro in (0, 3):
        placement = {name: PlacementConfig(micro_batch=micro) for name in paths}
        record = run_concurrent(run_of(paths, TaskConfig(**TINY_TASK), dataclasses.replace(GRPO, beta=0.0),
                                        RunnerConfig(), probe=probe_config(probe, **knobs), placement=placement),
                                progress=False)
        rows.append(record.steps)
    for whole, micro in zip(*rows):
        assert micro["reward"] == whole["reward"]
        assert micro["loss"] == pytest.approx(whole["loss"], rel=1e-5, abs=1e-7)
        assert micro["grad_norm"] == pytest.approx(whole["grad_norm"], rel=1e-4, abs=1e-7)


def test_no_module_a_step_runs_makes_a_cpu_tensor_with_from_numpy():
    """torch.from_numpy escapes the guard (no TorchFunctionMode sees it), so the step's modules are read for it."""
    root = Path(mrl.__file__).parent
    modules = [p for p in root.rglob("*.py") if p.parent.name not in ("reports", "bandit")]
    assert len(modules) > 30
    assert [str(p.relative_to(root)) for p in modules if "from_numpy" in p.read_text()] == []


def test_gradient_checkpointing_recomputes_the_same_update(tiny_zoo_paths):
    """transformers' checkpointing (the hf forward: the fast path keeps no activations to recompute) changes the
    memory of the update, not its loss or gradient."""
    paths = {name: tiny_zoo_paths[name] for name in ("A", "B")}
    grpo = dataclasses.replace(GRPO, beta=0.0, engine="hf")
    rows = []
    for checkpointing in (False, True):
        placement = {name: PlacementConfig(gradient_checkpointing=checkpointing) for name in paths}
        rows.append(run_concurrent(run_of(paths, TaskConfig(**TINY_TASK), grpo, RunnerConfig(),
                                           probe=probe_config("sgt"), placement=placement), progress=False).steps)
    for plain, recomputed in zip(*rows):
        assert recomputed["reward"] == plain["reward"]
        assert recomputed["loss"] == pytest.approx(plain["loss"], rel=1e-6, abs=1e-8)
        assert recomputed["grad_norm"] == pytest.approx(plain["grad_norm"], rel=1e-5)
    assert _actor(tiny_zoo_paths["A"], gradient_checkpointing=True).model.is_activation_checkpointing


def test_a_bf16_copy_casts_parameters_only_so_it_stays_the_model_it_copies_over_a_long_sequence():
    """RoPE's inv_freq stays fp32 in the bf16 sampler, reference and teacher (mrl.runtime.placement.cast_parameters):
    cast to bf16 it makes an angle error that grows with the position. On a 1,000-token sequence of a Qwen2-style model
    (rope base 1e6), the bf16 copy's log-probs stay as close to the fp32 model's late in the sequence as early; a copy
    made with `.to(bfloat16)` drifts."""
    import copy

    from transformers import AutoModelForCausalLM, Qwen2Config

    from mrl.runtime.placement import cast_parameters

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(Qwen2Config(
        vocab_size=64, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1100, rope_theta=1e6, tie_word_embeddings=True)).eval()
    ids = torch.randint(0, 64, (1, 1000), generator=torch.Generator().manual_seed(0))
    copies = {"parameters": cast_parameters(copy.deepcopy(model), torch.bfloat16),
              "everything": copy.deepcopy(model).to(torch.bfloat16)}
    assert {b.dtype for b in copies["parameters"].buffers()} == {torch.float32}
    assert {p.dtype for p in copies["parameters"].parameters()} == {torch.bfloat16}

    def logprobs(m) -> torch.Tensor:
        with torch.no_grad():
            return torch.log_softmax(m(ids).logits.float(), -1)[0, :-1].gather(-1, ids[0, 1:, None])[:, 0]

    reference = logprobs(model)
    error = {name: (logprobs(m) - reference).abs() for name, m in copies.items()}
    early, late = slice(0, 200), slice(799, 999)
    assert error["parameters"][late].mean() < 2 * error["parameters"][early].mean() + 1e-3
    assert error["everything"][late].mean() > error["parameters"][late].mean()


def test_the_evaluation_has_its_own_length_and_batch(tiny_zoo_paths, monkeypatch):
    import mrl.runtime.evaluation as evaluation

    calls, real = [], evaluation.greedy_accuracy

    def spy(model, tokenizer, problems, verify, max_new_tokens, batch_size, **kwargs):
        calls.append((max_new_tokens, batch_size))
        return real(model, tokenizer, problems, verify, max_new_tokens, batch_size, **kwargs)

    monkeypatch.setattr(evaluation, "greedy_accuracy", spy)
    for grpo, expected in ((GrpoConfig(max_new_tokens=3), (3, 512)),
                           (GrpoConfig(max_new_tokens=3, eval_max_new_tokens=5, eval_batch=7), (5, 7))):
        calls.clear()
        PolicyActor(WorkerSpec("A", tiny_zoo_paths["A"], TaskConfig(**TINY_TASK), grpo)).evaluate(0)
        assert calls and set(calls) == {expected}


def test_each_phase_s_gpu_memory_peak_is_measured_there_and_nothing_on_a_cpu(monkeypatch):
    from mrl.runtime.placement import measured_peak

    into = {}
    with measured_peak(torch.device("cpu"), "rollout_peak_gb", into):
        torch.ones(10)
    assert into == {}
    calls = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda device: calls.append(("reset", device)))
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda device: 3e9)
    with measured_peak(torch.device("cuda:0"), "update_peak_gb", into):
        calls.append("block")
    assert calls == [("reset", torch.device("cuda:0")), "block"] and into == {"update_peak_gb": 3.0}


def test_a_policy_sharing_a_gpu_is_capped_to_its_share_with_expandable_segments(monkeypatch):
    from mrl.runtime.placement import cap_gpu_memory

    calls = []
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda share, device: calls.append(share))
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    cap_gpu_memory(torch.device("cpu"), 0.5)
    cap_gpu_memory(torch.device("cuda:0"), 0.0)      # no share reserved: the whole GPU
    assert calls == [] and "PYTORCH_CUDA_ALLOC_CONF" not in __import__("os").environ
    cap_gpu_memory(torch.device("cuda:0"), 0.378)
    assert calls == [0.378] and __import__("os").environ["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"


def test_the_cap_of_a_plain_cuda_device_names_the_current_gpu_and_both_one_policy_backends_apply_it(monkeypatch):
    """auto resolves to plain `cuda`, which torch's set_per_process_memory_fraction refuses without an index (as
    the first GPU run found); a process or Ray worker caps its policy before building it."""
    from types import SimpleNamespace

    import mrl.runtime.mwra as mwra
    import mrl.runtime.placement as placement
    from mrl.runtime.mwra import _own_process_actor

    calls = []
    monkeypatch.setattr(torch.cuda, "set_per_process_memory_fraction", lambda share, device: calls.append(device))
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    placement.cap_gpu_memory(torch.device("cuda"), 0.5)
    assert calls == [1]
    monkeypatch.setattr(mwra, "resolve_device", lambda spec: torch.device("cuda:0"))   # as the backends import it
    spec = SimpleNamespace(placement=SimpleNamespace(device="auto", gpus=0.25))
    spec.build = lambda: ("actor", spec)
    built = _own_process_actor(spec)
    assert built == ("actor", spec) and calls == [1, 0]
