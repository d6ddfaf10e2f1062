# pgdrain: `make demo` runs the seed's scenario on an embedded PostgreSQL, `make test` runs the
# suite. Both create the virtual environment with pinned dependencies first.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
REQUIREMENTS := requirements-dev.txt $(wildcard layers/pgdrain/requirements*.txt) pyproject.toml dev/pyproject.toml console/pyproject.toml
STAMP := $(VENV)/.installed-$(shell cat $(REQUIREMENTS) | cksum | cut -d' ' -f1)
PIP := $(BIN)/python -m pip --disable-pip-version-check -q

.PHONY: help demo test test-unit lint migrate clean sam-check soak soak-model browser console-screenshots

help: ## list the targets
	@grep -E '^[a-z/-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

$(STAMP): $(REQUIREMENTS)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "pgdrain needs Python 3.11 or newer; set PYTHON=python3.x"; exit 1; }
	rm -rf $(VENV)
	$(PYTHON) -m venv $(VENV)
	$(PIP) install -r requirements-dev.txt
	$(PIP) install --no-deps -e .
	$(PIP) install --no-deps -e dev/
	$(PIP) install --no-deps -e console/
	touch $@

venv: $(STAMP)

# The demo installs only what it runs (about 15 packages, not the test tools' hundred); a
# venv that `make test` built has it all already.
DEMO_REQUIREMENTS := requirements-demo.txt layers/pgdrain/requirements.txt layers/pgdrain/requirements-powertools.txt pyproject.toml dev/pyproject.toml console/pyproject.toml
DEMO_STAMP := $(VENV)/.demo-$(shell cat $(DEMO_REQUIREMENTS) | cksum | cut -d' ' -f1)

$(DEMO_STAMP): $(DEMO_REQUIREMENTS)
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
	  { echo "pgdrain needs Python 3.11 or newer; set PYTHON=python3.x"; exit 1; }
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(PIP) install -r requirements-demo.txt
	$(PIP) install --no-deps -e . -e dev/ -e console/
	touch $@

demo: $(DEMO_STAMP) ## run the seed article's scenario on an embedded PostgreSQL
	$(BIN)/python demo/seed.py

test: $(STAMP) browser ## run the whole suite (embedded PostgreSQL, or DATABASE_URL)
	$(BIN)/python -m pytest

# The console's browser tests drive Debian's Chromium through its ChromeDriver (Selenium never
# downloads one): installed here when either is missing, which needs root and apt-get.
BROWSER_PACKAGES := chromium chromium-driver
APT_INSTALL := DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends
browser: ## install Chromium and ChromeDriver for the console's browser tests when missing (apt-get, as root)
	@if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then exit 0; fi; \
	if ! command -v apt-get >/dev/null 2>&1; then \
	  echo "make: the console's browser tests need Chromium and ChromeDriver at /usr/bin/chromium and /usr/bin/chromedriver; there is no apt-get here: install them with this system's package manager (Debian and Ubuntu: apt-get install $(BROWSER_PACKAGES))" >&2; \
	  exit 1; \
	fi; \
	if [ "$$(id -u)" != 0 ]; then \
	  echo "make: the console's browser tests need Chromium and ChromeDriver; install them as root: sudo apt-get install $(BROWSER_PACKAGES) (or run make as root)" >&2; \
	  exit 1; \
	fi; \
	echo "make: installing $(BROWSER_PACKAGES) for the console's browser tests"; \
	$(APT_INSTALL) $(BROWSER_PACKAGES) || { apt-get update && $(APT_INSTALL) $(BROWSER_PACKAGES); }

console-screenshots: $(STAMP) browser ## regenerate docs/console/*.png: the console's pages on a realistic queue, in headless Chromium
	PGDRAIN_SCREENSHOTS=$(CURDIR)/docs/console $(BIN)/python -m pytest -q \
	  tests/console/test_console_browser.py -k test_the_pages_of_a_realistic_queue

test-unit: $(STAMP) ## run the tests that need no database
	$(BIN)/python -m pytest tests/unit

soak: $(STAMP) ## the reliability suite at ten times its CI size (RELIABILITY_SCALE)
	RELIABILITY_SCALE=$${RELIABILITY_SCALE:-10} PGDRAIN_FUZZ_EXAMPLES=$${PGDRAIN_FUZZ_EXAMPLES:-1000} \
	  $(BIN)/python -m pytest tests/reliability -s

soak-model: $(STAMP) ## the model-based test long (PGDRAIN_MODEL_EXAMPLES, default 3000)
	PGDRAIN_MODEL_EXAMPLES=$${PGDRAIN_MODEL_EXAMPLES:-3000} PGDRAIN_MODEL_STEPS=$${PGDRAIN_MODEL_STEPS:-20} \
	  $(BIN)/python -m pytest tests/model -s --hypothesis-show-statistics

lint: $(STAMP) ## ruff (complexity included), the import contracts, mypy --strict on pgdrain
	$(BIN)/ruff check .
	$(BIN)/lint-imports
	$(BIN)/mypy

migrate: $(STAMP) ## apply migrations to DATABASE_URL
	$(BIN)/pgdrain migrate

# The SAM CLI lives in its own environment: its exact pins clash with the test tools'. The
# checks below need a region only to expand ARNs: any will do, none is deployed to.
# cfn-lint 1.53.3: later versions no longer run the SAM transform and miss broken runtimes,
# schedules and API references.
SAM_VENV ?= .venv-sam
SAM_STAMP := $(SAM_VENV)/.installed-sam-1.170.0-cfnlint-1.53.3
SAM := SAM_CLI_TELEMETRY=0 AWS_DEFAULT_REGION=$${AWS_DEFAULT_REGION:-eu-west-1} $(SAM_VENV)/bin/sam

