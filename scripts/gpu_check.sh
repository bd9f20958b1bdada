#!/usr/bin/env bash
# The GPU check, in two halves, so the lent GPU machine spends its minutes on the GPU only.
#
#   bash scripts/gpu_check.sh prepare   # here, on a CPU machine with the project set up
#   bash scripts/gpu_check.sh run [STAGES]  # there, from the repository root, .gpu_check carried;
#                                           # STAGES: ctest,train,infer,bench (default: all;
#                                           # infer reads the model train saves in the same call)
#
# prepare: builds (scripts/build.sh, CUDA on: nvcc compiles kernels/cuda for sm_90) the programs
#   the check runs, and packs into .gpu_check/bundle.tar.gz (git-ignored, ~20-40 MiB): those
#   programs stripped, the Debian libraries they load that a bare GPU image lacks
#   (SentencePiece, yaml-cpp, liburing, ...; not LibTorch, CUDA or glibc, which it has), a
#   CTestTestfile with the `cuda`-labelled suites, and the default corpus already split. Why not
#   build there: the GPU machine reaches no package registry, so those libraries' headers are
#   not there, and a build would eat the check's minutes.
# run: unpacks into /tmp, finds LibTorch (the image's python3 torch, the pin setup.sh installs:
#   2.11.0+cu130) and its CUDA libraries, then
#     1. ctest -L cuda           (CudaKernels, CudaDevice, LlamaCuda: kernels against the CPU
#                                 references, plugins bf16/fp32 on the GPU, GPU engine = CPU engine)
#     2. train_llama --device cuda, 200 steps on the default corpus (bf16), then
#     3. infer_llama --device cuda on the model it saved (and the GPU engine's throughput)
#     4. bench_kernels           (kernels vs LibTorch, decode vs the bandwidth bound, training vs
#                                 PyTorch eager and torch.compile for M and 1B)
#   and prints one summary. Logs go to $OUT when set (the device tool brings them back).
#   Budget: under the device tool's 10 minutes per command (stage timeouts 150 + 90 + 45 + 270 s);
#   split the stages over two calls if a first run shows they need more.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
stage_dir="$root/.gpu_check"
mode="${1:-}"

