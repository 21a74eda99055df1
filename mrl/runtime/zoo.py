"""The tiny heterogeneous model zoo: real transformers checkpoints with locally trained tokenizers.

Each family is an architecture (gpt2, llama, qwen2) built from config, a tokenizer trained with
`tokenizers` on the task corpus of all skills (byte-level BPE, Unigram, WordPiece) and saved as a
`PreTrainedTokenizerFast`, and a supervised warm-up on the family's skill mixture (docs/architecture.md, The task and
the zoo). Built once into `data/models/<task>/<family>-<hash>/` and rebuilt whenever its config changes.
"""
from __future__ import annotations

import json
import math
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from tqdm.auto import tqdm
from transformers import (AutoModelForCausalLM, GPT2Config, GPTNeoXConfig, LlamaConfig, MistralConfig,
                          PreTrainedTokenizerFast, Qwen2Config)
from transformers.utils import logging as hf_logging

from mrl import numerics
from mrl.core.config import FamilyConfig, TaskConfig, WarmupConfig, ZooConfig
from mrl.core.seeding import torch_threads
from mrl.core.tasks import ArithTask
from mrl.core.validation import config_hash, to_dict
from mrl.fingerprint import zoo_fingerprint
from mrl.runtime.pools import map_in_processes
from mrl.runtime.results import machine, repo_root
from mrl.runtime.rollout import completion_logprobs

SPECIAL_TOKENS = ["<pad>", "<eos>", "<unk>"]  # ids 0, 1, 2 in every family


def train_tokenizer(kind: str, corpus: list[str], vocab_size: int, max_length: int) -> PreTrainedTokenizerFast:
    """Train a tokenizer of `kind` on `corpus`; pad/eos/unk are ids 0/1/2, left padding.

    bpe: GPT-2 byte-level BPE (merges frequent 2-digit numbers); unigram: SentencePiece-style
    Unigram over punctuation/space/single-digit pieces (char-level on numbers); wordpiece: BERT
    WordPiece with '##' continuations (drops spaces: its decode is lossy by design); char: one token per
    character of the corpus (a word-level model over single characters; its vocabulary is the corpus's alphabet,
    whatever vocab_size says).
    """
    if kind == "char":
        alphabet = sorted({c for text in corpus for c in text} | set("0123456789"))
        tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(SPECIAL_TOKENS + alphabet)},
                                         unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        tok.decoder = decoders.Fuse()
        return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
                                       padding_side="left", model_max_length=max_length)
    if kind == "bpe":
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, initial_alphabet=[],
                                      show_progress=False)
    elif kind == "unigram":
        tok = Tokenizer(models.Unigram())
        tok.normalizer = normalizers.NFKC()
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Punctuation(), pre_tokenizers.Split(" ", "isolated"),
            pre_tokenizers.Digits(individual_digits=True)])
        tok.decoder = decoders.Fuse()
        trainer = trainers.UnigramTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, unk_token="<unk>",
                                          show_progress=False)
    elif kind == "wordpiece":
        tok = Tokenizer(models.WordPiece(unk_token="<unk>", continuing_subword_prefix="##"))
        tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
        trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                            continuing_subword_prefix="##", show_progress=False)
    else:
        raise ValueError(f"tokenizer kind {kind!r} is not allowed; expected one of ['bpe', 'unigram', 'wordpiece', "
                         f"'char']")
    tok.train_from_iterator(corpus, trainer=trainer)
    if kind == "unigram":
        # the Unigram trainer orders pieces of equal score in a run-dependent way (same pieces and scores, other
        # ids); renumber by score, then piece, so a rebuilt zoo is bit-identical
        learnt = json.loads(tok.to_str())["model"]["vocab"]
        specials = [entry for entry in learnt if entry[0] in SPECIAL_TOKENS]
        others = sorted((entry for entry in learnt if entry[0] not in SPECIAL_TOKENS), key=lambda e: (-e[1], e[0]))
        ordered = sorted(specials, key=lambda e: SPECIAL_TOKENS.index(e[0])) + others
        tok.model = models.Unigram([(piece, score) for piece, score in ordered], unk_id=SPECIAL_TOKENS.index("<unk>"))
    if kind == "wordpiece":
        # the WordPiece trainer assigns ids in a run-dependent order (same tokens, shuffled ids);
        # renumber canonically so a rebuilt zoo is bit-identical
        learnt = sorted(set(tok.get_vocab()) - set(SPECIAL_TOKENS), key=lambda t: (t.startswith("##"), len(t), t))
        vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS + learnt)}
        tok.model = models.WordPiece(vocab=vocab, unk_token="<unk>", continuing_subword_prefix="##")
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>",
                                   padding_side="left", model_max_length=max_length)


