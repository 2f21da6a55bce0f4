# FillScope: `make demo` and `make test` are the two commands; `make serve` opens the canvas.
# COMFYUI_PATH=/path/to/ComfyUI uses an existing ComfyUI instead of the bundled .comfyui/.
SHELL := /bin/bash
PY := .venv/bin/python
PYTEST_ARGS ?=
PORT ?= 8188
# two workers (this machine's 2 cores), each test module one unit handed out longest first (tests/suite_plan.py);
# one torch thread per process: two workers and their servers on 2 cores, no thread oversubscription. Bytecode
# written even where the environment says not to (PYTHONDONTWRITEBYTECODE=1 here): each ComfyUI server the tests
# start compiled ComfyUI's and the pack's sources again, 2.4 s of its 17 s start (docs/tests.md)
PYTEST_WORKERS ?= 2
PYTEST := OMP_NUM_THREADS=$${OMP_NUM_THREADS:-1} PYTHONDONTWRITEBYTECODE= $(PY) -m pytest -n $(PYTEST_WORKERS) --dist loadfile --no-loadscope-reorder

.PHONY: setup test test-fast demo serve bench clean

setup:
	@bash scripts/setup.sh

test: setup
	$(PYTEST) --durations=40 $(PYTEST_ARGS)

# the edit loop: the engine's tests and the server smoke test, less the slow ones (tests/suite_plan.py, docs/tests.md)
test-fast: setup
	$(PYTEST) -m "(engine or smoke) and not slow" $(PYTEST_ARGS)

demo: setup
	@PORT=$(PORT) bash scripts/demo.sh

serve: setup
	@PORT=$(PORT) bash scripts/serve.sh

bench: setup
	@set -e; shopt -s nullglob; files=(bench/bench_*.py); \
	if [ $${#files[@]} -eq 0 ]; then echo "[bench] no bench/bench_*.py"; fi; \
	for f in "$${files[@]}"; do echo "[bench] $$f"; $(PY) "$$f"; done

clean:
	rm -rf out/
