#!/usr/bin/env bash
# Builds llama.cpp for bench_infer's comparison column, from the source shipped inside PyPI's
# llama-cpp-python sdist (the only registry this project's machines reach). Nothing is vendored:
# the source and the build live outside the checkout, under the project's cache.
#
#   scripts/build_llama_cpp.sh            build (idempotent) and print the directory of the binaries
#   scripts/build_llama_cpp.sh --root     print the source directory (convert_hf_to_gguf.py, gguf-py)
#   scripts/build_llama_cpp.sh --source   fetch the sources only (idempotent; setup.sh does, for the
#                                         tests that run llama.cpp's converter) and print their directory
#
# Built: llama-bench (prompt and decode speed), llama-batched-bench (parallel sequences),
# llama-quantize (q8_0, q4_0), llama-perplexity and
# llama-completion, CPU only, for this machine's instruction set (GGML_NATIVE), OpenMP threads.
set -euo pipefail

VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"   # llama-cpp-python release whose vendored llama.cpp we build
CACHE_ROOT="${COLOSSAL_CACHE:-$HOME/.cache/colossal-cpp}"
ROOT="$CACHE_ROOT/llama-cpp-python-$VERSION"
SRC="$ROOT/src/vendor/llama.cpp"
BUILD="$ROOT/build"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

if [[ "${1:-}" == "--root" ]]; then echo "$SRC"; exit 0; fi

log() { echo "[build_llama_cpp] $*" >&2; }

fetch_source() {
  [[ -f "$SRC/CMakeLists.txt" ]] && return 0
  PY="$("$HERE/setup.sh" --python)"
  mkdir -p "$ROOT/download"
  log "downloading llama-cpp-python==$VERSION (sdist) from PyPI"
  "$PY" -m pip download "llama-cpp-python==$VERSION" --no-binary :all: --no-deps --no-build-isolation \
      -d "$ROOT/download" >&2 || "$PY" -m pip download "llama-cpp-python==$VERSION" --no-binary :all: \
      --no-deps -d "$ROOT/download" >&2
  rm -rf "$ROOT/src.tmp" && mkdir -p "$ROOT/src.tmp"
  tar xzf "$ROOT/download/llama_cpp_python-$VERSION.tar.gz" -C "$ROOT/src.tmp" --strip-components=1
  [[ -f "$ROOT/src.tmp/vendor/llama.cpp/CMakeLists.txt" ]] || { log "no vendor/llama.cpp in the sdist"; exit 1; }
  rm -rf "$ROOT/src" && mv "$ROOT/src.tmp" "$ROOT/src"
}
fetch_source
if [[ "${1:-}" == "--source" ]]; then echo "$SRC"; exit 0; fi

TARGETS=(llama-bench llama-batched-bench llama-quantize llama-perplexity llama-completion)
missing=0
for t in "${TARGETS[@]}"; do [[ -x "$BUILD/bin/$t" ]] || missing=1; done
if [[ "$missing" -eq 1 ]]; then
  log "configuring and building llama.cpp ($SRC) in $BUILD"
  LAUNCHER=()
  command -v ccache >/dev/null && LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$SRC" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DGGML_OPENMP=ON \
      -DGGML_CUDA=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DBUILD_SHARED_LIBS=OFF "${LAUNCHER[@]}" >&2
  cmake --build "$BUILD" --target "${TARGETS[@]}" -j "$(nproc)" >&2
fi
echo "$BUILD/bin"
