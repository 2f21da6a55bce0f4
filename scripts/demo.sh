#!/usr/bin/env bash
# FillScope demo, headless, through comfy-cli (REFERENCE.md section 6):
#   1. comfy launch --background   ComfyUI with the pack on 127.0.0.1:$PORT (--cpu when torch sees no CUDA)
#   2. comfy run --wait            each demo workflow (API format): the FLUX Fill and SD3 ControlNet meta traces
#   3. python -m fillscope.cli demo-summary --port $PORT --out out/   after each (reads /history; writes
#                                  out/<family>_shapes.json + .txt and prints the table)
#   4. comfy stop --port $PORT     always, also on failure (trap)
#
# Environment: PORT (8188), COMFYUI_PATH (existing ComfyUI instead of .comfyui), OUT (out/),
#   WORKFLOWS (space-separated; default the two meta traces), DEMO_TIMEOUT (comfy run's per-event silence
#   timeout, s; 1800), DEMO_SUMMARY=0 skips step 3.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
PORT="${PORT:-8188}"
OUT="${OUT:-out}"
WORKFLOWS="${WORKFLOWS:-${WORKFLOW:-api_workflows/flux_fill_meta_trace.api.json api_workflows/sd3_controlnet_meta_trace.api.json}}"
DEMO_TIMEOUT="${DEMO_TIMEOUT:-1800}"
PY="$ROOT/.venv/bin/python"
COMFY_BIN="$ROOT/.venv/bin/comfy"

say() { printf '[demo] %s\n' "$*"; }
die() { printf '[demo] ERROR: %s\n' "$*" >&2; exit 1; }

if [ -n "${COMFYUI_PATH:-}" ]; then
  COMFY="$(cd "$COMFYUI_PATH" && pwd)"
else
  COMFY="$ROOT/.comfyui"
  # comfy-cli runs main.py with $VIRTUAL_ENV/bin/python when set (else <workspace>/.venv, else its own python)
  export VIRTUAL_ENV="$ROOT/.venv"
fi
[ -f "$COMFY/main.py" ] || die "ComfyUI not found at $COMFY: run 'make setup'"
[ -x "$COMFY_BIN" ] || die "comfy-cli missing in .venv: run 'make setup'"
ABS_WORKFLOWS=()
for wf in $WORKFLOWS; do
  [ -f "$wf" ] || die "workflow $wf not found"
  ABS_WORKFLOWS+=("$(cd "$(dirname "$wf")" && pwd)/$(basename "$wf")")
done

# the background launcher re-invokes `comfy` from PATH; keep comfy-cli quiet and offline-friendly
export PATH="$ROOT/.venv/bin:$PATH"
export DO_NOT_TRACK=1 COMFY_NO_TELEMETRY=1 COMFY_KNOWLEDGE_DISABLE=1
comfy() { "$COMFY_BIN" --skip-prompt "$@"; }

DEVICE_ARGS=()
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  DEVICE_ARGS=(--cpu)
fi
LOG="$COMFY/user/comfyui_${PORT}.log"  # where comfy-cli 1.23 writes a background server's output

say "starting ComfyUI ($COMFY) on 127.0.0.1:$PORT ${DEVICE_ARGS[*]:-(cuda)}"
comfy --workspace "$COMFY" launch --background -- "${DEVICE_ARGS[@]}" --listen 127.0.0.1 --port "$PORT" \
  || die "comfy launch failed (port $PORT busy? see $LOG)"

stop_server() {
  local rc=$?
  say "stopping ComfyUI on port $PORT"
  comfy stop --port "$PORT" || comfy stop >/dev/null 2>&1 || say "warning: comfy stop failed"
  if [ "$rc" -ne 0 ]; then
    say "failed (exit $rc); server log: $LOG"
  fi
  exit "$rc"
}
trap stop_server EXIT
trap 'exit 130' INT TERM

# comfy launch returns once ComfyUI printed its URL; also check the API and the workflow's node types
"$PY" - "$PORT" "$LOG" "${ABS_WORKFLOWS[@]}" <<'EOF'
import json, sys, time, urllib.request
port, log, workflows = sys.argv[1], sys.argv[2], sys.argv[3:]
deadline = time.time() + 180
while True:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/object_info", timeout=10) as r:
            info = json.load(r)
        break
    except OSError as e:
        if time.time() > deadline:
            sys.exit(f"[demo] ERROR: ComfyUI on port {port} does not answer /object_info: {e}")
        time.sleep(1)
needed = set()
for workflow in workflows:
    with open(workflow) as f:
        wf = json.load(f)
    nodes = wf["nodes"] if isinstance(wf.get("nodes"), list) else list(wf.values())
    needed |= {n.get("class_type") or n.get("type") for n in nodes if isinstance(n, dict)} - {None}
missing = sorted(t for t in needed if t not in info)
if missing:
    lines = open(log, errors="replace").read().splitlines() if log else []
    hits = [l for l in lines if "FillScope" in l or "IMPORT FAILED" in l or "Error" in l][-40:]
    sys.exit("[demo] ERROR: node types missing on the server: %s\n%s" % (", ".join(missing), "\n".join(hits)))
print(f"[demo] server up: {len(info)} node types; workflow uses {len(needed)}")
EOF

for wf in "${ABS_WORKFLOWS[@]}"; do
  say "running $(basename "$wf")"
  comfy --workspace "$COMFY" run --workflow "$wf" --host 127.0.0.1 --port "$PORT" --wait --timeout "$DEMO_TIMEOUT"
  if [ "${DEMO_SUMMARY:-1}" != "0" ]; then
    mkdir -p "$OUT"
    "$PY" -m fillscope.cli demo-summary --port "$PORT" --out "$OUT/"
  fi
done
say "done"
