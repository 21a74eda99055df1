"""Tables and figures of 80_beyond: the poisoned-peer table (each probe beside a lying peer, paired with the same
probe beside an honest one) and its figure, and the n-policy scaling table and figure.

A poisoned run is labelled "<probe> | <attack>, <trusting|re-verified>" (`arm_label`), so the paired machinery of
mrl.reports.paired compares it with the honest run of its probe on the same seeds: same prompts, same sampling seeds,
only the peer's records differ. The label is only shown: the probe, attack and re-verification a table needs are read
from the run's own columns (`with_arm_labels` keeps them), never parsed back out of the label.
"""
from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from mrl.reports.paired import (MIN_PAIRS, chance_note, final_values, interval_cell, interval_count, pair_columns,
                                paired_differences)
from mrl.reports.palette import base_probe, policy_colour, probe_colour
from mrl.reports.probes import rescue_skills, with_overall

SEPARATOR = " | "
TURNED_AWAY = ("forged_dropped", "rejected_successes", "reward_disagreements")
"""step columns that count a peer's claims the learner's verifier turned away: successes SEE dropped before the probe,
successes and rewards the probe re-scored below the claim"""
MARKERS = {"trusting": "o", "re-verified": "s"}


def is_reverified(attack: str, reverify: bool) -> bool:
    """Whether the learner re-verifies the attack's claims: only forged successes carry a claim its verifier can
    re-score, so only their arms are told apart by it."""
    return attack == "forged_success" and bool(reverify)


def attack_label(attack: str, reverify: bool) -> str:
    """'honest peer'; 'forged_success, trusting' (or 're-verified') for forged successes; 'lying_stats' for an
    attack re-verification cannot touch."""
    if attack == "none":
        return "honest peer"
    if attack != "forged_success":
        return attack
    return f"{attack}, {'re-verified' if is_reverified(attack, reverify) else 'trusting'}"


def arm_label(probe: str, attack: str, reverify: bool) -> str:
    """'sgt' for the honest arm, 'sgt | forged_success, trusting' for the others (attack_label after the probe)."""
    return probe if attack == "none" else f"{probe}{SEPARATOR}{attack_label(attack, reverify)}"


def with_arm_labels(frame: pd.DataFrame) -> pd.DataFrame:
    """The frame (columns probe, attack, reverify) with probe replaced by its arm label and the probe itself kept
    as `base`."""
    return frame.assign(base=frame.probe, probe=[arm_label(p, a, bool(r)) for p, a, r in
                                                 zip(frame.probe, frame.attack, frame.reverify)])


def _same_evals(evals: pd.DataFrame, arm: str, honest: str, policy: str) -> str:
    """'yes' when every evaluation of the arm equals the honest run's on each shared seed, else 'no'."""
    keys = pair_columns(evals) + ["step", "split", "skill"]
    a = evals[(evals.probe == arm) & (evals.policy == policy)].set_index(keys).accuracy.sort_index()
    b = evals[(evals.probe == honest) & (evals.policy == policy)].set_index(keys).accuracy.sort_index()
    b = b[b.index.isin(a.index)]
    return "yes" if len(a) and a.index.equals(b.index) and np.array_equal(a.to_numpy(), b.to_numpy()) else "no"


