"""Paired statistics against independent GRPO, and rollouts-to-reach (docs/architecture.md, Experiments and profiles).

Every run of a grid shares its prompts and sampling seeds per step with the GRPO run of the same RL seed (and zoo
seed), so a probe is compared with GRPO run by run: d_s = value(probe, s) - value(grpo, s) over the shared seeds s,
and the 95% interval of mean(d) is Student's t with n - 1 degrees of freedom. A difference is called real only when
that interval excludes 0, rests on at least MIN_PAIRS pairs and has a width (pairs that agree exactly, common
with accuracies on a few hundred prompts, give an interval of width 0).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from mrl.reports.cells import Interval
from mrl.reports.palette import base_probe, fit_accuracy_axis, knobs_suffix, line_style, probe_palette
from mrl.reports.probes import (KEYS, PEER_USE, ci95, final_accuracy, probe_order, rescue_skills,
                                stability_sentence)

BASELINE = "grpo"
MIN_PAIRS = 3


def t_interval(values) -> tuple[float, float, float]:
    """(mean, low, high) of the 95% t interval of the mean of `values` (NaNs dropped); low = high = NaN below 2."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    mean = float(values.mean()) if len(values) else float("nan")
    half = ci95(values)
    return mean, mean - half, mean + half


def is_real(low: float, high: float, n: int) -> bool:
    """A difference is real when its interval excludes 0, rests on at least MIN_PAIRS pairs and has a width (pairs
    that all agree, as accuracies on a few hundred prompts can, make the t interval degenerate: no evidence)."""
    return bool(n >= MIN_PAIRS and high - low > 1e-9 and (low > 0 or high < 0))


def pair_columns(frame: pd.DataFrame) -> list[str]:
    """The columns that identify a shared draw: the RL seed, and the zoo seed where the grid has several."""
    return ["seed"] + (["zoo_seed"] if "zoo_seed" in frame.columns else [])


def paired_differences(values: pd.DataFrame, column: str, baseline: str = BASELINE,
                       by_zoo: bool = False) -> pd.DataFrame:
    """values: one row per run and policy (columns pairing, probe, policy, seed[, zoo_seed], `column`).

    Returns per (pairing, probe, policy), probes other than `baseline`: mean difference to the baseline over the
    shared seeds, its 95% interval [low, high], the number of units n, `real` (the interval excludes 0) and the
    units' differences themselves (`units`, a tuple: what a figure draws where n is too small for an interval).
    by_zoo: the unit is the warm-up: the differences are averaged within each zoo seed first and the interval is
    over zoo seeds (n = zoo seeds); otherwise every shared (seed, zoo seed) pair is a unit."""
    pairs = pair_columns(values)
    base = values[values.probe == baseline].set_index(["pairing", "policy", *pairs])[column]
    rows = []
    for (pairing, probe, policy), group in values[values.probe != baseline].groupby(KEYS, sort=False):
        index = pd.MultiIndex.from_frame(group[["pairing", "policy", *pairs]])
        shared = index.isin(base.index)
        diffs = group[column].to_numpy()[shared] - base.loc[index[shared]].to_numpy()
        if by_zoo and "zoo_seed" in group.columns:
            diffs = pd.Series(diffs).groupby(group.zoo_seed.to_numpy()[shared]).mean().to_numpy()
        mean, low, high = t_interval(diffs)
        n = int(np.isfinite(diffs).sum())
        rows.append({"pairing": pairing, "probe": probe, "policy": policy, "diff": mean, "low": low, "high": high,
                     "n": n, "real": is_real(low, high, n),
                     "units": tuple(float(d) for d in diffs if np.isfinite(d))})
    return pd.DataFrame(rows, columns=KEYS + ["diff", "low", "high", "n", "real", "units"])


def rollouts_to_reach(rollouts, accuracy, target: float) -> float:
    """Own rollouts at which a learning curve first reaches `target`, linearly interpolated between the two
    evaluations around the crossing: r = r_{i-1} + (target - a_{i-1}) / (a_i - a_{i-1}) * (r_i - r_{i-1}) for the
    first i with a_i >= target. rollouts[0] when it starts there; NaN when it never reaches it (or target is NaN).
    rollouts, accuracy: (E,) in evaluation order."""
    rollouts, accuracy = np.asarray(rollouts, dtype=float), np.asarray(accuracy, dtype=float)
    if np.isnan(target):
        return float("nan")
    hits = np.flatnonzero(accuracy >= target - 1e-12)
    if len(hits) == 0:
        return float("nan")
    i = hits[0]
    if i == 0:
        return float(rollouts[0])
    a0, a1, r0, r1 = accuracy[i - 1], accuracy[i], rollouts[i - 1], rollouts[i]
    return float(r0 + (target - a0) / (a1 - a0) * (r1 - r0))


