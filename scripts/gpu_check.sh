#!/usr/bin/env bash
# The GPU checks, for a session lent a GPU machine (see DEVELOPERS.md): build with CUDA, run the
# tests labelled `cuda`, then a short train_llama on the GPU beside the same run on the CPU.
# Prints one summary line per check; exits non-zero when any check fails.
#
#   bash scripts/gpu_check.sh            # everything
#   COLOSSAL_JOBS=16 bash scripts/gpu_check.sh
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${COLOSSAL_BUILD_DIR:-$root/build-gpu}"
jobs="${COLOSSAL_JOBS:-$(nproc)}"
out="${OUT:-/tmp/gpu_check}"
mkdir -p "$out"
status=0
say() { printf '[gpu_check] %s\n' "$*"; }

nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || say "nvidia-smi: not available"
python="$(bash "$root/scripts/setup.sh" --python 2>/dev/null || command -v python3)"
if ! cmake -S "$root" -B "$build" -G Ninja -DCOLOSSAL_PYTHON="$python" -DCOLOSSAL_WITH_CUDA=ON \
     -DCOLOSSAL_BUILD_BENCH=OFF >"$out/configure.log" 2>&1; then
  say "configure: FAILED (see $out/configure.log)"; exit 1
fi
if ! cmake --build "$build" -j "$jobs" --target core_tests train_llama colossal >"$out/build.log" 2>&1; then
  say "build: FAILED (see $out/build.log)"; tail -30 "$out/build.log"; exit 1
fi
say "build: ok"

(cd "$build" && ctest -L cuda --output-on-failure) >"$out/ctest_cuda.log" 2>&1 \
  && say "ctest -L cuda: ok" || { say "ctest -L cuda: FAILED"; status=1; }
grep -E "Passed|Failed|Skipped|SKIPPED" "$out/ctest_cuda.log" | head -20

# train_llama on the GPU and on the CPU, same seed and steps: the loss curves should agree to
# about 1e-4 (different summation order); tokens/s shows what the GPU path gives.
for dev in cuda cpu; do
  "$build/apps/train_llama" --device "$dev" --max_steps 20 --log_interval 5 --eval_interval 0 --sample_tokens 0 \
    --output "$out/llama_$dev" --log_file "$out/llama_$dev.jsonl" >"$out/llama_$dev.log" 2>&1 \
    && say "train_llama --device $dev: ok ($(tail -1 "$out/llama_$dev.jsonl" 2>/dev/null))" \
    || { say "train_llama --device $dev: FAILED"; tail -20 "$out/llama_$dev.log"; status=1; }
done
exit $status
