# Every target works on a fresh machine: it creates .venv and installs the
# project with every extra before running anything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The checkout is installed in setuptools' compat editable mode (a path entry):
# the default strict mode's import hook is invisible to type checkers, and a
# directory named envckpt in the working directory would shadow it.
EDITABLE := --config-settings editable_mode=compat

.PHONY: demo test install lint typecheck pytest bench statecharts mermaid clean verify mutation

# The run's directory is kept (build/demo, cleared at the next run); the demo
# ends by naming it and its verdict.json.
demo: $(STAMP)
	$(BIN)/envckpt demo --dir $(BUILD)/demo --force

# The Python install and the renderer's npm install wait on the network, not on
# each other: they run side by side, then lint and type checks beside the npm
# install's tail, then pytest alone (it wants both cores).
test:
	$(MAKE) --no-print-directory -j 2 lint typecheck $(MERMAID_STAMP)
	$(MAKE) --no-print-directory pytest

lint: $(STAMP)
	$(BIN)/ruff check envckpt tests bench examples
	$(BIN)/ruff format --check envckpt tests bench examples

typecheck: $(STAMP)
	$(BIN)/mypy

# The real Mermaid renderer behind `envckpt statecharts --render` and its test:
# Debian's chromium, and mermaid-cli pinned in tools/mermaid (no browser download).
MERMAID := tools/mermaid
MERMAID_STAMP := $(MERMAID)/node_modules/.installed
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

mermaid: $(MERMAID_STAMP)

$(MERMAID_STAMP): $(MERMAID)/package.json $(MERMAID)/package-lock.json
	command -v chromium >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }
	command -v npm >/dev/null || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q nodejs npm; }
	cd $(MERMAID) && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund
	touch $@

# make test: the long campaigns (marked slow) are left to make verify. Three
# workers on two cores: about half of the suite's time is spent waiting on
# the servers and processes it starts (448 s of test time used 235 CPU
# seconds), so a third worker took pytest from 247 s to 202-206 s here (a
# fourth, 190 s, leaves each worker half a core). A file's tests stay on one
# worker, and so do the files sharing a session's servers
# (tests/helpers/shared_servers.py: loadgroup marks are lost on pytest 9.2).
PYTEST_WORKERS ?= 3
pytest: $(STAMP) $(MERMAID_STAMP)
	ENVCKPT_REQUIRE_RENDERER=1 $(BIN)/pytest -q -m "not slow" -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench

# Verification beyond sampling (docs/testing.md): every test (slow campaigns
# included, hypothesis thorough) recording transition coverage, on two workers
# (as make test spreads them: tests sharing servers kept on one) whose shares the plugin
# merges; then the bounded model check. Each part prints its wall time; the
# last lines are the model check's summary (states, oracle violations) and the
# coverage per machine and transport (the full report: build/transition-coverage.txt).
# The plugin is loaded up front and its path given with "=": pytest 9.2 reads
# a bare path after an option it does not know yet as a test path.
BUILD := build
verify: $(STAMP)
	mkdir -p $(BUILD)
	start=$$(date +%s); \
	ENVCKPT_CAMPAIGNS=1 ENVCKPT_HYPOTHESIS_PROFILE=thorough PYTHONPATH=tests $(BIN)/pytest -q -p no:cacheprovider -n 2 --dist loadfile --durations=15 -p transition_coverage.plugin --transition-coverage=$(BUILD)/transition-coverage.jsonl $(PYTEST_ARGS) > $(BUILD)/verify-pytest.txt 2>&1 || { tail -40 $(BUILD)/verify-pytest.txt; exit 1; }; \
	tail -1 $(BUILD)/verify-pytest.txt; echo "pytest part: $$(( $$(date +%s) - start )) s"
	start=$$(date +%s); \
	PYTHONPATH=tests $(BIN)/python -m model_check --quiet > $(BUILD)/model-check.txt; \
	checked=$$?; cat $(BUILD)/model-check.txt; echo "model check part: $$(( $$(date +%s) - start )) s"; \
	PYTHONPATH=tests $(BIN)/python -m transition_coverage $(BUILD)/transition-coverage.jsonl \
		> $(BUILD)/transition-coverage.txt; \
	covered=$$?; \
	tail -2 $(BUILD)/model-check.txt; \
	PYTHONPATH=tests $(BIN)/python -m transition_coverage --summary $(BUILD)/transition-coverage.jsonl; \
	[ $$checked = 0 ] && [ $$covered = 0 ]

# Mutation testing (minutes to hours on 2 cores): mutmut in a scratch copy.
mutation: $(STAMP)
	$(UV) $(EDITABLE) -e '.[mutation]'
	rm -rf $(BUILD)/mutation && mkdir -p $(BUILD)/mutation
	git ls-files | tar -cf - -T - | tar -xf - -C $(BUILD)/mutation
	# One child: the machine is shared; MODULES=envckpt.gym.replies runs one module's mutants.
	cd $(BUILD)/mutation && env -u PYTHONPATH nice ../../$(BIN)/mutmut run --max-children 1 $(if $(MODULES),$(addsuffix *,$(MODULES))) || true
	$(BIN)/python tests/mutation/score.py $(BUILD)/mutation --fail-under 90

statecharts: $(STAMP)
	$(BIN)/envckpt statecharts

install: $(STAMP)

# uv installs (parallel fetches: about 25 s here, bytecode included, where pip took 75).
# nemo-gym 0.7.0 declares Python >= 3.13.14 but works on older interpreters,
# and only pip can ignore that (--ignore-requires-python, passed only there):
# pip installs nemo-gym alone, then uv resolves the project's extras and
# nemo-gym's own requirements together. --compile-bytecode, as pip does: the
# tests start hundreds of Python processes, and without .pyc files (none are
# written when PYTHONDONTWRITEBYTECODE is set) each compiles its imports anew,
# which made pytest 70 s slower here.
UV := $(BIN)/uv pip install -q --compile-bytecode --python $(BIN)/python
GYM_REQUIREMENTS := $(VENV)/nemo-gym-requirements.txt
$(STAMP): pyproject.toml tools/requirements_of.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q uv packaging
	$(BIN)/python -m pip install -q --no-deps --prefer-binary \
		$$($(BIN)/python -c 'import sys; print("--ignore-requires-python" if sys.version_info < (3, 13, 14) else "")') \
		nemo-gym==0.7.0
	$(BIN)/python tools/requirements_of.py nemo-gym > $(GYM_REQUIREMENTS)
	$(UV) $(EDITABLE) -e '.[http,ray,dev,prometheus,otel,report]' -r $(GYM_REQUIREMENTS)
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
