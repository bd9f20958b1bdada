#!/usr/bin/env bash
# The submission recipes of examples/ run to completion with the environment their scheduler
# gives, over two hosts (network namespaces, netns_pair.sh), and train exactly as `colossal run`
# with the same number of ranks:
#   * examples/slurm/*.sbatch, run as sbatch would (bash, with the allocation's SLURM_*
#     variables) with stand-ins for srun and scontrol (stand_ins/): srun starts the tasks of
#     node i in namespace i with the per-task SLURM variables;
#   * examples/kubernetes/*.yaml: each pod's container command from the manifest, started in its
#     namespace with the variables the operator sets (PyTorchJob: RANK, WORLD_SIZE, MASTER_ADDR,
#     MASTER_PORT per pod; Trainer v2's torch runtime: PET_NNODES, PET_NPROC_PER_NODE,
#     PET_NODE_RANK, PET_MASTER_ADDR, PET_MASTER_PORT per node), /data mapped to a directory.
set -u
APPS=${1:?usage: cluster_recipes_test.sh APPS_DIR PYTHON}
PYTHON=${2:?usage: cluster_recipes_test.sh APPS_DIR PYTHON}
HERE=$(cd "$(dirname "$0")" && pwd)
SOURCE=$(cd "$HERE/../../.." && pwd)
source "$HERE/netns_pair.sh"

