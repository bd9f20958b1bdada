#!/usr/bin/env bash
# README command (a): set up, build what the main job needs, and run it on its built-in default:
#   1. train_llama on 2 ranks — the Jane Austen corpus (from Debian, fetched by setup), a
#      SentencePiece tokenizer, a ~5M-parameter LLaMA for 300 steps (a few minutes), held-out
#      perplexity, a checkpoint, and the Hugging Face directory out/llama/model;
#   2. infer_llama — text generated from that model through the paged-KV-cache engine.
# Only the libraries, `colossal`, train_llama and infer_llama are built (the tests, benchmarks and
# the Python module are scripts/test.sh's and scripts/install.sh's), so the first training step
# comes soon on a fresh machine. Extra arguments go to train_llama (e.g. --plugin zero2 --max_steps 1000).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
start=$(date +%s)
bash "$root/scripts/setup.sh" --main-job
COLOSSAL_BUILD_TARGETS="colossal train_llama infer_llama" bash "$root/scripts/build.sh"
echo "[quickstart] set up and built in $(($(date +%s) - start)) s; training starts" >&2
build="${COLOSSAL_BUILD_DIR:-$root/build}"
"$build/apps/colossal" run --nproc_per_node "${NPROC:-2}" -- "$build/apps/train_llama" --sample_tokens 0 "$@"
exec "$build/apps/infer_llama" --model out/llama/model --max_new_tokens 48 --seed 1 \
  --prompt "It is a truth universally acknowledged" --prompt "Elizabeth" --prompt "Mr. Darcy said"
