# Two commands: `make demo` and `make test`. Both set up .venv from the lock first.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
PY ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: demo test test-system audit lint docs serve serve-pg bench bench-aggregate peers-venv clean

$(STAMP): pyproject.toml requirements.lock.txt
	test -x $(VENV)/bin/python || $(PY) -m venv $(VENV)
	@echo "installing the pinned dependencies into $(VENV) (3 min 21 s the first time here, on 2 busy cores: uv, else pip)..."
	# uv installs the same pinned lock from the registry in a fraction of pip's time; where uv cannot be had or
	# fails (no registry it reaches), pip installs it as before
	$(VENV)/bin/pip install -q --disable-pip-version-check uv==0.13.8 2>&1 | sed '/is ignored: it is neither/d' || true
	if ! ($(VENV)/bin/uv --version > /dev/null 2>&1 && $(VENV)/bin/uv pip install --python $(VENV)/bin/python -r requirements.lock.txt 2>&1 | tail -n 1); then \
		$(VENV)/bin/pip install --disable-pip-version-check --progress-bar off -r requirements.lock.txt 2>&1 \
		| sed -u '/is ignored: it is neither/d' | grep --line-buffered -E '^(Collecting|Successfully|ERROR)' \
		| sed -u -E 's/^Collecting ([^ ]+).*/  collecting \1/' || true; fi
	# pyCANON: the tests' independent check of k-anonymity and l-diversity. --no-deps: it pins typer and
	# typing_extensions (for its own command line, which the tests do not use) below the versions Prefect needs
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps pycanon==1.3.6
	test -x $(VENV)/bin/prefect
	$(VENV)/bin/python -c "import prefect, great_expectations, duckdb, gmpy2"
	$(VENV)/bin/pip install -q --disable-pip-version-check --no-deps -e . 2>&1 | sed '/is ignored: it is neither/d'
	# bytecode written once, as pip writes it at install (uv does not): every command then reads it, also where
	# PYTHONDONTWRITEBYTECODE is set, instead of compiling its 300-odd modules again (1.2 s of each release here)
	$(VENV)/bin/python -m compileall -q -j 0 "$$($(VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" privrelease > /dev/null || true
	$(VENV)/bin/privrelease --help > /dev/null
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/privrelease demo

serve: $(STAMP)
	bash scripts/serve.sh

serve-pg: $(STAMP)  # the same, with the ledger and Prefect's server on PostgreSQL ($$PRIVRELEASE_LEDGER_URL)
	bash scripts/serve-pg.sh

test: $(STAMP)
	bash scripts/system-deps.sh
	$(VENV)/bin/python -m pytest -n 2 --dist load -m "not system"  # both cores; the tiers: tests/conftest.py

test-system: $(STAMP)  # the system tier: whole stacks (served Prefect, gate, proxy, browser, make serve, two hosts)
	bash scripts/system-deps.sh
	$(VENV)/bin/python -m pytest -n 2 --dist load -m system

# the statistical privacy auditor's long run (10-30 min; its table goes in docs/PRIVACY-AUDIT.md), then the quickstart's
# install for real in a fresh clone and the operator's serving commands in a network namespace (tests/project/test_serve_network.py)
audit: $(STAMP)
	rm -f audit-results.md
	PRIVRELEASE_AUDIT=1 PRIVRELEASE_AUDIT_REPORT=$(CURDIR)/audit-results.md $(VENV)/bin/python -m pytest tests/audits/test_audit.py tests/audits/test_audit_outliers.py tests/audits/test_audit_spam.py tests/audits/test_audit_sdc.py tests/audits/test_audit_sdc_table.py tests/audits/test_audit_aggregate.py tests/project/test_install.py tests/project/test_serve_network.py -q
	@echo "results: audit-results.md"

lint: $(STAMP)
	$(VENV)/bin/ruff check privrelease tests bench scripts
	$(VENV)/bin/ruff format --check privrelease tests bench scripts  # formatted; `# fmt: skip` on tables only
	$(VENV)/bin/python scripts/gendocs.py --check  # the generated pages: CLI, parameters, request schema, the gate's access table
	$(VENV)/bin/python scripts/check_seeds.py  # every generator a test or benchmark makes is seeded, or says why any draw will do
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --quiet  # the site (mkdocs.yml) into build/site: a broken link fails

docs: $(STAMP)  # the documentation site on http://127.0.0.1:8000, rebuilt as pages change
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs serve

bench: $(STAMP)  # every benchmark; each needs PRIVRELEASE_DATA for the public data sets
	for b in bench/bench_*.py; do echo "== $$b"; $(VENV)/bin/python $$b || exit 1; done

clean:
	rm -rf $(VENV)

PEERS_VENV ?= .peers-venv
peers-venv:  # OpenDP and Tumult Analytics for bench/bench_aggregate.py, in their own venv (never .venv)
	test -x $(PEERS_VENV)/bin/python || $(PY) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q --disable-pip-version-check -r bench/requirements-peers.txt

bench-aggregate: $(STAMP) peers-venv  # about 30 min on 2 cores; results go in bench/RESULTS.md by hand
	PYTHONPATH=$(CURDIR) $(VENV)/bin/python bench/bench_aggregate.py --peers-python $(PEERS_VENV)/bin/python
