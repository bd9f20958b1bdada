#!/usr/bin/env bash
# Two hosts on one machine: network namespaces cc-hostA and cc-hostB joined by a veth pair
# (10.231.0.1 <-> 10.231.0.2, addresses that exist only inside these namespaces). Each runs
# `colossal run --nnodes 2 --nproc_per_node 2`; the 4 ranks all-reduce across both hosts.
# Skipped (77) where namespaces cannot be made (netns_pair.sh says why).
set -u
COLOSSAL=${1:?usage: two_hosts_test.sh COLOSSAL_BIN DIST_DEMO_BIN}
DEMO=${2:?usage: two_hosts_test.sh COLOSSAL_BIN DIST_DEMO_BIN}
PORT=29531
source "$(dirname "$0")/netns_pair.sh"

run_node() {  # ns node_rank
  ip netns exec "$1" env COLOSSAL_DIST_TIMEOUT=60 "$COLOSSAL" run --nnodes 2 --node_rank "$2" \
    --nproc_per_node 2 --master_addr "$ADDR_A" --master_port "$PORT" --rdzv_timeout 60 \
    -- "$DEMO" >"$work/node$2.out" 2>"$work/node$2.err"
}
run_node "$A" 0 & pa=$!
run_node "$B" 1 & pb=$!
# Bounded: each launcher has its rendezvous and collective timeouts, and ctest a deadline.
wait $pa; ra=$?
wait $pb; rb=$?

for n in 0 1; do
  echo "===== node $n stdout"; cat "$work/node$n.out"
  echo "===== node $n stderr"; cat "$work/node$n.err"
done
[ "$ra" -eq 0 ] || { echo "FAIL: node 0 launcher exited $ra"; exit 1; }
[ "$rb" -eq 0 ] || { echo "FAIL: node 1 launcher exited $rb"; exit 1; }
grep -q "all-reduce verified on 4 ranks: PASS" "$work/node0.out" || { echo "FAIL: no PASS line"; exit 1; }
# Ranks 2 and 3 really ran in the second namespace, and the world all-reduce spanned both.
grep -q "\[rank 3\].*group 'world' (4 ranks: 0-3): got 10, expected 10 - ok" "$work/node1.err" \
  || { echo "FAIL: node 1's ranks did not join the world all-reduce"; exit 1; }
echo "PASS: 4 ranks on 2 hosts all-reduced across the veth link"
