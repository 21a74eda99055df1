"""The paper profile's first GPU run, reduced: its three policies at their real sizes, each phase's measured memory
peak and tokens per second against the resource plan (docs/paper_profile.md, "What ran where").

The checkpoints cannot be downloaded where this runs, so each policy is a stand-in at its real size: the published
architecture (mrl/data/published_configs: Qwen2.5-0.5B, Llama-3.2-1B, SmolLM2-360M), random weights saved in bf16
as the real checkpoints are, and a word-level tokenizer with exactly the model's vocabulary, the family's chat
template and special tokens, and its generation config's stop ids. Random weights put a stop id at about 1/V per
token, so almost every completion runs to its full length: the plan's worst case. The questions are GSM8K-schema
and MATH-schema files written here; the word-level tokenizer makes their prompts shorter (about 90 tokens) than the
plan's 256, and the plan of each phase is computed at the run's own prompt length. Random weights solve nothing, so
the reward is a coin fixed by the completion's text (`coin_reward`, about 1 in 4, cut-off completions included) and
the exchange passes the peers' successes unverified: the advantages, SGT's rescues and the update's backward are
then what a real step has. The evaluation is scored by the same coin: its accuracies mean nothing.

What runs (configs/paper.yaml otherwise unchanged: bf16 sampler over fp32 masters, gradient checkpointing, micro
batches of 16, 512 new tokens, evaluation at 1,024; the sampling engine is the profile's, generate, or `--engine`'s):

1. SGT on A + B + C sharing one GPU, the process backend (one process per policy, each capped to its profile's
   GPU share: shares sized for two 80 GB GPUs, which bind nothing on one larger GPU), `--steps` steps of
   `--prompts` prompts x 8 samples, greedy evaluation of `--eval-prompts` prompts of each of `--benchmarks`
   (MATH-500's schema by default) at step 0 and at the last step. Per policy and phase of the last step: the
   measured peak (torch.cuda's max_memory_allocated in the policy's own process) beside the plan's prediction
   for that phase (mrl.runtime.resources.policy_memory at this run's batch and prompt length), and tokens per second: of
   the completions drawn (rollout), of the batch's planned prompt + completion length (update) and of the answers
   at their full length (evaluation, timed from the driver: its pipe included).
2. The engines alone on the GPU: B's bf16 sampler draws the same batch with each of `--engines` (by default
   `generate`, `batched`: transformers' continuous batching, and `graphs`: mrl.runtime.graphs_engine's decode step
   captured in CUDA graphs), tokens per second of each and its ratio to generate's.

    python benchmarks/gpu_first_run.py --out results/gpu_first_run [--steps 2] [--prompts 8] [--engine graphs]

Writes report.json (every row) and report.md (the tables) to --out. Refuses to run without a GPU, but for
`--cpu-check` (the script itself checked on a CPU at a short length: no memory is measured there).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
import zlib
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MRL_NUMERICS", "native")   # the CPU contract pins CPU kernels; nothing here is compared bitwise
import mrl  # noqa: E402, F401  (first: the numerics contract, before torch and numpy)
import torch  # noqa: E402

from mrl.runtime.actor import PolicyActor  # noqa: E402
from mrl.core.config import ENGINES  # noqa: E402
from mrl.runtime.resources import phase_peaks  # noqa: E402

NAMES = {"A": "Qwen2.5-0.5B-Instruct", "B": "Llama-3.2-1B-Instruct", "C": "SmolLM2-360M-Instruct"}
CHATML = ("{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
LLAMA3 = ("<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
          "{{ m.content }}<|eot_id|>{% endfor %}{% if add_generation_prompt %}<|start_header_id|>assistant"
          "<|end_header_id|>\n\n{% endif %}")
FAMILY = {  # chat template, special tokens, eos, pad, the generation config's stop tokens
    "A": (CHATML, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "<|im_end|>", "<|endoftext|>",
          ["<|im_end|>", "<|endoftext|>"]),
    "B": (LLAMA3, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>",
                   "<|eot_id|>"], "<|eot_id|>", "<|end_of_text|>", ["<|end_of_text|>", "<|eom_id|>", "<|eot_id|>"]),
    "C": (CHATML, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"], "<|im_end|>", "<|im_end|>", ["<|im_end|>"]),
}
COIN = 4
"""a completion's reward is 1 when crc32(text) % COIN == 0: about one in four"""


