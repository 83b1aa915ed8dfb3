# Quick start: `make serve` and `make test`. Both install what they need into .venv first.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: serve test install chromium lint bench clean

install: $(STAMP)

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@touch $(STAMP)

serve: $(STAMP)
	@bash scripts/ensure-fashion-mnist.sh
	$(VENV)/bin/attnscope serve --host $(HOST) --port $(PORT)

chromium:
	@bash scripts/ensure-chromium.sh

test: $(STAMP) chromium
	$(PY) -m pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check app tests bench
	$(VENV)/bin/mypy app

bench: $(STAMP)
	$(PY) bench/decode.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
