"""Tables and figures of the probe experiment (docs/architecture.md, Experiments and profiles): main results,
stability, curves.

Inputs are the concatenated `steps` and `evals` of `mrl.experiments.run_many` (columns pairing, probe, seed).
Means over seeds carry a 95% confidence half-width from Student's t with n - 1 degrees of freedom.
"""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from scipy.stats import t as student_t

from mrl.core.config import GrpoConfig, TaskConfig, WarmupConfig
from mrl.core.probes import get_probe, probe_config
from mrl.core.probes.hacpo_primitives import stepwise_lower_bound
from mrl.reports.cells import Count
from mrl.reports.palette import (COMPACT, baseline_on_top, figure_title, fit_accuracy_axis, line_style,
                                 probe_colour, probe_palette)

KEYS = ["pairing", "probe", "policy"]
PEER_USE = {"peer_samples": "peer samples (prp)", "rescue_size": "peer demos (sgt)",
            "graft_samples": "peer successes (graft)"}


def ci95(values) -> float:
    """Half-width of the 95% confidence interval of the mean (t, n - 1 dof); NaN for one value."""
    values = np.asarray(values, dtype=float)
    values = values[~np.isnan(values)]
    if len(values) < 2:
        return float("nan")
    return float(student_t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / np.sqrt(len(values)))


def with_overall(evals: pd.DataFrame) -> pd.DataFrame:
    """Adds an 'overall' skill: the mean accuracy over the skills of each eval."""
    keys = [c for c in evals.columns if c not in ("skill", "accuracy")]
    overall = evals.groupby(keys, as_index=False, dropna=False)["accuracy"].mean().assign(skill="overall")
    return pd.concat([evals, overall], ignore_index=True)


def rescue_skills(evals: pd.DataFrame) -> dict[tuple[str, str], str]:
    """{(pairing, policy): the skill it lacks}: the largest gap between the best peer's step-0 held-out
    accuracy and its own (A lacks S2, B lacks S1 in the default zoo)."""
    start = evals[(evals.step == 0) & (evals.split == "held-out")]
    start = start.groupby(["pairing", "policy", "skill"]).accuracy.mean()
    out = {}
    for (pairing, policy), own in start.groupby(level=[0, 1]):
        own = own.droplevel([0, 1])
        peers = start.loc[pairing].drop(index=policy, level=0)
        gap = peers.groupby(level="skill").max() - own
        out[(pairing, policy)] = gap.idxmax()
    return out


def final_accuracy(evals: pd.DataFrame) -> pd.DataFrame:
    """Each run's last evaluation (a run: pairing, probe, policy, seed and, where present, zoo seed), with overall."""
    run = KEYS + ["seed"] + (["zoo_seed"] if "zoo_seed" in evals.columns else [])
    last = evals[evals.step == evals.groupby(run).step.transform("max")]
    return with_overall(last)


def main_table(evals: pd.DataFrame, split: str = "held-out") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(numeric long table, formatted wide table) of the final accuracy per skill and overall on `split`,
    mean and 95% CI over seeds. The paired comparison with GRPO, rollouts to reach it and the experience used
    are `mrl.reports.paired.paired_table`'s."""
    final = final_accuracy(evals)
    final = final[final.split == split]
    numeric = final.groupby(KEYS + ["skill"], sort=False).accuracy.agg(mean="mean", ci95=ci95, seeds="count")
    numeric = numeric.reset_index()
    wide = numeric.assign(cell=[_cell(m, c) for m, c in zip(numeric["mean"], numeric.ci95)])
    wide = wide.pivot_table(index=KEYS, columns="skill", values="cell", aggfunc="first", sort=False)
    wide = wide[[c for c in ("S1", "S2", "S3", "overall") if c in wide.columns]]
    wide = wide.reset_index()
    wide["rescue skill"] = [rescue_skills(evals).get((p, q), "") for p, q in zip(wide.pairing, wide.policy)]
    return numeric, wide


def _cell(mean: float, half: float) -> str:
    return f"{mean:.3f}" if np.isnan(half) else f"{mean:.3f} ± {half:.3f}"


