# FillScope: `make demo` and `make test` are the two commands; `make serve` opens the canvas.
# COMFYUI_PATH=/path/to/ComfyUI uses an existing ComfyUI instead of the bundled .comfyui/.
SHELL := /bin/bash
PY := .venv/bin/python
PYTEST_ARGS ?=
PORT ?= 8188

.PHONY: setup test demo serve bench clean

setup:
	@bash scripts/setup.sh

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

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
