#!/usr/bin/env bash
# Fetch (from PyPI, on this machine) the wheels gpu_session.sh installs on the GPU machine (Python 3.12, no
# network there) into .whl/ (git-ignored; carry it with the device tool).
set -eu
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
"$PY" -m pip download -q --only-binary=:all: --python-version 3.12 --no-deps -d .whl \
  diffusers==0.42.1 transformers==5.24.0 importlib_metadata regex pytest pluggy iniconfig packaging pygments
ls .whl