def check_composition(tokenizer, problems) -> None:
    """enc(prompt) + enc(answer) == enc(prompt + answer): the RL completion is what the warm-up taught."""
    for p in problems:
        joint = tokenizer.encode(p.prompt + p.answer, add_special_tokens=False)
        split = tokenizer.encode(p.prompt, add_special_tokens=False) \
            + tokenizer.encode(p.answer, add_special_tokens=False)
        if joint != split:
            raise ValueError(f"tokenizer does not compose prompt and answer for {p.prompt + p.answer!r}: "
                             f"{tokenizer.convert_ids_to_tokens(joint)} vs {tokenizer.convert_ids_to_tokens(split)}")


def build_model(family: FamilyConfig, vocab_size: int, max_positions: int, seed: int):
    """A randomly initialised causal LM of the family's architecture, dropout 0."""
    torch.manual_seed(seed)
    ids = dict(pad_token_id=0, eos_token_id=1, bos_token_id=1)
    if family.arch == "gpt2":
        config = GPT2Config(vocab_size=vocab_size, n_positions=max_positions, n_embd=family.d_model,
                            n_layer=family.n_layers, n_head=family.n_heads, n_inner=family.d_ff, resid_pdrop=0.0,
                            embd_pdrop=0.0, attn_pdrop=0.0, **ids)
    elif family.arch == "gpt_neox":  # parallel attention and MLP, rotary on a quarter of each head, no GQA
        config = GPTNeoXConfig(vocab_size=vocab_size, hidden_size=family.d_model, intermediate_size=family.d_ff,
                               num_hidden_layers=family.n_layers, num_attention_heads=family.n_heads,
                               max_position_embeddings=max_positions, rotary_pct=0.25, use_parallel_residual=True,
                               hidden_dropout=0.0, attention_dropout=0.0, tie_word_embeddings=False, **ids)
    else:
        cls = {"llama": LlamaConfig, "qwen2": Qwen2Config, "mistral": MistralConfig}[family.arch]
        extra = {"sliding_window": None} if family.arch == "mistral" else {}
        config = cls(vocab_size=vocab_size, hidden_size=family.d_model, intermediate_size=family.d_ff,
                     num_hidden_layers=family.n_layers, num_attention_heads=family.n_heads,
                     num_key_value_heads=family.n_kv_heads, max_position_embeddings=max_positions,
                     tie_word_embeddings=True, attention_dropout=0.0, **extra, **ids)
    return AutoModelForCausalLM.from_config(config)


def _encode_sources(tokenizer, task: ArithTask, keys) -> dict[str, list[tuple[list[int], list[int]]]]:
    eos = tokenizer.eos_token_id
    out = {}
    for key in keys:
        problems = task.source(key)
        prompts = tokenizer([p.prompt for p in problems], add_special_tokens=False)["input_ids"]
        answers = tokenizer([p.answer for p in problems], add_special_tokens=False)["input_ids"]
        out[key] = [(q, a + [eos]) for q, a in zip(prompts, answers)]
    return out


def _collate(examples: list[tuple[list[int], list[int]]], pad_id: int):
    """Left-pad prompts and right-pad answers: (B, P) prompt ids/mask and (B, T) answer ids/mask (int64), each built
    from padded Python lists in one tensor call (a row at a time took 1-2% of a held-out warm-up step)."""
    p_len = max(len(q) for q, _ in examples)
    t_len = max(len(a) for _, a in examples)
    prompt = torch.tensor([[pad_id] * (p_len - len(q)) + q for q, _ in examples], dtype=torch.long)
    prompt_mask = torch.tensor([[0] * (p_len - len(q)) + [1] * len(q) for q, _ in examples], dtype=torch.long)
    answer = torch.tensor([a + [pad_id] * (t_len - len(a)) for _, a in examples], dtype=torch.long)
    answer_mask = torch.tensor([[1] * len(a) + [0] * (t_len - len(a)) for _, a in examples], dtype=torch.long)
    return prompt, prompt_mask, answer, answer_mask


