#!/usr/bin/env bash
# Configure stays one pass whatever PATH says.
#   configure_test.sh SOURCE_DIR PYTHON
#
# CMake that meets a CUDA compiler other than the one it cached deletes its cache and configures
# again; when the project itself names the other one, that never ends. It happened on CI, whose
# PATH reaches nvcc through /usr/local/bin while a shell with /usr/local/cuda/bin first did not
# show it (stops 40 and 41 never finished configuring). So: configure a fresh build directory
# with a bare PATH, then configure the same directory again with CUDA's bin first, and each must
# finish, once.
set -uo pipefail
src="$1" python="$2"
dir="$(mktemp -d "${TMPDIR:-/tmp}/colossal-configure-XXXXXX")"
trap 'rm -rf "$dir"' EXIT

configure() {  # NAME PATH
  local name="$1" path="$2" log="$dir/$1.log" rc=0
  env -i HOME="$HOME" PATH="$path" timeout 120 \
    cmake -S "$src" -B "$dir/build" -G Ninja -DCOLOSSAL_PYTHON="$python" >"$log" 2>&1 || rc=$?
  local passes
  passes=$(grep -c 'require your cache to be deleted' "$log")
  if ((rc != 0 || passes != 0)); then
    tail -n 40 "$log"
    echo "FAIL: configure with $name PATH ($path): exit $rc, cache deleted $passes time(s)" >&2
    exit 1
  fi
  echo "ok: configure with $name PATH: one pass ($(grep -E '^-- colossal: CUDA' "$log"))"
}

configure bare /usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
configure cuda-first /usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
