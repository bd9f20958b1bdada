#!/usr/bin/env bash
# README command (b): set up, build, and run the whole test suite (CI runs exactly this).
# Extra arguments go to ctest, e.g.  scripts/test.sh -L unit
#
# Each stage says when it starts and how long it took on stderr, and the end says which tests
# failed, so a run that is cut off (a CI deadline) or shows only stderr still tells where it was.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
start=$(date +%s)
stage() { printf '[test] %s at %s (+%d s)\n' "$1" "$(date -u +%H:%M:%S)" "$(($(date +%s) - start))" >&2; }

# The same steps as the container image: setup, build, the Python module installed.
stage "setup, build and install: started"
bash "$root/scripts/install.sh"
built=$(date +%s)
stage "setup, build and install: done"

build="${COLOSSAL_BUILD_DIR:-$root/build}"
cd "$build"
status=0
stage "ctest: started"
bash "$root/scripts/heartbeat.sh" ctest '/([a-z]+_tests|python[0-9.]*|train_[a-z]+|infer_llama|colossal|bench_[a-z]+)$' &
beat=$!
trap 'kill "$beat" 2>/dev/null || true' EXIT
ctest --output-on-failure -j "${COLOSSAL_TEST_JOBS:-2}" "$@" || status=$?
kill "$beat" 2>/dev/null || true
end=$(date +%s)
stage "ctest: done (exit $status)"
if ((status)) && [ -s Testing/Temporary/LastTestsFailed.log ]; then
  echo "[test] failed:" $(cut -d: -f2 Testing/Temporary/LastTestsFailed.log) >&2
fi
summary="[test] setup+build $((built - start)) s, tests $((end - built)) s"
# Both streams, written in turn: `tee /dev/stderr` would reopen (and truncate) a stderr file.
echo "$summary"
echo "$summary" >&2
exit $status