def stability_table(steps: pd.DataFrame, evals: pd.DataFrame) -> pd.DataFrame:
    """Per pairing, probe and policy (means over seeds unless said): collapsed runs (the 10-step mean training
    reward falls below half of its first 10 steps' mean), grad-norm spread (std over steps), PRP's ESS
    fraction, SGT's rescue hits per step, the change of held-out accuracy on the policy's strongest skill."""
    rows = []
    start = evals[(evals.step == 0) & (evals.split == "held-out")]
    strongest = start.groupby(["pairing", "policy", "skill"]).accuracy.mean().groupby(level=[0, 1]).idxmax()
    final = final_accuracy(evals)
    for (pairing, probe, policy, seed), run in steps.groupby(KEYS + ["seed"], sort=False):
        reward = run.sort_values("step").reward.rolling(10, min_periods=10).mean()
        first = reward.dropna().iloc[0] if reward.notna().any() else np.nan
        skill = strongest[(pairing, policy)][2]
        own = final[(final.pairing == pairing) & (final.probe == probe) & (final.policy == policy)
                    & (final.seed == seed) & (final.split == "held-out") & (final.skill == skill)].accuracy
        begin = start[(start.pairing == pairing) & (start.probe == probe) & (start.policy == policy)
                      & (start.seed == seed) & (start.skill == skill)].accuracy
        rows.append({"pairing": pairing, "probe": probe, "policy": policy, "seed": seed,
                     "collapsed": bool((reward.dropna() < first / 2).any()),
                     "grad-norm std": run.grad_norm.std(), "grad-norm max": run.grad_norm.max(),
                     "ESS fraction": run["ess_fraction"].mean() if "ess_fraction" in run else np.nan,
                     "rescue hits / step": run["rescue_size"].mean() if "rescue_size" in run else np.nan,
                     "strong skill": skill,
                     "strong-skill change": float(own.mean() - begin.mean()) if len(own) and len(begin) else np.nan})
    frame = pd.DataFrame(rows)
    numeric = ["grad-norm std", "grad-norm max", "ESS fraction", "rescue hits / step", "strong-skill change"]
    table = frame.groupby(KEYS, sort=False)[numeric].mean()
    collapsed = frame.groupby(KEYS, sort=False).collapsed
    table.insert(0, "collapsed runs", [Count(int(k), int(n)) for k, n in zip(collapsed.sum(), collapsed.size())])
    table.insert(1, "strong skill", frame.groupby(KEYS, sort=False)["strong skill"].first())
    return table.reset_index()


def stability_sentence(stability: pd.DataFrame) -> str:
    """The stability table in words (Markdown): how many runs collapsed, the mean change of held-out accuracy on the
    policies' strongest skill per probe, and PRP's effective sample size fraction where it ran. stability:
    stability_table's frame."""
    if stability.empty:
        return ""
    collapsed = stability["collapsed runs"]
    change = stability.groupby("probe", sort=False)["strong-skill change"].mean().dropna()
    sentences = [f"{sum(c.k for c in collapsed)} of {sum(c.n for c in collapsed)} policy runs collapsed."]
    if len(change):
        sentences.append("Held-out accuracy on each policy's strongest skill changed over training by, on average "
                         "over the policies, " + ", ".join(f"{v:+.3f} under `{p}`" for p, v in change.items()) + ".")
    ess = stability.groupby("probe", sort=False)["ESS fraction"].agg(["min", "max"]).dropna()
    if len(ess):
        sentences.append("The importance weights kept an effective sample size fraction of " + ", ".join(
            f"{_span(row['min'], row['max'])} (`{p}`)" for p, row in ess.iterrows()) + " of the peer samples.")
    return " ".join(sentences)


def _span(low: float, high: float) -> str:
    """'0.075' or '0.075-0.129': a range of values over policies, one number when they agree to three places."""
    return f"{low:.3f}" if f"{low:.3f}" == f"{high:.3f}" else f"{low:.3f}-{high:.3f}"


def probe_order(evals: pd.DataFrame) -> list[str]:
    """The probes in the grid's order (legend order; colours come from mrl.reports.palette)."""
    return list(dict.fromkeys(evals.probe))


def t_band(values) -> tuple[float, float]:
    """seaborn errorbar: the mean's 95% t interval over the runs (`ci95`, the tables' interval; no band for one
    run)."""
    values = np.asarray(values, dtype=float)
    half = ci95(values)
    mean = float(np.nanmean(values))
    return (mean, mean) if np.isnan(half) else (mean - half, mean + half)


def accuracy_band(values) -> tuple[float, float]:
    """`t_band` clipped to [0, 1], where an accuracy lies."""
    low, high = t_band(values)
    return max(low, 0.0), min(high, 1.0)


