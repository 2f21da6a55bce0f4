#!/usr/bin/env bash
# Start ComfyUI with the FillScope pack in the foreground (the canvas): http://127.0.0.1:$PORT
# --cpu when torch sees no CUDA device. Extra arguments go to ComfyUI's main.py.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
PORT="${PORT:-8188}"
COMFY="${COMFYUI_PATH:-$ROOT/.comfyui}"
PY="${COMFYUI_PYTHON:-$ROOT/.venv/bin/python}"
[ -f "$COMFY/main.py" ] || { echo "[serve] ComfyUI not found at $COMFY: run 'make setup'" >&2; exit 1; }
ARGS=(--listen 127.0.0.1 --port "$PORT")
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  ARGS=(--cpu "${ARGS[@]}")
fi
echo "[serve] ComfyUI $COMFY on http://127.0.0.1:$PORT ${ARGS[0]}"
cd "$COMFY"
exec "$PY" main.py "${ARGS[@]}" "$@"