def poison_table(evals: pd.DataFrame, steps: pd.DataFrame, poisoned: str,
                 split: str = "held-out") -> tuple[pd.DataFrame, pd.DataFrame]:
    """(numbers, formatted table): per probe and poisoned arm, the honest learner's (every policy but `poisoned`)
    final weak-skill and overall `split` accuracy, the paired difference to the same probe beside an honest peer
    with its 95% t interval over the shared seeds (bold: real), the peer's claims its verifier turned away (per run,
    summed over steps: TURNED_AWAY) and whether every evaluation equals the honest run's.
    evals, steps: arm-labelled (with_arm_labels)."""
    learner_evals = evals[evals.policy != poisoned]
    arms = evals.drop_duplicates("probe").set_index("probe")[["base", "attack", "reverify"]]
    values = final_values(evals, split)   # the weak skill is read off both policies' warm-up accuracies
    values = values[values.policy != poisoned]
    values["base"] = values.probe.map(arms.base)
    learner_steps = steps[steps.policy != poisoned]
    turned_away = learner_steps[[c for c in TURNED_AWAY if c in learner_steps]].fillna(0).sum(axis=1)
    rejected = (learner_steps.assign(turned_away=turned_away).groupby(["probe", *pair_columns(learner_steps)])
                .turned_away.sum().groupby(level=0).mean())
    rows = []
    for base, frame in values.groupby("base", sort=False):
        diffs = {column: paired_differences(frame.drop(columns="base"), column, baseline=base).set_index(
            ["probe", "policy"]) for column in ("weak", "overall")}
        for (arm, policy), group in frame.groupby(["probe", "policy"], sort=False):
            attack, reverify = arms.attack[arm], arms.reverify[arm]
            row = {"policy": policy, "probe": base, "arm": attack_label(attack, reverify),
                   "re-verified": is_reverified(attack, reverify),
                   "runs": len(group), "weak": group.weak.mean(), "overall": group.overall.mean()}
            for column, table in diffs.items():
                d = table.loc[(arm, policy)] if (arm, policy) in table.index else None
                row[f"{column} Δ"] = (d["diff"], d.low, d.high, bool(d.real)) if d is not None else None
                row[f"{column} units"] = d["units"] if d is not None else ()
            row["rejected claims"] = rejected.get(arm, np.nan)
            row["equals honest"] = "" if arm == base else _same_evals(learner_evals, arm, base, policy)
            rows.append(row)
    numbers = pd.DataFrame(rows)
    table = numbers[["policy", "probe", "arm", "runs"]].copy()
    for column in ("weak", "overall"):
        table[column] = numbers[column].round(3)
        table[f"Δ {column} vs honest peer [95% CI]"] = [interval_cell(*d) if d else ""
                                                        for d in numbers[f"{column} Δ"]]
    table["claims turned away / run"] = numbers["rejected claims"].round(0)
    table["equals honest run"] = numbers["equals honest"]
    return numbers, table


def poison_figure_inputs(numbers: pd.DataFrame, column: str = "weak") -> dict[str, pd.DataFrame]:
    """What poison_figure draws of poison_table's numbers, as frames (the inputs mrl.reports.figure_inputs.draw_and_save
    commits): `arms`, one row per poisoned arm (probe, arm, re-verified, policy, runs; paired: whether it shares a
    seed with the honest peer, and the paired difference of the learner's final `column` accuracy: mean, low, high), and `units`,
    each shared seed's own difference (row: the arm's row in `arms`; difference)."""
    arms = numbers[numbers.arm != "honest peer"].reset_index(drop=True)
    cells = arms[f"{column} Δ"]
    frame = arms[["probe", "arm", "re-verified", "policy", "runs"]].assign(
        paired=[cell is not None for cell in cells],
        **{part: [cell[i] if cell is not None else np.nan for cell in cells]
           for i, part in enumerate(("mean", "low", "high"))})
    units = pd.DataFrame([(row, float(d)) for row, seeds in enumerate(arms[f"{column} units"]) for d in seeds],
                         columns=["row", "difference"])
    return {"arms": frame, "units": units}


def poison_figure(arms: pd.DataFrame, units: pd.DataFrame, column: str = "weak"):
    """The paired difference (poisoned minus honest peer) of the learner's final `column` accuracy per probe and
    arm: a marker at the mean (open: re-verified, filled: the others), each shared seed's own difference as a small
    dot, and the 95% t interval over the shared seeds as a bar where there are MIN_PAIRS seeds or more (at n = 2 a
    t interval is 12.7 standard errors wide and says nothing). arms, units: poison_figure_inputs'."""
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(arms) + 1.6))
    seeds = [units.loc[units.row == y, "difference"].tolist() for y in range(len(arms))]
    for y, row in arms.iterrows():
        if not row.paired:
            continue
        mean, low, high = row["mean"], row["low"], row["high"]
        colour = probe_colour(row.probe)
        trusting = not row["re-verified"]
        own = seeds[y]
        if len(own) >= MIN_PAIRS and np.isfinite(low):
            ax.plot([low, high], [y, y], color=colour, lw=1.5)
        ax.plot(own, [y] * len(own), marker="|", ms=9, mew=1.2, color=colour, ls="none", alpha=0.7)
        ax.plot(mean, y, marker=MARKERS["trusting" if trusting else "re-verified"], ms=7, color=colour,
                mfc=colour if trusting else "white", ls="none")
    ax.axvline(0.0, color="black", lw=0.9)
    ax.set_yticks(range(len(arms)), [f"{r.probe}: {r.arm} ({r.policy}, {r.runs} seed{'s' * (r.runs != 1)})"
                                     for r in arms.itertuples()], fontsize=8)
    ax.invert_yaxis()
    n_max = max((len(own) for own in seeds), default=0)   # what the bars rest on
    spread = ("bar: 95% t interval over the shared seeds" if n_max >= MIN_PAIRS
              else f"fewer than {MIN_PAIRS} seeds: no interval")
    ax.set(xlabel=f"final {column} accuracy: poisoned peer minus honest peer",
           title="The honest learner beside a poisoned peer, paired with the same probe beside an honest one\n"
                 f"(marker: mean; ticks: each shared seed; {spread}; open: forged successes re-verified)")
    ax.title.set_fontsize(9)
    fig.tight_layout()
    return fig


