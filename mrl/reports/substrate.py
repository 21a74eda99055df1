"""Tables, figures and the result prose of the substrate notebooks (00-30), built from run records (pandas, seaborn,
matplotlib). The `*_result` functions return Markdown whose every number is read from the frames they are given."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from mrl.core.thl import residual
from mrl.reports.palette import COMPACT, PHASE_COLOURS, phase_colour, plain_log_axis, policy_colour
from mrl.reports.probes import accuracy_band, rescue_skills
from mrl.runtime.evaluation import skill_accuracy
from mrl.runtime.results import listing

EXAMPLE = "37+48=85"


def _value(x, spec: str = ".3f") -> str:
    """A number as prose: `spec`-formatted, or "n/a" when missing (None, NaN)."""
    return "n/a" if x is None or pd.isna(x) else format(x, spec)


def _ratio(a, b) -> str:
    """a / b as "1.04x", or "n/a" where either is missing or b is 0."""
    return "n/a" if pd.isna(a) or pd.isna(b) or b == 0 else f"{a / b:.2f}x"


def token_split(tokenizer, text: str) -> list[str]:
    """The tokens `tokenizer` splits `text` into, as it writes them (no special tokens)."""
    return tokenizer.convert_ids_to_tokens(tokenizer.encode(text, add_special_tokens=False))


def zoo_table(zoo: dict, task) -> pd.DataFrame:
    """One row per family: architecture, tokenizer, size, how it splits an example, warm-up loss."""
    rows = []
    for name, policy in zoo.items():
        tok = policy.tokenizer
        rows.append({"policy": name, "arch": policy.family.arch, "tokenizer": policy.family.tokenizer,
                     "vocab": len(tok), "params": policy.n_params,
                     "split of " + EXAMPLE: " ".join(token_split(tok, EXAMPLE)),
                     "warm-up mix": mix_text(policy.family.warmup_mix),
                     "final warm-up loss": sum(policy.record["warmup_loss"][-20:]) / 20})
    return pd.DataFrame(rows)


def mix_text(mix: dict[str, float]) -> str:
    """A warm-up mixture as zoo_table's `warm-up mix` cell: {"S1": 0.75, "leak:S2": 0.03} -> "S1 0.75, leak:S2 0.03"."""
    return ", ".join(f"{k} {v:.2f}" for k, v in mix.items())


def mix_roles(text: str) -> tuple[list[str], list[str]]:
    """(own skills, lacked skills) read back from a `warm-up mix` cell (mix_text). Own: the skills taught with the
    largest share, halves summed ("S3.half0" counts for S3); lacked: the skills seen only as a leak ("leak:S2")."""
    shares: dict[str, float] = {}
    leaked = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, share = part.rsplit(" ", 1)
        if key.startswith("leak:"):
            leaked.append(key[len("leak:"):])
        else:
            skill = key.split(".")[0]
            shares[skill] = shares.get(skill, 0.0) + float(share)
    top = max(shares.values(), default=None)
    return [s for s, v in shares.items() if v == top], [s for s in leaked if s not in shares]


def skill_legend(task) -> str:
    """The task's skills as caption text: "S1 `a+b=`, S2 `a-b=`, S3 `b*a=`" from their prompt templates, or their
    names where the task has no templates."""
    templates = getattr(task, "templates", None) or {}
    if not templates:
        return ", ".join(getattr(task, "skills", None) or list(task.test))
    return ", ".join(f"{skill} `{template.format(a='a', b='b')}`" for skill, template in templates.items())


def warmup_caption(task, split: str) -> str:
    """Caption of the warm-up accuracy table on `split` (held-out or pool), its skills named by skill_legend."""
    prompts = "held-out prompts" if split == "held-out" else "RL pool prompts"
    return f"Greedy accuracy per skill after the warm-up, {prompts} ({skill_legend(task)})."


def warmup_accuracy(zoo: dict, task, max_new_tokens: int = 6) -> pd.DataFrame:
    """Long table: policy, split (held-out, pool), skill, greedy accuracy."""
    return pd.DataFrame([{"policy": name, **row} for name, policy in zoo.items()
                         for row in skill_accuracy(policy.model, policy.tokenizer, task, max_new_tokens)])