def coin_reward(completion_text: str, problem) -> float:
    """A reward that random weights earn as often as a weak policy (about 1 in COIN completions, fixed by the
    text): the groups then have non-zero advantages and SGT finds rescues, so the update runs its backward and
    peer terms as a real step does (math-verify would score every random completion 0 and the update would skip)."""
    return float(zlib.crc32(completion_text.encode()) % COIN == 0)


def cut_off_counts(texts: list[tuple[str, bool]]) -> list[tuple[str, bool]]:
    """completion_texts' (text, well-formed) with every completion well-formed: random weights almost never emit a
    stop id, and mrl's reward rule gives a completion cut off at the length limit 0 whatever its text."""
    return [(text, True) for text, _ in texts]


class CoinRewardActor(PolicyActor):
    """A policy actor whose rollouts and evaluations are scored by coin_reward, cut-off completions included: the
    actor module's completion_texts is wrapped by cut_off_counts in the actor's process (once: the process backend
    holds one actor per process)."""

    def __init__(self, config):
        import mrl.runtime.actor as actor_module

        super().__init__(config)
        self.task.verify = coin_reward
        if not getattr(actor_module.completion_texts, "counts_cut_offs", False):
            texts = actor_module.completion_texts

            def wrapped(*args):
                return cut_off_counts(texts(*args))

            wrapped.counts_cut_offs = True
            actor_module.completion_texts = wrapped


PEOPLE = ["Natalia", "Weng", "Betty", "Julie", "James", "Mark", "Albert", "Ken", "Alexis", "Tina"]


def gsm8k_rows(count: int, offset: int) -> list[dict]:
    """GSM8K-schema rows (question, answer ending '#### n') of about GSM8K's length (60 words)."""
    rows = []
    for i in range(offset, offset + count):
        a, b, c = 3 + i % 17, 5 + i % 11, 2 + i % 7
        who = PEOPLE[i % len(PEOPLE)]
        question = (f"{who} sold {a} boxes of cookies to her friends in April, and then she sold {b} more boxes in "
                    f"May than in April. Each box holds {c} cookies, and every cookie costs one dollar at the school "
                    f"fair where she sells them on weekends with her brother. How many dollars did {who} earn from "
                    f"the cookies she sold in April and May altogether?")
        answer = (a + a + b) * c
        rows.append({"question": question, "answer": f"She sold {a + b} in May.\n#### {answer}"})
    return rows


def write_data(root: Path, train: int, test: int) -> tuple[Path, dict]:
    """GSM8K train and test files and a MATH-500-schema test file under root."""
    root.mkdir(parents=True, exist_ok=True)
    files = {"train": root / "gsm8k_train.jsonl", "gsm8k": root / "gsm8k_test.jsonl", "math500": root / "math500.jsonl"}
    files["train"].write_text("\n".join(json.dumps(r) for r in gsm8k_rows(train, 0)))
    files["gsm8k"].write_text("\n".join(json.dumps(r) for r in gsm8k_rows(test, 10_000)))
    files["math500"].write_text("\n".join(json.dumps(
        {"problem": f"Let $f(x) = {i + 2}x^2 + {i}x - 7$. What is the value of $f({i % 5 + 1})$? Express your answer "
                    "as an integer.", "solution": "...",
         "answer": str((i + 2) * (i % 5 + 1) ** 2 + i * (i % 5 + 1) - 7),
         "subject": "Algebra", "level": 2, "unique_id": f"test/algebra/{i}.json"}) for i in range(test)))
    return files["train"], {"gsm8k": str(files["gsm8k"]), "math500": str(files["math500"])}