def scaling_table(evals: pd.DataFrame, runs: pd.DataFrame, split: str = "held-out") -> pd.DataFrame:
    """One row per n-policy run (n, clock, seed): its wall time (start-up included), and the final `split` accuracy
    of the pair's policies on their weak skills (each the skill its pair peer owns, read off the n = 2 runs'
    warm-up accuracies) and overall, and the mean overall accuracy over all n policies."""
    pair = evals[evals.n == evals.n.min()]
    weak = {policy: skill for (_, policy), skill in rescue_skills(pair).items()}
    last = evals[(evals.split == split) & (evals.step == evals.groupby(["n", "mode", "seed"]).step.transform("max"))]
    last = with_overall(last)
    rows = []
    for (n, mode, seed), group in last.groupby(["n", "mode", "seed"], sort=True):
        accuracy = group.set_index(["policy", "skill"]).accuracy
        row = {"n": n, "clock": mode, "seed": seed, "policies": "+".join(sorted(group.policy.unique()))}
        for policy, skill in sorted(weak.items()):
            row[f"{policy} weak ({skill})"] = accuracy.get((policy, skill), np.nan)
            row[f"{policy} overall"] = accuracy.get((policy, "overall"), np.nan)
        row["mean overall, all policies"] = group[group.skill == "overall"].accuracy.mean()
        wall = runs[(runs.n == n) & (runs["mode"] == mode) & (runs.seed == seed)]["wall seconds"]
        row["wall seconds"] = float(wall.iloc[0]) if len(wall) else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


def records_handed_over(steps: pd.DataFrame, mode: str = "async") -> dict:
    """{n: mean number of peer records handed to a learner per step} over the `mode` runs, from the step rows'
    peer_staleness ({staleness: records}, JSON)."""
    rows = steps[steps["mode"] == mode]
    records = rows.peer_staleness.map(lambda text: sum(json.loads(text).values()))
    return records.groupby(rows.n).mean().round(1).to_dict()


def scaling_figure(table: pd.DataFrame):
    """Left: wall time vs n per clock. Right: the pair's final weak-skill accuracy vs n per clock (one line per
    policy and clock; solid with filled circles sync, dashed with open squares async). Mean over seeds where there are
    several (no band)."""
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.8))
    styles = {"sync": "-", "async": "--"}
    # told apart at a single n too, and where the two clocks land on one value: a filled circle inside an open square
    markers = {"sync": dict(marker="o", ms=5), "async": dict(marker="s", mfc="white", ms=10)}
    means = table.groupby(["clock", "n"], sort=True).mean(numeric_only=True).reset_index()
    for clock, group in means.groupby("clock"):
        left.plot(group.n, group["wall seconds"], ls=styles.get(clock, ":"), color="black", label=clock,
                  **markers.get(clock, {}))
        for column in [c for c in table.columns if " weak (" in c]:
            policy = column.split(" ")[0]
            right.plot(group.n, group[column], ls=styles.get(clock, ":"), color=policy_colour(policy),
                       label=f"{column}, {clock}", **markers.get(clock, {}))
    left.set(xlabel="policies n", ylabel="wall seconds (start-up included)", title="Wall time of one run")
    left.set_ylim(0, 1.15 * means["wall seconds"].max())   # headroom: no point on the frame
    seeds = table.seed.nunique() if "seed" in table else 1
    runs = "one run per point" if seeds == 1 else f"mean of {seeds} runs per point"
    sizes = sorted(table.n.unique())
    what = (f"The pair's weak skills as peers are added ({runs})" if len(sizes) > 1 else
            f"The pair's weak skills at n = {sizes[0]} only ({runs};\nthe profile adds no peers)")
    right.set(xlabel="policies n", ylabel="final held-out accuracy", title=what)
    top = max(means[[c for c in table.columns if " weak (" in c]].max().max(), 0.0)
    right.set_ylim(0, min(1.0, max(0.3, 1.2 * top)))   # from 0: single runs' differences are not magnified
    for ax in (left, right):
        ax.set_xticks(sorted(table.n.unique()))
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def _delta(diff: float, low: float, high: float, real) -> str:
    """A paired difference for prose: interval_cell's text (bold when real), 'no shared seed' without one."""
    text = str(interval_cell(diff, low, high, bool(real) if pd.notna(real) else False))
    return text or "no shared seed"


