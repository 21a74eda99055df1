"""What the tour notebook (01_tour) shows: whose zoo it runs on, how each tokenizer splits a prompt, one prompt's
samples per policy, a THL alignment drawn as coloured byte groups over both tokenizations, the SEE records of one
logged step, and what its SGT run learned."""
from __future__ import annotations

import dataclasses
import html
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from mrl.core.thl import Alignment, token_pieces
from mrl.core.validation import require
from mrl.paths import repo_root
from mrl.core.run_config import RunConfig
from mrl.profiles import load_profile
from mrl.reports.palette import policy_colour
from mrl.reports.substrate import token_split
from mrl.runtime.experience_log import replay
from mrl.runtime.rollout import sample_records

GROUP_COLOURS = ["#fde0dd", "#d9f0d3", "#deebf7", "#fff2cc", "#e5d8f0", "#d0f0f0", "#fbe3c8", "#e8e8e8"]
"""background colours of consecutive THL groups (cycled); the same group has the same colour on both sides"""


TOUR_PROFILES = ("auto", "default", "smoke")
"""what the tour's `profile` parameter takes: auto (the default profile's held-out zoo when it is cached, else the
smoke zoo), default (that held-out zoo, of warm-up seed 0, built when missing: minutes on two cores) or smoke (its
zoo; what `mrl reproduce --profile smoke` and nbval inject)"""

TOUR_STEPS = {"heldout": 60, "smoke": 12}
"""the SGT run's steps on each zoo: on the held-out zoo 60 steps (about half a minute on one core) move each policy's
weak skill visibly; the smoke profile's 12 keep `make test` short"""


@dataclass(frozen=True)
class TourZoo:
    """Which zoo the tour runs on, and why."""

    zoo: str
    """heldout or smoke"""
    profile: str
    """the profile whose settings and results folder the notebook takes (default for the held-out zoo)"""
    why: str
    """a sentence for the reader: the zoo, and what they should see on it"""


def heldout_zoo_cached(root: Path | None = None) -> bool:
    """Whether the default profile's held-out zoo of warm-up seed 0 is in the zoo cache (data/models/ by default):
    70_heldout builds it, and the tour reads it without building it."""
    from mrl.experiments.heldout import heldout_config
    from mrl.runtime.zoo_grid import missing_families

    config = heldout_config(load_profile("default"), 0)
    root = root if root is not None else repo_root() / "data" / "models"
    return not missing_families(config.task, [config.zoo], root)


def tour_zoo(requested: str, root: Path | None = None) -> TourZoo:
    """The zoo the tour runs on (TourZoo): `auto` takes the default profile's held-out zoo when it is cached, else the
    smoke zoo, whose families are warmed up for seconds and learn almost nothing (the sentence names that fallback
    and how to leave it); `default` (the held-out zoo) or `smoke` as asked."""
    require(requested in TOUR_PROFILES, "01_tour", "profile", requested, f"one of {list(TOUR_PROFILES)}")
    heldout = TourZoo("heldout", "default", (
        "The tour runs on the held-out experiment's zoo (the default profile's, warm-up seed 0): A is strong on the "
        "forms S1 and S3 and weak on S2, B strong on S1 and S2 and weak on S3. Watch each policy's weak skill: SGT "
        "puts the peer's verified successes on it into the learner's loss, and its held-out accuracy rises within "
        "the run while the strong skills hold."))
    smoke = TourZoo("smoke", "smoke", (
        "The tour runs on the smoke zoo{}: warmed up for seconds to keep `make test` short, its policies answer "
        "almost nothing and learn almost nothing here. Run the tour with `profile = \"default\"` (it builds the "
        "held-out zoo once, minutes on two cores, which `70_heldout` reuses) to see the policies learn."))
    if requested == "default" or (requested == "auto" and heldout_zoo_cached(root)):
        return heldout
    reason = ", as asked" if requested == "smoke" else " (the held-out zoo is not cached)"
    return dataclasses.replace(smoke, why=smoke.why.format(reason))


