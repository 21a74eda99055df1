"""How `make test`'s two pytest-xdist workers (`-n 2`) share the work (pytest_xdist_make_scheduler): the unit of
work is a test file (its module fixtures built once, on one worker), and every smoke notebook is in one unit, run in
order on one worker (00_zoo builds the smoke zoo that the later notebooks read from its cache). A worker that
finishes its unit takes the next, so both cores stay busy to the end, where two fixed jobs (the unit tests beside
nbval) left one idle for a third of the run.

make test starts one local Ray cluster, in one test (tests/test_user_probe.py's every-backend test, marked `ray`); no
smoke notebook starts Ray (the smoke profile's 30_mwra times the inline and process backends). Two Ray heads starting
at once on two cores time out or take each other's actors: a second Ray test needs a lock across the workers."""

import pytest

NOTEBOOKS = "smoke notebooks"
"""the unit of work of every nbval item"""


def work_unit(nodeid: str) -> str:
    """The unit of work of a test: NOTEBOOKS for a notebook's cell, else its file."""
    path = nodeid.split("::", 1)[0]
    return NOTEBOOKS if path.endswith(".ipynb") else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    class FileScheduling(LoadScopeScheduling):
        """xdist's scope scheduling, with work_unit as the scope."""

        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return FileScheduling(config, log)