def word_tokenizer(vocab_size: int, specials: list[str], eos: str, pad: str, corpus: list[str], template: str):
    """A word-level fast tokenizer of exactly vocab_size ids: the specials, the corpus's words, then filler words."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = list(dict.fromkeys(w for text in corpus for w in pre_tokenizers.Whitespace().pre_tokenize_str(text)
                               for w in [w[0]]))
    vocab = {token: i for i, token in enumerate(["<unk>", *specials, *words])}
    vocab.update({f"w{i}": i for i in range(len(vocab), vocab_size)})
    core = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=core, unk_token="<unk>", eos_token=eos, pad_token=pad,
                                        additional_special_tokens=[s for s in specials if s not in (eos, pad)])
    tokenizer.chat_template = template
    assert len(tokenizer) == vocab_size, (len(tokenizer), vocab_size)
    return tokenizer


def build_stand_in(policy: str, folder: Path, corpus: list[str], seed: int, device: torch.device,
                   layers: int | None = None) -> Path:
    """A checkpoint folder at the real size of NAMES[policy]: config, random bf16 weights, tokenizer, stop ids
    (layers: fewer layers than published, for --cpu-check)."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    from mrl.runtime.resources import PUBLISHED

    values = json.loads((PUBLISHED / f"{NAMES[policy]}.json").read_text())
    values.pop("architectures", None)
    if layers:
        values["num_hidden_layers"] = layers
    config = AutoConfig.for_model(values.pop("model_type"), **values)
    template, specials, eos, pad, stops = FAMILY[policy]
    tokenizer = word_tokenizer(config.vocab_size, specials, eos, pad, corpus, template)
    config.eos_token_id = tokenizer.convert_tokens_to_ids(eos)
    config.pad_token_id = tokenizer.convert_tokens_to_ids(pad)
    torch.manual_seed(seed)
    with device:
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    out = folder / NAMES[policy]
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    GenerationConfig(eos_token_id=tokenizer.convert_tokens_to_ids(stops),
                     pad_token_id=config.pad_token_id).save_pretrained(out)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return out


def prompt_tokens(path: Path, task, chat_template: bool) -> int:
    """The longest rendered prompt of the task's train and test rows, in the policy's tokens (the batch's padded
    length; the plan's prompt_tokens)."""
    from transformers import PreTrainedTokenizerFast

    from mrl.core.batch import prompt_renderer

    tokenizer = PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
    render = prompt_renderer(tokenizer, chat_template)
    problems = [p for rows in (*task.train.values(), *task.test.values()) for p in rows]
    return max(len(tokenizer(render(p.prompt), add_special_tokens=False)["input_ids"]) for p in problems)


TOKENS_ARE = {"rollout": "drawn", "update": "planned", "evaluation": "full length"}
"""what a phase row's tokens count: the completion tokens drawn; the batch's prompts and completions at the
planned lengths; the evaluation's answers at their full length (greedy on random weights never stops)"""


def phase_rows(record, plans: dict, steps: int, eval_tokens: dict) -> list[dict]:
    """Per policy and phase of the last step: the measured peak, the plan's, their ratio, seconds and tokens per
    second. Adam's states are made by the first optimizer step, at the end of step 1's update: the plan of step 1's
    rollout and update leaves them out (the evaluation after it holds them)."""
    rows = []
    last = {row["policy"]: row for row in record.steps if row["step"] == steps}
    evals = {}
    for row in record.evals:
        if row["step"] == steps:
            evals.setdefault(row["policy"], row)
    spans = {}
    for span in record.timeline:
        spans.setdefault((span["worker"], span["phase"]), []).append(span["end"] - span["start"])
    for policy, plan in plans.items():
        memory, tokens = plan["memory"], plan["tokens"]
        step = last[policy]
        eval_seconds = spans.get((policy, "evaluate"), [float("nan")])[-1]
        # step 1's rollout and update come before the first optimizer step makes Adam's states; its evaluation after
        predicted = {**phase_peaks(memory, adam=steps > 1), "evaluation": phase_peaks(memory)["evaluation"]}
        measured = {"rollout": step.get("rollout_peak_gb"), "update": step.get("update_peak_gb"),
                    "evaluation": evals.get(policy, {}).get("eval_peak_gb")}
        seconds = {"rollout": step["rollout_seconds"], "update": step["update_seconds"], "evaluation": eval_seconds}
        counted = {"rollout": step["completion_tokens"], "update": tokens["update"],
                   "evaluation": eval_tokens[policy]}
        for phase in ("rollout", "update", "evaluation"):
            rows.append({"policy": policy, "model": NAMES[policy], "phase": phase,
                         "measured_gb": measured[phase], "plan_gb": predicted[phase],
                         "measured_over_plan": (measured[phase] / predicted[phase]) if measured[phase] else None,
                         "seconds": seconds[phase], "tokens": counted[phase], "tokens_are": TOKENS_ARE[phase],
                         "tokens_per_s": counted[phase] / seconds[phase] if seconds[phase] else None})
    return rows


