#!/usr/bin/env bash
# README command (a): set up, build, and run the main job on its built-in default:
# train_llama on 2 ranks — the Jane Austen corpus (from Debian, fetched by setup), a SentencePiece
# tokenizer, a ~5M-parameter LLaMA for 300 steps (a few minutes), a held-out perplexity, a
# checkpoint, the Hugging Face model directory out/llama/model, and a generated sample.
# Extra arguments go to train_llama (e.g. --plugin zero2 --max_steps 1000).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bash "$root/scripts/setup.sh"
bash "$root/scripts/build.sh"
build="${COLOSSAL_BUILD_DIR:-$root/build}"
exec "$build/apps/colossal" run --nproc_per_node "${NPROC:-2}" -- "$build/apps/train_llama" "$@"