def band_text(frame: pd.DataFrame, by=("pairing", "probe")) -> str:
    """What a figure's band is: 'band: 95% t interval of the mean over 3 seeds' (or '2-3 seeds'), or 'one seed:
    no band'."""
    seeds = frame.groupby(list(by)).seed.nunique()
    if seeds.max() < 2:
        return "one seed: no band"
    n = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()}-{seeds.max()}"
    return f"band: 95% t interval of the mean over {n} seeds"


def _curve_grid(frame: pd.DataFrame, order: list[str], title: str):
    """Accuracy vs own rollouts, a panel per `run`, a colour per probe (the palette), held-out solid and pool
    dashed; line: mean over seeds, band: its 95% t interval (`accuracy_band`); y fitted to each panel's data."""
    grid = sns.relplot(data=frame, x="rollouts", y="accuracy", hue="probe", hue_order=order,
                       palette=probe_palette(order), style="split", col="run",
                       col_wrap=min(5, frame.run.nunique()), kind="line", errorbar=accuracy_band,
                       err_kws={"alpha": 0.12, "lw": 0}, height=2.8, aspect=1.1, style_order=["held-out", "pool"],
                       facet_kws={"sharey": False, "sharex": False})
    grid.set_titles("{col_name}")
    fitted = False
    for ax in grid.axes.flat:
        ax.xaxis.set_major_formatter(COMPACT)
        ax.set_xlabel("own rollouts")
        baseline_on_top(ax)
        fitted = fit_accuracy_axis(ax, None) or fitted
    note = "\n(each axis fitted to its panel's data)" if fitted else ""
    for ax in grid.axes.flat:
        ax.set_ylabel(f"greedy accuracy{note}" if ax.get_subplotspec().is_first_col() else "")
    grid.tight_layout()
    figure_title(grid.figure, title)
    return grid.figure


def accuracy_figure(evals: pd.DataFrame, setting: str = ""):
    """Overall accuracy vs own rollouts per probe; a panel per pairing and policy; solid held-out, dashed pool;
    line: mean over seeds, band: its 95% t interval. setting: the task and zoo seed, named first in the title."""
    curves = with_overall(evals)
    curves = curves[curves.skill == "overall"]
    curves = curves.assign(run=curves.pairing + ": policy " + curves.policy)
    return _curve_grid(curves, probe_order(evals),
                       f"{_setting(setting)}Overall greedy accuracy vs own rollouts (mean over seeds, "
                       f"{band_text(evals)})")


def rescue_figure(evals: pd.DataFrame, setting: str = ""):
    """Accuracy on the skill each policy lacks (rescue_skills), per probe; solid held-out, dashed pool; line: mean
    over seeds, band: its 95% t interval. setting: the task and zoo seed, named first in the title."""
    lacks = rescue_skills(evals)
    mask = [lacks.get((p, q)) == s for p, q, s in zip(evals.pairing, evals.policy, evals.skill)]
    rescue = evals[mask]
    rescue = rescue.assign(run=rescue.pairing + ": " + rescue.policy + " lacks " + rescue.skill)
    return _curve_grid(rescue, probe_order(evals), f"{_setting(setting)}Rescue skill: accuracy on the skill each "
                                                   f"policy lacks (mean over seeds, {band_text(evals)})")


def _setting(setting: str) -> str:
    """A figure title's opening: 'arith-ops, zoo seed 0: ' (empty without a setting)."""
    return f"{setting}: " if setting else ""


def summary_table(evals: pd.DataFrame) -> pd.DataFrame:
    """Per pairing, probe and policy: final overall accuracy (held-out, pool) and on the rescue skill, as
    mean ± 95% CI over seeds (formatted), with the number of seeds."""
    final = final_accuracy(evals)
    lacks = rescue_skills(evals)
    final = final.assign(rescue=[lacks.get((p, q)) == s for p, q, s in zip(final.pairing, final.policy, final.skill)])
    columns = {"held-out": (final.split == "held-out") & (final.skill == "overall"),
               "pool": (final.split == "pool") & (final.skill == "overall"),
               "rescue skill, held-out": (final.split == "held-out") & final.rescue,
               "rescue skill, pool": (final.split == "pool") & final.rescue}
    table = pd.DataFrame({name: final[mask].groupby(KEYS, sort=False).accuracy.agg(lambda v: _cell(v.mean(), ci95(v)))
                          for name, mask in columns.items()})
    table["seeds"] = final[columns["pool"]].groupby(KEYS, sort=False).seed.nunique()
    return table.reset_index()