def skill_matrix(accuracy: pd.DataFrame, split: str = "held-out") -> pd.DataFrame:
    """Wide table: one row per policy, one column per skill, for one split."""
    wide = accuracy[accuracy.split == split].pivot(index="policy", columns="skill", values="accuracy")
    return wide.reset_index().rename_axis(columns=None)


def warmup_figure_inputs(accuracy: pd.DataFrame, zoo: dict) -> dict:
    """What warmup_figure draws, as frames and JSON (the inputs mrl.reports.figure_inputs.draw_and_save commits):
    `accuracy`, the held-out rows of warmup_accuracy (policy, skill, accuracy); `loss`, each family's warm-up loss per
    step (policy, step, loss), in the zoo's order; `families`, {name: "arch/tokenizer"}."""
    held_out = accuracy.loc[accuracy.split == "held-out", ["policy", "skill", "accuracy"]].reset_index(drop=True)
    loss = pd.DataFrame([(name, step, value) for name, policy in zoo.items()
                         for step, value in enumerate(policy.record["warmup_loss"])],
                        columns=["policy", "step", "loss"])
    families = {name: f"{policy.family.arch}/{policy.family.tokenizer}" for name, policy in zoo.items()}
    return {"accuracy": held_out, "loss": loss, "families": families}


def warmup_figure(accuracy: pd.DataFrame, loss: pd.DataFrame, families: dict[str, str], setting: str = ""):
    """Left: warm-up loss per family (log axis, decimal ticks); right: greedy accuracy per skill and family
    (held-out), each family in its colour of mrl.reports.palette. accuracy, loss, families: warmup_figure_inputs'.
    setting: the task and zoo seed, named in the title."""
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, curve in loss.groupby("policy", sort=False):
        ax_loss.plot(curve.sort_values("step").loss.tolist(), label=f"{name} ({families[name]})", lw=1,
                     color=policy_colour(name))
    ax_loss.set(yscale="log", xlabel="warm-up step", ylabel="completion cross-entropy (log)",
                title="Supervised warm-up")
    plain_log_axis(ax_loss.yaxis)
    ax_loss.xaxis.set_major_formatter(COMPACT)
    ax_loss.legend(frameon=False)
    sns.barplot(data=accuracy, x="skill", y="accuracy", hue="policy", ax=ax_acc, saturation=1.0,
                palette={name: policy_colour(name) for name in accuracy.policy.unique()})
    ax_acc.set(ylim=(0, 1), title="Greedy accuracy on held-out prompts", ylabel="accuracy")
    if setting:
        fig.suptitle(f"The zoo's warm-up ({setting})")
    fig.tight_layout()
    return fig


def zoo_result(accuracy: pd.DataFrame, families: pd.DataFrame) -> str:
    """The warm-up's result as Markdown, read from warmup_accuracy's long table and zoo_table: each policy's greedy
    accuracy on its own skill and on the skills it lacks (mix_roles of its `warm-up mix`), held out and on the RL
    pool, then how many policies lead the zoo on their own skill held out, and the smallest margin."""
    if accuracy.empty or families.empty:
        return "No warm-up accuracy was measured."
    cells = accuracy.groupby(["split", "policy", "skill"]).accuracy.mean()
    roles = {policy: mix_roles(mix) for policy, mix in zip(families.policy, families["warm-up mix"])}

    def on(split, policy, skills):
        return ", ".join(f"{_value(cells.get((split, policy, s)))} on {s}" for s in skills)

    sentences = []
    for split, lead in (("held-out", "Held out, after the warm-up"), ("pool", "On the RL pool")):
        if split not in cells.index.get_level_values("split"):
            continue
        parts = []
        for i, (policy, (own, lacked)) in enumerate(roles.items()):
            first = i == 0 and split == "held-out"
            text = f"{policy} {'scores ' if first else ''}{on(split, policy, own)}{' (its own skill)' if first else ''}"
            if lacked:
                text += f" and {on(split, policy, lacked)}{' (seen only as a leak)' if first else ''}"
            parts.append(text)
        sentences.append(f"{lead}: {'; '.join(parts)}.")
    held = accuracy[accuracy.split == "held-out"].groupby(["skill", "policy"]).accuracy.mean()
    margins = []
    for policy, (own, _) in roles.items():
        for skill in own:
            if skill in held.index.get_level_values("skill"):
                peers = held.loc[skill].drop(index=policy, errors="ignore").dropna()
                if len(peers):
                    margins.append((policy, skill, held.get((skill, policy), float("nan")) - peers.max()))
    if margins:
        behind = sorted({p for p, _, m in margins if not m > 0})
        leaders = len({p for p, _, _ in margins}) - len(behind)
        policy, skill, margin = min(margins, key=lambda m: m[2] if m[2] == m[2] else float("inf"))
        sentences.append(f"{leaders} of {len({p for p, _, _ in margins})} policies lead the zoo on their own skill "
                         f"held out{f' (not {listing(behind)})' if behind else ''}; the smallest margin over the "
                         f"best peer is {policy}'s on {skill}, {_value(margin, '+.3f')}.")
    return " ".join(sentences)


