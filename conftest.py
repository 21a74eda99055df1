"""How `make test`'s two pytest-xdist workers (`-n 2`) share the work (pytest_xdist_make_scheduler): the unit of
work is a test file (its module fixtures built once, on one worker), and every smoke notebook is in one unit, run in
order on one worker (00_zoo builds the smoke zoo that the later notebooks read from its cache). A worker that
finishes its unit takes the next, so both cores stay busy to the end, where two fixed jobs (the unit tests beside
nbval) left one idle for a third of the run.

One local Ray cluster at a time: the tests marked `ray` hold one lock across the workers while they run, since two Ray
heads starting at once on two cores time out or take each other's actors (no smoke notebook starts Ray: the smoke
profile's 30_mwra times the inline and process backends)."""
import contextlib
import tempfile
from pathlib import Path

import pytest
from filelock import FileLock

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


def starts_ray(item) -> bool:
    """The test is marked `ray`."""
    return item.get_closest_marker("ray") is not None


def ray_lock(config):
    """The run's Ray lock: a file lock every xdist worker of this run shares (named by the run's id); nothing to
    hold without workers, where tests run one at a time."""
    worker = getattr(config, "workerinput", None)
    if worker is None:
        return contextlib.nullcontext()
    return FileLock(Path(tempfile.gettempdir()) / f"mrl-ray-{worker['testrunuid']}.lock")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test that starts Ray runs (setup, call, teardown) holding the run's Ray lock."""
    if not starts_ray(item):
        yield
        return
    with ray_lock(item.config):
        yield