def peer_clip_table(steps: pd.DataFrame) -> pd.DataFrame:
    """Per pairing, probe and policy: the fraction of peer samples inside the clip range (HACPO), mean over steps."""
    if "peer_kept" not in steps.columns:
        return pd.DataFrame(columns=KEYS + ["peer kept fraction"])
    rows = steps.dropna(subset=["peer_kept"])
    rows = rows[rows.peer_samples > 0]
    fraction = (rows.peer_kept / rows.peer_samples).groupby([rows[k] for k in KEYS], sort=False).mean()
    return fraction.rename("peer kept fraction").reset_index()


RATIO_STATS = {"log_s_mean": "mean log s", "log_s_std": "std log s", "log_s_q10": "q10 log s",
               "log_s_q50": "median log s", "log_s_q90": "q90 log s", "inside": "inside clip range"}


def ratio_statistics_table(steps: pd.DataFrame) -> pd.DataFrame:
    """HACPO's Table 6 on our runs: per pairing, probe, policy and source (self, or the peer it came from), the
    per-step statistics of the log ratio log s (mean, std, quantiles) and the fraction of peer samples inside the
    clip range, averaged over steps and seeds. Self rows: log(pi / pi_old) of own samples (0 with one update per
    step; with minibatches, the drift of later updates; rows that are exactly 0, i.e. one update per step, are
    left out)."""
    pattern = r"^(log_s_mean|log_s_std|log_s_q10|log_s_q50|log_s_q90|inside)_(self|from_\w+)$"
    columns = [c for c in steps.columns if pd.Series([c]).str.match(pattern).iloc[0]]
    if not columns:
        return pd.DataFrame(columns=KEYS + ["source", *RATIO_STATS.values()])
    long = steps.melt(id_vars=KEYS, value_vars=columns, var_name="column").dropna(subset=["value"])
    parts = long.column.str.extract(pattern)
    long = long.assign(stat=parts[0].map(RATIO_STATS), source=parts[1].str.replace("from_", "", regex=False))
    table = long.pivot_table(index=KEYS + ["source"], columns="stat", values="value", aggfunc="mean", sort=False)
    table = table.reindex(columns=[c for c in RATIO_STATS.values() if c in table.columns]).reset_index()
    stats = [c for c in ("mean log s", "std log s") if c in table.columns]
    no_drift = (table.source == "self") & (table[stats] == 0).all(axis=1)
    return table[~no_drift].reset_index(drop=True)


def _default_mark(value, default) -> str:
    return "yes" if value == default else f"no ({default})"


def hyperparameter_table(config, probe_cfgs) -> pd.DataFrame:
    """The settings of every run, read from the configs: GRPO and the task (shared), each experiment's steps, the
    zoo warm-up, and each probe's own knobs; `default` says whether a value is the package's default (else gives
    the default)."""
    grpo, task, warmup = GrpoConfig(), TaskConfig(), WarmupConfig()
    rows = [{"scope": "all runs", "setting": f"grpo.{name}", "value": getattr(config.grpo, name),
             "default": _default_mark(getattr(config.grpo, name), getattr(grpo, name))}
            for name in ("prompts_per_step", "group_size", "max_new_tokens", "temperature", "lr", "grad_clip",
                         "loss_type", "level", "scale", "eps_low", "eps_high", "beta", "eval_every", "engine")]
    rows += [{"scope": "all runs", "setting": f"task.{name}", "value": getattr(config.task, name),
              "default": _default_mark(getattr(config.task, name), getattr(task, name))}
             for name in ("name", "pool_per_skill", "test_per_skill")]
    grids = config.experiments   # the experiments this profile holds (mrl.experiments)
    steps = []
    if "probe" in grids:
        steps += [(f"RL steps, probe grid {pairing}", value) for pairing, value in grids["probe"].steps.items()
                  if pairing in grids["probe"].pairings]
    if "hacpo" in grids:
        steps += [("RL steps, HACPO comparison", grids["hacpo"].steps),
                  ("RL steps, HACPO ablations", grids["hacpo"].ablation_steps)]
    if "heldout" in grids:
        steps += [("RL steps, held-out experiment", grids["heldout"].steps)]
    rows += [{"scope": "experiments", "setting": name, "value": value, "default": "profile"} for name, value in steps]
    zoos = [("zoo warm-up", config.zoo), ("held-out zoo warm-up", grids["heldout"].zoo if "heldout" in grids else None)]
    for scope, zoo in [(scope, zoo) for scope, zoo in zoos if zoo is not None]:
        rows += [{"scope": scope, "setting": f"warmup.{name}", "value": getattr(zoo.warmup, name),
                  "default": _default_mark(getattr(zoo.warmup, name), getattr(warmup, name))}
                 for name in ("steps", "batch_size", "lr", "lr_warmup_steps", "grad_clip", "precision")]
    seen = set()
    for cfg in probe_cfgs:
        probe = get_probe(cfg.name)
        defaults = probe_config(cfg.name).knobs()
        for knob, value in cfg.knobs().items():
            if (cfg.name, knob, value) not in seen:
                seen.add((cfg.name, knob, value))
                rows.append({"scope": cfg.name, "setting": knob, "value": value,
                             "default": _default_mark(value, defaults[knob])})
        if probe.group_multiplier != 1 and (cfg.name, "samples") not in seen:
            seen.add((cfg.name, "samples"))
            rows.append({"scope": cfg.name, "setting": "samples per prompt",
                         "value": probe.group_multiplier * config.grpo.group_size, "default": "registry"})
    frame = pd.DataFrame(rows)
    frame["value"] = frame["value"].astype(str)
    return frame


