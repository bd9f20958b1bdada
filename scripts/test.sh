#!/usr/bin/env bash
# README command (b): set up, build, and run the whole test suite (CI runs exactly this).
# Extra arguments go to ctest, e.g.  scripts/test.sh -L unit
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
start=$(date +%s)
# The same steps as the container image: setup, build, the Python module installed.
bash "$root/scripts/install.sh"
built=$(date +%s)
build="${COLOSSAL_BUILD_DIR:-$root/build}"
cd "$build"
status=0
ctest --output-on-failure -j "${COLOSSAL_TEST_JOBS:-2}" "$@" || status=$?
end=$(date +%s)
echo "[test] setup+build $((built - start)) s, tests $((end - built)) s"
exit $status
