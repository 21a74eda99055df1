"""Tables and figures built from run records (pandas, seaborn, matplotlib)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from mrl.evaluation import skill_accuracy
from mrl.reports.palette import COMPACT, PHASE_COLOURS, phase_colour, plain_log_axis, policy_colour
from mrl.reports.probes import accuracy_band

EXAMPLE = "37+48=85"


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
                     "warm-up mix": ", ".join(f"{k} {v:.2f}" for k, v in policy.family.warmup_mix.items()),
                     "final warm-up loss": sum(policy.record["warmup_loss"][-20:]) / 20})
    return pd.DataFrame(rows)


def warmup_accuracy(zoo: dict, task, max_new_tokens: int = 6) -> pd.DataFrame:
    """Long table: policy, split (held-out, pool), skill, greedy accuracy."""
    return pd.DataFrame([{"policy": name, **row} for name, policy in zoo.items()
                         for row in skill_accuracy(policy.model, policy.tokenizer, task, max_new_tokens)])


def skill_matrix(accuracy: pd.DataFrame, split: str = "held-out") -> pd.DataFrame:
    """Wide table: one row per policy, one column per skill, for one split."""
    wide = accuracy[accuracy.split == split].pivot(index="policy", columns="skill", values="accuracy")
    return wide.reset_index().rename_axis(columns=None)


def warmup_figure(accuracy: pd.DataFrame, zoo: dict):
    """Left: warm-up loss per family (log axis, decimal ticks); right: greedy accuracy per skill and family
    (held-out), each family in its colour of mrl.reports.palette."""
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, policy in zoo.items():
        ax_loss.plot(policy.record["warmup_loss"], label=f"{name} ({policy.family.arch}/{policy.family.tokenizer})",
                     lw=1, color=policy_colour(name))
    ax_loss.set(yscale="log", xlabel="warm-up step", ylabel="completion cross-entropy (log)",
                title="Supervised warm-up")
    plain_log_axis(ax_loss.yaxis)
    ax_loss.xaxis.set_major_formatter(COMPACT)
    ax_loss.legend(frameon=False)
    held_out = accuracy[accuracy.split == "held-out"]
    sns.barplot(data=held_out, x="skill", y="accuracy", hue="policy", ax=ax_acc, saturation=1.0,
                palette={name: policy_colour(name) for name in held_out.policy.unique()})
    ax_acc.set(ylim=(0, 1), title="Greedy accuracy on held-out prompts", ylabel="accuracy")
    fig.tight_layout()
    return fig


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


def thl_residual_table(tokenizers: dict, corpora: dict[str, dict[str, dict]]) -> pd.DataFrame:
    """THL residual cost for every ordered pair of tokenizers on every corpus.

    corpora: {corpus name: {source tokenizer name: {"texts": [...], "ids": [[...]] or None,
    "logps": [[...]] or None, "max_tokens": receiver budget or None}}}; a source missing from a
    corpus uses the corpus's "*" entry (texts encoded canonically by the source).
    Returns one row per (corpus, source, receiver).
    """
    from mrl.thl import residual

    rows = []
    for corpus, by_source in corpora.items():
        for src_name, src in tokenizers.items():
            batch = by_source.get(src_name, by_source.get("*"))
            for dst_name, dst in tokenizers.items():
                report = residual(batch["texts"], src, dst, src_ids=batch.get("ids"), src_logps=batch.get("logps"),
                                  max_tokens=batch.get("max_tokens"))
                rows.append({"corpus": corpus, "source": src_name, "receiver": dst_name, **report.as_row()})
    return pd.DataFrame(rows)


def thl_heatmaps(table: pd.DataFrame, metrics=("inexact_rate", "coarseness", "round_trip_failure_rate")):
    """One heatmap (source x receiver) per corpus and metric."""
    corpora = list(dict.fromkeys(table.corpus))
    fig, axes = plt.subplots(len(corpora), len(metrics), figsize=(4.6 * len(metrics), 4.0 * len(corpora)),
                             squeeze=False)
    order = list(dict.fromkeys(table.source))
    for i, corpus in enumerate(corpora):
        for j, metric in enumerate(metrics):
            grid = table[table.corpus == corpus].pivot(index="source", columns="receiver", values=metric)
            sns.heatmap(grid.loc[order, order], annot=True, fmt=".2f", vmin=0, vmax=1, cmap="viridis", cbar=False,
                        ax=axes[i, j], annot_kws={"size": 7})
            axes[i, j].set_title(f"{metric} ({corpus})", fontsize=9)
    fig.tight_layout()
    return fig


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


def mwra_timeline_figure(runs: dict[str, dict], max_seconds: float | None = None):
    """Busy intervals (rollout, update, evaluate) per worker, one panel per backend on a shared time axis whose
    origin, 0 s, is each backend's first drawn interval (the step-0 evaluation; start-up excluded), so the
    backends' runs line up. Phases and workers in their colours of mrl.reports.palette."""
    from matplotlib.patches import Patch

    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 1.2 + 1.8 * len(runs)), squeeze=False, sharex=True)
    for ax, (backend, run) in zip(axes[:, 0], runs.items()):
        timeline = pd.DataFrame(run["timeline"])
        drawn = timeline[timeline.phase.isin(PHASE_COLOURS)]
        origin = (drawn if len(drawn) else timeline).start.min()
        workers = sorted(timeline.worker.unique())
        for row, worker in enumerate(workers):
            for phase, group in drawn[drawn.worker == worker].groupby("phase"):
                ax.broken_barh(list(zip(group.start - origin, group.end - group.start)), (row - 0.4, 0.8),
                               color=phase_colour(phase))
        ax.set_yticks(range(len(workers)), workers)
        for tick, worker in zip(ax.get_yticklabels(), workers):
            tick.set_color(policy_colour(worker))
        ax.set_title(f"{backend}: training loop {run['wall']:.1f} s after the step-0 evaluation "
                     f"(start-up {run['startup']:.1f} s before 0, not shown)", fontsize=9)
        if max_seconds:
            ax.set_xlim(0, max_seconds)
    axes[-1, 0].set_xlim(left=0)
    axes[-1, 0].set_xlabel("seconds since the backend's first step (its step-0 evaluation)")
    handles = [Patch(color=colour, label=phase) for phase, colour in PHASE_COLOURS.items()]
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.legend(handles=handles, loc="upper center", frameon=False, ncol=len(handles), bbox_to_anchor=(0.5, 1.0))
    return fig
