#!/usr/bin/env bash
# README command (a): set up, build, and run the main job on its built-in default.
# For now the main job is a 4-rank distributed check: it prints the process-group mesh and
# verifies all-reduces on the world and along each mesh axis (train_llama replaces it later).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
build="${COLOSSAL_BUILD_DIR:-$root/build}"
exec "$build/apps/colossal" run --nproc_per_node "${NPROC:-4}" -- "$build/apps/dist_demo" "$@"
