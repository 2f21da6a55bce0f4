#!/usr/bin/env bash
# One prepared run for a GPU session (the device tool's machine: nothing installed from the network).
# Carry: .whl (diffusers, transformers, pytest wheels), .comfyui/comfy/sd1_tokenizer,
# .comfyui/comfy/text_encoders/t5_tokenizer. Writes under $OUT; prints a short table last. ~5-6 min on an H200.
#   CUDA-only tests (by-pointer moves from pinned memory, the CUDA tracer)
#   bench/gpu_memory.py: every memory policy's peak and stage times, FLUX Fill 1024 bf16, placeholder weights
set -u
OUT=${OUT:-out/gpu_session}
mkdir -p "$OUT"
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
export PYTHONPATH=/tmp/site
export COMFYUI_PATH=$PWD/.comfyui
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
python3 -c "import sys, torch, diffusers, transformers; print(sys.version.split()[0], torch.__version__, diffusers.__version__, transformers.__version__)" | tee "$OUT/versions.txt"
timeout 150 python3 -m pytest -q -p no:cacheprovider tests/test_placement.py tests/test_tracers.py -k cuda \
  > "$OUT/pytest_cuda.txt" 2>&1
echo "pytest (CUDA-only tests): rc=$? $(tail -1 "$OUT/pytest_cuda.txt")"
timeout 420 python3 bench/gpu_memory.py --out "$OUT" --steps 4 > "$OUT/gpu_memory.txt" 2>&1
echo "gpu_memory.py: rc=$?"
tail -8 "$OUT/gpu_memory.txt"
