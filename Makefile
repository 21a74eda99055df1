# The two commands of the README: `make test` and `make reproduce`. Both create .venv on first
# use and install the package with everything it needs (torch pinned to the local CPU wheel).
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.mrl-installed
PROFILE ?= default

.PHONY: install latex test test-cluster unit nbval soak test-browser book test-book reproduce smoke bench lab sync clean-models

# pip installs without compiling bytecode, then compileall compiles it on both cores (pip compiles on one; measured
# 184 s against 229 s for the whole install, 2026-11-29). Its status is not checked: a few files in the wheels are not
# Python 3.11 on purpose (torch's py312_intrinsics.py), which pip's own compile skips the same way.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --no-compile torch==2.13.0
	$(VENV)/bin/pip install -q --no-compile -e ".[test]"
	-$(PY) -m compileall -q -j 2 $$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])") > /dev/null 2>&1
	touch $(STAMP)

install: $(STAMP)

# the unit tests and the smoke notebooks (nbval) in one pytest over two xdist workers, one core each (each runs one
# torch thread): a worker that finishes a test file takes the next, the notebooks run in order as one unit (conftest.py)
test: $(STAMP) latex
	$(PY) -m pytest -q --durations=25 -n 2 --nbval-lax --nbval-current-env notebooks/smoke tests

# pdflatex for tests/test_tables.py (every paper_tables/*.tex must compile); without root or a Debian
# mirror the install fails softly and that test is skipped with its reason
latex:
	@command -v pdflatex >/dev/null || apt-get install -y -qq --no-install-recommends texlive-latex-base \
		texlive-latex-recommended >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq \
		--no-install-recommends texlive-latex-base texlive-latex-recommended >/dev/null 2>&1) || \
		echo "pdflatex could not be installed: tests/test_tables.py will skip the LaTeX compile"

unit: $(STAMP) latex
	$(PY) -m pytest -q --durations=25 tests

nbval: $(STAMP)
	$(PY) -m pytest -q --durations=25 --nbval-lax --nbval-current-env notebooks/smoke

# minutes on two cores: the grid on a simulated Ray cluster of two one-CPU nodes (tests/test_cluster.py): a warm-up and
# a grid equal to the same computed here, a node removed mid-grid, a driver killed mid-grid, a refused node
test-cluster: $(STAMP)
	$(PY) -m pytest -q -m cluster tests/test_cluster.py

# several minutes: a 200-step run under random worker kills, run kills and checkpoint damage (tests/test_soak.py)
soak: $(STAMP)
	$(PY) -m pytest -q -s -m soak tests/test_soak.py

# JupyterLab as a person uses it: headless Chromium (Debian's package) opens notebooks/01_tour.ipynb, runs all
# cells from the Run menu, fails on an error, and leaves screenshots in results/browser/
test-browser: $(STAMP)
	@command -v chromium >/dev/null || apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
		(apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends chromium >/dev/null)
	$(VENV)/bin/pip install -q -e ".[test,browser]"
	$(PY) tests/browser/run_tour_in_lab.py
	cd tests/browser && ../../$(PY) tensorboard_screenshot.py

# the paper as one static HTML book from the committed files (seconds; nothing executes unless EXECUTE=1, which runs
# the smoke profile first): results/book/html/index.html (mrl.reports.book, docs/book.md)
BOOK_STAMP := $(VENV)/.mrl-book-installed
$(BOOK_STAMP): $(STAMP) pyproject.toml
	$(VENV)/bin/pip install -q -e ".[book,browser]"
	touch $(BOOK_STAMP)

book: $(BOOK_STAMP)
	$(PY) -m mrl.reports.book $(if $(EXECUTE),--execute,)

# the book as a reader meets it: its tables equal paper_tables/, then headless Chromium (Debian's package) opens every
# page: no broken image or internal link, no error output, every figure; screenshots in results/book/screenshots/.
# Without Chromium or its install, the browser check is skipped with its reason
test-book: book
	@command -v chromium >/dev/null || apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1 || \
		(apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq --no-install-recommends chromium >/dev/null 2>&1) || \
		echo "chromium could not be installed: the browser check will be skipped"
	$(PY) -m pytest -q -m book tests/test_book.py
	$(PY) tests/browser/check_book.py; status=$$?; [ $$status -eq 0 ] || [ $$status -eq 2 ]

# CORES=N: the cores the warm-ups and grid runs use (default: this process's affinity and cgroup quota);
# RAY_ADDRESS=host:port (or local): each warm-up and grid run a Ray task of one CPU (docs/performance.md)
reproduce: $(STAMP)
	$(PY) -m mrl.reproduce --profile $(PROFILE) $(if $(CORES),--cores $(CORES)) $(if $(RAY_ADDRESS),--ray $(RAY_ADDRESS))

smoke: $(STAMP)
	$(PY) -m mrl.reproduce --profile smoke

bench: $(STAMP)
	$(PY) benchmarks/bench_grpo_step.py --numerics both
	$(PY) benchmarks/bench_rollout.py --numerics both
	$(PY) benchmarks/bench_thl.py
	$(PY) benchmarks/bench_probes.py --no-skip
	$(PY) benchmarks/bench_packing.py
	$(PY) benchmarks/bench_warmup.py --numerics both

# after editing a notebook (.ipynb in JupyterLab, or its .py twin in an editor): bring the other side up to date
sync: $(STAMP)
	cd notebooks && ../$(VENV)/bin/jupytext --sync *.ipynb

lab: $(STAMP)
	$(VENV)/bin/pip install -q -e ".[lab]" && $(VENV)/bin/jupyter lab notebooks/

clean-models:
	rm -rf data/models