def warm_up(model, tokenizer, task: ArithTask, family: FamilyConfig, cfg: WarmupConfig, progress: bool = True,
            position: int = 0) -> list[float]:
    """Supervised warm-up: completion-only cross-entropy on the family's skill mixture.

    Each step draws `batch_size` examples: the mixture key by its weight, then a problem of that
    key uniformly. AdamW, linear warm-up then cosine decay, gradient clipping. Returns the loss curve.
    The forward is mrl.runtime.fast's where it knows the model (equal to transformers' within 1e-5), under bf16
    autocast when cfg.precision is bf16.
    """
    rng = random.Random(cfg.seed)
    keys, weights = zip(*sorted(family.warmup_mix.items()))
    sources = _encode_sources(tokenizer, task, keys)
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=0.0, fused=True)

    def lr_at(step):
        if step < cfg.lr_warmup_steps:
            return (step + 1) / cfg.lr_warmup_steps
        frac = (step - cfg.lr_warmup_steps) / max(1, cfg.steps - cfg.lr_warmup_steps)
        return 0.5 * (1 + math.cos(math.pi * frac))

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_at)
    model.train()
    losses = []
    bar = tqdm(range(cfg.steps), desc=f"warm-up {family.name}", disable=not progress, position=position,
               mininterval=5, leave=True)
    for _ in bar:
        batch = [rng.choice(sources[k]) for k in rng.choices(keys, weights, k=cfg.batch_size)]
        loss = warmup_step(model, optimizer, _collate(batch, tokenizer.pad_token_id), cfg.precision, cfg.grad_clip)
        scheduler.step()
        losses.append(loss)
        bar.set_postfix(loss=f"{loss:.3f}", refresh=False)
    model.eval()
    return losses


def warmup_step(model, optimizer, batch: tuple, precision: str, grad_clip: float, engine: str = "fast") -> float:
    """One supervised step on a collated batch (prompt, prompt_mask, answer, answer_mask), each (N, L): the
    completion-only cross-entropy -sum(mask * log pi(answer | prompt)) / sum(mask), its backward (matmuls under
    bf16 autocast when precision is bf16), the global gradient norm clipped to grad_clip, one optimizer step.
    Returns the loss."""
    prompt, prompt_mask, answer, answer_mask = batch
    device = next(model.parameters()).device.type
    with torch.autocast(device, dtype=torch.bfloat16, enabled=precision == "bf16"):
        logp = completion_logprobs(model, prompt, prompt_mask, answer, answer_mask, engine=engine)
    loss = -(logp * answer_mask).sum() / answer_mask.sum()
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()


@dataclass
class Policy:
    """A built zoo member: its family config, model, tokenizer and warm-up record."""

    family: FamilyConfig | None   # None for a pretrained checkpoint (paper profile)
    model: object
    tokenizer: PreTrainedTokenizerFast
    path: Path
    record: dict

    @property
    def name(self) -> str:
        return self.family.name if self.family else self.path.name

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())


def family_dir(root: Path, task_cfg: TaskConfig, family: FamilyConfig, zoo_cfg: ZooConfig) -> Path:
    """Cache folder of one family: its name plus a hash of everything its weights depend on (the configs and the
    code of the warm-up, mrl.fingerprint.zoo_fingerprint, so a zoo never outlives the code that built it, and the
    numerics mode, mrl.numerics.mode(), whose kernels round otherwise)."""
    key = {"task": to_dict(task_cfg), "family": to_dict(family), "warmup": to_dict(zoo_cfg.warmup),
           "max_positions": zoo_cfg.max_positions, "code": zoo_fingerprint(), "numerics": numerics.mode()}
    return Path(root) / task_cfg.name / f"{family.name}-{config_hash(key)}"


def load_policy(path: str | Path, family: FamilyConfig | None = None) -> Policy:
    """Load a saved zoo member (a plain transformers checkpoint folder plus zoo.json), or a pretrained
    checkpoint folder without zoo.json (the paper profile: family None; pad falls back to EOS)."""
    path = Path(path)
    if (path / "zoo.json").exists():
        record = json.loads((path / "zoo.json").read_text())
        family = family or FamilyConfig(**record["family"])
    else:
        record = {"pretrained": str(path)}
    tokenizer = PreTrainedTokenizerFast.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    hf_logging.disable_progress_bar()
    model = AutoModelForCausalLM.from_pretrained(path)
    model.eval()
    return Policy(family, model, tokenizer, path, record)


def _build_family(args) -> str:
    """Train the tokenizer, build and warm up one family with `threads` torch threads, save atomically."""
    with torch_threads(args[4]):
        return _build_family_with_threads(*args)


def _build_family_with_threads(task_cfg, family, zoo_cfg, out, threads, progress, position) -> str:
    numerics.require()
    hf_logging.disable_progress_bar()
    task = ArithTask(task_cfg)
    tokenizer = train_tokenizer(family.tokenizer, task.corpus, family.vocab_size, zoo_cfg.max_positions)
    check_composition(tokenizer, [p for s in task.test for p in task.test[s][:50]])
    model = build_model(family, len(tokenizer), zoo_cfg.max_positions, zoo_cfg.warmup.seed)
    losses = warm_up(model, tokenizer, task, family, zoo_cfg.warmup, progress, position)
    tmp = Path(f"{out}.tmp-{os.getpid()}")  # this process's own: two builds of one family never share a folder
    tmp.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    record = {"family": to_dict(family), "task": to_dict(task_cfg), "warmup": to_dict(zoo_cfg.warmup),
              "max_positions": zoo_cfg.max_positions, "warmup_loss": losses,
              "n_params": sum(p.numel() for p in model.parameters()), "vocab_size": len(tokenizer),
              "torch_threads": threads, "machine": machine()}
    (tmp / "zoo.json").write_text(json.dumps(record))
    try:
        tmp.rename(out)  # atomic: a half-built family is never mistaken for a built one
    except OSError:
        if not (out / "zoo.json").exists():
            raise
        shutil.rmtree(tmp)  # another process (a notebook, a test) built the same family first: the same bits
    return str(out)


