"""Tables and figures built from run records (pandas, seaborn, matplotlib)."""
from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns

from mrl.evaluation import skill_accuracy
from mrl.reports.palette import PHASE_COLOURS, policy_colour

EXAMPLE = "37+48=85"


def zoo_table(zoo: dict, task) -> pd.DataFrame:
    """One row per family: architecture, tokenizer, size, how it splits an example, warm-up loss."""
    rows = []
    for name, policy in zoo.items():
        tok = policy.tokenizer
        rows.append({"policy": name, "arch": policy.family.arch, "tokenizer": policy.family.tokenizer,
                     "vocab": len(tok), "params": policy.n_params,
                     "split of " + EXAMPLE: " ".join(tok.convert_ids_to_tokens(tok.encode(EXAMPLE, add_special_tokens=False))),
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
    """Left: warm-up loss per family; right: greedy accuracy per skill and family (held-out)."""
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
    for name, policy in zoo.items():
        ax_loss.plot(policy.record["warmup_loss"], label=f"{name} ({policy.family.arch}/{policy.family.tokenizer})",
                     lw=1, color=policy_colour(name))
    ax_loss.set(yscale="log", xlabel="warm-up step", ylabel="completion cross-entropy", title="Supervised warm-up")
    ax_loss.legend(frameon=False)
    held_out = accuracy[accuracy.split == "held-out"]
    sns.barplot(data=held_out, x="skill", y="accuracy", hue="policy", ax=ax_acc,
                palette={name: policy_colour(name) for name in held_out.policy.unique()})
    ax_acc.set(ylim=(0, 1), title="Greedy accuracy on held-out prompts", ylabel="accuracy")
    fig.tight_layout()
    return fig


def learning_curves_figure(evals: pd.DataFrame, title: str = "Independent GRPO"):
    """Per-skill greedy accuracy vs rollouts; one panel per policy, pool (solid) and held-out (dashed)."""
    grid = sns.relplot(data=evals, x="rollouts", y="accuracy", hue="skill", style="split", col="policy",
                       kind="line", marker="o", height=3.2, aspect=1.1, facet_kws={"sharey": True},
                       style_order=["pool", "held-out"])
    grid.set(ylim=(-0.02, 1.02))
    grid.figure.suptitle(title, y=1.03)
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
    origin is each backend's first call (start-up excluded, so the backends' training loops line up)."""
    fig, axes = plt.subplots(len(runs), 1, figsize=(10, 1.0 + 0.9 * len(runs) * 2), squeeze=False, sharex=True)
    for ax, (backend, run) in zip(axes[:, 0], runs.items()):
        timeline = pd.DataFrame(run["timeline"])
        origin = timeline.start.min()
        workers = sorted(timeline.worker.unique())
        for row, worker in enumerate(workers):
            for phase, group in timeline[timeline.worker == worker].groupby("phase"):
                if phase in PHASE_COLOURS:
                    ax.broken_barh(list(zip(group.start - origin, group.end - group.start)), (row - 0.4, 0.8),
                                   color=PHASE_COLOURS[phase], label=phase if row == 0 else None)
        ax.set_yticks(range(len(workers)), workers)
        ax.set_title(f"{backend}: wall {run['wall']:.1f} s (+ {run['startup']:.1f} s start-up, not shown)", fontsize=9)
        if max_seconds:
            ax.set_xlim(0, max_seconds)
    axes[-1, 0].set_xlabel("seconds since the backend's first call")
    handles, labels = axes[0, 0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="upper right", frameon=False, ncol=3)
    fig.tight_layout()
    return fig
