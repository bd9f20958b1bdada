#!/usr/bin/env bash
# Configure and build into ./build (or $COLOSSAL_BUILD_DIR). Extra arguments go to CMake's
# configure step, e.g.  scripts/build.sh -DCOLOSSAL_WITH_CUDA=ON
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${COLOSSAL_BUILD_DIR:-$root/build}"
jobs="${COLOSSAL_JOBS:-$(nproc)}"
python="$(bash "$root/scripts/setup.sh" --python)"
log="$(mktemp)"
# The configure output is long (LibTorch's CMake warns about CUDA details); show it on failure.
cmake -S "$root" -B "$build" -G Ninja -DCOLOSSAL_PYTHON="$python" "$@" >"$log" 2>&1 \
  || { cat "$log" >&2; echo "[build] configure failed (log above)" >&2; exit 1; }
grep -E '^-- colossal' "$log" || true
rm -f "$log"
cmake --build "$build" -j "$jobs"
