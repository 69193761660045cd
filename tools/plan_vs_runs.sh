#!/usr/bin/env bash
# Runs one short training step per layout (data parallel with ZeRO 0-3 on 1-4 ranks, tensor
# parallel on 2 and 4, a pipeline of 2 under three schedules, flash attention on three of them,
# composed layouts on 4 and 8 ranks) and asks the planner about the same
# layout; writes OUT/index.jsonl (one line per run) with the metrics and plan files it made. The
# notebooks zero.ipynb and planner.ipynb read it, and the planner's view of GPT-2 1.5B on 16 H100s.
#   bash tools/plan_vs_runs.sh [build/release/bin/scalelab] [out/plan_vs_runs]
set -euo pipefail
cli=${1:-build/release/bin/scalelab}
out=${2:-out/plan_vs_runs}
mkdir -p "$out"
: > "$out/index.jsonl"
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
# The tiny model with a byte vocabulary (the default corpus is text), 2 sequences per micro-batch.
shape=(--config tiny --vocab-size 256)
rows=2

# run NAME RANKS DP TP PP ZERO M SCHEDULE SP [ATTENTION]
run() {
  local name=$1 ranks=$2 dp=$3 tp=$4 pp=$5 zero=$6 m=$7 schedule=$8 sp=$9 attention=${10:-naive}
  local batch=$((dp * m * rows))
  local flags=(--steps 1 --batch "$batch" --micro-batches "$m" --tp "$tp" --pp "$pp" --attention "$attention")
  [ "$zero" -gt 0 ] && flags+=(--zero "$zero")
  [ "$pp" -gt 1 ] && flags+=(--schedule "$schedule")
  [ "$sp" = 1 ] && flags+=(--sequence-parallel)
  mpirun --oversubscribe -np "$ranks" "$cli" train "${shape[@]}" "${flags[@]}" \
    --metrics "$out/$name.jsonl" > "$out/$name.log" 2>&1 || { cat "$out/$name.log"; exit 1; }
  local restrict=(--dp "$dp" --tp "$tp" --pp "$pp" --zero "$zero" --micro-batches "$m" --checkpoint none)
  [ "$pp" -gt 1 ] && restrict+=(--schedule "$schedule")
  "$cli" plan --model tiny --vocab-size 256 --nodes 1 --gpus-per-node "$ranks" --batch "$batch" --precision fp32 --attention "$attention" \
    "${restrict[@]}" --json "$out/$name.plan.json" > /dev/null
  printf '{"name": "%s", "ranks": %d, "dp": %d, "tp": %d, "pp": %d, "zero": %d, "micro_batches": %d, "schedule": "%s", "sequence_parallel": %s, "attention": "%s", "metrics": "%s.jsonl", "plan": "%s.plan.json"}\n' \
    "$name" "$ranks" "$dp" "$tp" "$pp" "$zero" "$m" "$([ "$pp" -gt 1 ] && echo "$schedule" || echo none)" \
    "$([ "$sp" = 1 ] && echo true || echo false)" "$attention" "$name" "$name" >> "$out/index.jsonl"
}

for d in 1 2 3 4; do
  for z in 0 1 2 3; do run "zero${z}_d${d}" "$d" "$d" 1 1 "$z" 1 1f1b 0; done
done
for t in 2 4; do
  for sp in 0 1; do run "tp${t}_sp${sp}" "$t" 1 "$t" 1 0 1 1f1b "$sp"; done
done
for s in afab 1f1b zb-h1; do run "pp2_$s" 2 1 1 2 0 4 "$s" 0; done
# Stage 08: flash attention saves B NH T per block instead of B NH T^2 (one rank, ZeRO-2 on 2, a pipeline).
run flash_d1 1 1 1 1 0 1 1f1b 0 flash
run flash_zero2_d2 2 2 1 1 2 1 1f1b 0 flash
run flash_pp2_1f1b 2 1 1 2 0 4 1f1b 0 flash
# Composed: ZeRO-1 inside pp and tp, tp x pp, and dp x tp x pp with ZeRO-1 and sequence parallelism.
run dp2_pp2_zero1 4 2 1 2 1 4 1f1b 0
run dp2_tp2_zero1 4 2 2 1 1 1 1f1b 0
run tp2_pp2 4 1 2 2 0 2 1f1b 0
run dp2_tp2_pp2_zero1_sp 8 2 2 2 1 2 1f1b 1
# The planner on a published shape: GPT-2 1.5B on two nodes of 8 H100s.
"$cli" plan --model gpt2-1.5b --nodes 2 --batch 512 --json "$out/gpt2-1.5b.plan.json" > "$out/gpt2-1.5b.plan.txt"
echo "plan_vs_runs: $(wc -l < "$out/index.jsonl") runs in $out"