def stepwise_clipping_inputs(steps: pd.DataFrame) -> pd.DataFrame:
    """What stepwise_clipping_figure draws of the clipping runs' step rows (the input
    mrl.reports.figure_inputs.draw_and_save commits): the rows where peer samples arrived (peer_samples > 0, peer_kept
    recorded), with the probe, the run's seeds, the step and the two counts."""
    keep = [c for c in ("probe", "seed", "zoo_seed", "step", "peer_samples", "peer_kept") if c in steps.columns]
    rows = steps.dropna(subset=["peer_kept"])
    return rows.loc[rows.peer_samples > 0, keep].reset_index(drop=True)


def stepwise_clipping_figure(steps: pd.DataFrame, delta: float, delta_step: float, minibatches: int,
                             smooth: int = 5):
    """Left: the peer ratio's clip range per minibatch update m for each clipping variant. Right: the fraction
    of peer samples inside it over training (mean over policies and seeds), a line per variant (hacpo's colour,
    a line style each; thin per step, thick its centred `smooth`-step mean). A variant that keeps every sample
    (clipping=none) is named, not drawn: its line at 1 would squash the range where the others differ."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    m = np.arange(max(minibatches, 10))
    left.step(m, [stepwise_lower_bound(i, delta, delta_step) for i in m], where="post", label="stepwise lower",
              color=probe_colour("hacpo"))
    left.axhline(1 - delta, color="0.45", ls="--", label="fixed / symmetric lower")
    left.axhline(1.0, color="0.45", lw=0.8, label="upper (stepwise, fixed)")
    left.axhline(1 + delta, color="0.45", ls=":", label="symmetric upper")
    left.axvspan(-0.5, minibatches - 0.5, color="0.9", label=f"updates used per step ({minibatches})")
    left.set(xlabel="minibatch update m within a step", ylabel="peer ratio clip bound",
             title=f"delta = {delta}, delta_step = {delta_step}")
    left.legend(fontsize=7)
    rows = steps.dropna(subset=["peer_kept"])
    rows = rows[rows.peer_samples > 0].assign(kept=lambda f: f.peer_kept / f.peer_samples)
    order = list(dict.fromkeys(rows.probe))
    kept_all = []
    for probe in order:
        kept = rows[rows.probe == probe].groupby("step").kept.mean()
        if (kept > 1 - 1e-9).all():      # no clipping keeps every sample: a flat line at 1 would squash the others
            kept_all.append(probe)
            continue
        smoothed = kept.rolling(smooth, min_periods=1, center=True).mean()
        right.plot(kept.index, kept.values, color=probe_colour(probe), ls=line_style(probe, order), lw=0.5,
                   alpha=0.35)
        right.plot(smoothed.index, smoothed.values, color=probe_colour(probe), ls=line_style(probe, order), lw=1.6,
                   label=f"{probe} (mean {kept.mean():.2f})")
    for probe in kept_all:   # a legend entry without a line: named where the reader looks for it
        right.plot([], [], ls="none", label=f"{probe}: keeps all (1.0, not drawn)")
    runs = rows.groupby(["probe", *[c for c in ("seed", "zoo_seed") if c in rows]]).ngroups // max(len(order), 1)
    right.set(xlabel="RL step", title=f"peer samples kept per step, mean over policies and {runs} "
                                      f"run{'s' * (runs != 1)}\n"
                                      f"(thick: {smooth}-step mean, thin: each step)")
    right.title.set_fontsize(10)
    fit_accuracy_axis(right, "fraction of peer samples inside the clip range")
    right.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig
