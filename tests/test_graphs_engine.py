"""The graphs engine (mrl/runtime/graphs_engine.py) against transformers: greedy completions equal generate's on the
three paper architectures (Qwen2.5, Llama 3.2, SmolLM2 at tiny sizes, bf16 where this CPU has it), whatever the bucket
and prefill sizes; seeded draws follow the model's softmax at the first and at a later token (chi-square); its log-probs
are the sampler's own, so the sampler/trainer mismatch is measured as under the loops. On a CPU the decode step runs
eagerly; on a GPU the same tests run the captured step, and captured equals eager."""
import copy
import json

import pytest
import torch
from test_generate import assert_draws_follow

from mrl.core.batch import Decoding
from mrl.core.mismatch import mismatch_stats
import mrl.runtime.graphs_engine as graphs
from mrl.runtime.placement import cast_parameters
from mrl.runtime.resources import PUBLISHED
from mrl.runtime.rollout import completion_logprobs, first_eos_mask, sample_completions

PAPER = {"qwen2.5": ("Qwen2.5-0.5B-Instruct", 7), "llama3.2": ("Llama-3.2-1B-Instruct", 4),
         "smollm2": ("SmolLM2-360M-Instruct", 3)}
"""the paper's three checkpoints: published config and its query heads per key/value head"""
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"))]
VOCAB = 96


def paper_model(name: str, dtype: torch.dtype = torch.float32, seed: int = 0):
    """The published architecture of PAPER[name] at a tiny size: 2 layers, 2 key/value heads of 16 dimensions and the
    checkpoint's grouping, its RoPE (Llama 3's scaled frequencies), biases and tied embeddings kept; weights random
    at a 0.2 scale, so that greedy completions vary."""
    from transformers import AutoConfig, AutoModelForCausalLM

    checkpoint, group = PAPER[name]
    values = json.loads((PUBLISHED / f"{checkpoint}.json").read_text())
    values.pop("architectures", None)
    heads = 2 * group
    values.update(num_hidden_layers=2, num_attention_heads=heads, num_key_value_heads=2, head_dim=16,
                  hidden_size=16 * heads, intermediate_size=32 * heads, vocab_size=VOCAB, initializer_range=0.2,
                  max_position_embeddings=512, bos_token_id=None, eos_token_id=1, pad_token_id=0,
                  attn_implementation="sdpa")
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config).to(dtype).eval()


