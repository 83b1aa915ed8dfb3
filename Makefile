# Quick start: `make serve` and `make test`. Both install what they need into .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
NATIVE := $(VENV)/.native-built
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: serve test install native chromium lint bench clean wheel

install: $(STAMP) $(NATIVE)

# Each step says what it does and how long it takes; pip prints what it collects and installs as it
# goes (a first install downloads torch and the rest: several minutes, not silence).
$(STAMP): pyproject.toml
	@echo "attnscope install [1/2]: Python packages into $(VENV) with pip (the first time: torch and the rest, several minutes) ..."
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --disable-pip-version-check --progress-bar on -e '.[dev]'
	@touch $(STAMP)

# The native decoder operations are compiled here, at install time, never when serving: into the
# venv, named by a hash of their sources and torch's version. Without a C++ compiler the server
# takes the Python step (same results, slower); `make native` tries again.
$(NATIVE): $(STAMP) $(wildcard attnscope/nn/native/*.cpp) attnscope/nn/native/library.py
	@echo "attnscope install [2/2]: compiling the native decoder operations (C++; 1-2 minutes on 2 busy cores, under 30 s on a fast machine) ..."
	@$(PY) -m attnscope.nn.native || echo "attnscope: the native operations were not built; serving takes the Python step"
	@touch $(NATIVE)

native: $(STAMP)
	$(PY) -m attnscope.nn.native --force
	@touch $(NATIVE)

serve: install
	@echo "attnscope: checking Fashion-MNIST for the Vision page (Debian's dataset-fashion-mnist, installed with apt-get as root when missing) ..."
	@bash scripts/ensure-fashion-mnist.sh
	@echo "attnscope: starting the server on http://$(HOST):$(PORT) (ready in seconds) ..."
	$(VENV)/bin/attnscope serve --host $(HOST) --port $(PORT)

chromium:
	@echo "attnscope: checking Chromium for the browser tests (Debian's chromium, installed with apt-get as root when missing) ..."
	@bash scripts/ensure-chromium.sh

test: install chromium
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check attnscope tests bench scripts
	$(VENV)/bin/mypy attnscope

bench: $(STAMP)
	$(PY) bench/decode.py

# A wheel with the pages and the shipped models inside (setup.py); `pip install dist/attnscope-*.whl`
# then serves them from any directory.
wheel: $(STAMP)
	$(PY) -m pip wheel --no-deps --no-build-isolation -w dist .

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist
