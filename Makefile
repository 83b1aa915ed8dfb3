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

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

# The native decoder operations are compiled here, at install time, never when serving: into the
# venv, named by a hash of their sources and torch's version. Without a C++ compiler the server
# takes the Python step (same results, slower); `make native` tries again.
$(NATIVE): $(STAMP) $(wildcard attnscope/nn/native/*.cpp) attnscope/nn/native/library.py
	@$(PY) -m attnscope.nn.native || echo "attnscope: the native operations were not built; serving takes the Python step"
	@touch $(NATIVE)

native: $(STAMP)
	$(PY) -m attnscope.nn.native --force
	@touch $(NATIVE)

serve: install
	@bash scripts/ensure-fashion-mnist.sh
	$(VENV)/bin/attnscope serve --host $(HOST) --port $(PORT)

chromium:
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