def prompts(rows: int = 3, length: int = 9, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompts of different lengths (row i loses i tokens)."""
    ids = torch.randint(2, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(ids)
    for row in range(rows):
        ids[row, :row], mask[row, :row] = 0, 0
    return ids, mask


def diverge_at_a_tie(model, ids: torch.Tensor, mask: torch.Tensor, ours: torch.Tensor, ours_mask: torch.Tensor,
                     reference: torch.Tensor, reference_mask: torch.Tensor) -> list[int]:
    """Rows whose greedy completions differ, after checking that each first differs where the reference forward
    (transformers', over the prompt and the tokens both drew) scores the two tokens within one bf16 rounding of
    each other: a tie that rounding broke, as a batch-size or kernel change breaks it in bf16."""
    rows = []
    for row in range(len(ids)):
        a, b = ours[row][ours_mask[row].bool()].tolist(), reference[row][reference_mask[row].bool()].tolist()
        if a == b:
            continue
        at = next(i for i, (x, y) in enumerate(zip(a + [-1], b + [-2])) if x != y)
        assert at < min(len(a), len(b)), (row, a, b)   # one ended where the other did not: not a tie
        context = torch.cat([ids[row, mask[row].bool()], torch.tensor(b[:at], device=ids.device)])[None]
        with torch.no_grad():
            logits = model(input_ids=context).logits[0, -1].float()
        assert (logits[b[at]] - logits[a[at]]).abs() <= torch.finfo(torch.bfloat16).eps * logits[b[at]].abs(), row
        rows.append(row)
    return rows


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
@pytest.mark.parametrize("name", list(PAPER))
def test_greedy_completions_equal_transformers_generate_on_the_paper_architectures(name, dtype, device):
    """Prompts of 38-40 tokens and up to 70 new: the decode crosses from the first attended bucket (64 keys) into the
    second and the third; three rows, so the batch bucket pads one. In fp32 the completions are generate's and the
    hf loop's token for token; in bf16 a row may part from them only at a tie within one bf16 rounding (the attended
    length differs, so the attention's sums round differently), and the rows that do not are equal."""
    model = paper_model(name, dtype).to(device)
    ids, mask = (tensor.to(device) for tensor in prompts(length=40))
    stops, new = (1, 5), 70
    decoding = Decoding(max_new_tokens=new, eos_id=stops, pad_id=0, greedy=True)
    drawn, drawn_mask, logp = sample_completions(model, ids, mask, decoding, engine="graphs")
    generated = model.generate(input_ids=ids, attention_mask=mask, do_sample=False, max_new_tokens=new,
                               eos_token_id=list(stops), pad_token_id=0, top_k=None, top_p=None)[:, ids.shape[1]:]
    generated_mask = first_eos_mask(generated, stops)
    loop = sample_completions(model, ids, mask, decoding, engine="hf")
    assert drawn_mask.sum(1).max() > 64 - 40   # a row decoded past the first attended bucket
    if dtype == torch.float32:
        assert torch.equal(drawn, loop[0]) and torch.equal(drawn_mask, loop[1])
        assert torch.equal(drawn * drawn_mask, generated[:, : drawn.shape[1]] * drawn_mask)
        torch.testing.assert_close(logp, loop[2], atol=1e-5, rtol=0)
        return
    assert len(diverge_at_a_tie(model, ids, mask, drawn, drawn_mask, generated, generated_mask)) < len(ids)
    equal = [row for row in range(len(ids)) if row not in diverge_at_a_tie(model, ids, mask, drawn, drawn_mask,
                                                                           loop[0], loop[1])]
    for row in equal:   # the sampler's log-probs of the same tokens: the loop's within bf16's rounding of a logit
        kept = int(drawn_mask[row].sum())
        torch.testing.assert_close(logp[row, :kept], loop[2][row, :kept], atol=0.1, rtol=0)


def test_bucket_and_prefill_sizes_do_not_change_the_completions(monkeypatch):
    """Buckets of 4 tokens (many attended lengths, little padding) and one prompt a prefill forward draw what buckets
    of 64 and one prefill forward draw, greedy and seeded."""
    model = paper_model("llama3.2")
    ids, mask = prompts(rows=5)
    requests = [Decoding(max_new_tokens=20, eos_id=1, pad_id=0, temperature=0.8, greedy=greedy)
                for greedy in (True, False)]
    wide = [sample_completions(model, ids, mask, decoding, torch.Generator().manual_seed(3), engine="graphs")
            for decoding in requests]
    monkeypatch.setattr(graphs, "BUCKET", 4)
    monkeypatch.setattr(graphs, "GRAPHS_PREFILL_TOKENS", 1)
    assert graphs.cache_shape(5, 9, 20) == (8, 32)
    narrow = [sample_completions(model, ids, mask, decoding, torch.Generator().manual_seed(3), engine="graphs")
              for decoding in requests]
    for a, b in zip(wide, narrow):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
        torch.testing.assert_close(a[2], b[2], atol=1e-5, rtol=0)


def test_buckets_serve_every_prompt_length_and_batch_of_a_run():
    assert [graphs.batch_bucket(n) for n in (1, 3, 8, 33, 64, 65, 512, 500)] == [1, 4, 8, 64, 64, 128, 512, 512]
    assert graphs.cache_shape(512, 90, 512) == (512, 640)
    assert {graphs.cache_shape(64 * 8, prompt, 512) for prompt in range(129, 193)} == {(512, 704)}


@pytest.mark.parametrize("device", DEVICES)
def test_seeded_draws_follow_the_softmax_at_the_first_and_a_later_token(device):
    """Chi-square of 4,000 draws of the first token against the softmax at temperature 0.7, and of the second token
    against its marginal sum_a p(a) p(b | a) (the decode step's draw: cache, positions, mask)."""
    model = paper_model("qwen2.5").to(device)
    context, mask = (tensor[:1].to(device) for tensor in prompts())
    n, temperature = 4000, 0.7
    decoding = Decoding(max_new_tokens=2, eos_id=1, pad_id=0, temperature=temperature, min_new_tokens=2)
    ids, _, _ = sample_completions(model, context.repeat(n, 1), mask.repeat(n, 1), decoding,
                                   torch.Generator(device).manual_seed(0), engine="graphs")
    with torch.no_grad():
        first = torch.softmax(model(input_ids=context).logits[0, -1].double() / temperature, -1)
        first[1] = 0   # min_new_tokens: the stop id is not drawn first
        first /= first.sum()
        extended = torch.cat([context.repeat(VOCAB, 1), torch.arange(VOCAB, device=device)[:, None]], 1)
        second = torch.softmax(model(input_ids=extended).logits[:, -1].double() / temperature, -1)
        second[:, 1] = 0
        second = first @ (second / second.sum(1, keepdim=True))
    for column, expected in ((0, first), (1, second)):
        assert_draws_follow(torch.bincount(ids[:, column], minlength=VOCAB).double().cpu(), expected.cpu(), n)


@pytest.mark.parametrize("device", DEVICES)
def test_the_sampler_log_probs_are_its_own_so_the_mismatch_is_measured_as_under_the_loops(device):
    """A bf16 copy samples for an fp32 trainer (the paper's setting): under greedy decoding the graphs engine draws the
    hf loop's completions, its log-probs are the bf16 sampler's (the loop's, not the trainer's), and the mismatch
    statistic from them is the loop's."""
    trainer = paper_model("smollm2").to(device)
    sampler = cast_parameters(copy.deepcopy(trainer), torch.bfloat16).eval()
    ids, mask = (tensor.to(device) for tensor in prompts(rows=4))
    decoding = Decoding(max_new_tokens=12, eos_id=1, pad_id=0, greedy=True)
    ours = sample_completions(sampler, ids, mask, decoding, engine="graphs")
    loop = sample_completions(sampler, ids, mask, decoding, engine="hf")
    rows = [row for row in range(len(ids)) if row not in diverge_at_a_tie(sampler, ids, mask, ours[0], ours[1],
                                                                           loop[0], loop[1])]
    assert rows
    ids, mask, completion, completion_mask = ids[rows], mask[rows], ours[0][rows], ours[1][rows]
    train = completion_logprobs(trainer, ids, mask, completion, completion_mask).detach() * completion_mask
    stats = mismatch_stats(train, ours[2][rows], completion_mask)
    loops = mismatch_stats(train, loop[2][rows, : completion.shape[1]], completion_mask)
    assert stats["sampler_logp_diff_mean"] > 0   # bf16 is not fp32
    for key in stats:
        assert stats[key] == pytest.approx(loops[key], abs=2e-2)


def test_a_bf16_actor_on_the_graphs_engine_logs_the_mismatch_from_its_sampler(tiny_zoo_paths):
    from testsupport import TINY_TASK

    from mrl.runtime.actor import WorkerSpec, PolicyActor
    from mrl.core.config import GrpoConfig, PlacementConfig, TaskConfig
    from mrl.runtime.rollout import sample_groups
    from mrl.core.seeding import step_generator
    from mrl.core.tasks import make_task

    grpo = GrpoConfig(prompts_per_step=4, group_size=4, max_new_tokens=6, lr=1e-4, engine="graphs")
    actor = PolicyActor(WorkerSpec("B", tiny_zoo_paths["B"], TaskConfig(**TINY_TASK), grpo,
                                    placement=PlacementConfig(dtype="bfloat16")))
    problems = make_task(TaskConfig(**TINY_TASK)).rl_prompts(__import__("random").Random(0), 4)
    stats = actor.rollout(1, problems).sampler
    assert set(stats) == {"sampler_logp_diff_mean", "sampler_logp_diff_max"}
    assert 0.0 < stats["sampler_logp_diff_mean"] <= stats["sampler_logp_diff_max"]
    batch = actor.pending   # drawn again from the step's generator: the sampler's own log-probs, as it drew
    _, _, ids, mask, drawn = sample_groups(actor.sampler, actor.tokenizer, [actor.render(p.prompt) for p in problems],
                                           step_generator(0, 1, "B", actor.device), grpo)
    assert torch.equal(ids, batch.completion_ids) and torch.equal(mask, batch.completion_mask)
    assert stats == mismatch_stats(batch.sample_logp, drawn, mask)


def test_a_model_with_sliding_window_layers_is_refused():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, use_sliding_window=True, sliding_window=8,
                         max_window_layers=1)
    ids, mask = prompts()
    with pytest.raises(ValueError, match="engine graphs: layer types .*sliding_attention.* not allowed"):
        sample_completions(Qwen2ForCausalLM(config).eval(), ids, mask,
                           Decoding(max_new_tokens=3, eos_id=1, pad_id=0, greedy=True), engine="graphs")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU")
@pytest.mark.parametrize("greedy", [True, False], ids=["greedy", "seeded"])
def test_the_captured_step_replays_the_eager_step(greedy):
    """On a GPU: the graphs replayed draw exactly what the same steps draw eagerly, greedy and seeded (the same
    kernels, the same generator offsets)."""
    model = paper_model("llama3.2", torch.bfloat16).cuda()
    ids, mask = (tensor.cuda() for tensor in prompts(rows=6))
    decoding = Decoding(max_new_tokens=100, eos_id=(1, 5), pad_id=0, greedy=greedy, temperature=0.9)
    captured = graphs.graphs_completions(model, ids, mask, decoding, torch.Generator("cuda").manual_seed(1),
                                         capture=True)
    eager = graphs.graphs_completions(model, ids, mask, decoding, torch.Generator("cuda").manual_seed(1),
                                      capture=False)
    for a, b in zip(captured, eager):
        assert torch.equal(a, b)


def test_the_resource_plan_counts_the_graphs_engines_buckets_and_its_draws_logits():
    """engine graphs: the KV cache of the batch and length buckets, and the larger of whole-prompt prefill forwards
    of at most GRAPHS_PREFILL_TOKENS tokens and the decode step's logits with the draw's two fp32 (B, V) tensors."""
    from test_resources import ARCH, _memory

    kv = 2 * 16 * 512 * 768 * 512 * 2 / 1e9   # 512 sequences of 256 + 512 tokens: on the buckets already
    per_token = (3 * 8192 + 2 * 2048 + 2 * 512) * 2 + 2 * 2048 * 4
    paper = _memory(engine="graphs", dtype="bfloat16")
    assert paper["KV cache"] == pytest.approx(kv)
    assert paper["prefill"] == pytest.approx(max(32 * 256 * per_token, 512 * ARCH.vocab * 10) / 1e9)
    assert paper["prefill"] == pytest.approx(512 * ARCH.vocab * 10 / 1e9)   # the draw's logits: 0.66 GB
    odd = _memory(engine="graphs", dtype="bfloat16", sequences=500, prompt_tokens=90)
    assert odd["KV cache"] == pytest.approx(2 * 16 * 512 * 640 * 512 * 2 / 1e9)   # 500 -> 512 rows, 602 -> 640
    few = _memory(engine="graphs", dtype="bfloat16", sequences=8, prompt_tokens=2048)
    assert few["prefill"] == pytest.approx(4 * 2048 * per_token / 1e9)   # four whole prompts a forward
