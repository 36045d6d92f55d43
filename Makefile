# Every target bootstraps .venv from pyproject.toml when it is missing.
PY := .venv/bin/python
TORCH_VERSION ?= 2.13.0
SHARED ?= ../shared

.PHONY: test demo bench batch-equivalence clean-venv

.venv/.ready: pyproject.toml
	@test -x $(PY) || python3 -m venv .venv
	# torch first, pinned: the CPU build on local disk here, so no CUDA build is pulled.
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==$(TORCH_VERSION)
	$(PY) -m pip install -q -e '.[test,lmeval]'
	@touch $@

# One pytest-xdist worker per core of a 2-core machine; each file stays on one worker, so its module
# fixtures are built once (session fixtures shared across files build once under a file lock)
TEST_WORKERS ?= 2

# Bytecode caches on, even where the environment turns them off (PYTHONDONTWRITEBYTECODE): the suite starts
# about 200 Python processes (drivers, Ray workers, CLI runs), each of which would otherwise compile ripple's
# modules again, and pytest would rewrite every test module in both workers
test: .venv/.ready
	RIPPLE_SHARED=$(SHARED) PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder

# demo.yaml, then demo-lines.yaml (ripple-tiny-lines) through the grid path (Ray workers, result store in ./results,
# MLflow: `ripple ui`; demo-lines without MLflow, to keep the demo under 3.5 minutes), then the leaderboard of that store (./results/leaderboard/leaderboard.html; its path is printed)
demo: .venv/.ready
	$(PY) -m ripple.cli grid demo --fresh
	$(PY) -m ripple.cli grid demo-lines --fresh --no-tracking
	$(PY) -m ripple.cli leaderboard

bench: .venv/.ready
	$(PY) -m ripple.bench

# every demo-grid sample at batch 8 against batch 1, caches none/prefix/dual: same tokens and NFE
# (re-run after retraining ripple-tiny; 4 to 10 min on one core; exit 1 if a difference is not a near-tie)
batch-equivalence: .venv/.ready
	$(PY) -m ripple.bench --batch-equivalence

clean-venv:
	rm -rf .venv
