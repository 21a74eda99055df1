"""`python -m mrl.reproduce`: a --only value that names no notebook of the profile is an argument error that
lists the notebooks (nothing runs, nothing is written), so no value ever reaches a file name."""
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
