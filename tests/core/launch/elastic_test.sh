#!/usr/bin/env bash
# Elastic membership across two hosts (network namespaces, netns_pair.sh): each host runs
# `colossal run --nnodes 1:2` with train_llama; host B is killed (every process in its namespace,
# -9) once the pair has written a checkpoint. Host A's launcher must form a round of one node,
# and its rank resume from the newest checkpoint at world size 1, with losses equal to one plain
# process resumed from that checkpoint. Prints the time from the kill to training again.
set -u
COLOSSAL=${1:?usage: elastic_test.sh COLOSSAL_BIN TRAIN_LLAMA_BIN}
TRAIN=${2:?usage: elastic_test.sh COLOSSAL_BIN TRAIN_LLAMA_BIN}
PORT=29541
source "$(dirname "$0")/netns_pair.sh"

fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "===== $f"; tail -40 "$f"; done; exit 1; }
[ -x "$TRAIN" ] || skip "no $TRAIN"

cat >"$work/config.json" <<'JSON'
{"hidden_size": 128, "intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4,
 "num_key_value_heads": 2, "max_position_embeddings": 256, "vocab_size": 600}
JSON
STEPS=120
MODEL=(--model_config "$work/config.json" --vocab_size 600 --batch_size 2 --max_length 128 --eval_interval -1
       --sample_tokens 0 --log_interval 1)
FLAGS=("${MODEL[@]}" --max_steps $STEPS --save_interval 10 --keep_checkpoints 0)
export OMP_NUM_THREADS=1 COLOSSAL_DEAD_AFTER=3
# The corpus and tokenizer made once beforehand (the same cache the job would make), so the
# rounds start training at once.
"$TRAIN" --output "$work/prep" "${MODEL[@]}" --max_steps 1 >"$work/prep.log" 2>&1 ||
  fail "preparing the data failed"
mkdir -p "$work/out"
for f in data cache tokenizer.model tokenizer.vocab; do cp -r "$work/prep/$f" "$work/out/"; done

run_node() {  # ns name
  ip netns exec "$1" "$COLOSSAL" run --nnodes 1:2 --nproc_per_node 1 --rdzv_endpoint "$ADDR_A:$PORT" \
    --rdzv_conf join_timeout=60,last_call_timeout=3 --max_restarts 2 -- \
    "$TRAIN" --output "$work/out" --log_file "$work/elastic.jsonl" "${FLAGS[@]}" >"$work/$2.log" 2>&1
}
run_node "$A" nodeA & pa=$!
sleep 0.5  # A hosts the store: let it bind first (B would retry its connection anyway)
run_node "$B" nodeB & pb=$!

# Kill host B once the two-node round has saved a checkpoint.
for _ in $(seq 1 1200); do
  [ -d "$work/out/checkpoints/step-20" ] && break
  kill -0 $pa 2>/dev/null || break
  sleep 0.05
done
[ -d "$work/out/checkpoints/step-20" ] || fail "the two-node round wrote no step-20 checkpoint"
grep -q "elastic round 0: 2 node(s)" "$work/nodeA.log" || fail "round 0 did not have both nodes"
ip netns pids "$B" | xargs -r kill -9
killed=$(date +%s.%N)
wait $pb 2>/dev/null
for _ in $(seq 1 1200); do
  grep -q "^\[rank 0\] resumed:" "$work/nodeA.log" && grep -q "elastic round [1-9]" "$work/nodeA.log" && break
  kill -0 $pa 2>/dev/null || break
  sleep 0.05
done
back=$(date +%s.%N)
wait $pa; ra=$?
[ "$ra" -eq 0 ] || fail "host A's launcher exited $ra"
grep -q "elastic round [1-9]: 1 node(s) of 1:2" "$work/nodeA.log" || fail "no one-node round after host B died"
resumed=$(grep -o "resumed: [^ ]*step-[0-9]*" "$work/nodeA.log" | tail -1 | sed 's/.*step-//')
[ -n "$resumed" ] || fail "host A's rank did not resume from a checkpoint"
echo "host B killed; host A resumed from step-$resumed at world size 1: $(awk -v a="$back" -v b="$killed" 'BEGIN { printf "%.1f", a - b }') s from the kill to training again"
grep "^colossal run:" "$work/nodeA.log"

# The reference: one process resumed from the same checkpoint.
"$TRAIN" --output "$work/ref" --save_dir "$work/ref/checkpoints" --load_checkpoint "$work/out/checkpoints/step-$resumed" \
  --log_file "$work/ref.jsonl" "${FLAGS[@]}" >"$work/ref.log" 2>&1 || fail "the reference run failed"
# The last line per step (a step of the lost round may repeat), from the resumed step on.
losses() { awk -v from="$resumed" '/"loss"/ {
             match($0, /"step": ?[0-9]+/); s = substr($0, RSTART, RLENGTH); sub(/.*: ?/, "", s)
             match($0, /"loss": ?[-0-9.e+]+/); l = substr($0, RSTART, RLENGTH); sub(/.*: ?/, "", l)
             if (s + 0 > from + 0) v[s + 0] = l }
           END { for (s in v) print s, v[s] }' "$1" | sort -n; }
losses "$work/elastic.jsonl" >"$work/elastic.losses"
losses "$work/ref.jsonl" >"$work/ref.losses"
n=$(wc -l <"$work/ref.losses")
[ "$n" -eq $((STEPS - resumed)) ] || fail "the reference logged $n steps after $resumed, expected $((STEPS - resumed))"
diff "$work/elastic.losses" "$work/ref.losses" >/dev/null || { diff "$work/elastic.losses" "$work/ref.losses" | head;
  fail "the elastic run's losses after step $resumed differ from one process resumed from that checkpoint"; }
echo "PASS: $n steps after step-$resumed equal one process resumed from that checkpoint"