def learning_curves_figure(evals: pd.DataFrame, title: str = "Independent GRPO"):
    """Per-skill greedy accuracy vs own rollouts; one panel per policy, held-out (solid) and pool (dashed), as in
    the probe figures; with several seeds (a `seed` column), the mean and its 95% t interval, else one run's
    values and no band. The shared y axis fits the data and says so when it is narrower than 0 to 1."""
    grid = sns.relplot(data=evals, x="rollouts", y="accuracy", hue="skill", style="split", col="policy",
                       kind="line", marker="o", height=3.2, aspect=1.1, facet_kws={"sharey": True},
                       style_order=["held-out", "pool"], errorbar=accuracy_band, err_kws={"alpha": 0.15, "lw": 0})
    grid.set_titles("policy {col_name}")
    low = min(ax.dataLim.intervaly[0] for ax in grid.axes.flat)
    high = max(ax.dataLim.intervaly[1] for ax in grid.axes.flat)
    span = max(high - low, 0.02)
    low, high = max(low - 0.05 * span, -0.01), min(high + 0.05 * span, 1.01)
    grid.set(ylim=(low, high))
    fitted = low > 0.05 or high < 0.95
    for ax in grid.axes.flat:
        ax.xaxis.set_major_formatter(COMPACT)
    grid.set_axis_labels("own rollouts", "greedy accuracy" + ("\n(axis fitted to the data)" if fitted else ""))
    seeds = evals.seed.nunique() if "seed" in evals.columns else 1
    band = f"band: 95% t interval of the mean over {seeds} seeds" if seeds > 1 else "one seed, no band"
    grid.figure.suptitle(f"{title}: {band}", y=1.03)
    return grid.figure


def baseline_table(evals: pd.DataFrame) -> pd.DataFrame:
    """Per policy, split and skill: accuracy at step 0 and at the last step, and the change."""
    first, last = evals.step.min(), evals.step.max()
    start = evals[evals.step == first].set_index(["policy", "split", "skill"]).accuracy
    end = evals[evals.step == last].set_index(["policy", "split", "skill"]).accuracy
    table = pd.DataFrame({"start": start, "end": end})
    table["change"] = table.end - table.start
    return table.reset_index()


