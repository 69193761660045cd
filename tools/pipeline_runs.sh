#!/usr/bin/env bash
# Runs a 2-rank pipeline (stage 05) for two steps under each schedule and several micro-batch
# counts, keeping each run's Chrome trace (every rank a track) and metrics, and measures the
# collectives (stage 04, ours and the built-in, 2 ranks). Writes OUT/index.jsonl and OUT/comm.json;
# notebooks/pipeline.ipynb and notebooks/collectives.ipynb read them.
#   bash tools/pipeline_runs.sh [build/release/bin/scalelab] [out/pipeline_runs]
set -euo pipefail
cli=${1:-build/release/bin/scalelab}
out=${2:-out/pipeline_runs}
mkdir -p "$out"
: > "$out/index.jsonl"
export OMPI_ALLOW_RUN_AS_ROOT=${OMPI_ALLOW_RUN_AS_ROOT:-1} OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=${OMPI_ALLOW_RUN_AS_ROOT_CONFIRM:-1}
# Four blocks wide enough that a micro-batch's compute outweighs sending it (2 sequences of 64).
shape=(--config tiny --vocab-size 256 --context 64 --channels 128 --layers 4 --heads 4)
p=2 rows=2
for schedule in afab 1f1b zb-h1 interleaved:2; do
  for m in 1 2 4 8; do
    if [ "$schedule" = interleaved:2 ] && [ $((m % p)) -ne 0 ]; then continue; fi
    name="pp${p}_${schedule/:/}_m$m"
    mpirun --oversubscribe -np "$p" "$cli" train "${shape[@]}" --steps 2 --batch $((m * rows)) --pp "$p" \
      --micro-batches "$m" --schedule "$schedule" --trace "$out/$name.trace.json" --metrics "$out/$name.jsonl" \
      > "$out/$name.log" 2>&1 || { cat "$out/$name.log"; exit 1; }
    printf '{"name": "%s", "pp": %d, "micro_batches": %d, "schedule": "%s", "trace": "%s.trace.json", "log": "%s.log"}\n' \
      "$name" "$p" "$m" "$schedule" "$name" "$name" >> "$out/index.jsonl"
  done
done
mpirun --oversubscribe -np 2 "$cli" bench comm --op all --impl both --max-bytes 4M --iters 5 --warmup 2 \
  --json "$out/comm.json" > "$out/comm.log" 2>&1 || { cat "$out/comm.log"; exit 1; }
echo "pipeline_runs: $(wc -l < "$out/index.jsonl") pipeline runs and the collectives in $out"