fail() { echo "FAIL: $*"; for f in "$work"/*.log; do echo "===== $f"; tail -30 "$f"; done; exit 1; }
export OMP_NUM_THREADS=1 COLOSSAL_DIST_TIMEOUT=120
export PATH="$HERE/stand_ins:$APPS:$(dirname "$PYTHON"):$PATH"

cat >"$work/config.json" <<'JSON'
{"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
 "num_key_value_heads": 2, "max_position_embeddings": 256, "vocab_size": 600}
JSON
FLAGS=(--model_config "$work/config.json" --vocab_size 600 --batch_size 2 --max_length 64 --max_steps 3
       --log_interval 1 --eval_interval -1 --sample_tokens 0)
# The corpus and tokenizer made once, copied into each run's output (the cache the job would make).
train_llama --output "$work/prep" "${FLAGS[@]}" >"$work/prep.log" 2>&1 || fail "preparing the data failed"
prepare() { mkdir -p "$1"; for f in data cache tokenizer.model tokenizer.vocab; do cp -r "$work/prep/$f" "$1/"; done; }
losses() { grep -o "step [0-9]*/3 .*loss [0-9.]*" "$1" | sed -E 's/step ([0-9]+).* loss ([0-9.]+)/\1 \2/'; }

declare -A reference
expect_like_colossal_run() {  # name log world_size
  if [ -z "${reference[$3]:-}" ]; then
    prepare "$work/ref$3"
    colossal run --nproc_per_node "$3" -- train_llama --output "$work/ref$3" "${FLAGS[@]}" >"$work/ref$3.log" 2>&1 ||
      fail "colossal run on $3 ranks failed"
    reference[$3]=$(losses "$work/ref$3.log")
  fi
  local got
  got=$(losses "$2")
  [ "$(echo "$got" | wc -l)" -eq 3 ] || fail "$1: expected 3 step lines"
  [ "$got" = "${reference[$3]}" ] || fail "$1: losses $(echo $got) differ from colossal run's $(echo ${reference[$3]})"
  grep -q "dp $3" "$2" || fail "$1: not $3 data-parallel ranks"
  echo "ok: $1 ($3 ranks over two hosts) trains as colossal run: $(echo $got)"
}

# ---- SLURM: the sbatch scripts as sbatch runs them, on an allocation of the two hosts.
for recipe in torchrun srun; do
  script="$SOURCE/examples/slurm/$recipe.sbatch"
  nodes=$(sed -n 's/^#SBATCH --nodes=//p' "$script")
  per_node=$(sed -n 's/^#SBATCH --ntasks-per-node=//p' "$script")
  [ "$nodes" = 2 ] || fail "$script: expected #SBATCH --nodes=2, the test's two hosts"
  prepare "$work/slurm-$recipe"
  env SLURM_JOB_ID=4242 SLURM_NNODES="$nodes" SLURM_NTASKS_PER_NODE="$per_node" SLURM_JOB_NODELIST="$HOST_A,$HOST_B" \
      FAKE_SLURM_NETNS="$A $B" COLOSSAL_APPS="$APPS" OUTPUT="$work/slurm-$recipe" NPROC_PER_NODE=1 \
      timeout 300 bash "$script" "${FLAGS[@]}" >"$work/slurm-$recipe.log" 2>&1 || fail "$script exited $?"
  expect_like_colossal_run "examples/slurm/$recipe.sbatch" "$work/slurm-$recipe.log" $((nodes * per_node))
done

# ---- Kubernetes: each pod's command with the operator's variables.
pod_command() {  # manifest: the container command, /data mapped into $work/<dir>, one word per line
  "$PYTHON" - "$1" "$2" <<'PY'
import sys, yaml
doc = yaml.safe_load(open(sys.argv[1]))
if doc["kind"] == "PyTorchJob":
    command = doc["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["command"]
else:
    command = doc["spec"]["trainer"]["command"]
for word in command:
    print(word.replace("/data", sys.argv[2]))
PY
}
manifest_value() { "$PYTHON" -c "import sys, yaml; d = yaml.safe_load(open(sys.argv[1])); print(eval(sys.argv[2]))" "$1" "$2"; }

m="$SOURCE/examples/kubernetes/pytorchjob.yaml"
mapfile -t cmd < <(pod_command "$m" "$work/pytorchjob")
pods=$(manifest_value "$m" 'sum(r["replicas"] for r in d["spec"]["pytorchReplicaSpecs"].values())')
[ "$pods" = 2 ] || fail "$m: expected 2 pods"
prepare "$work/pytorchjob/llama"
ip netns exec "$A" env RANK=0 WORLD_SIZE=2 MASTER_ADDR="$HOST_A" MASTER_PORT=23456 PYTHONUNBUFFERED=0 \
  timeout 300 "${cmd[@]}" "${FLAGS[@]}" >"$work/pytorchjob-master.log" 2>&1 & pm=$!
ip netns exec "$B" env RANK=1 WORLD_SIZE=2 MASTER_ADDR="$HOST_A" MASTER_PORT=23456 PYTHONUNBUFFERED=0 \
  timeout 300 "${cmd[@]}" "${FLAGS[@]}" >"$work/pytorchjob-worker.log" 2>&1 & pw=$!
wait $pm || fail "$m: the master pod exited $?"
wait $pw || fail "$m: the worker pod exited $?"
expect_like_colossal_run "examples/kubernetes/pytorchjob.yaml" "$work/pytorchjob-master.log" 2

m="$SOURCE/examples/kubernetes/trainjob.yaml"
mapfile -t cmd < <(pod_command "$m" "$work/trainjob")
nodes=$(manifest_value "$m" 'd["spec"]["trainer"]["numNodes"]')
per_node=$(manifest_value "$m" 'd["spec"]["trainer"]["numProcPerNode"]')
[ "$nodes" = 2 ] || fail "$m: expected numNodes 2"
prepare "$work/trainjob/llama"
for i in 0 1; do
  ns=$A; [ $i = 1 ] && ns=$B
  ip netns exec "$ns" env PET_NNODES="$nodes" PET_NPROC_PER_NODE="$per_node" PET_NODE_RANK=$i \
    PET_MASTER_ADDR="$HOST_A" PET_MASTER_PORT=29400 timeout 300 "${cmd[@]}" "${FLAGS[@]}" \
    >"$work/trainjob-node$i.log" 2>&1 &
  pids[$i]=$!
done
wait ${pids[0]} || fail "$m: node 0 exited $?"
wait ${pids[1]} || fail "$m: node 1 exited $?"
expect_like_colossal_run "examples/kubernetes/trainjob.yaml" "$work/trainjob-node0.log" $((nodes * per_node))
echo "PASS: the SLURM and Kubernetes recipes train as colossal run over two hosts"