def engine_rows(path: Path, task, grpo, chat_template: bool, group: int, device: torch.device,
                engines: tuple[str, ...] = ("generate", "batched", "graphs")) -> list[dict]:
    """B's bf16 sampler draws the step's batch with each of `engines`; completion tokens per second of each (the
    second call of each engine is timed, after one warm-up call). An engine that fails is a row with its error."""
    from mrl.runtime.placement import cast_parameters
    from mrl.core.batch import prompt_renderer
    from mrl.runtime.rollout import sample_groups
    from mrl.core.seeding import step_generator
    from mrl.runtime.zoo import load_policy

    policy = load_policy(path)
    cuda = device.type == "cuda"
    sampler = cast_parameters(policy.model.to(device), torch.bfloat16).eval()
    render = prompt_renderer(policy.tokenizer, chat_template)
    prompts = [render(p.prompt) for p in task.train["gsm8k"][:grpo.prompts_per_step]]
    rows = []
    for engine in engines:
        try:
            for attempt in range(2):
                if cuda:
                    torch.cuda.synchronize()
                    torch.cuda.reset_peak_memory_stats(device)
                start = time.perf_counter()
                _, _, completion_ids, completion_mask, _ = sample_groups(
                    sampler, policy.tokenizer, prompts, step_generator(0, attempt, "B", device),
                    dataclasses.replace(grpo, group_size=group, engine=engine), with_logprobs=False)
                if cuda:
                    torch.cuda.synchronize()
                seconds = time.perf_counter() - start
        except Exception as err:  # noqa: BLE001  (recorded; the other engines still run)
            rows.append({"engine": engine, "error": f"{type(err).__name__}: {err}"[:500]})
            continue
        tokens = int(completion_mask.sum().item())
        rows.append({"engine": engine, "sequences": completion_ids.shape[0], "tokens": tokens, "seconds": seconds,
                     "tokens_per_s": tokens / seconds,
                     "peak_gb": torch.cuda.max_memory_allocated(device) / 1e9 if cuda else None})
    return rows


def phases_of(report: dict) -> list[dict]:
    """phase_rows of a report (report.json): greedy answers on random weights run to the full evaluation length."""
    import types

    args, setting = report["args"], report["setting"]
    eval_tokens = len(args["benchmarks"].split(",")) * args["eval_prompts"] * setting["eval_max_new_tokens"]
    record = types.SimpleNamespace(steps=report["steps"], evals=report["evals"], timeline=report["timeline"])
    return phase_rows(record, report["plans"], args["steps"], {name: eval_tokens for name in report["plans"]})


def mismatch_rows(steps: list[dict]) -> list[dict]:
    """Per policy and step: the sampler/trainer mismatch, SGT's rescues and the reward."""
    keys = ("policy", "step", "sampler_logp_diff_mean", "sampler_logp_diff_max", "rescue_size", "reward")
    return [{k: row.get(k) for k in keys} for row in steps]


def summary(phases: list[dict], mismatch: list[dict], engines: list[dict] | None,
            gpu_gb: float | None = None) -> list[str]:
    """The report's sentences, from its rows: the measured peaks over the plan's and their sum against the GPU's
    memory, the mismatch, the engines."""
    ratios = [row["measured_over_plan"] for row in phases if row["measured_over_plan"]]
    if not ratios:
        return ["- No phase's memory was measured (no GPU)."]
    lines = [f"- Measured peak over the plan's, over the {len(ratios)} phases measured: from {min(ratios):.2f} to "
             f"{max(ratios):.2f} (allocated memory: the allocator's reserve comes on top)."]
    peaks: dict = {}
    for row in phases:
        if row["measured_gb"]:
            peaks[row["policy"]] = max(peaks.get(row["policy"], 0.0), row["measured_gb"])
    if gpu_gb and len(peaks) > 1:
        lines.append(f"- The policies' peaks, each in its own process, add up to {sum(peaks.values()):.1f} GB of the "
                     f"GPU's {gpu_gb:.1f} GB (an upper bound: they need not coincide).")
    means = [row["sampler_logp_diff_mean"] for row in mismatch if row["sampler_logp_diff_mean"] is not None]
    if means:
        largest = max(row["sampler_logp_diff_max"] for row in mismatch if row["sampler_logp_diff_max"] is not None)
        lines.append(f"- Sampler/trainer mismatch |log pi_train - log pi_sampler|: its mean per token from "
                     f"{min(means):.3g} to {max(means):.3g} over the policies' steps, its largest token {largest:.3g}.")
    rates = {row["engine"]: row.get("tokens_per_s") for row in engines or []}
    others = [f"{engine} {rate / rates['generate']:.2f}" for engine, rate in rates.items()
              if rate and engine != "generate" and rates.get("generate")]
    if others:
        lines.append(f"- Engines, tokens per second over generate's: {', '.join(others)}.")
    return lines


