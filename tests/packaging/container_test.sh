#!/usr/bin/env bash
# The container, built and run (CTest packaging.container, registered with
# -DCOLOSSAL_CONTAINER_TEST=ON: it builds the whole image, 20+ minutes, beyond CI's budget).
#   1. the base: debian:12 from the local store, else pulled, else made from Debian's archive
#      with debootstrap (the registries this machine reaches are Debian's and PyPI);
#   2. `podman build` of the Dockerfile (the image runs scripts/install.sh, as CI does);
#   3. `podman run` of its default command (train_llama on 2 ranks) exits 0 having saved a model.
# What this machine needs to run containers, and why each flag is there:
#   --runtime runc   its cgroups are v1 with a v2 hierarchy beside (hybrid), which crun refuses;
#   --ulimit ...     raising RLIMIT_NOFILE/NPROC is not permitted in this VM: the defaults are lowered;
#   --network=host   the build reaches Debian's archive and PyPI as this machine does.
# The pip and ccache caches are mounted into the build (not into the image) to spare downloads
# and compiles. Exits 77 (skipped) naming what is missing where it cannot run.
# usage: container_test.sh SOURCE_DIR
set -uo pipefail
src=${1:?usage: container_test.sh SOURCE_DIR}
skip() { echo "SKIPPED: $*"; exit 77; }
fail() { echo "FAIL: $*"; exit 1; }
[ "$(id -u)" -eq 0 ] || skip "needs root (podman here runs rootful)"
command -v podman >/dev/null || skip "podman not installed (apt install podman runc debootstrap)"
command -v runc >/dev/null || skip "runc not installed (crun refuses this machine's hybrid cgroups)"
flags=(--runtime runc --network=host --ulimit nofile=1024:1024 --ulimit nproc=4096:4096)
image=localhost/colossal-cpp:test
cache=${COLOSSAL_CACHE:-$HOME/.cache/colossal-cpp}
mkdir -p "$cache/pip" "$cache/ccache"

if ! podman image exists docker.io/library/debian:12 && ! podman pull -q docker.io/library/debian:12 >/dev/null 2>&1; then
  command -v debootstrap >/dev/null || skip "no debian:12 image, no registry, and no debootstrap to make one"
  root=$(mktemp -d)
  echo "== debian:12 made from Debian's archive (debootstrap --variant=minbase bookworm)"
  debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >/dev/null || fail "debootstrap failed"
  tar -C "$root" -c . | podman import - docker.io/library/debian:12 >/dev/null || fail "podman import failed"
  rm -rf "$root"
fi

# This machine's TLS trust goes into the build (not the image): behind a proxy that re-signs
# TLS, pip in the image would otherwise refuse PyPI's certificate.
# (Mounted beside Debian's own bundle, not over it: the image's ca-certificates package rewrites
# that file when it is installed.)
trust=()
bundle=${PIP_CERT:-/etc/ssl/certs/ca-certificates.crt}
if [ -f "$bundle" ]; then
  conf=$(mktemp)
  printf '[global]\ncert = /run/host-ca.crt\n' >"$conf"
  trust+=(-v "$bundle:/run/host-ca.crt:ro" -v "$conf:/etc/pip.conf:ro")
fi

echo "== podman build"
start=$(date +%s)
podman build --format docker "${flags[@]}" "${trust[@]}" -v "$cache/pip:/root/.cache/colossal-cpp/pip" \
  -v "$cache/ccache:/root/.cache/colossal-cpp/ccache" -t "$image" "$src" || fail "podman build failed"
echo "built $image in $(( $(date +%s) - start )) s"

echo "== podman run (the image's default command)"
start=$(date +%s)
out=$(podman run --rm "${flags[@]}" "$image" 2>&1)
code=$?
echo "$out" | tail -15
[ $code -eq 0 ] || fail "the default command exited $code"
echo "$out" | grep -q "saved: " || fail "the default command saved no model"
echo "PASS: the image builds, and its default command trains and exits 0 ($(( $(date +%s) - start )) s)"
