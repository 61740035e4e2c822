# Two commands: `make demo` and `make test`. Both set up .venv from the lock first.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test serve bench clean

$(STAMP): pyproject.toml requirements.lock.txt
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	$(VENV)/bin/pip install -q --disable-pip-version-check -r requirements.lock.txt 2>&1 | sed '/is ignored: it is neither/d'
	$(VENV)/bin/python -c "import prefect, great_expectations, duckdb, gmpy2"
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e . 2>&1 | sed '/is ignored: it is neither/d'
	$(VENV)/bin/privrelease --help > /dev/null
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/privrelease demo

serve: $(STAMP)
	bash scripts/serve.sh

test: $(STAMP)
	$(VENV)/bin/python -m pytest

bench: $(STAMP)
	$(VENV)/bin/python bench/bench_ra.py

clean:
	rm -rf $(VENV) .privrelease