RELATIVE_TOKENS = {"bpe": 1.0, "wordpiece": 1.0, "unigram": 1.66, "char": 1.66}
"""tokens per corpus text relative to BPE's (arith-forms: bpe 7.8, wordpiece 7.8, unigram and char 12.9, which split
numbers into digits): the warm-up cost estimate's sequence length"""


def warmup_cost(family: FamilyConfig, zoo_cfg: ZooConfig) -> float:
    """Relative cost of a family's warm-up, to start the longest first: steps x batch x the tokenizer's relative
    tokens per example x the matmul multiply-adds per token (attention projections, output projection, MLP of
    every layer). An estimate that orders jobs; it changes no bits."""
    gated = family.arch not in ("gpt2", "gpt_neox")   # llama, qwen2, mistral: SwiGLU and grouped-query attention
    d_model = family.d_model
    kv_width = d_model // family.n_heads * (family.n_kv_heads if gated else family.n_heads)
    mlp_matrices = 3 if gated else 2
    per_token = family.n_layers * (d_model * (2 * d_model + 2 * kv_width) + mlp_matrices * d_model * family.d_ff)
    return zoo_cfg.warmup.steps * zoo_cfg.warmup.batch_size * RELATIVE_TOKENS.get(family.tokenizer, 1.0) * per_token


def build_zoos(task_cfg: TaskConfig, zoo_cfgs: list[ZooConfig], root: str | Path | None = None,
               progress: bool = True) -> list[dict[str, Policy]]:
    """Build (or load from the cache) every family of several zoos of one task (zoos that differ in their warm-up
    seed, say); returns one {name: Policy} per config, in order.

    root: the cache folder, by default data/models/ of the checkout (whatever the working directory). Every missing
    family of every zoo is one job, each in the folder build_zoo gives it (family_dir) with the same bits; the jobs
    run longest first (warmup_cost) in one pool of max(workers) worker processes with one torch thread each, so a
    process that finishes a short warm-up starts the next job while a long one runs. A family that two configs share
    is built once; cached ones are loaded. One worker (or one job) builds inline. A warm-up process that dies or
    cannot start (a script without its `if __name__ == "__main__":` guard) raises mrl.runtime.pools.PoolBroken.
    """
    root = Path(root) if root is not None else repo_root() / "data" / "models"
    dirs = [{f.name: family_dir(root, task_cfg, f, zoo_cfg) for f in zoo_cfg.families} for zoo_cfg in zoo_cfgs]
    missing = {}   # folder -> (family, zoo config): each missing family once
    for zoo_cfg, zoo_dirs in zip(zoo_cfgs, dirs):
        for f in zoo_cfg.families:
            if not zoo_dirs[f.name].exists():
                missing.setdefault(zoo_dirs[f.name], (f, zoo_cfg))
    order = sorted(missing, key=lambda out: -warmup_cost(*missing[out]))   # stable: ties keep the configs' order
    workers = max((zoo_cfg.workers for zoo_cfg in zoo_cfgs), default=1)
    # one torch thread per warm-up: with two, CPU backward kernels were not bit-reproducible here
    jobs = [(task_cfg, *missing[out], out, 1, progress, i % workers) for i, out in enumerate(order)]
    if workers > 1 and len(jobs) > 1:
        map_in_processes(_build_family, jobs, min(workers, len(jobs)), "the zoo's warm-up")
    else:
        for job in jobs:
            _build_family(job)
    return [{f.name: load_policy(zoo_dirs[f.name], f) for f in zoo_cfg.families}
            for zoo_cfg, zoo_dirs in zip(zoo_cfgs, dirs)]


def build_zoo(task_cfg: TaskConfig, zoo_cfg: ZooConfig, root: str | Path | None = None,
              progress: bool = True) -> dict[str, Policy]:
    """Build (or load from the cache) every family of the zoo; returns {name: Policy}: build_zoos of this one zoo.

    root: the cache folder, by default data/models/ of the checkout (whatever the working directory).
    Missing families are built in `zoo_cfg.workers` worker processes with one torch thread each
    (deterministic for a fixed seed); cached ones are loaded. A warm-up process that dies or cannot start (a script
    without its `if __name__ == "__main__":` guard) raises mrl.runtime.pools.PoolBroken.
    """
    return build_zoos(task_cfg, [zoo_cfg], root, progress)[0]
