"""The README's generated blocks: the substrate, the claims ledger, the marginal arms, the notebooks' outputs and
times.

A block sits between `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` in README.md. `make reproduce`
(default profile) rewrites every block from the committed outputs (`paper_tables/claims.csv`,
`claims_secondary.csv`, `beyond_marginal_arms.csv`, `beyond_marginal_verdicts.csv`, `heldout_zoo.csv` and the
reproduce record `reproduce_default.json`), and `tests/test_readme.py` fails when a block differs from what those
outputs give, so the README never quotes a number by hand.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

from mrl.profiles import load_profile
from mrl.reports.claims import (DESCRIPTIVE_OUTCOME_WORDS, FAMILIES, MIN_WARMUPS, OUTCOME_WORDS, claims_ledger,
                                ledger_interval_count, ledger_table, read_endpoint_values, verdict_kinds)
from mrl.reports.confirmatory import DESIGN
from mrl.reports.marginal import marginal_arms_result

NOTEBOOKS = {   # what each notebook shows and writes (names, not results: the results are in the files)
    "00_zoo": ("the tiny model zoo: families, tokenizers, warm-up accuracy per skill",
               "zoo, warmup, warmup_pool", "warmup"),
    "01_tour": ("the tour: one prompt through both tokenizers, THL, SEE's records, a short SGT run", "", ""),
    "10_grpo_baseline": ("independent GRPO per policy, on the RL pool and on held-out prompts", "grpo_baseline",
                         "grpo_baseline_curves"),
    "20_thl": ("THL's residual cost for every ordered pair of six tokenizers", "thl_residuals", "thl_residuals"),
    "30_mwra": ("the concurrent runner's step time and waiting per backend", "mwra_compute", "mwra_timeline"),
    "40_probe": ("PRP, XGRPO and SGT against GRPO on the arith-ops pool regime",
                 "probe_main, probe_paired, probe_pool, probe_stability", "probe_accuracy, probe_rescue"),
    "50_hacpo": ("HACPO against GSPO, GSPO x2, naive sharing and the MRL probes; its ablations",
                 "hacpo_comparison, hacpo_paired, hacpo_ablations, hacpo_ratio_statistics, hyperparameters",
                 "hacpo_stepwise_clipping"),
    "60_bandit": ("the contextual-bandit analysis (a reconstruction): the stability-support plane",
                  "bandit, bandit_dynamics", "bandit_plane, bandit_dynamics"),
    "70_heldout": ("the held-out experiment on five warm-ups and the claims ledger",
                   "heldout_zoo, heldout_warmup, heldout_main, claims_like_for_like, claims, claims_secondary, "
                   "claims_power, claims_evidence, claims_runs",
                   "heldout_weak_skill, heldout_base_rate"),
    "75_confirmatory": ("the confirmatory test of SGT against GRPO on 12 warm-ups no one had run, registered before "
                        "its runs", "confirmatory_plan, confirmatory, confirmatory_leave_one_out, confirmatory_runs, "
                        "confirmatory_rliable", "confirmatory_rliable"),
    "76_confirmatory_claims": ("every claim's confirmatory test (the second registration): the ten arms of nine "
                               "comparisons on 12 warm-ups no one had run, registered before its runs",
                               "confirmatory_claims_plan, confirmatory_claims_power, confirmatory_claims, "
                               "confirmatory_claims_runs, sgt_forest, claims_seed_effect", "sgt_forest"),
    "80_beyond": ("beyond the papers: TRRD, GRAFT online and offline, a poisoned peer, more policies, the exact "
                  "cross-tokenizer probability",
                  "beyond_main, beyond_poison, beyond_scaling, beyond_marginal_gap, beyond_marginal_ratio, "
                  "beyond_marginal_cost, beyond_marginal_arms, beyond_marginal_verdicts, beyond_marginal_training",
                  "beyond_weak_skill, beyond_poison, beyond_scaling, beyond_marginal_gap"),
}
RECORD = "reproduce_default.json"
MARKER = re.compile(r"(<!-- generated:(?P<name>[a-z]+) -->\n)(?P<body>.*?)(<!-- /generated:(?P=name) -->)", re.S)


def ledger_block(tables: Path) -> str:
    """The exploratory claims ledger as README markdown, judged again from the committed per-run endpoint values
    (`claims_runs.csv`, on the default profile's ledger warm-ups) by the committed rule, which
    tests/test_claims.py holds equal to the committed `claims.csv` and `claims_secondary.csv`: per claim its primary
    endpoint, difference and interval, Holm p, verdict (rule v2), fragility and rule v1's verdict, then the secondary
    family's difference and description."""
    if not (tables / "claims_secondary.csv").exists() or not (tables / "claims_runs.csv").exists():
        return (f"No claims ledger under the current rule is committed yet: `make reproduce` writes it on "
                f"{MIN_WARMUPS} or more warm-ups, and this block.\n")
    values = read_endpoint_values(tables / "claims_runs.csv")
    values = values[values.zoo_seed.isin(load_profile("default").heldout.zoo_seeds)]
    return rule_v2_block(*(claims_ledger(values, family) for family in FAMILIES), confirmatory_answers(tables))


def second_registration(tables: Path):
    """The second registration's results (mrl.reports.claims_confirmatory.ClaimResult, one per comparison) from its
    committed per-run values (`confirmatory_claims_runs.csv`, which 76_confirmatory_claims writes once the block's
    runs passed its checks); None before them."""
    from mrl.reports.claims_confirmatory import COMPARISONS, claims_test, warmup_differences

    path = tables / "confirmatory_claims_runs.csv"
    if not path.exists():
        return None
    heldout = load_profile("default").heldout
    block = heldout.confirmatory_claims
    values = read_endpoint_values(path)
    return claims_test(warmup_differences(values, COMPARISONS, block.seeds, heldout.pairing), len(block.zoo_seeds))


def result_words(result) -> str:
    """A second-registration result in a few words: its labels and its interval (none without a result)."""
    from mrl.reports.claims_confirmatory import Reading, SizeReading

    if result.reading is Reading.NO_RESULT:
        return f"{result.reading.value} ({result.warmups} of {result.planned})"
    size = "" if result.size is SizeReading.NO_SIZE else f"; {result.size.value}"
    return f"{result.reading.value}{size}, {result.mean:+.4f} [{result.low:+.4f}, {result.high:+.4f}]"


def confirmatory_answers(tables: Path) -> dict[str, str]:
    """{claim: its confirmatory answer}: the second registration's labels with the interval (second_registration);
    {} before its results."""
    results = second_registration(tables)
    return {} if results is None else {r.claim.claim: result_words(r) for r in results}


def interval_text(row) -> str:
    return f"{row['difference']} {row['95% t over warm-ups']}".strip() or "not run"


def rule_v2_block(primary: pd.DataFrame, secondary: pd.DataFrame, answers: dict[str, str] | None = None) -> str:
    """The block of a rule-v2 ledger (ledger_block) from its two families (claims_ledger), each claim's confirmatory
    answer beside it (answers: {claim: text}, confirmatory_answers; a claim without one reads "registered, running")."""
    answers = answers or {}
    lines = ["| paper | claim | comparison | endpoint | warm-ups x seeds | difference [95% t] | Holm p vs 0 or margin "
             "| verdict (rule v2) | leave one warm-up out | rule v1 | other endpoint: difference [95% t] | reading "
             "| confirmatory answer (second registration) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    shown = (ledger_table(ledger).to_dict("records") for ledger in (primary, secondary))
    for o, w in zip(*shown):
        lines.append(f"| {o['paper']} | {o['claim']} | `{o['comparison']}` | {o['endpoint']} | {o['warm-ups x seeds']} "
                     f"| {interval_text(o)} | {o['p vs 0 or margin (Holm)']} | {o['verdict']} "
                     f"| {o['leave one warm-up out']} | {o['rule v1']} | {interval_text(w)} | {w['verdict']} "
                     f"| {answers.get(o['claim'], 'registered, running')} |")
    intervals = ledger_interval_count(pd.concat([primary, secondary]))   # a comparison and endpoint once
    return (f"Exploratory: {len(primary)} claims, each in the primary family (its primary endpoint: "
            f"{verdict_summary(primary)}) and the secondary one, whose labels describe the other endpoint "
            f"({verdict_summary(secondary)}). The table holds {intervals} distinct intervals; about "
            f"{0.05 * intervals:.1f} would exclude 0 by chance at 95%, which is why every verdict comes from "
            f"Holm-adjusted tests in one family (`docs/claims.md`).\n\n" + "\n".join(lines) + "\n")


def verdict_summary(ledger: pd.DataFrame) -> str:
    """'2 supported, 1 contradicted, 5 inconclusive': the verdicts' outcomes counted, in a fixed order (the
    secondary family's in its descriptive words)."""
    outcomes = verdict_kinds(ledger)
    words = DESCRIPTIVE_OUTCOME_WORDS if ledger.verdict.iloc[0].descriptive else OUTCOME_WORDS
    order = [*words, "not judged"]
    return ", ".join(f"{int((outcomes == kind).sum())} {words.get(kind, kind)}" for kind in order
                     if (outcomes == kind).any())


def short_sha(sha: str) -> str:
    """'404bd09' of a git SHA, '404bd09-dirty' of one that ran with uncommitted changes (mrl.runtime.results.git_sha)."""
    return sha[:7] + ("-dirty" if sha.endswith("-dirty") else "")


def notebooks_block(tables: Path) -> str:
    """The notebooks as README markdown: what each shows, the tables and figures it writes, and its wall time in
    the reproduce record (a fresh clone's `make reproduce`; the record names the machine, and the notebooks re-run
    alone since, mrl.reproduce.merged_record)."""
    path = tables / RECORD
    record = json.loads(path.read_text()) if path.exists() else {"notebooks": {}}
    times = {name.removesuffix(".ipynb"): seconds for name, seconds in record["notebooks"].items()}
    lines = ["| notebook | what it shows | `paper_tables/` | `figures/` | minutes |", "|---|---|---|---|---:|"]
    for stem, (shows, table_names, figure_names) in NOTEBOOKS.items():
        minutes = f"{times[stem] / 60:.1f}" if stem in times else "not run" if times else ""
        lines.append(f"| [`{stem}`](notebooks/{stem}.ipynb) | {shows} | {table_names} | {figure_names} | {minutes} |")
    if not path.exists():
        return ("No whole default-profile run is recorded yet: `make reproduce` writes its times to "
                f"`paper_tables/{RECORD}` and this table.\n\n" + "\n".join(lines) + "\n")
    machine = record.get("machine", {})
    cpu = machine.get("cpu") or "an unnamed CPU"
    cores = f", {machine['cpus']} cores" if machine.get("cpus") else ""
    numerics = machine.get("numerics", {}).get("mode", "native")
    reruns = len(standing_reruns(record))
    return (f"Times from the reproduce record `paper_tables/{RECORD}` ({record['started'][:10]}, {cpu}{cores}, "
            f"numerics {numerics}): {record['total_seconds'] / 60:.0f} minutes in all, installation not included"
            + (f"; {reruns} re-runs apart from the others since" if reruns else "")
            + ". Which run made each notebook, with its date, commit, machine and how it ran: "
              "[`docs/provenance.md`](docs/provenance.md).\n\n" + "\n".join(lines) + "\n")


def standing_reruns(record: dict) -> list[tuple[dict, list[str]]]:
    """The record's re-runs, each with the notebooks whose time in the record is still its own: a later re-run of a
    notebook replaced its time (mrl.reproduce.merged_record), so an earlier one no longer names it, and a re-run with
    none left is not named at all (its note with it)."""
    later: set[str] = set()
    standing = []
    for rerun in reversed(record.get("reruns", [])):
        own = [name for name in rerun["notebooks"] if name not in later]
        later.update(rerun["notebooks"])
        if own:
            standing.append((rerun, own))
    return standing[::-1]


def substrate_block(tables: Path) -> str:
    """The substrate the ledger's evidence comes from, in one sentence: the held-out experiment's policies (size in
    parameters, architecture, tokenizer: heldout_zoo.csv) and task and RL steps (the default profile)."""
    heldout = load_profile("default").heldout
    path = tables / "heldout_zoo.csv"
    if not path.exists():
        return "No held-out zoo is committed yet: `make reproduce` writes it, and this sentence.\n"
    zoo = pd.read_csv(path)
    zoo = zoo[zoo.zoo_seed == zoo.zoo_seed.min()]
    policies = "; ".join(f"{row.policy}: {row.arch} with a {row.tokenizer} tokenizer of {row.vocab} pieces, "
                         f"{row.params / 1e6:.2f}M parameters" for row in zoo.itertuples())
    return (f"**On this substrate:** the claims ledger's evidence comes from {len(zoo)} tiny models ({policies}) "
            f"trained for {heldout.steps} RL steps on two-number addition written in three surface forms "
            f"(`{heldout.task.name}`), a CPU stand-in for the papers' billion-parameter models on math benchmarks. "
            f"Every verdict holds on this substrate, not in the papers' setting.\n")


def marginal_block(tables: Path) -> str:
    """The ledger's HACPO arm and GRAFT with the marginal ratio against their canonical twins, in words
    (mrl.reports.marginal.marginal_arms_result over the committed beyond_marginal_arms.csv and
    beyond_marginal_verdicts.csv)."""
    paths = [tables / f"beyond_marginal_{name}.csv" for name in ("arms", "verdicts")]
    if not all(path.exists() for path in paths):
        return ("No marginal arms are committed yet: `make reproduce` runs them in 70_heldout's grid, reads them in "
                "80_beyond and writes this block.\n")
    arms, verdicts = (pd.read_csv(path, dtype=str, keep_default_na=False) for path in paths)
    return marginal_arms_result(arms, verdicts) + "\n"


def confirmatory_block(tables: Path) -> str:
    """The confirmatory test's answer for the README's first screen, from paper_tables/confirmatory.csv
    (75_confirmatory, mrl.reports.confirmatory.result_table); before its runs, that it is registered and pending."""
    if not (tables / "confirmatory.csv").exists():
        return ("**The confirmatory test** of MRL's headline claim, SGT beats independent GRPO, is registered "
                "(`docs/registration.md`: its design, data and analysis fixed in the repository before any of its "
                "runs, on warm-ups no one had run) and has not run yet. Until it has, every verdict below is "
                "exploratory.\n")
    row = pd.read_csv(tables / "confirmatory.csv", dtype=str, keep_default_na=False).iloc[0]
    interval = f"{1 - DESIGN.alpha:.0%} t interval"   # result_table's column
    size = row["paper's size"]
    return (f"**The confirmatory test** (registered before its runs, `docs/registration.md`): `{row['comparison']}` "
            f"on {row['endpoint']} held-out accuracy over {row['warm-ups (planned)']} fresh warm-ups (those complete, "
            f"and in parentheses those it planned) is "
            f"**{row['gatekeeper']}**: {row['difference']} {row[interval]} ({interval}, two-sided p "
            f"{row['p vs 0 (two-sided)']}, {row['warm-ups above 0']} warm-ups above 0); against the paper's size: "
            f"{size}.{confirmatory_context(tables, float(row['p vs 0 (two-sided)']) < DESIGN.alpha)} On this "
            f"substrate; every other verdict below is exploratory.\n")


def claims_confirmatory_block(tables: Path) -> str:
    """The second registration as README markdown: before its results, that its runs are under way (its committed
    record); after, each comparison's labels and interval (second_registration) and the pooled evidence on SGT beside
    the confirmatory estimates (mrl.reports.sgt_evidence, from the committed runs)."""
    from mrl.reports.claims_confirmatory import COMPARISONS
    from mrl.reports.claims_rule import claim_hypotheses

    block = load_profile("default").heldout.confirmatory_claims
    tests = sum(len(claim_hypotheses(claim)) for claim in COMPARISONS)
    design = (f"{len(COMPARISONS)} comparisons on {len(block.zoo_seeds)} fresh warm-ups, one Holm family of {tests} "
              f"tests at 0.05")
    results = second_registration(tables)
    if results is None:
        return (f"**Every claim's confirmatory test** (the second registration, `docs/registration_claims.md`, "
                f"registered before its runs): {design}. Its runs are under way in parts "
                f"(`paper_tables/confirmatory_claims_record/`); until they are all in, the ledger below is the only "
                f"answer to the other claims, and it is exploratory.\n")
    parts = "; ".join(f"`{r.claim.probe} - {r.claim.reference}` ({r.claim.endpoint}) **{result_words(r)}**"
                      for r in results)
    from mrl.reports.sgt_evidence import committed_evidence, pooled_random_effects, warmup_rows

    heldout = load_profile("default").heldout
    evidence = committed_evidence(tables.parent)
    pooled = pooled_random_effects(evidence, warmup_rows(evidence, heldout.seeds, heldout.pairing))
    return (f"**Every claim's confirmatory test** (the second registration, `docs/registration_claims.md`: {design}; "
            f"95% t intervals over warm-ups): {parts}. Over all {pooled['warm-ups']} warm-ups on which `sgt - grpo` "
            f"has run, outside checks included, a random-effects pool gives {pooled['mean']:+.4f} "
            f"[{pooled['low']:+.4f}, {pooled['high']:+.4f}] (descriptive; `paper_tables/sgt_forest.md`). On this "
            f"substrate.\n")


def confirmatory_context(tables: Path, passed: bool) -> str:
    """How fragile the confirmatory answer is and what it could detect, from its committed tables: which warm-ups'
    removal alone would change whether the gatekeeper passes (at the full sample's critical t;
    confirmatory_leave_one_out.csv), and the registered design's power at the paper's effect, averaged over the SD's
    uncertainty (confirmatory_plan.csv, at the default profile's registered block); "" where they are not
    committed."""
    text = ""
    leave_one_out = tables / "confirmatory_leave_one_out.csv"
    if leave_one_out.exists():
        loo = pd.read_csv(leave_one_out)
        moved = loo.loc[loo["passes the full sample's critical t"] != passed, "zoo seed left out"].tolist()
        seeds = f"zoo seed {moved[0]}" if len(moved) == 1 else f"any one of zoo seeds {', '.join(map(str, moved))}"
        text += (" No single warm-up left out changes whether it passes" if not moved else
                 f" Leaving out {seeds} alone would change whether it passes")
        text += " (at the full sample's critical t)."
    plan = tables / "confirmatory_plan.csv"
    block = load_profile("default").heldout.confirmatory
    if plan.exists() and block is not None:
        designed = pd.read_csv(plan, dtype=str)
        row = designed[(designed["RL seeds"] == str(len(block.seeds)))
                       & (designed["warm-ups"] == str(len(block.zoo_seeds)))]
        if len(row):
            text += (f" The design had {row['power (averaged over the SD)'].iloc[0]} power at the paper's "
                     f"{DESIGN.paper_effect:+.3f} (averaged over the SD's uncertainty).")
    return text


BLOCKS = {"confirmatory": confirmatory_block, "claims": claims_confirmatory_block, "substrate": substrate_block,
          "ledger": ledger_block, "marginal": marginal_block, "notebooks": notebooks_block}


def render_blocks(text: str, blocks: dict, tables: Path, page: str) -> str:
    """`text` with every generated block rewritten by its generator (blocks: {name: generator(tables) -> str}); a
    block name without a generator, or a generator without its block, is a ValueError naming `page`."""
    found = {m.group("name") for m in MARKER.finditer(text)}
    if found != set(blocks):
        raise ValueError(f"{page} blocks {sorted(found)} do not match the generators {sorted(blocks)}")
    return MARKER.sub(lambda m: m.group(1) + blocks[m.group("name")](tables) + m.group(4), text)


def rewrite_page(path: Path, render) -> bool:
    """Rewrite a page's generated blocks in place with render(text); returns whether anything changed."""
    text = path.read_text()
    new = render(text)
    if new != text:
        path.write_text(new)
    return new != text


def render_readme(text: str, tables: Path) -> str:
    """README text with every generated block rewritten from `tables` (render_blocks)."""
    return render_blocks(text, BLOCKS, tables, "README")


def update_readme(readme: Path, tables: Path) -> bool:
    """Rewrite README.md's generated blocks in place; returns whether anything changed."""
    return rewrite_page(readme, lambda text: render_readme(text, tables))
