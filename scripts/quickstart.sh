#!/usr/bin/env bash
# README command (a): set up, build, and run the main job on its built-in default:
#   1. train_llama on 2 ranks — the Jane Austen corpus (from Debian, fetched by setup), a
#      SentencePiece tokenizer, a ~5M-parameter LLaMA for 300 steps (a few minutes), held-out
#      perplexity, a checkpoint, and the Hugging Face directory out/llama/model;
#   2. infer_llama — text generated from that model through the paged-KV-cache engine.
# Extra arguments go to train_llama (e.g. --plugin zero2 --max_steps 1000).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# setup, build, and the Python module installed (the same steps as CI and the container)
bash "$root/scripts/install.sh"
build="${COLOSSAL_BUILD_DIR:-$root/build}"
"$build/apps/colossal" run --nproc_per_node "${NPROC:-2}" -- "$build/apps/train_llama" --sample_tokens 0 "$@"
exec "$build/apps/infer_llama" --model out/llama/model --max_new_tokens 48 --seed 1 \
  --prompt "It is a truth universally acknowledged" --prompt "Elizabeth" --prompt "Mr. Darcy said"