def weak_skill_evals(evals: pd.DataFrame, split: str = "held-out") -> pd.DataFrame:
    """The `split` evaluations on each policy's weak skill (the one it lacks most against its best peer at
    step 0: `rescue_skills`)."""
    weak = rescue_skills(evals)
    rows = evals[evals.split == split]
    return rows[[weak.get((p, q)) == s for p, q, s in zip(rows.pairing, rows.policy, rows.skill)]]


def reach_table(evals: pd.DataFrame, split: str = "held-out") -> pd.DataFrame:
    """Per pairing, probe and policy: own rollouts until the weak-skill `split` accuracy reaches independent GRPO's
    final one (mean over GRPO's RL seeds on the same zoo seed), per run by `rollouts_to_reach`; the mean over the
    runs that reach it and how many of all runs do."""
    weak = weak_skill_evals(evals, split)
    pairs = pair_columns(weak)
    zoo = [c for c in pairs if c != "seed"]
    grpo_final = final_accuracy(weak)
    grpo_final = grpo_final[(grpo_final.probe == BASELINE) & (grpo_final.skill != "overall")]
    targets = grpo_final.groupby(["pairing", "policy", *zoo]).accuracy.mean()
    rows = []
    for key, curve in weak.groupby(KEYS + pairs, sort=False):
        pairing, probe, policy = key[:3]
        target = targets.get((pairing, policy, *key[4:]), np.nan)
        curve = curve.sort_values("step")
        rows.append({"pairing": pairing, "probe": probe, "policy": policy,
                     "rollouts": rollouts_to_reach(curve.rollouts, curve.accuracy, target)})
    reach = pd.DataFrame(rows).groupby(KEYS, sort=False).rollouts
    table = pd.DataFrame({"rollouts to GRPO's final (weak)": reach.mean(),
                          "reached": reach.count().astype(str) + "/" + reach.size().astype(str)})
    return table


def final_values(evals: pd.DataFrame, split: str = "held-out") -> pd.DataFrame:
    """One row per run and policy: final `split` accuracy on the weak skill ("weak") and over all skills
    ("overall")."""
    final = final_accuracy(evals)
    final = final[final.split == split]
    weak = rescue_skills(evals)
    keys = KEYS + pair_columns(final)
    is_weak = [weak.get((p, q)) == s for p, q, s in zip(final.pairing, final.policy, final.skill)]
    out = final[is_weak].set_index(keys).accuracy.rename("weak").to_frame()
    out["overall"] = final[final.skill == "overall"].set_index(keys).accuracy
    return out.reset_index()


def peer_use(steps: pd.DataFrame) -> pd.DataFrame:
    """Per pairing, probe and policy: peer samples (prp, naive, hacpo), demonstrations (sgt) or successes (graft)
    that entered the loss, summed over a run's steps, mean over runs."""
    keys = KEYS + pair_columns(steps)
    used = pd.Series(0.0, index=steps.groupby(keys, sort=False).size().index)
    for column in PEER_USE:
        if column in steps.columns:
            used = used + steps.groupby(keys, sort=False)[column].sum(min_count=1).fillna(0)
    return used.groupby(level=[0, 1, 2], sort=False).mean().rename("peer used").to_frame()


def own_rollouts(evals: pd.DataFrame) -> pd.Series:
    """Per pairing, probe and policy: own completions sampled in a run (at its last evaluation), mean over runs."""
    return evals.groupby(KEYS + pair_columns(evals), sort=False).rollouts.max().groupby(
        level=[0, 1, 2], sort=False).mean().rename("own rollouts")


def interval_cell(mean: float, low: float, high: float, real: bool) -> Interval:
    """The table cell of a paired difference (mrl.reports.cells.Interval): '+0.123 [+0.050, +0.196]', in bold when
    real; the mean alone when there is one pair."""
    return Interval(float(mean), float(low), float(high), bool(real))


