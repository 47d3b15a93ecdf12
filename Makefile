# The README's two commands: `make demo` (the main job) and `make test`. Both set up what they need.
PYTHON ?= python3
PIP = $(PYTHON) -m pip
STAMP = .setup.stamp

.PHONY: setup demo test bench clean

$(STAMP): pyproject.toml requirements-sglang.txt Makefile
	command -v dot >/dev/null || (apt-get update -qq && apt-get install -y -qq graphviz)
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[test]'
	$(PIP) install -q --no-deps sglang==0.5.23
	$(PIP) install -q -r requirements-sglang.txt
	$(MAKE) $(TRANSFORMERS_SRC)
	touch $(STAMP)

# transformers' own modelling code, the source behind ../shared/fixtures/gpu-traces (not imported).
TRANSFORMERS_SRC = build/src/transformers-5.17.0
$(TRANSFORMERS_SRC):
	rm -rf build/src/tmp && mkdir -p build/src/tmp
	$(PIP) download -q --no-deps --only-binary=:all: transformers==5.17.0 -d build/src/tmp
	$(PYTHON) -m zipfile -e build/src/tmp/transformers-5.17.0-*.whl $(TRANSFORMERS_SRC)
	rm -rf build/src/tmp

setup: $(STAMP)

demo: setup
	$(PYTHON) -m examples.glm5_kv_cast.demo

test: setup
	$(PYTHON) -m pytest -q

bench: setup
	$(PIP) install -q -e '.[bench]'
	$(PYTHON) bench/bench_scan.py
	$(PYTHON) bench/bench_explain.py
	$(PYTHON) bench/bench_overhead.py

clean:
	rm -rf $(STAMP) build *.egg-info .kerneltrace-cache