def grpo_baseline_result(evals: pd.DataFrame) -> str:
    """Independent GRPO's result as Markdown, read from run_one's evaluations (baseline_table's start and end): each
    policy's weak skill (rescue_skills: the one it trails its best peer on most at step 0) from start to end, held out
    and on the pool; the mean change on the weak skills against the other skills; the largest gain on any skill."""
    if evals.empty:
        return "No evaluations were recorded."
    table = baseline_table(evals).set_index(["policy", "split", "skill"])
    splits = [s for s in ("held-out", "pool") if s in set(evals.split)]
    where = {"held-out": "held out", "pool": "on the pool"}
    weak = {}
    if evals.policy.nunique() > 1 and "held-out" in splits:
        start = evals[(evals.step == evals.step.min()) & (evals.split == "held-out")].dropna(subset=["accuracy"])
        if start.policy.nunique() > 1:
            weak = {policy: skill for (_, policy), skill in rescue_skills(start.assign(pairing="")).items()
                    if isinstance(skill, str)}
    steps = int(evals.step.max() - evals.step.min())
    sentences = []
    if weak:
        moves = [f"{policy} on {skill}, " + " and ".join(
            f"{_value(table.start.get((policy, split, skill)))} to {_value(table.end.get((policy, split, skill)))} "
            f"{where[split]}" for split in splits) for policy, skill in weak.items()]
        sentences.append(f"Over {steps} steps of independent GRPO, each policy's weak skill (the one it trails its "
                         f"best peer on most at step 0, as the probe notebooks pick it) went from its step-0 to its "
                         f"final accuracy as follows: {'; '.join(moves)}.")
        is_weak = pd.Series([weak.get(p) == s for p, _, s in table.index], index=table.index)
        mean = {(split, w): table.change[is_weak == w].xs(split, level="split").mean() for split in splits
                for w in (True, False)}
        sentences.append("Averaged over the policies, the weak skills changed by "
                         + " and ".join(f"{_value(mean[split, True], '+.3f')} {where[split]}" for split in splits)
                         + ", the other skills by "
                         + " and ".join(f"{_value(mean[split, False], '+.3f')} {where[split]}" for split in splits)
                         + ".")
    else:
        sentences.append(f"Over {steps} steps of independent GRPO there is no weak skill to read (it needs two "
                         f"policies with a step-0 held-out evaluation).")
    change = table.change.dropna()
    if len(change):
        (policy, split, skill), best = change.idxmax(), change.max()
        sentences.append(f"The largest gain on any skill is {policy}'s on {skill} {where.get(split, split)}, "
                         f"{_value(best, '+.3f')}.")
    return " ".join(sentences)


def thl_residual_table(tokenizers: dict, corpora: dict[str, dict[str, dict]]) -> pd.DataFrame:
    """THL residual cost for every ordered pair of tokenizers on every corpus.

    corpora: {corpus name: {source tokenizer name: {"texts": [...], "ids": [[...]] or None,
    "logps": [[...]] or None, "max_tokens": receiver budget or None}}}; a source missing from a
    corpus uses the corpus's "*" entry (texts encoded canonically by the source).
    Returns one row per (corpus, source, receiver).
    """
    rows = []
    for corpus, by_source in corpora.items():
        for src_name, src in tokenizers.items():
            batch = by_source.get(src_name, by_source.get("*"))
            for dst_name, dst in tokenizers.items():
                report = residual(batch["texts"], src, dst, src_ids=batch.get("ids"), src_logps=batch.get("logps"),
                                  max_tokens=batch.get("max_tokens"))
                rows.append({"corpus": corpus, "source": src_name, "receiver": dst_name, **report.as_row()})
    return pd.DataFrame(rows)


THL_METRIC_NAMES = {"inexact_rate": "inexact alignment rate", "coarseness": "coarseness",
                    "round_trip_failure_rate": "round-trip failure rate"}


THL_HEATMAP_METRICS = ("inexact_rate", "coarseness", "round_trip_failure_rate")
"""the rates thl_heatmaps draws, a column each"""


def thl_heatmap_inputs(table: pd.DataFrame, metrics=THL_HEATMAP_METRICS) -> pd.DataFrame:
    """What thl_heatmaps draws of thl_residual_table (the input mrl.reports.figure_inputs.draw_and_save commits):
    corpus, source, receiver and the `metrics`."""
    return table[["corpus", "source", "receiver", *metrics]]


def thl_heatmaps(table: pd.DataFrame, metrics=THL_HEATMAP_METRICS):
    """One heatmap (source x receiver) per corpus and metric, every one a rate on the same 0-1 colour scale, read
    off the one colour bar at the right; metric names in words (THL_METRIC_NAMES)."""
    corpora = list(dict.fromkeys(table.corpus))
    fig, axes = plt.subplots(len(corpora), len(metrics), figsize=(4.6 * len(metrics) + 0.8, 4.0 * len(corpora)),
                             squeeze=False)
    order = list(dict.fromkeys(table.source))
    for i, corpus in enumerate(corpora):
        for j, metric in enumerate(metrics):
            grid = table[table.corpus == corpus].pivot(index="source", columns="receiver", values=metric)
            sns.heatmap(grid.loc[order, order], annot=True, fmt=".2f", vmin=0, vmax=1, cmap="viridis", cbar=False,
                        ax=axes[i, j], annot_kws={"size": 7})
            axes[i, j].set_title(f"{THL_METRIC_NAMES.get(metric, metric)} ({corpus} corpus)", fontsize=9)
    fig.suptitle("THL residuals per ordered tokenizer pair (source -> receiver)")
    fig.tight_layout(rect=(0, 0, 0.93, 1))
    bar = fig.colorbar(axes[0, 0].collections[0], ax=list(axes.flat), fraction=0.02, pad=0.02)
    bar.set_label("rate: share of sequences (coarseness: share of receiver tokens not aligned one to one)")
    return fig