def paired_table(evals: pd.DataFrame, steps: pd.DataFrame, split: str = "held-out",
                 by_zoo: bool = False) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(numbers, formatted table) per pairing, probe and policy: final weak-skill and overall `split` accuracy
    (mean over the row's runs, on the zoo seeds it lists), their paired differences to GRPO with 95% intervals over
    the pairs (bold: real), rollouts to reach GRPO's final weak-skill accuracy, own rollouts and peer experience
    used, the number of runs and of pairs with GRPO."""
    values = final_values(evals, split)
    means = values.groupby(KEYS, sort=False)[["weak", "overall"]].mean()
    runs = values.groupby(KEYS, sort=False).size().rename("runs")
    weak_skill = pd.Series({k: v for k, v in rescue_skills(evals).items()}, name="weak skill")
    numbers = means.join(runs)
    if "zoo_seed" in values.columns:
        numbers["zoo seeds"] = values.groupby(KEYS, sort=False).zoo_seed.agg(
            lambda z: ", ".join(str(v) for v in sorted(set(z))))
    for column in ("weak", "overall"):
        diff = paired_differences(values, column, by_zoo=by_zoo).set_index(KEYS)
        numbers = numbers.join(diff.add_prefix(f"{column} Δ "))
    numbers = numbers.join(reach_table(evals, split)).join(own_rollouts(evals)).join(peer_use(steps)).reset_index()
    numbers.insert(2, "weak skill", [weak_skill.get((p, q), "") for p, q in zip(numbers.pairing, numbers.policy)])
    columns = ["pairing", "policy", "weak skill", "probe", "runs"] + (["zoo seeds"] if "zoo seeds" in numbers else [])
    table = numbers[columns].copy()
    table["warm-ups" if by_zoo else "pairs"] = numbers["weak Δ n"].astype("Int64")
    table["weak"] = numbers.weak.round(3)
    table["Δ weak vs grpo [95% CI]"] = [interval_cell(*r) for r in numbers[
        ["weak Δ diff", "weak Δ low", "weak Δ high", "weak Δ real"]].itertuples(index=False)]
    table["overall"] = numbers.overall.round(3)
    table["Δ overall vs grpo [95% CI]"] = [interval_cell(*r) for r in numbers[
        ["overall Δ diff", "overall Δ low", "overall Δ high", "overall Δ real"]].itertuples(index=False)]
    table["rollouts to grpo's final weak"] = numbers["rollouts to GRPO's final (weak)"].round(0)
    table["reached"] = numbers["reached"]
    table["own rollouts"] = numbers["own rollouts"].round(0).astype(int)
    table["peer used"] = numbers["peer used"].round(0).astype(int)
    return numbers, table


def knob_table(evals: pd.DataFrame, split: str = "held-out") -> pd.DataFrame:
    """Each knob variant against its probe at the defaults (e.g. "sgt (lam=0.3)" vs "sgt"), per policy: final
    weak-skill and overall `split` accuracy of both and the paired difference over the shared seeds with its 95%
    t interval (formatted; bold only when it excludes 0 with n >= 3, so one seed is never called real)."""
    final = final_values(evals, split)
    rows = []
    for base, frame in final.groupby(final.probe.map(base_probe), sort=False):
        for metric, label in (("weak", "weak"), ("overall", "overall")):
            diffs = paired_differences(frame, metric, baseline=base)
            diffs = diffs.assign(metric=label, default=base)
            rows.append(diffs)
    if not rows:
        return pd.DataFrame()
    diffs = pd.concat(rows, ignore_index=True)
    table = []
    for (pairing, probe, policy), group in diffs.groupby(KEYS, sort=False):
        row = {"pairing": pairing, "policy": policy, "probe": probe, "default": group["default"].iloc[0]}
        for _, d in group.iterrows():
            row[f"Δ {d.metric} vs default [95% CI]"] = interval_cell(d["diff"], d.low, d.high, d.real)
        row["pairs"] = int(group.n.max())
        table.append(row)
    return pd.DataFrame(table)


def curve_band(frame: pd.DataFrame, x: str, y: str, by: list[str]) -> pd.DataFrame:
    """Mean of y per (by, x) and its 95% t interval over the runs (low, high), as columns mean/low/high."""
    rows = []
    for key, group in frame.groupby(by + [x], sort=False):
        mean, low, high = t_interval(group[y])
        rows.append({**dict(zip(by + [x], key)), "mean": mean, "low": low, "high": high})
    return pd.DataFrame(rows)


def paired_curves(weak: pd.DataFrame, baseline: str = BASELINE) -> pd.DataFrame:
    """Per pairing, probe, policy and evaluation step: the paired difference to the baseline over the shared seeds,
    its 95% interval and whether it is real (paired_differences at every step). weak: rows of one skill per policy."""
    frames = [paired_differences(at_step, "accuracy", baseline).assign(step=step)
              for step, at_step in weak.groupby("step", sort=True)]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def run_differences(weak: pd.DataFrame, probe: str, baseline: str = BASELINE) -> pd.DataFrame:
    """Per shared run (pair columns) and evaluation step: the probe's weak-skill accuracy minus the baseline's on the
    same seeds (column diff). weak: one pairing and policy's rows of weak_skill_evals."""
    pairs = pair_columns(weak)
    keys = pairs + ["step"]
    mine = weak[weak.probe == probe].set_index(keys).accuracy
    base = weak[weak.probe == baseline].set_index(keys).accuracy
    shared = mine.index.intersection(base.index)
    return (mine.loc[shared] - base.loc[shared]).rename("diff").reset_index()


def draw_spread(ax, runs: pd.DataFrame, x: str, y: str, band: pd.DataFrame | None, colour: str, n: int,
                clip: bool = False) -> None:
    """What a curve's spread honestly is: with at least MIN_PAIRS runs, the band [low, high] of `band` (the 95% t
    interval); with fewer, where a t interval is not informative (at n = 2 it is 12.7 standard errors wide), each
    run's own line, thin. runs: one row per run and x (pair columns, x, y)."""
    if n >= MIN_PAIRS and band is not None and not band.empty:
        low, high = band["low"], band["high"]
        if clip:
            low, high = low.clip(0, 1), high.clip(0, 1)
        ax.fill_between(band[x], low, high, color=colour, alpha=0.12, lw=0)
        return
    for _, run in runs.groupby(pair_columns(runs), sort=False):
        run = run.sort_values(x)
        ax.plot(run[x], run[y], color=colour, lw=0.6, alpha=0.45, zorder=1)


def spread_text(n_runs: pd.Series) -> str:
    """The figure's legend of spreads: 'band: 95% t interval over the runs' where every curve has >= MIN_PAIRS
    runs, 'thin lines: each run' where none has, both where it varies."""
    if n_runs.min() >= MIN_PAIRS:
        return "band: 95% t interval over the runs"
    if n_runs.max() < MIN_PAIRS:
        return f"thin lines: each run (fewer than {MIN_PAIRS} runs: no interval)"
    return f"band: 95% t interval over >= {MIN_PAIRS} runs; thin lines: each run where fewer"


def rollouts_per_step(weak: pd.DataFrame) -> pd.Series:
    """Per probe: own rollouts per RL step at its last evaluation, relative to the baseline's (gspo_x2 samples twice
    the group: 2.0); NaN where nothing was evaluated after step 0."""
    last = weak[(weak.step > 0) & (weak.step == weak.groupby("probe").step.transform("max"))]
    per_step = (last.rollouts / last.step).groupby(last.probe).mean()
    base = per_step.get(BASELINE, per_step.min() if len(per_step) else np.nan)
    return (per_step / base).round(1)


def weak_skill_inputs(evals: pd.DataFrame, steps: pd.DataFrame, zoo_seed: int) -> dict[str, pd.DataFrame]:
    """What weak_skill_figure draws for one zoo seed, and no more (the inputs mrl.reports.figure_inputs.draw_and_save
    commits): that seed's evaluations, and of its step rows the keys, seeds, step and reward."""
    keep = [c for c in [*KEYS, *pair_columns(steps), "step", "reward"] if c in steps.columns]
    return {"evals": evals[evals.zoo_seed == zoo_seed].reset_index(drop=True),
            "steps": steps.loc[steps.zoo_seed == zoo_seed, keep].reset_index(drop=True)}


def weak_skill_figure(evals: pd.DataFrame, steps: pd.DataFrame,
                      panels: dict[str, list[str]] | list[tuple[str, list[str]]] | None = None,
                      split: str = "held-out", smooth: int = 25, zoo_seed: int | None = None, setting: str = ""):
    """Three rows per policy, a column per group of probes (`panels`: {title: probes}, or [(title, probes)] pairs,
    the form whose order survives draw_and_save's recipe, which sorts a mapping's keys; None: one group of all), RL
    step on every x axis. Top: the weak skill's `split` accuracy, one line per probe (mean over its runs). Middle:
    the paired difference to GRPO on the same seeds. Bottom: the training reward (the policy's mean reward per
    step, rolling mean over `smooth` steps, mean over runs). Spread (`draw_spread`): the 95% t interval where a
    probe has MIN_PAIRS runs or more, each run's thin line where fewer. The accuracy and difference panels of a
    policy share their y scale. zoo_seed: only the runs on that zoo seed (a group keeps the probes that ran there,
    if two or more did). setting: the task (and anything else) the title names first. A probe sampling more
    rollouts per step than GRPO (gspo_x2) says so in its legend label. Each probe has its colour of
    mrl.reports.palette, the same in every figure; knob variants their base probe's colour and a line style of
    their own; grpo on top."""
    order = probe_order(evals)
    if zoo_seed is not None:
        evals, steps = evals[evals.zoo_seed == zoo_seed], steps[steps.zoo_seed == zoo_seed]
    ran = set(evals.probe)
    panels = {title: [p for p in probes if p in ran] for title, probes in dict(panels or {"probes": order}).items()
              if len(set(probes) & ran) > 1}
    weak = weak_skill_evals(evals, split)
    colours = probe_palette(order)
    styles = {probe: line_style(probe, order) for probe in order}
    policies = list(dict.fromkeys(zip(weak.pairing, weak.policy, weak.skill)))
    fig, axes = plt.subplots(3 * len(policies), len(panels), figsize=(5.4 * len(panels), 8.4 * len(policies)),
                             squeeze=False)
    accuracy = curve_band(weak, "step", "accuracy", ["pairing", "policy", "probe"])
    paired = paired_curves(weak)
    reward = steps.sort_values("step").assign(
        smoothed=lambda f: f.groupby(KEYS + pair_columns(f)).reward.transform(
            lambda r: r.rolling(smooth, min_periods=1).mean()))
    reward = reward.groupby(["pairing", "policy", "probe", "step"], sort=False).smoothed.mean().reset_index()
    n_runs = weak.groupby(["pairing", "policy", "probe"]).apply(lambda g: len(g.groupby(pair_columns(g))),
                                                                include_groups=False)
    scale = rollouts_per_step(weak)
    for index, (pairing, policy, skill) in enumerate(policies):
        top, middle, bottom = axes[3 * index], axes[3 * index + 1], axes[3 * index + 2]
        of_policy = lambda frame, probe: frame[(frame.pairing == pairing) & (frame.policy == policy)  # noqa: E731
                                               & (frame.probe == probe)]
        mine = weak[(weak.pairing == pairing) & (weak.policy == policy)]
        for ax, diff_ax, reward_ax, (title, probes) in zip(top, middle, bottom, panels.items()):
            for probe in [p for p in order if p in probes]:
                n = int(n_runs.get((pairing, policy, probe), 0))
                z = 3 if probe == BASELINE else 2
                line = of_policy(accuracy, probe)
                if not line.empty:
                    ratio = scale.get(probe, 1.0)
                    more = f", {ratio:g}x rollouts/step" if np.isfinite(ratio) and ratio != 1.0 else ""
                    ax.plot(line.step, line["mean"], color=colours[probe], ls=styles[probe], lw=1.5, zorder=z,
                            label=f"{probe} ({n} runs{more})")
                    draw_spread(ax, mine[mine.probe == probe], "step", "accuracy", line, colours[probe], n, clip=True)
                diff = of_policy(paired, probe) if not paired.empty else paired
                if not diff.empty:
                    diff_ax.plot(diff.step, diff["diff"], color=colours[probe], ls=styles[probe], lw=1.5,
                                 label=f"{probe} ({int(diff.n.max())} pairs)")
                    draw_spread(diff_ax, run_differences(mine, probe), "step", "diff", diff, colours[probe],
                                int(diff.n.max()))
                curve = of_policy(reward, probe)
                if not curve.empty:
                    reward_ax.plot(curve.step, curve.smoothed, color=colours[probe], ls=styles[probe], lw=1.0,
                                   zorder=z)
            ax.set(xlabel="RL step", title=f"{policy}'s weak skill {skill}: {title}")
            fit_accuracy_axis(ax, f"{split} accuracy on {skill}")
            ax.legend(fontsize=7, loc="upper left")
            diff_ax.axhline(0.0, color=colours.get(BASELINE, "k"), lw=0.9, zorder=3)
            diff_ax.set(xlabel="RL step", ylabel=f"difference to {BASELINE} on {skill}",
                        title=f"{policy}: minus {BASELINE} on the same seeds")
            diff_ax.legend(fontsize=7, loc="upper left")
            reward_ax.set(xlabel="RL step", ylabel=f"training reward ({smooth}-step mean)",
                          title=f"{policy}: training reward (mean over runs)")
        share_y(top)         # one scale across a policy's panels: their probes compare at a glance
        share_y(middle)
        share_y(bottom)
    zoo = f", zoo seed {evals.zoo_seed.iloc[0]}" if "zoo_seed" in evals and evals.zoo_seed.nunique() == 1 else ""
    where = f"{setting}, " if setting else ""
    fig.suptitle(f"{where}{pairing}{zoo}: each policy's weak skill ({split} prompts, mean over runs), its paired "
                 f"difference to {BASELINE}, and the training reward\n({spread_text(n_runs)})", y=1.0)
    fig.tight_layout()
    return fig


def share_y(axes) -> None:
    """Give `axes` one y range, the union of theirs."""
    axes = list(axes)
    if len(axes) > 1:
        low = min(ax.get_ylim()[0] for ax in axes)
        high = max(ax.get_ylim()[1] for ax in axes)
        for ax in axes:
            ax.set_ylim(low, high)


def chance_note(intervals: int, level: float = 0.95) -> str:
    """The caption's count of a table of intervals: how many it holds and how many would exclude 0 by chance alone if
    no effect were real."""
    return (f"The table holds {intervals} intervals; at {level:.0%}, about {intervals * (1 - level):.1f} of them would "
            f"exclude 0 by chance alone if no effect were real.")


def interval_caption(table: pd.DataFrame, over: str, n_column: str = "pairs", reference: str = "") -> str:
    """The sentence every caption of a table of paired intervals ends with (one function, so the captions cannot
    drift apart): what the interval covers, where n is, what bold means, and how many of the table's intervals would
    exclude 0 by chance (chance_note). over: what the interval runs over, e.g. "RL seeds 0, 1, 2"."""
    against = f" to {reference}" if reference else ""
    return (f"Δ: the paired difference{against} with its 95% t interval over {over} (n = `{n_column}`); bold: the "
            f"interval excludes 0 with n >= {MIN_PAIRS}. {chance_note(interval_count(table))}")


def interval_count(table: pd.DataFrame) -> int:
    """How many interval cells ('+0.1 [+0.0, +0.2]': an Interval with both ends) a table holds."""
    return sum(isinstance(cell, Interval) and cell.bounded for column in table.columns for cell in table[column])


def interval_phrase(mean: float, low: float, high: float, n: float, real: bool) -> str:
    """A paired difference in prose, as the tables show it (interval_cell: bold when real), '+0.010 (one pair: no
    interval)' when it rests on one pair, 'no pair' when the arm shares no seed with its reference."""
    if np.isnan(mean) or not n:
        return "no pair"
    text = str(interval_cell(mean, low, high, bool(real)))
    return f"{text} (one pair: no interval)" if np.isnan(low) else text


def delta_phrase(row, column: str) -> str:
    """interval_phrase of one row of paired_table's numbers, for `column` ("weak" or "overall")."""
    return interval_phrase(*(row[f"{column} Δ {part}"] for part in ("diff", "low", "high", "n", "real")))


def policy_label(row, pairings: int, skill: bool = True) -> str:
    """'A (S2)' in a grid of one pairing, 'A in A+B+C (S2)' in a grid of several: a policy and (skill) its weak
    skill."""
    where = f" in {row['pairing']}" if pairings > 1 else ""
    return f"{row['policy']}{where}" + (f" ({row['weak skill']})" if skill else "")


def seeds_phrase(numbers: pd.DataFrame, baseline: str = BASELINE) -> str:
    """'3 RL seeds' (or '2-3 RL seeds', '1 RL seed'): the pairs behind the weak-skill intervals of paired_table's
    numbers."""
    n = numbers.loc[numbers.probe != baseline, "weak Δ n"].dropna().astype(int)
    if n.empty:
        return "no shared RL seed"
    count = f"{n.min()}" if n.min() == n.max() else f"{n.min()}-{n.max()}"
    return f"{count} RL seed{'' if count == '1' else 's'}"


def weak_skill_lines(numbers: pd.DataFrame, baseline: str = BASELINE) -> list[str]:
    """One Markdown bullet per probe (grid order): its paired difference to `baseline` on each policy's weak skill,
    with its 95% t interval. numbers: paired_table's numbers."""
    pairings = numbers.pairing.nunique()
    lines = []
    for probe, rows in numbers[numbers.probe != baseline].groupby("probe", sort=False):
        deltas = "; ".join(f"{policy_label(row, pairings)} {delta_phrase(row, 'weak')}" for _, row in rows.iterrows())
        lines.append(f"- `{probe}`: {deltas}.")
    return lines


def significance_sentence(numbers: pd.DataFrame, reference: str = "GRPO", named: list[str] | None = None,
                          who: str = "") -> str:
    """How many of paired_table's intervals (weak and overall) exclude 0 with n >= MIN_PAIRS (bold), against how many
    would by chance alone (chance_note), naming those that do: all, or only those of the probes in `named` (`who`
    says whose they are, e.g. "HACPO")."""
    columns = ("weak", "overall")
    intervals = sum(int(numbers[f"{c} Δ low"].notna().sum()) for c in columns)
    if intervals == 0:
        return (f"No arm has two seeds paired with {reference}, so the table holds no interval: these runs show the "
                f"pipeline at work, not an effect.")
    pairings = numbers.pairing.nunique()
    real = [(row, c) for c in columns for _, row in numbers[numbers[f"{c} Δ real"].eq(True)].iterrows()]
    shown = [(row, c) for row, c in real if named is None or row.probe in named]
    listed = "; ".join(f"`{row.probe}`, {policy_label(row, pairings, skill=False)}, "
                       f"{'weak skill ' + row['weak skill'] if c == 'weak' else c} {delta_phrase(row, c)}"
                       for row, c in shown)
    whose = f"{who}'s" if who else "these arms'"
    if not real:
        tail = "None does."
    elif named is None:
        tail = f"{len(real)} do{'es' if len(real) == 1 else ''}: {listed}."
    else:
        tail = (f"{len(real)} do{'es' if len(real) == 1 else ''}, "
                + (f"{len(shown)} of them {whose}: {listed}." if shown else f"none of them {whose}."))
    return f"{chance_note(intervals)} {tail}"


def transfer_sentence(held_out: pd.DataFrame, pool: pd.DataFrame, numbers: pd.DataFrame,
                      baseline: str = BASELINE) -> str:
    """Does what a probe adds on its weak skill on the RL pool reach held-out prompts? Per probe, the mean over the
    policies of its final weak-skill accuracy minus the baseline's, on the pool and held-out. held_out, pool:
    main_table's numbers on each split; numbers: paired_table's (for the weak skills)."""
    weak = numbers[["pairing", "policy", "weak skill"]].drop_duplicates().rename(columns={"weak skill": "skill"})
    means = {split: frame.merge(weak, on=["pairing", "policy", "skill"]).pivot_table(
        index=["pairing", "policy"], columns="probe", values="mean", sort=False) for split, frame in
        (("pool", pool), ("held-out", held_out))}
    if any(baseline not in m.columns for m in means.values()):
        return ""
    gains = {split: m.drop(columns=baseline).sub(m[baseline], axis=0).mean() for split, m in means.items()}
    probes = [p for p in gains["pool"].index if p in gains["held-out"].index]
    if not probes:
        return ""
    listed = ", ".join(f"`{p}` {gains['pool'][p]:+.3f} / {gains['held-out'][p]:+.3f}" for p in probes)
    return (f"Each probe's final weak-skill accuracy minus `{baseline}`'s, averaged over the policies, on the RL pool "
            f"/ on held-out prompts: {listed}; `{baseline}` itself ends at "
            f"{means['pool'][baseline].mean():.3f} / {means['held-out'][baseline].mean():.3f}.")


def probe_result(numbers: pd.DataFrame, held_out: pd.DataFrame, pool: pd.DataFrame, stability: pd.DataFrame) -> str:
    """40_probe's Result as Markdown, generated from its tables: each probe's paired difference to GRPO on each
    policy's weak skill (held-out), how many of the paired table's intervals exclude 0 against chance, whether pool
    gains reach held-out prompts, and stability. numbers: paired_table's; held_out, pool: main_table's; stability:
    stability_table."""
    lead = (f"Each probe against independent GRPO, paired on {seeds_phrase(numbers)}: the difference of final "
            f"held-out accuracy on each policy's weak skill, with its 95% t interval.")
    rest = [significance_sentence(numbers), transfer_sentence(held_out, pool, numbers), stability_sentence(stability)]
    return "\n\n".join([lead, "\n".join(weak_skill_lines(numbers)), *(s for s in rest if s)])


HACPO_REFERENCES = ("gspo", "gspo_x2", "naive")
"""the HACPO paper's baselines: GSPO alone, GSPO with twice the rollouts, naive sharing"""


def hacpo_comparisons(evals: pd.DataFrame, split: str = "held-out", column: str = "overall",
                      references: tuple[str, ...] = HACPO_REFERENCES) -> pd.DataFrame:
    """HACPO against its paper's baselines, paired on the seeds: per HACPO arm ("hacpo", "hacpo (minibatches=4)"),
    reference and policy, the paired difference of final `split` accuracy (`column`: "overall" or "weak") to the
    reference run with the same knobs ("gspo (minibatches=4)" for "hacpo (minibatches=4)"), its 95% t interval, n
    and `real` (paired_differences' columns, and `reference`)."""
    values = final_values(evals, split)
    ran = set(values.probe)
    rows = []
    for arm in (p for p in dict.fromkeys(values.probe) if base_probe(p) == "hacpo"):
        knobs = knobs_suffix(arm)
        for reference in (r + knobs for r in references if r + knobs in ran):
            pair = values[values.probe.isin([arm, reference])]
            rows.append(paired_differences(pair, column, baseline=reference).assign(reference=reference))
    columns = KEYS + ["reference", "diff", "low", "high", "n", "real"]
    return pd.concat(rows, ignore_index=True)[columns] if rows else pd.DataFrame(columns=columns)


def hacpo_result(evals: pd.DataFrame, numbers: pd.DataFrame, split: str = "held-out") -> str:
    """50_hacpo's Result as Markdown, generated from its runs and paired table: per HACPO arm, its paired difference
    to GRPO on each policy's weak skill (paired_table's numbers) and to GSPO, GSPO x2 and naive sharing on overall
    accuracy (the HACPO paper's measure: hacpo_comparisons), then how many intervals exclude 0 against chance."""
    arms = [p for p in dict.fromkeys(numbers.probe) if base_probe(p) == "hacpo"]
    if not arms:
        return "HACPO did not run in this profile."
    direct = hacpo_comparisons(evals, split, "overall")
    pairings = numbers.pairing.nunique()
    lines = []
    for arm in arms:
        weak = ", ".join(f"{policy_label(row, pairings)} {delta_phrase(row, 'weak')}"
                         for _, row in numbers[numbers.probe == arm].iterrows())
        parts = [f"on the weak skill against GRPO {weak}"]
        for reference, rows in direct[direct.probe == arm].groupby("reference", sort=False):
            against = ", ".join(f"{r.policy}{f' in {r.pairing}' if pairings > 1 else ''} "
                                f"{interval_phrase(r.diff, r.low, r.high, r.n, r.real)}" for r in rows.itertuples())
            parts.append(f"overall against `{reference}` {against}")
        lines.append(f"- `{arm}`: " + "; ".join(parts) + ".")
    lead = (f"HACPO's final {split} accuracy, paired on {seeds_phrase(numbers)} with the reference's run of the same "
            f"seed, with 95% t intervals:")
    tally = significance_sentence(numbers, named=arms, who="HACPO")
    intervals = int(direct.low.notna().sum())
    if intervals:
        real = int(direct.real.eq(True).sum())
        tally += (f" Of the {intervals} intervals against GSPO, GSPO x2 and naive sharing, {real} exclude"
                  f"{'s' if real == 1 else ''} 0 (at 95%, about {intervals * 0.05:.1f} would by chance alone).")
    return "\n\n".join([lead, "\n".join(lines), tally])
