"""The project's license and citation agree with its metadata: LICENSE is the Apache-2.0 text pyproject.toml names,
and CITATION.cff cites the package at pyproject's version with the papers it reproduces as references."""
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]


def test_license_and_citation_match_the_package_metadata():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"]["text"] == "Apache-2.0"
    assert "Apache License" in (ROOT / "LICENSE").read_text() and "Version 2.0" in (ROOT / "LICENSE").read_text()
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert citation["cff-version"] == "1.2.0" and citation["type"] == "software"
    assert (citation["version"], citation["license"]) == (project["version"], "Apache-2.0")
    cited = {entry.get("url") for entry in citation["references"]}
    assert {"https://arxiv.org/abs/2605.07244", "https://arxiv.org/abs/2603.02604",   # MRL, HACPO
            "https://arxiv.org/abs/2602.22495"} <= cited   # RLAD (TRRD); GRAFT by title: no arXiv id could be checked
    titles = {entry["title"] for entry in citation["references"]}
    assert any(title.startswith("Learning Beyond What You Sample") for title in titles)   # GRAFT
    for entry in citation["references"]:
        assert entry["authors"] and entry["title"] and entry["type"] in ("article", "software")
