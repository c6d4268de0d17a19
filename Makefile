PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install run study test test-slow lint

install:
	$(PIP) install -q -e ".[dev]"

# The main job: the quickstart ablation on the embedded corpus, ending with a comparison table.
run: install
	minimind run experiments/quickstart.yaml

# The study: the card's ablations and the modern axes, sequential seeds (3 up to 12 per arm) and a
# ladder of five sizes, read against the literature into results/study/ (about 4.4 hours on 2
# CPU cores; run again, it continues where it stopped).
study: install
	minimind study experiments/study/study.yaml --train

# The default suite (CPU only; the slow tests are marked and left out).
test: install
	$(PYTHON) -m pytest -q -m "not slow"

# Long tests: real servers, multi-process training.
test-slow: install
	$(PYTHON) -m pytest -q -m slow

lint: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy
