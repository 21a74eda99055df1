"""What the tour notebook (01_tour) shows: how each tokenizer splits a prompt, one prompt's samples per policy,
a THL alignment drawn as coloured byte groups over both tokenizations, and the SEE records of one logged step."""
from __future__ import annotations

import dataclasses
import html
from pathlib import Path

import pandas as pd
import torch

from mrl.core.thl import Alignment, token_pieces
from mrl.reports.palette import policy_colour
from mrl.reports.substrate import token_split
from mrl.runtime.experience_log import replay
from mrl.runtime.rollout import sample_records

GROUP_COLOURS = ["#fde0dd", "#d9f0d3", "#deebf7", "#fff2cc", "#e5d8f0", "#d0f0f0", "#fbe3c8", "#e8e8e8"]
"""background colours of consecutive THL groups (cycled); the same group has the same colour on both sides"""


def tokenization_table(tokenizers: dict, text: str) -> pd.DataFrame:
    """How each tokenizer splits `text`: one row per tokenizer with its tokens (as the tokenizer writes them,
    joined by spaces) and their count."""
    rows = []
    for name, tokenizer in tokenizers.items():
        tokens = token_split(tokenizer, text)
        rows.append({"policy": name, "tokenizer": type(tokenizer.backend_tokenizer.model).__name__,
                     "tokens": " ".join(tokens), "count": len(tokens)})
    return pd.DataFrame(rows)


def prompt_samples(policies: dict, problem, verify, n: int, seed: int, max_new_tokens: int) -> pd.DataFrame:
    """`n` sampled completions of one prompt from each policy ({name: mrl.runtime.zoo.Policy}), temperature 1, the
    generator seeded with `seed` per policy: policy, completion, reward (the task's verifier), tokens."""
    rows = []
    for name, policy in policies.items():
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            records = sample_records(policy.model, policy.tokenizer, [problem.prompt] * n, generator, max_new_tokens)
        rows += [{"policy": name, "completion": r["text"], "reward": verify(r["text"], problem),
                  "tokens": len(r["ids"])} for r in records]
    return pd.DataFrame(rows)


def _token_spans(pieces: list[bytes], groups) -> str:
    cells = []
    for piece, group in zip(pieces, groups):
        shown = html.escape(piece.decode("utf-8", errors="replace")).replace(" ", "&nbsp;") or "&empty;"
        cells.append(f'<span title="group {group}" style="background:{GROUP_COLOURS[group % len(GROUP_COLOURS)]};'
                     f'border:1px solid #999;border-radius:3px;padding:1px 4px;margin:1px;'
                     f'font-family:monospace;display:inline-block">{shown}</span>')
    return "".join(cells)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def alignment_html(alignment: Alignment, src_tokenizer, dst_tokenizer, src_name: str, dst_name: str) -> str:
    """One THL alignment as HTML: the source's tokens above the receiver's, each token on its group's
    background colour, so the byte groups THL moves values through line up; exact or coarse said in the title.
    An end-of-sequence token shows as its token text."""
    def pieces(tokenizer, ids):
        text = token_pieces(tokenizer, [i for i in ids if i != tokenizer.eos_token_id])
        return text + [tokenizer.eos_token.encode()] * sum(i == tokenizer.eos_token_id for i in ids)

    rows = [(src_name, pieces(src_tokenizer, alignment.src_ids), alignment.src_group),
            (dst_name, pieces(dst_tokenizer, alignment.dst_ids), alignment.dst_group)]
    state = "exact" if alignment.exact else "coarse (one group: a side cannot reproduce the text)"
    lines = [f'<div style="margin:4px 0"><b>{html.escape(repr(alignment.text))}</b>: '
             f'{_count(alignment.n_groups, "group")}, {state}</div>']
    for name, token_bytes, groups in rows:
        lines.append(f'<div style="margin:2px 0"><span style="display:inline-block;width:13em;'
                     f'color:{policy_colour(name.split()[0])}"><b>{html.escape(name)}</b> '
                     f'({_count(len(token_bytes), "token")})</span>{_token_spans(token_bytes, groups)}</div>')
    return "\n".join(lines)


def logged_records(log_dir: str | Path, step: int) -> pd.DataFrame:
    """The records SEE accepted at one step of an experience log (read back and re-validated by
    mrl.runtime.experience_log.replay), one row per record with its kind and fields; token ids and log-probs left
    out."""
    rows = [{"kind": record.kind, **dataclasses.asdict(record)} for logged, record in replay(log_dir)
            if logged == step]
    frame = pd.DataFrame(rows)
    return frame.drop(columns=[c for c in ("token_ids", "logps") if c in frame.columns])
