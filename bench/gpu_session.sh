#!/usr/bin/env bash
# One prepared run for a GPU session (the device tool's machine: nothing installed from the network).
# Carry: .whl (bench/gpu_wheels.sh fetches it), .comfyui/comfy/sd1_tokenizer, .comfyui/comfy/text_encoders/t5_tokenizer.
# Writes under $OUT; prints a short table per part last. PARTS picks what runs (default: all three, ~8 min on an
# H200; split across two calls if the session's device time is short: PARTS="tests memory", then PARTS=speed):
#   tests   CUDA-only tests (by-pointer moves from pinned memory, the CUDA tracer)            ~0.5 min
#   memory  bench/gpu_memory.py: every memory policy's peak and stage times, FLUX Fill 1024     ~4 min
#   speed   bench/gpu_speed.py: ms/step vs diffusers, attention backends, fused qkv, compile, step caches ~3.5 min
#   parallel bench/gpu_parallel.py: Ulysses ms/step at degree 1 and each valid degree <= the GPU count (not in the
#           default PARTS: it needs 2+ GPUs, and says so and exits 0 with fewer; its time per degree is not yet measured)
set -u
OUT=${OUT:-out/gpu_session}
PARTS=${PARTS:-tests memory speed}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
export COMFYUI_PATH=$PWD/.comfyui
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import sys, torch, diffusers, transformers; print(sys.version.split()[0], torch.__version__, diffusers.__version__, transformers.__version__)" | tee "$OUT/versions.txt"
summary=()
for part in $PARTS; do
  case $part in
    tests)
      timeout 120 python3 -m pytest -q -p no:cacheprovider tests/test_placement.py tests/test_tracers.py -k cuda \
        > "$OUT/pytest_cuda.txt" 2>&1
      summary+=("tests: rc=$? $(tail -1 "$OUT/pytest_cuda.txt")") ;;
    memory)
      timeout 300 python3 bench/gpu_memory.py --out "$OUT" --steps 4 > "$OUT/gpu_memory.txt" 2>&1
      summary+=("memory: rc=$?") ;;
    speed)
      timeout 330 python3 bench/gpu_speed.py --out "$OUT" > "$OUT/gpu_speed.txt" 2>&1
      summary+=("speed: rc=$?") ;;
    parallel)
      timeout 590 python3 bench/gpu_parallel.py --out "$OUT/parallel" > "$OUT/gpu_parallel.txt" 2>&1
      summary+=("parallel: rc=$?") ;;
  esac
done
for part in $PARTS; do
  case $part in
    memory) tail -7 "$OUT/gpu_memory.txt" ;;
    speed) tail -16 "$OUT/gpu_speed.txt" ;;
    parallel) tail -12 "$OUT/gpu_parallel.txt" ;;
  esac
done
printf '%s\n' "${summary[@]}"
