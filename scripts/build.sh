#!/usr/bin/env bash
# Configure and build into ./build (or $COLOSSAL_BUILD_DIR). Extra arguments go to CMake's
# configure step, e.g.  scripts/build.sh -DCOLOSSAL_WITH_CUDA=ON
# COLOSSAL_BUILD_TARGETS="colossal train_llama" builds only those targets (and what they need).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${COLOSSAL_BUILD_DIR:-$root/build}"
# Parallel compiles: the CPUs this process may use (nproc, or a cgroup CPU quota when one is
# set: nproc does not see quotas), and no more than one per 3 GiB of memory (a LibTorch unity
# file takes up to ~3 GiB in cc1plus; more at once would swap).
default_jobs() {
  local n q p mem_kb
  n=$(nproc)
  if read -r q p 2>/dev/null </sys/fs/cgroup/cpu.max && [ "$q" != max ]; then
    q=$(((q + p - 1) / p)); ((q < n)) && n=$q
  fi
  mem_kb=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
  if [ -n "$mem_kb" ]; then
    local by_mem=$((mem_kb / (3 * 1024 * 1024)))
    ((by_mem < 1)) && by_mem=1
    ((by_mem < n)) && n=$by_mem
  fi
  echo "$n"
}
jobs="${COLOSSAL_JOBS:-$(default_jobs)}"
python="$(bash "$root/scripts/setup.sh" --python)"
log="$(mktemp)"
# The configure output is long (LibTorch's CMake warns about CUDA details); show it on failure.
# A configure takes seconds; one still running after 10 minutes is stuck (a probe waiting on
# something), and says so with its log instead of holding a CI run until its deadline.
configure_timeout="${COLOSSAL_CONFIGURE_TIMEOUT:-600}"
status=0
timeout "$configure_timeout" \
  cmake -S "$root" -B "$build" -G Ninja -DCOLOSSAL_PYTHON="$python" "$@" >"$log" 2>&1 || status=$?
if ((status)); then
  cat "$log" >&2
  if ((status == 124)); then
    echo "[build] configure did not finish in $configure_timeout s (log above)" >&2
    # CMake that meets a changed compiler deletes its cache and configures again; if the change
    # comes from the project itself, it never ends. Name the variable.
    if (($(grep -c 'require your cache to be deleted' "$log") > 1)); then
      echo "[build] CMake re-ran configure in a loop; it kept changing:" >&2
      grep -A1 'following variables have changed' "$log" | grep -v -e 'following variables' -e '^--$' | sort -u >&2
    fi
  else
    echo "[build] configure failed (log above)" >&2
  fi
  exit 1
fi
grep -E '^-- colossal' "$log" || true
rm -f "$log"
build_start=$(date +%s)
bash "$root/scripts/heartbeat.sh" build '/(cc1plus|cicc|ptxas|nvcc|ld|collect2)$' &
beat=$!
trap 'kill "$beat" 2>/dev/null || true' EXIT
targets=()
for t in ${COLOSSAL_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}"
echo "[build] built${COLOSSAL_BUILD_TARGETS:+ ($COLOSSAL_BUILD_TARGETS)} in $(($(date +%s) - build_start)) s with $jobs jobs" >&2
