# The README's two commands: `make demo` (the main job) and `make test`. Both set up what they need.
PYTHON ?= python3
PIP = $(PYTHON) -m pip
STAMP = .setup.stamp

.PHONY: setup demo test lint typecheck bench clean

# First run only (then $(STAMP) says it is done): Debian's graphviz if `dot` is missing, torch 2.13 (CPU),
# kerneltrace with its test tools and Ray (the tests start a local Ray cluster), the light packages sglang imports, sglang 0.5.23 itself and
# transformers' source. sglang pins CUDA builds (torch, flashinfer, sgl-kernel) that a CPU machine
# neither has nor needs: it goes in last with --no-deps, and --no-warn-conflicts keeps pip from
# listing those pins against the CPU torch (~50 lines of resolver warnings that change nothing).
$(STAMP): pyproject.toml requirements-sglang.txt Makefile
	@echo "setup (first run only, a few minutes): torch 2.13 CPU, kerneltrace[test,ray], sglang 0.5.23 without its CUDA pins, transformers' source"
	@command -v dot >/dev/null || (apt-get update -qq && apt-get install -y -qq graphviz >/dev/null)
	$(PIP) install -q --no-warn-conflicts torch==2.13.0
	$(PIP) install -q --no-warn-conflicts -e '.[test,ray]'
	$(PIP) install -q --no-warn-conflicts -r requirements-sglang.txt
	$(PIP) install -q --no-warn-conflicts --no-deps sglang==0.5.23
	@$(MAKE) --no-print-directory $(TRANSFORMERS_SRC)
	@touch $(STAMP)

# transformers' own modelling code, the source behind ../shared/fixtures/gpu-traces (not imported).
TRANSFORMERS_SRC = build/src/transformers-5.17.0
$(TRANSFORMERS_SRC):
	@rm -rf build/src/tmp && mkdir -p build/src/tmp
	$(PIP) download -q --no-deps --only-binary=:all: transformers==5.17.0 -d build/src/tmp
	@$(PYTHON) -m zipfile -e build/src/tmp/transformers-5.17.0-*.whl $(TRANSFORMERS_SRC)
	@rm -rf build/src/tmp

setup: $(STAMP)

demo: setup
	$(PYTHON) -m examples.glm5_kv_cast.demo

test: setup
	$(PYTHON) -m pytest -q

# What CI checks besides the tests: ruff's rules and format (pyproject's [tool.ruff]), mypy on tracer/.
lint: setup
	$(PYTHON) -m ruff check .
	$(PYTHON) -m ruff format --check .

typecheck: setup
	$(PYTHON) -m mypy

bench: setup
	$(PIP) install -q -e '.[bench]'
	$(PYTHON) bench/bench_scan.py
	$(PYTHON) bench/bench_explain.py
	$(PYTHON) bench/bench_overhead.py
	$(PYTHON) bench/bench_fleet.py

clean:
	rm -rf $(STAMP) build *.egg-info .kerneltrace-cache