def tour_eval_every(config: RunConfig, steps: int) -> int:
    """The tour run's evaluation cadence: its config's (the held-out experiment's every 10 steps, so the learning
    figure has points along the run) where it divides the run in several, else only at the start and the end."""
    every = config.grpo.eval_every
    return every if every and steps >= 3 * every else steps


def tour_setting(config: RunConfig, zoo: str) -> tuple[RunConfig, dict[str, str]]:
    """(the run config, {policy: checkpoint folder}) of the tour on `zoo`: the held-out experiment's config and zoo
    of warm-up seed 0 (built when missing), or the smoke profile's own zoo; `config` is the notebook's profile."""
    from mrl.experiments import policy_paths
    from mrl.experiments.heldout import heldout_config, heldout_zoos

    if zoo == "heldout":
        return heldout_config(config, 0), heldout_zoos(config, False, [0])[0]
    return config, policy_paths(config, progress=False)


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


def weak_skills(evals: pd.DataFrame, split: str = "held-out") -> dict[str, str]:
    """{policy: its weak skill}: the skill of its lowest `split` accuracy at the first evaluation."""
    first = evals[(evals.split == split) & (evals.step == evals.step.min())]
    return {policy: rows.sort_values("accuracy").skill.iloc[0] for policy, rows in first.groupby("policy")}


def learning_sentence(steps: pd.DataFrame, evals: pd.DataFrame) -> str:
    """What the tour's SGT run learned, in words (Markdown), from its step rows (policy, step, rescue_size) and
    evaluations (policy, step, split, skill, accuracy): per policy, its held-out accuracy on its weak skill
    (weak_skills) at the first and last evaluation, its other skills' mean at both, and the peer successes SGT put
    into its loss."""
    held = evals[evals.split == "held-out"]
    first, last = held.step.min(), held.step.max()
    parts = []
    for policy, weak in weak_skills(evals).items():
        mine = held[held.policy == policy]
        at = mine.set_index(["step", "skill"]).accuracy
        others = mine[mine.skill != weak].groupby("step").accuracy.mean()
        rescued = int(steps[steps.policy == policy].rescue_size.sum())
        parts.append(f"{policy}'s held-out accuracy on its weak skill {weak} went from {at[(first, weak)]:.3f} to "
                     f"{at[(last, weak)]:.3f} ({at[(last, weak)] - at[(first, weak)]:+.3f}), its other skills' from "
                     f"{others[first]:.3f} to {others[last]:.3f}, with {rescued} peer successes in its loss")
    return (f"In this run of {last} steps, " + "; ".join(parts) + ". One run on one warm-up: the notebooks "
            "that follow compare probes over many.")


def learning_figure(evals: pd.DataFrame):
    """Each policy's held-out accuracy per skill against the step, its weak skill (weak_skills) drawn bold: one
    panel per policy, in the policy's colour."""
    import matplotlib.pyplot as plt

    held = evals[evals.split == "held-out"]
    weak = weak_skills(evals)
    fig, axes = plt.subplots(1, len(weak), figsize=(4.2 * len(weak), 3.0), sharey=True, squeeze=False)
    for ax, (policy, skill_weak) in zip(axes[0], weak.items()):
        for skill, rows in held[held.policy == policy].groupby("skill"):
            rows = rows.sort_values("step")
            bold = skill == skill_weak
            ax.plot(rows.step, rows.accuracy, marker="o", markersize=3, color=policy_colour(policy),
                    linewidth=2.4 if bold else 1.0, alpha=1.0 if bold else 0.45,
                    label=f"{skill} (weak)" if bold else skill)
        ax.set_title(f"{policy}: held-out accuracy per skill")
        ax.set_xlabel("SGT step")
        ax.legend(fontsize=8, frameon=False)
    axes[0][0].set_ylim(0, 1)   # every panel's weak and strong skills on one full scale
    axes[0][0].set_ylabel("held-out accuracy")
    fig.tight_layout()
    plt.close(fig)   # shown once, as the cell's value
    return fig
