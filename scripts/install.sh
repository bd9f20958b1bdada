#!/usr/bin/env bash
# Everything a machine needs to use colossal-cpp, in order: the setup (Debian packages, the torch
# environment), the build (./build, or $COLOSSAL_BUILD_DIR), and the `colossal` Python module
# installed into the project's python (`pip install .`, reusing the build: it links and copies).
# CI (scripts/test.sh) and the container image (Dockerfile) run exactly this script.
# Extra arguments go to CMake's configure step, as with scripts/build.sh.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${COLOSSAL_BUILD_DIR:-$root/build}"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh" "$@"
python="$(bash "$root/scripts/setup.sh" --python)"
# --no-index: nothing here needs the network (and a hanging index must not stall CI).
# No build isolation: scikit-build-core is in the environment already (setup.sh), and the module
# must be built against this environment's torch. --no-deps: torch is there, pinned by setup.sh.
"$python" -m pip install -q --no-index --disable-pip-version-check --no-build-isolation --no-deps --config-settings=build-dir="$build" "$root"
"$python" -c 'import colossal; print("[install] colossal module:", colossal.__file__)'