def _cells(row: dict, metric: str) -> tuple:
    """(diff, low, high, real) of `metric` ('weak', 'overall') in a record of paired_table's numbers."""
    return tuple(row[f"{metric} Δ {part}"] for part in ("diff", "low", "high", "real"))


def _pairs(counts) -> str:
    """'n = 3 pairs per policy', or the counts listed where the policies differ; one pair gives no interval."""
    counts = sorted({int(n) for n in counts if pd.notna(n)})
    if not counts:
        return "no pair"
    text = f"n = {', '.join(map(str, counts))} pair{'' if counts == [1] else 's'} per policy"
    return text + ("; one pair gives no interval" if counts[0] < 2 else "")


def excluding_count(numbers: pd.DataFrame) -> tuple[int, int]:
    """(intervals that exclude 0, of them real: n >= MIN_PAIRS) over the weak and overall differences of a numbers
    frame of paired_table (columns '<metric> Δ low', '... high', '... real'); a zero-width interval excludes
    nothing."""
    excluded = real = 0
    for metric in ("weak", "overall"):
        low, high = numbers[f"{metric} Δ low"].astype(float), numbers[f"{metric} Δ high"].astype(float)
        apart = (high - low > 1e-9) & ((low > 0) | (high < 0))
        excluded += int(apart.sum())
        real += int((apart & numbers[f"{metric} Δ real"].eq(True)).sum())
    return excluded, real


def methods_result(numbers: pd.DataFrame, table: pd.DataFrame, methods: tuple[str, ...] = ("trrd", "graft")) -> str:
    """The main table in words (Markdown): for each probe whose base is in `methods` (online and offline), the
    paired difference to GRPO per policy on the weak form and overall with its 95% t interval, then how many of the
    table's intervals exclude 0 against the count chance alone would give (chance_note). numbers, table:
    paired_table's."""
    chosen = numbers[numbers.probe.map(base_probe).isin(methods)]
    sentences = []
    for probe, rows in chosen.groupby("probe", sort=False):
        records = rows.to_dict("records")
        weak = ", ".join(f"{r['policy']} ({r['weak skill']}) {_delta(*_cells(r, 'weak'))}" for r in records)
        overall = ", ".join(f"{r['policy']} {_delta(*_cells(r, 'overall'))}" for r in records)
        sentences.append(f"`{probe}` against GRPO, on the weak form: {weak}; overall: {overall} "
                         f"({_pairs(rows['weak Δ n'])}).")
    if not sentences:
        sentences.append(f"No run of {', '.join(f'`{m}`' for m in methods)} in this profile.")
    count = interval_count(table)
    if count:
        excluded, real = excluding_count(numbers)
        sentences.append(f"{chance_note(count)} {excluded} of them exclude 0, {real} with n >= {MIN_PAIRS} (bold).")
    else:
        sentences.append("No row has two pairs, so the table holds no interval: each difference is a single draw.")
    return " ".join(sentences)


def _runs(count) -> str:
    """'1 run', '3 runs'."""
    return f"{int(count)} run{'' if int(count) == 1 else 's'}"


