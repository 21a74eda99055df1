"""Where each profile's notebooks write: only the default profile writes the committed paper_tables/ and figures/;
every other profile (smoke, full, paper) writes under results/<profile>/, so a GPU run of the paper profile never
overwrites the CPU results a reader opens."""
import pytest

from mrl.notebook import setup_notebook
from mrl.profiles import PROFILES
import mrl.runtime.results


@pytest.mark.parametrize("profile", PROFILES)
def test_only_the_default_profile_writes_the_committed_tables_and_figures(profile, tmp_path, monkeypatch):
    monkeypatch.setattr(mrl.runtime.results, "repo_root", lambda: tmp_path)
    run = setup_notebook("40_probe", profile)
    committed = {tmp_path / "paper_tables", tmp_path / "figures"}
    if profile == "default":
        assert {run.tables, run.figures} == committed
    else:
        assert not {run.tables, run.figures} & committed
        assert run.tables.parent == run.figures.parent == tmp_path / "results" / profile
    assert run.folder == tmp_path / "results" / "40_probe" / f"{profile}-seed0"
