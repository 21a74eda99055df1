"""`python -m mrl.reproduce`: a --only value that names no notebook of the profile is an argument error that
lists the notebooks (nothing runs, nothing is written), so no value ever reaches a file name; a partial default run's
times replace its notebooks' in the committed record only when it ran on the same kind of machine."""
import pytest

from mrl.reproduce import main


@pytest.mark.parametrize("only", [["99"], ["x/../../.."], ["00", "nope"], []])
def test_only_must_name_notebooks_of_the_profile(only, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_:
        main(["--profile", "smoke", "--only", *only])
    assert exit_.value.code == 2
    assert "each value must be the start of a notebook name" in capsys.readouterr().err
    assert not any(tmp_path.rglob("*"))


def test_a_partial_run_replaces_its_notebooks_times_in_the_record_on_the_same_machine():
    from mrl.reproduce import merged_record

    machine = {"cpu": "AMD EPYC", "cpus": 2, "numerics": {"mode": "portable"}}
    committed = {"profile": "default", "git_sha": "a" * 40, "started": "2026-11-25T10:00:00+0000", "machine": machine,
                 "notebooks": {"00_zoo.ipynb": 60.0, "70_heldout.ipynb": 600.0}, "total_seconds": 660.0}
    partial = {"profile": "default", "git_sha": "b" * 40, "started": "2026-11-26T10:00:00+0000", "machine": machine,
               "notebooks": {"70_heldout.ipynb": 900.0}, "total_seconds": 900.0}
    merged = merged_record(committed, partial)
    assert merged["notebooks"] == {"00_zoo.ipynb": 60.0, "70_heldout.ipynb": 900.0} and merged["total_seconds"] == 960
    assert merged["started"] == committed["started"] and merged["reruns"][0]["notebooks"] == ["70_heldout.ipynb"]
    assert len(merged_record(merged, partial)["reruns"]) == 2
    other = {**partial, "machine": {**machine, "cpu": "Intel Xeon"}}
    assert merged_record(committed, other) is None   # times from another kind of CPU do not compare


def test_the_provenance_names_the_notebooks_re_run_apart_and_only_their_latest_re_run(tmp_path):
    import json

    from mrl.reports.provenance import provenance_block
    from mrl.reports.readme import RECORD, notebooks_block

    record = {"started": "2026-11-25T10:00:00+0000", "git_sha": "a" * 40, "machine": {"cpu": "AMD EPYC", "cpus": 2},
              "notebooks": {"70_heldout.ipynb": 900.0}, "total_seconds": 900.0,
              "reruns": [{"git_sha": "b" * 40, "started": "2026-11-26T10:00:00+0000", "machine": {},
                          "notebooks": ["70_heldout.ipynb"]}]}
    (tmp_path / RECORD).write_text(json.dumps(record))
    assert "| 2026-11-26 | bbbbbbb |" in provenance_block(tmp_path)
    assert "1 re-runs apart from the others since" in notebooks_block(tmp_path)
    assert "(docs/provenance.md)" in notebooks_block(tmp_path)
    record["reruns"][0]["git_sha"] = "c" * 40 + "-dirty"   # uncommitted changes are said
    (tmp_path / RECORD).write_text(json.dumps(record))
    assert "| ccccccc-dirty |" in provenance_block(tmp_path)
    # a later re-run of the same notebook replaced its time: only the later one is named, with its note
    record["reruns"].append({"git_sha": "d" * 40, "started": "2026-11-27T10:00:00+0000", "machine": {},
                             "notebooks": ["70_heldout.ipynb"], "note": "Alone on the machine."})
    (tmp_path / RECORD).write_text(json.dumps(record))
    block = provenance_block(tmp_path)
    assert "2026-11-26" not in block and "| 2026-11-27 | ddddddd |" in block and "1. Alone on the machine." in block