def render(report: dict) -> str:
    """report.md of a report (report.json): the setting, the summary from its rows, its tables."""
    args, setting = report["args"], report["setting"]
    names, benchmarks = list(report["plans"]), args["benchmarks"].split(",")
    phases, mismatch = phases_of(report), mismatch_rows(report["steps"])
    text = [f"# The paper profile's first GPU run, reduced ({report['gpu']}, torch {report['torch']}, "
            f"transformers {report['transformers']})", "",
            f"SGT on {'+'.join(names)}, process backend on one GPU, {args['steps']} steps of {args['prompts']} "
            f"prompts x {setting['group_size']}, {setting['max_new_tokens']} new tokens, engine "
            f"{setting.get('engine', 'generate')}; evaluation of "
            f"{args['eval_prompts']} prompts of {', '.join(benchmarks)} at {setting['eval_max_new_tokens']} tokens. "
            f"Phases of step "
            f"{args['steps']}.", "", *summary(phases, mismatch, report.get("engines"), report.get("gpu_memory_gb")),
            "",
            markdown(phases), "", "## Sampler/trainer mismatch per step", "", markdown(mismatch)]
    if "engines" in report:
        text += ["", "## Engines (B's bf16 sampler alone on the GPU)", "", markdown(report["engines"])]
    return "\n".join(text) + "\n"