$(SAM_STAMP):
	rm -rf $(SAM_VENV)
	$(PYTHON) -m venv $(SAM_VENV)
	$(SAM_VENV)/bin/python -m pip --disable-pip-version-check -q install \
	  'aws-sam-cli==1.170.0' 'cfn-lint==1.53.3'
	touch $@

sam-check: $(SAM_STAMP) ## sam validate, sam validate --lint and sam build (no Docker)
	$(SAM) validate
	$(SAM) validate --lint
	$(SAM_VENV)/bin/python tests/sam/check_first_deploy.py
	$(SAM) build
	@# The layer ships what a function runs: the RDS CA bundle, not the shell's tools.
	test -s .aws-sam/build/PgdrainLayer/python/pgdrain/certs/rds-ca-bundle.pem
	test ! -e .aws-sam/build/PgdrainLayer/python/pgdrain/cli
	test ! -e .aws-sam/build/PgdrainLayer/python/aws_lambda_powertools
	test -d .aws-sam/build/PowertoolsLayer/python/aws_lambda_powertools

# checkov scans the template as CloudFormation receives it: SAM's translation (checkov fails on
# SAM's Globals with intrinsic functions), every skipped check named and justified in
# .checkov.yaml.
CHECKOV_VENV ?= .venv-checkov
CHECKOV_STAMP := $(CHECKOV_VENV)/.installed-checkov-3.3.30
$(CHECKOV_STAMP):
	rm -rf $(CHECKOV_VENV)
	$(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/python -m pip --disable-pip-version-check -q install 'checkov==3.3.30'
	touch $@

.PHONY: checkov
checkov: $(STAMP) $(CHECKOV_STAMP) ## checkov on the translated template (skips named in .checkov.yaml)
	mkdir -p .aws-sam
	$(BIN)/python -m pgdrain_dev.sam_translate template.yaml > .aws-sam/translated.json
	BC_SKIP_MAPPING=TRUE $(CHECKOV_VENV)/bin/checkov --config-file .checkov.yaml -f .aws-sam/translated.json

# The region is the deployer's choice, never a default: REGION=..., or AWS_REGION /
# AWS_DEFAULT_REGION from the shell. The first deploy asks how to reach the database, the
# network and the alarms' e-mail (dev/pgdrain_dev/first_deploy.py; every other parameter keeps
# its default), saved in samconfig.toml; later ones reuse them. The outputs come last.
STACK ?= pgdrain
DEPLOY_REGION = $(or $(REGION),$(AWS_REGION),$(AWS_DEFAULT_REGION))
.PHONY: deploy deploy-region
deploy-region:
	@test -n "$(DEPLOY_REGION)" || { echo "make deploy: which region? make deploy REGION=eu-west-1 (or set AWS_REGION)"; exit 2; }

deploy: deploy-region $(SAM_STAMP) ## build and deploy the stack (REGION=eu-west-1; the first time asks how to reach the database), then print its outputs
	SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam build
	if grep -q '^parameter_overrides' samconfig.toml; then \
	  SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam deploy --stack-name $(STACK) --region $(DEPLOY_REGION); \
	else \
	  SAM_CLI_TELEMETRY=0 $(PYTHON) dev/pgdrain_dev/first_deploy.py --sam $(SAM_VENV)/bin/sam \
	    --stack-name $(STACK) --region $(DEPLOY_REGION); \
	fi
	SAM_CLI_TELEMETRY=0 $(SAM_VENV)/bin/sam list stack-outputs --stack-name $(STACK) --region $(DEPLOY_REGION) --output table

clean: ## remove the virtual environments, caches and build output
	rm -rf $(VENV) $(SAM_VENV) $(CHECKOV_VENV) .pytest_cache .ruff_cache .hypothesis .aws-sam

.PHONY: openapi
# docs/openapi.json shows the example job (echo) and the demo's job types (a deployed stack's
# document: python -m pgdrain.http.openapi --jobs <its PGDRAIN_JOBS>).
OPENAPI_JOBS := jobs,pgdrain_dev.demo_jobs.examples,pgdrain_jobs.webhook
openapi: $(STAMP) ## write docs/openapi.json (the enqueue API) from the code
	$(BIN)/python -m pgdrain.http.openapi --jobs $(OPENAPI_JOBS) --output docs/openapi.json

.PHONY: backlog
backlog: $(STAMP) ## drain a 10,000-job backlog of 200 ms jobs through the local Lambda Invoke stand-in (fan-out, continuation)
	$(BIN)/python bench/backlog.py --jobs $(or $(JOBS),10000) --max-drains $(or $(MAX_DRAINS),4 16)

.PHONY: sustained
sustained: $(STAMP) ## producers and drains together at RATE jobs/s for MINUTES (default 4000, 30), DATABASE_URL's server or the embedded one
	$(BIN)/python bench/sustained.py --rate $(or $(RATE),4000) --minutes $(or $(MINUTES),30)

.PHONY: bench-peers
bench-peers: $(STAMP) ## no-op throughput beside PgQueuer and procrastinate (installed in .venv-bench)
	test -x .venv-bench/bin/python || $(PYTHON) -m venv .venv-bench
	.venv-bench/bin/python -m pip --disable-pip-version-check -q install -e '.[bench]'
	PEERS_PYTHON=.venv-bench/bin/python $(BIN)/python bench/throughput.py --rounds 3
