"""The ids that end a completion of a checkpoint: its EOS, and the stop ids its generation config lists."""
from __future__ import annotations

import functools
from pathlib import Path

from transformers import GenerationConfig


def stop_ids(tokenizer) -> tuple[int, ...]:
    """Every id that ends a completion of this tokenizer's checkpoint: its EOS first (the id mrl appends where it
    writes a completion), then the `eos_token_id`s of the checkpoint's generation config, which may list several
    (Llama 3's <|end_of_text|>, <|eom_id|> and <|eot_id|>; Qwen2.5's <|im_end|> and <|endoftext|>), read from the
    folder the tokenizer was loaded from. A tokenizer built in memory, or a folder without a generation config
    (the zoo's, whose one EOS is the tokenizer's), has its EOS alone."""
    return _stop_ids(str(getattr(tokenizer, "name_or_path", "") or ""), tokenizer.eos_token_id)


@functools.lru_cache(maxsize=64)
def _stop_ids(folder: str, eos_id: int) -> tuple[int, ...]:
    ids = [eos_id]
    if folder and (Path(folder) / "generation_config.json").is_file():
        extra = GenerationConfig.from_pretrained(folder).eos_token_id
        ids += [extra] if isinstance(extra, int) else list(extra or [])
    return tuple(dict.fromkeys(i for i in ids if i is not None))