def markdown(rows: list[dict]) -> str:
    import pandas as pd

    return pd.DataFrame(rows).to_markdown(index=False, floatfmt=".3g")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default="results/gpu_first_run")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--prompts", type=int, default=8, help="prompts per step (the paper's: 64)")
    parser.add_argument("--eval-prompts", type=int, default=8, help="prompts per benchmark in each evaluation")
    parser.add_argument("--policies", default="A,B,C")
    parser.add_argument("--engine", default=None, choices=ENGINES,
                        help="the sampling engine of the three-policy run (default: the paper profile's)")
    parser.add_argument("--engines", default="generate,batched,graphs",
                        help="the engines compared alone on B's sampler, of " + ",".join(ENGINES))
    parser.add_argument("--skip-engines", action="store_true")
    parser.add_argument("--cpu-check", action="store_true",
                        help="run on the CPU with 2-layer stand-ins, 8 new tokens (4 in the evaluation): checks the "
                             "script, measures nothing")
    parser.add_argument("--benchmarks", default="math500",
                        help="the test files evaluated, of gsm8k,math500 (MATH-500: the longer answers, the plan's "
                             "evaluation term)")
    parser.add_argument("--render", metavar="REPORT_JSON",
                        help="rewrite report.md beside a report.json from its rows (no run, no GPU)")
    args = parser.parse_args()
    if args.render:
        path = Path(args.render)
        path.with_suffix(".md").write_text(render(json.loads(path.read_text())))
        return
    unknown = [engine for engine in args.engines.split(",") if engine not in ENGINES]
    if unknown:
        sys.exit(f"--engines {unknown} are not allowed; expected some of {list(ENGINES)}")
    if not torch.cuda.is_available() and not args.cpu_check:
        sys.exit("gpu_first_run needs a CUDA GPU (torch.cuda.is_available() is False); --cpu-check checks the "
                 "script on the CPU")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

    from mrl.core.config import RunnerConfig
    from mrl.core.probes import probe_config
    from mrl.profiles import load_profile
    from mrl.runtime.resources import Workload, architecture, policy_memory
    from mrl.runtime.runner import run_concurrent
    from mrl.runtime.spec import Run, Variant
    from mrl.core.tasks import make_task

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"args": vars(args), "torch": torch.__version__,
                    "gpu": torch.cuda.get_device_name(0) if device.type == "cuda" else "none (--cpu-check)",
                    "gpu_memory_gb": torch.cuda.get_device_properties(0).total_memory / 1e9
                    if device.type == "cuda" else None}
    import transformers
    report["transformers"] = transformers.__version__

    def save():
        (out / "report.json").write_text(json.dumps(report, indent=1, default=str))

    profile = load_profile("paper")
    names = args.policies.split(",")
    began = time.perf_counter()
    train_file, test_files = write_data(out / "data", 4 * args.prompts * args.steps, args.eval_prompts)
    test_files = {name: test_files[name] for name in args.benchmarks.split(",")}
    task_cfg = dataclasses.replace(profile.task, data_files=str(train_file), test_files=test_files,
                                   test_per_skill=args.eval_prompts)
    task = make_task(task_cfg)
    corpus = [p.prompt for rows in (*task.train.values(), *task.test.values()) for p in rows]
    paths = {name: build_stand_in(name, out / "checkpoints", corpus, i, device, 2 if args.cpu_check else None)
             for i, name in enumerate(names)}
    report["build_seconds"] = time.perf_counter() - began
    print(f"stand-ins built in {report['build_seconds']:.0f} s", flush=True)

    grpo = dataclasses.replace(profile.grpo, steps=args.steps, prompts_per_step=args.prompts, eval_every=args.steps,
                               engine=args.engine or profile.grpo.engine)
    if args.cpu_check:
        grpo = dataclasses.replace(grpo, max_new_tokens=8, eval_max_new_tokens=4)
    group = grpo.group_size
    report["setting"] = {"group_size": group, "max_new_tokens": grpo.max_new_tokens, "engine": grpo.engine,
                         "eval_max_new_tokens": grpo.eval_max_new_tokens or grpo.max_new_tokens}
    plans = {}
    for name in names:
        prompt = prompt_tokens(paths[name], task, task_cfg.chat_template)
        placement = profile.placement[name]
        eval_new = grpo.eval_max_new_tokens or grpo.max_new_tokens
        workload = Workload(args.prompts * group, prompt, grpo.max_new_tokens, reference=False, engine=grpo.engine,
                            eval_sequences=min(grpo.eval_batch, args.eval_prompts), eval_new_tokens=eval_new)
        memory = policy_memory(architecture(paths[name]), workload, placement)
        plans[name] = {"prompt_tokens": prompt, "memory": memory,
                       "tokens": {"update": args.prompts * group * (prompt + grpo.max_new_tokens)}}
    report["plans"] = plans
    save()

    started = time.perf_counter()
    # reverify off: the peers' coin successes reach SGT as claimed (the driver's math-verify would refuse them)
    config = dataclasses.replace(profile, task=task_cfg, grpo=grpo, threads=2,
                                 runner=RunnerConfig(backend="process", step_timeout=900),
                                 placement={name: profile.placement[name] for name in names})
    run = Run(config, paths, probe_config("sgt"), grpo.seed, grpo.steps, Variant(runner={"reverify": False}))
    record = run_concurrent(run, actor_cls=CoinRewardActor, progress=False)
    report["run_seconds"] = time.perf_counter() - started
    report["steps"], report["evals"], report["timeline"] = record.steps, record.evals, record.timeline
    report["counters"] = record.counters
    save()
    print(f"SGT on {'+'.join(names)}: {report['run_seconds']:.0f} s", flush=True)

    if not args.skip_engines:
        try:
            report["engines"] = engine_rows(paths[names[min(1, len(names) - 1)]], task, grpo,
                                            task_cfg.chat_template, group, device, tuple(args.engines.split(",")))
        except Exception as err:  # noqa: BLE001  (the run's rows above are kept; the failure is reported)
            report["engines"] = [{"engine": "failed", "error": f"{type(err).__name__}: {err}"[:500]}]
        save()

    text = render(report)
    (out / "report.md").write_text(text)
    print(text, flush=True)


if __name__ == "__main__":
    main()