def thl_result(table: pd.DataFrame) -> str:
    """THL's result as Markdown, read from thl_residual_table: per corpus, how many ordered pairs align every sequence
    byte for byte (named where few) and the largest inexact rate; the receiver that fails the most round trips; the
    source with the largest share of non-canonical samples."""
    rows = table.dropna(subset=["inexact_rate"]) if "inexact_rate" in table else table.iloc[0:0]
    if rows.empty:
        return "No THL residuals were measured."
    sentences = []
    for corpus, group in rows.groupby("corpus", sort=False):
        pairs = group.source + " -> " + group.receiver
        exact = group.inexact_rate == 0
        n, k = len(group), int(exact.sum())
        if k == n:
            sentences.append(f"On the {corpus} corpus, all {n} ordered pairs (source -> receiver) align every "
                             f"sequence byte for byte.")
            continue
        named = (f": {', '.join(pairs[exact])}" if 0 < k <= 6 else
                 f", all but {', '.join(pairs[~exact])}" if 0 < k and n - k <= 6 else "")
        worst = group.inexact_rate.max()
        at_worst = pairs[group.inexact_rate == worst]
        others = f" and {len(at_worst) - 1} other pairs" if len(at_worst) > 2 else (
            f" and {at_worst.iloc[1]}" if len(at_worst) == 2 else "")
        sentences.append(f"On the {corpus} corpus, {k} of {n} ordered pairs (source -> receiver) align every "
                         f"sequence byte for byte{named}; the largest inexact rate is {_value(worst)}, "
                         f"{at_worst.iloc[0]}{others}.")
    failures = rows.groupby(["corpus", "receiver"], sort=False).round_trip_failure_rate.mean().dropna()
    if len(failures) and failures.max() > 0:
        corpus, receiver = failures.idxmax()
        sentences.append(f"Round trips fail most into {receiver}, on {_value(failures.max())} of the {corpus} "
                         f"corpus's sequences (mean over sources).")
    else:
        sentences.append("Every receiver reproduces every text: no round trip fails.")
    samples = rows.groupby(["corpus", "source"], sort=False).non_canonical_rate.mean().dropna()
    if len(samples) and samples.max() > 0:
        corpus, source = samples.idxmax()
        sentences.append(f"The largest share of non-canonical samples (ids that are not the source tokenizer's own "
                         f"encoding of the text) is {source}'s, {_value(samples.max())} on the {corpus} corpus.")
    else:
        sentences.append("No source sampled non-canonical ids.")
    return " ".join(sentences)


def mwra_compute_table(runs: dict[str, dict]) -> pd.DataFrame:
    """Per backend and worker: mean step time, utilisation (busy / wall) and wait fraction.

    runs: {backend: {"timeline": [{worker, phase, start, end}], "wall": seconds of the training loop,
    "startup": seconds before the first step}}. A worker's step time is its rollout + update time.
    """
    rows = []
    for backend, run in runs.items():
        timeline = pd.DataFrame(run["timeline"])
        training = timeline[timeline.phase.isin(["rollout", "update"])]
        for worker, group in training.groupby("worker"):
            busy = (group.end - group.start).sum()
            steps = (group.phase == "update").sum()
            rows.append({"backend": backend, "worker": worker, "steps": int(steps),
                         "step seconds": busy / max(steps, 1), "utilisation": busy / run["wall"],
                         "wait fraction": 1 - busy / run["wall"], "wall seconds": run["wall"],
                         "startup seconds": run["startup"]})
    return pd.DataFrame(rows)


