"""What the tour notebook (01_tour) shows: whose zoo it runs on, how each tokenizer splits a prompt, one prompt's
samples per policy, a THL alignment drawn as coloured byte groups over both tokenizations, the SEE records of one
logged step, and what its SGT run learned."""
from __future__ import annotations

import dataclasses
import html
from pathlib import Path

import pandas as pd
import torch

from mrl.core.thl import Alignment, token_pieces
from mrl.core.validation import require
from mrl.paths import repo_root
from mrl.profiles import PROFILES, load_profile
from mrl.reports.palette import policy_colour
from mrl.reports.substrate import token_split
from mrl.runtime.experience_log import replay
from mrl.runtime.rollout import sample_records
from mrl.runtime.zoo import family_dir

GROUP_COLOURS = ["#fde0dd", "#d9f0d3", "#deebf7", "#fff2cc", "#e5d8f0", "#d0f0f0", "#fbe3c8", "#e8e8e8"]
"""background colours of consecutive THL groups (cycled); the same group has the same colour on both sides"""


TOUR_PROFILES = ("auto", *PROFILES)
"""what the tour's `profile` parameter takes: auto (the default zoo when it is cached, else the smoke zoo) or a
profile"""


def zoo_cached(profile: str, root: Path | None = None) -> bool:
    """Whether every family of the profile's zoo is in the zoo cache (data/models/ of the checkout by default): the
    tour can run on it without building it."""
    config = load_profile(profile)
    root = root if root is not None else repo_root() / "data" / "models"
    return config.zoo is not None and all(family_dir(root, config.task, family, config.zoo).exists()
                                          for family in config.zoo.families)


def tour_profile(requested: str, root: Path | None = None) -> tuple[str, str]:
    """(the profile the tour runs on, a sentence that says why): `auto` takes the default profile when its zoo is
    cached (make reproduce's 00_zoo builds it), else the smoke profile, whose zoo is warmed up for seconds and
    learns little: the sentence names that fallback and how to leave it. Another value is taken as asked."""
    require(requested in TOUR_PROFILES, "01_tour", "profile", requested, f"one of {list(TOUR_PROFILES)}")
    if requested != "auto":
        return requested, f"The tour runs on the {requested} profile's zoo, as asked."
    if zoo_cached("default", root):
        return "default", ("The tour runs on the default profile's zoo (cached): warmed up to a skill profile in "
                           "which each family is strong on its own forms and weak on its peer's, it learns within "
                           "the tour's steps.")
    return "smoke", ("The default profile's zoo is not cached, so the tour runs on its fallback, the smoke zoo: "
                     "warmed up for seconds to keep `make test` short, it answers almost nothing and learns almost "
                     "nothing here. Build the default zoo (`mrl reproduce --profile default --only 00`, minutes on "
                     "two cores) and run the tour again with `profile = \"auto\"` to see the policies learn.")


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


def learning_sentence(steps: pd.DataFrame, evals: pd.DataFrame, window: int = 3) -> str:
    """What the tour's SGT run learned, in words (Markdown), from its step rows (policy, step, reward, rescue_size)
    and evaluations (policy, step, split, skill, accuracy): each policy's mean reward over its first and last
    `window` steps, the peer successes SGT put into its loss, and its held-out accuracy over every skill at the first
    and last evaluation."""
    parts = []
    held = evals[(evals.split == "held-out")].groupby(["policy", "step"]).accuracy.mean()
    for policy, rows in steps.sort_values("step").groupby("policy"):
        first, last = rows.reward.head(window).mean(), rows.reward.tail(window).mean()
        before, after = held[policy].iloc[0], held[policy].iloc[-1]
        parts.append(f"{policy}'s mean reward went from {first:.3f} (steps {rows.step.iloc[0]}-"
                     f"{rows.step.iloc[min(window, len(rows)) - 1]}) to {last:.3f} (the last {min(window, len(rows))}), "
                     f"with {int(rows.rescue_size.sum())} peer successes in its loss, and its held-out accuracy from "
                     f"{before:.3f} to {after:.3f}")
    return "In this run, " + "; ".join(parts) + "."
