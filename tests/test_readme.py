"""The README is a front page: short, and every result it quotes generated from the committed outputs."""
import pandas as pd
import pytest

from mrl.profiles import load_profile
from mrl.reports.readme import NOTEBOOKS, RECORD, render_readme
from mrl.runtime.results import repo_root

ROOT = repo_root()


def test_the_readme_is_a_front_page():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250


def test_the_generated_blocks_are_current():
    text = (ROOT / "README.md").read_text()
    assert render_readme(text, ROOT / "paper_tables") == text, (
        "README.md's generated blocks differ from paper_tables/: run `.venv/bin/python -c \"from mrl.reports.readme "
        "import update_readme; from pathlib import Path; update_readme(Path('README.md'), Path('paper_tables'))\"` "
        "or `make reproduce`")


def test_the_notebook_table_names_every_notebook_and_only_outputs_that_exist():
    """Every output the table lists exists once a whole default run is recorded (it writes all of them)."""
    assert list(NOTEBOOKS) == load_profile("default").notebooks
    if not (ROOT / "paper_tables" / RECORD).exists():
        pytest.skip("no whole default-profile run is recorded in paper_tables/ yet")
    for stem, (_, tables, figures) in NOTEBOOKS.items():
        for name in filter(None, tables.split(", ")):
            assert (ROOT / "paper_tables" / f"{name}.csv").exists(), (stem, name)
        for name in filter(None, figures.split(", ")):
            assert (ROOT / "figures" / f"{name}.png").exists(), (stem, name)


def test_a_missing_or_unknown_block_is_refused(tmp_path):
    with pytest.raises(ValueError, match="do not match"):
        render_readme("<!-- generated:ledger -->\n<!-- /generated:ledger -->\n", tmp_path)
    with pytest.raises(ValueError, match="do not match"):
        render_readme("<!-- generated:ledger -->\n<!-- /generated:ledger -->\n<!-- generated:other -->\n"
                      "<!-- /generated:other -->\n<!-- generated:notebooks -->\n<!-- /generated:notebooks -->\n",
                      tmp_path)


def test_the_confirmatory_block_says_how_fragile_its_answer_is(tmp_path):
    """The first screen's answer, from the committed tables: the reading, its interval, which warm-up alone would
    change whether it passes, and the registered design's averaged power."""
    import shutil

    from mrl.reports.readme import confirmatory_block

    shutil.copy(ROOT / "paper_tables" / "confirmatory_plan.csv", tmp_path)
    pd.DataFrame([{"comparison": "sgt - grpo", "endpoint": "overall", "warm-ups (planned)": "12 (12)",
                   "difference": "+0.0100", "95% t interval": "[+0.0010, +0.0190]", "p vs 0 (two-sided)": "0.0321",
                   "warm-ups above 0": "9/12", "gatekeeper": "confirmed", "paper's size": "not ruled out"}]
                 ).to_csv(tmp_path / "confirmatory.csv", index=False)
    pd.DataFrame({"zoo seed left out": range(100, 112), "passes the full sample's critical t": [True] * 11 + [False]}
                 ).to_csv(tmp_path / "confirmatory_leave_one_out.csv", index=False)
    text = confirmatory_block(tmp_path)
    assert "is **confirmed**: +0.0100 [+0.0010, +0.0190]" in text
    assert "Leaving out zoo seed 111 alone would change whether it passes" in text
    assert "power at the paper's +0.013 (averaged over the SD's uncertainty)" in text


def test_the_second_registrations_block_says_its_labels_once_its_runs_are_in(tmp_path):
    """Before its per-run values are committed the block says the runs are under way; after, each comparison's
    labels and interval and the pooled evidence on SGT, all computed from the committed runs."""
    import shutil

    import numpy as np
    import pandas as pd

    from mrl.reports.readme import claims_confirmatory_block, confirmatory_answers

    tables = tmp_path / "paper_tables"
    shutil.copytree(ROOT / "paper_tables", tables, ignore=shutil.ignore_patterns("*.tex", "*.md"))
    shutil.copytree(ROOT / "data" / "outside_checks", tmp_path / "data" / "outside_checks")
    (tables / "confirmatory_claims_runs.csv").unlink(missing_ok=True)
    assert "under way in parts" in claims_confirmatory_block(tables) and confirmatory_answers(tables) == {}
    ledger = pd.read_csv(tables / "claims_runs.csv")
    rng = np.random.default_rng(0)
    fake = pd.concat([ledger[ledger.zoo_seed == zoo % 5].assign(zoo_seed=200 + zoo) for zoo in range(12)])
    fake["overall"] += rng.normal(0, 0.002, len(fake))
    fake.to_csv(tables / "confirmatory_claims_runs.csv", index=False)
    block = claims_confirmatory_block(tables)
    assert "`naive (minibatches=4) - gspo (minibatches=4)` (overall) **contradicted: the opposite sign" in block
    assert "a random-effects pool gives +" in block and "under way" not in block
    answers = confirmatory_answers(tables)
    assert len(answers) == 9 and all("[" in text for text in answers.values())