def mwra_result(compute: pd.DataFrame) -> str:
    """MWRA's result as Markdown, read from mwra_compute_table: per backend, the mean step time and wait fraction over
    its workers, its training loop and start-up, each relative to inline (or to the first backend without inline)."""
    if compute.empty:
        return "No MWRA timings were recorded."
    per = compute.groupby("backend", sort=False).agg(
        step=("step seconds", "mean"), wait=("wait fraction", "mean"), wall=("wall seconds", "first"),
        startup=("startup seconds", "first"), workers=("worker", "nunique"))
    ref = "inline" if "inline" in per.index else per.index[0]
    r = per.loc[ref]
    sentences = [f"Under {ref} (the reference), a worker's step (rollout and update) takes {_value(r.step)} s, mean "
                 f"over its {int(r.workers)} workers, and a worker waits {_value(r.wait)} of the "
                 f"{_value(r.wall)} s training loop; start-up, apart, takes {_value(r.startup)} s."]
    for backend, row in per.drop(index=ref).iterrows():
        sentences.append(f"{backend.capitalize()}: step {_value(row.step)} s, wait fraction {_value(row.wait)}, "
                         f"training loop {_value(row.wall)} s, start-up {_value(row.startup)} s; against {ref}, "
                         f"{_ratio(row.step, r.step)}, {_ratio(row.wait, r.wait)} and {_ratio(row.wall, r.wall)}.")
    return " ".join(sentences)


def mwra_timeline_inputs(runs: dict[str, dict]) -> dict[str, pd.DataFrame]:
    """What mwra_timeline_figure draws, as frames (the inputs mrl.reports.figure_inputs.draw_and_save commits):
    `timeline`, every backend's intervals (backend, worker, phase, start, end: seconds since its runner started), and
    `runs`, one row per backend in the runs' order (backend, wall, startup: seconds). runs: as mwra_compute_table's."""
    timeline = pd.DataFrame([{"backend": backend, **interval} for backend, run in runs.items()
                             for interval in run["timeline"]], columns=["backend", "worker", "phase", "start", "end"])
    totals = pd.DataFrame([(backend, run["wall"], run["startup"]) for backend, run in runs.items()],
                          columns=["backend", "wall", "startup"])
    return {"timeline": timeline, "runs": totals}


def mwra_timeline_figure(timeline: pd.DataFrame, runs: pd.DataFrame, max_seconds: float | None = None):
    """Busy intervals (rollout, update, evaluate) per worker, one panel per backend on a shared time axis whose
    origin, 0 s, is each backend's first drawn interval (the step-0 evaluation; start-up excluded), so the
    backends' runs line up. Phases and workers in their colours of mrl.reports.palette. timeline, runs:
    mwra_timeline_inputs'."""
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 1.2 + 1.8 * len(runs)), squeeze=False, sharex=True)
    for ax, run in zip(axes[:, 0], runs.itertuples()):
        intervals = timeline[timeline.backend == run.backend]
        drawn = intervals[intervals.phase.isin(PHASE_COLOURS)]
        origin = (drawn if len(drawn) else intervals).start.min()
        workers = sorted(intervals.worker.unique())
        for row, worker in enumerate(workers):
            for phase, group in drawn[drawn.worker == worker].groupby("phase"):
                ax.broken_barh(list(zip(group.start - origin, group.end - group.start)), (row - 0.4, 0.8),
                               color=phase_colour(phase))
        ax.set_yticks(range(len(workers)), workers)
        for tick, worker in zip(ax.get_yticklabels(), workers):
            tick.set_color(policy_colour(worker))
        ax.set_title(f"{run.backend}: training loop {run.wall:.1f} s after the step-0 evaluation "
                     f"(start-up {run.startup:.1f} s before 0, not shown)", fontsize=9)
        if max_seconds:
            ax.set_xlim(0, max_seconds)
    axes[-1, 0].set_xlim(left=0)
    axes[-1, 0].set_xlabel("seconds since the backend's first step (its step-0 evaluation)")
    handles = [Patch(color=colour, label=phase) for phase, colour in PHASE_COLOURS.items()]
    fig.suptitle("MWRA: when each policy's worker rolls out, updates and evaluates, per backend", y=0.995)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.legend(handles=handles, loc="upper center", frameon=False, ncol=len(handles), bbox_to_anchor=(0.5, 0.965))
    return fig
