# Every target works on a fresh machine: it creates .venv and installs the
# project with every extra before running anything.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: demo test install lint typecheck pytest bench statecharts clean

demo: $(STAMP)
	$(BIN)/envckpt demo

test: $(STAMP) lint typecheck pytest

lint: $(STAMP)
	$(BIN)/ruff check envckpt tests bench
	$(BIN)/ruff format --check envckpt tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -q $(PYTEST_ARGS)

bench: $(STAMP)
	$(BIN)/python -m bench

statecharts: $(STAMP)
	$(BIN)/envckpt statecharts

install: $(STAMP)

# nemo-gym 0.7.0 declares Python >= 3.13.14 but works on older interpreters;
# only there is --ignore-requires-python needed.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[http,ray,dev]'
	if $(BIN)/python -c 'import sys; sys.exit(0 if sys.version_info < (3, 13, 14) else 1)'; then \
		$(BIN)/python -m pip install -q --ignore-requires-python --prefer-binary nemo-gym==0.7.0; \
	else \
		$(BIN)/python -m pip install -q --prefer-binary nemo-gym==0.7.0; \
	fi
	$(BIN)/python -m pip install -q -e '.[http,ray,dev]'
	touch $(STAMP)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