prepare() {
  set -e
  local build="${COLOSSAL_BUILD_DIR:-$root/build}"
  bash "$root/scripts/setup.sh" >/dev/null
  bash "$root/scripts/build.sh" -DCOLOSSAL_WITH_CUDA=ON >/dev/null
  cmake --build "$build" --target core_tests llama_tests train_llama infer_llama bench_kernels
  rm -rf "$stage_dir" && mkdir -p "$stage_dir/pack/bin" "$stage_dir/pack/lib" "$stage_dir/pack/data"
  local bins=("$build/tests/core_tests" "$build/tests/llama_tests" "$build/apps/train_llama"
              "$build/apps/infer_llama" "$build/apps/bench_kernels")
  for b in "${bins[@]}"; do
    [ -x "$b" ] || { echo "[gpu_check] missing $b (did the build fail?)" >&2; exit 1; }
    cp "$b" "$stage_dir/pack/bin/" && strip --strip-unneeded "$stage_dir/pack/bin/$(basename "$b")"
  done
  # Libraries the programs load that are neither LibTorch's (the image has the same wheel), nor
  # CUDA's, nor the C runtime's (the image's are newer).
  local torch_lib
  torch_lib="$("$(bash "$root/scripts/setup.sh" --python)" -c 'import os, torch; print(os.path.dirname(torch.__file__))')"
  for b in "${bins[@]}"; do ldd "$b"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    grep -v -e "^$torch_lib" -e '/nvidia/' -e '/usr/local/cuda' \
         -e '/lib\(c\|m\|dl\|rt\|pthread\|gcc_s\|stdc++\|resolv\|util\)\.so' -e '/ld-linux' -e 'libcuda\.so' |
    while read -r lib; do cp -L "$lib" "$stage_dir/pack/lib/"; done
  # The default corpus, split the way train_llama splits it (it reads these when they exist).
  if [ ! -f "$root/out/llama/data/train.jsonl" ]; then
    "$build/apps/train_llama" --max_steps 0 --output "$stage_dir/corpus" >/dev/null 2>&1 || true
    cp "$stage_dir"/corpus/data/*.jsonl "$stage_dir/pack/data/"
  else
    cp "$root"/out/llama/data/*.jsonl "$stage_dir/pack/data/"
  fi
  # The suites tests/CMakeLists.txt labels `cuda` (run() writes their CTestTestfile there).
  grep -o 'colossal_add_suites([a-z_]* cuda [0-9]* [A-Za-z ]*' "$root/tests/CMakeLists.txt" >"$stage_dir/pack/cuda_suites.txt"
  cp "$root/apps/bench/llama_torch_reference.py" "$root/apps/bench/matmul_rate.py" "$stage_dir/pack/"
  tar -C "$stage_dir/pack" -czf "$stage_dir/bundle.tar.gz" .
  rm -rf "$stage_dir/pack" "$stage_dir/corpus"
  echo "[gpu_check] prepared $stage_dir/bundle.tar.gz ($(du -h "$stage_dir/bundle.tar.gz" | cut -f1));" \
       "on the GPU machine: carry .gpu_check and run: bash scripts/gpu_check.sh run"
}

run() {
  local stages=",${1:-ctest,train,infer,bench},"
  local out="${OUT:-/tmp/gpu_check_out}" work=/tmp/gpu_check
  mkdir -p "$out" && rm -rf "$work" && mkdir -p "$work"
  [ -f "$stage_dir/bundle.tar.gz" ] || { echo "[gpu_check] no $stage_dir/bundle.tar.gz: run 'prepare' first" >&2; exit 1; }
  tar -C "$work" -xzf "$stage_dir/bundle.tar.gz"
  local python="${COLOSSAL_GPU_PYTHON:-python3}" torch_dir
  torch_dir="$("$python" -c 'import os, torch; print(os.path.dirname(torch.__file__))')" || {
    echo "[gpu_check] $python has no torch" >&2; exit 1; }
  "$python" -c 'import torch; print("[gpu_check] torch", torch.__version__, "cuda", torch.version.cuda, "device",
                                    torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NONE VISIBLE")' | tee "$out/summary.txt"
  local site; site="$(dirname "$torch_dir")"
  local cuda_libs; cuda_libs="$(find "$site/nvidia" -maxdepth 3 -name lib -type d 2>/dev/null | tr '\n' ':')"
  export LD_LIBRARY_PATH="$work/lib:$torch_dir/lib:${cuda_libs}${LD_LIBRARY_PATH:-}"
  export COLOSSAL_APPS="$work/bin"
  local status=0
  stage() {  # name, timeout, command...
    local name="$1" limit="$2"; shift 2
    [[ "$stages" == *",$name,"* ]] || return 0
    local t0=$SECONDS
    ( cd "$work" && timeout "$limit" "$@" ) >"$out/$name.log" 2>&1
    local rc=$?
    printf '[gpu_check] %-12s rc %-3s %4ss  (log: %s.log)\n' "$name" "$rc" $((SECONDS - t0)) "$name" | tee -a "$out/summary.txt"
    [ "$rc" = 0 ] || status=1
    return "$rc"
  }
  # ctest -L cuda over the bundled binaries: the suites CMake labels `cuda`, as it registers them.
  while read -r target _ _ suites; do
    for suite in ${suites%)}; do
      echo "add_test($target.$suite $work/bin/$target --gtest_filter=$suite.*)"
      echo "set_tests_properties($target.$suite PROPERTIES LABELS cuda TIMEOUT 300 SKIP_REGULAR_EXPRESSION \"\\\\[  SKIPPED \\\\]\")"
    done
  done < <(sed 's/colossal_add_suites(//' "$work/cuda_suites.txt") >"$work/CTestTestfile.cmake"
  stage ctest 150 ctest -L cuda --output-on-failure
  grep -E 'tests passed|tests failed|SKIPPED|Failed|\*\*\*' "$out/ctest.log" 2>/dev/null | tail -8 >>"$out/summary.txt"
  # On the GPU machine a skipped suite means the GPU was not usable: that is a failed check.
  if [ -f "$out/ctest.log" ] && grep -q 'Skipped' "$out/ctest.log"; then
    echo "[gpu_check] ctest: suites were SKIPPED (no usable GPU?): the check failed" | tee -a "$out/summary.txt"
    status=1
  fi
  mkdir -p "$work/run/data" && cp "$work"/data/*.jsonl "$work/run/data/"
  stage train 90 bin/train_llama --device cuda --mixed_precision bf16 --max_steps 200 --output run --sample_tokens 0
  grep -E 'tokens/s|loss|eval|MFU' "$out/train.log" 2>/dev/null | tail -4 >>"$out/summary.txt"
  stage infer 45 bin/infer_llama --device cuda --dtype bf16 --model run/model --max_new_tokens 48 --seed 1 \
    --prompt "It is a truth universally acknowledged" --prompt "Elizabeth" --prompt "Mr. Darcy said"
  grep -E 'tokens/s|cuda' "$out/infer.log" 2>/dev/null | tail -3 >>"$out/summary.txt"
  stage bench 270 bin/bench_kernels --python "$python" --reference llama_torch_reference.py --shapes M,1B
  [ -f "$out/bench.log" ] && sed -n '/^section/,$p' "$out/bench.log" >>"$out/summary.txt"
  echo "=================== summary ===================" ; cat "$out/summary.txt"
  return "$status"
}

case "$mode" in
  prepare) prepare ;;
  run) run "${2:-}" ;;
  *) echo "usage: bash scripts/gpu_check.sh prepare|run  (prepare here, run on the GPU machine)" >&2; exit 2 ;;
esac