def poison_result(numbers: pd.DataFrame) -> str:
    """The poisoned-peer table in words (Markdown): for every attack the learner meets without re-verification, its
    final weak and overall accuracy against the same probe beside an honest peer (the paired difference with its 95%
    t interval); then whether each re-verified arm equals the honest run in every evaluation, and the claims its
    verifier turned away per run. numbers: poison_table's (columns '<metric> Δ' hold (diff, low, high, real))."""
    arms = numbers[numbers.arm != "honest peer"]
    if arms.empty:
        return "No run beside a poisoned peer in this profile."
    checked = arms["re-verified"].astype(bool)
    sentences = []
    trusting = arms[~checked].to_dict("records")
    if trusting:
        items = [f"`{r['probe']}` with `{r['arm']}`: weak {_poison_delta(r['weak Δ'])}, overall "
                 f"{_poison_delta(r['overall Δ'])} ({r['policy']}, {_runs(r['runs'])})" for r in trusting]
        sentences.append("Without re-verification, the lying peer moves the honest learner's final accuracy (minus "
                         "the same probe's beside an honest peer) by " + "; ".join(items) + ".")
    reverified = arms[checked].to_dict("records")
    if reverified:
        equal = [r for r in reverified if r["equals honest"] == "yes"]
        items = [f"`{r['probe']}` with `{r['arm']}` ({_turned_away(r['rejected claims'])})" for r in reverified]
        verdict = (f"{len(equal)} of {len(reverified)} re-verified arms equal the honest run in every evaluation"
                   if len(equal) < len(reverified) else
                   f"{'every' if len(reverified) > 1 else 'the'} re-verified arm equals the honest run in every "
                   f"evaluation")
        differ = [f"`{r['probe']}` with `{r['arm']}`" for r in reverified if r["equals honest"] != "yes"]
        sentences.append(f"With re-verification on, {verdict}: " + "; ".join(items) + "."
                         + (f" Differs from it: {', '.join(differ)}." if differ else ""))
    return " ".join(sentences)


def _poison_delta(cell) -> str:
    """A poison_table difference cell ((diff, low, high, real) or None) for prose."""
    return _delta(*cell) if isinstance(cell, tuple) else "no shared seed"


def _turned_away(claims: float) -> str:
    """'503 claims turned away per run'."""
    return "claims turned away not counted" if pd.isna(claims) else f"{claims:.0f} claims turned away per run"


def scaling_result(scaling: pd.DataFrame | None) -> str:
    """The scaling table in words (Markdown): per clock, for each n, the wall time of a run, the mean overall
    accuracy of all n policies and the pair's weak-form accuracies (means where a point has several seeds), then how
    many runs stand behind each point. scaling: scaling_table's, or None where the profile runs none."""
    if scaling is None or scaling.empty:
        return "This profile runs no n-policy runs."
    weak = [c for c in scaling.columns if " weak (" in c]
    means = scaling.groupby(["clock", "n"], sort=True)[["wall seconds", "mean overall, all policies", *weak]].mean()
    sentences = []
    for clock, group in means.groupby(level=0, sort=False):
        items = [f"n = {n} ran in {_seconds(row['wall seconds'])}, mean overall accuracy "
                 f"{_accuracy(row['mean overall, all policies'])} "
                 f"({', '.join(f'{c} {_accuracy(row[c])}' for c in weak)})"
                 for (_, n), row in group.iterrows()]
        sentences.append(f"{clock.capitalize()}: " + "; ".join(items) + ".")
    seeds = scaling.groupby(["clock", "n"]).size()
    if seeds.max() == 1:
        sentences.append("Each point is one run: the differences between points are single draws, not estimates.")
    else:
        counts = f"{seeds.min()}" if seeds.min() == seeds.max() else f"{seeds.min()} to {seeds.max()}"
        sentences.append(f"Each point is the mean of {counts} runs (no interval).")
    return " ".join(sentences)


def _seconds(value: float) -> str:
    """'1.9 s', 'n/a' for NaN."""
    return "n/a" if pd.isna(value) else f"{value:.1f} s"


def _accuracy(value: float) -> str:
    """'0.077', 'n/a' for NaN."""
    return "n/a" if pd.isna(value) else f"{value:.3f}"


def beyond_result(numbers: pd.DataFrame, table: pd.DataFrame, poison_numbers: pd.DataFrame,
                  scaling: pd.DataFrame | None) -> str:
    """The notebook's Result (Markdown), a paragraph per section: TRRD and GRAFT against GRPO (methods_result), the
    poisoned peer (poison_result), n policies (scaling_result)."""
    return (f"**TRRD and GRAFT.** {methods_result(numbers, table)}\n\n**A poisoned peer.** "
            f"{poison_result(poison_numbers)}\n\n**More than two policies.** {scaling_result(scaling)}")
