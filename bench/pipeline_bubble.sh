#!/usr/bin/env bash
# Stage 05's measurement: the bubble and each rank's activation peak of real pipeline runs, beside
# the schedule run on paper with the measured action costs and the textbook formula.
#   bash bench/pipeline_bubble.sh [ranks] > docs/results/pipeline-bubble.md
# Runs `scalelab train --pp P` under mpirun for every schedule and m = 1, 2, 4, 8 (interleaved:2
# where m is a multiple of P), one BLAS thread per rank. Meaningful only with at least as many
# free cores as ranks: an oversubscribed rank waits for a core, which the timeline counts as bubble.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=${SCALELAB:-$root/build/release/bin/scalelab}
p=${1:-2}
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "# Pipeline bubble and activation peaks, measured"
echo
echo "\`bash bench/pipeline_bubble.sh $p\` on $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p')), $(date -u +%F)."
echo "Config mini (C=256, L=4, T=128), batch 16, $p pipeline ranks, one BLAS thread each; the last of 4 steps."
echo "Bubble = idle share of the ranks' time (the (p-1)/(m+p-1) convention). 'measured': the ranks' timeline;"
echo "'on paper': the schedule simulated with the step's measured median F, B (and W) costs; 'formula': the textbook value."
echo
echo "| schedule | m | measured | on paper | formula | F ms | B ms | activation peak per rank, MiB (in flight, formula) |"
echo "|---|---|---|---|---|---|---|---|"
for schedule in afab 1f1b interleaved:2 zb-h1; do
  for m in 1 2 4 8; do
    if [[ $schedule == interleaved:* ]] && (( m % p != 0 )); then continue; fi
    out=$(mpirun --oversubscribe -np "$p" "$bin" train --config mini --steps 4 --batch 16 --seq-len 128 --threads 1 \
      --pp "$p" --micro-batches "$m" --schedule "$schedule" 2>&1) || { echo "$out" >&2; exit 1; }
    bubble=$(grep "pipeline bubble" <<< "$out")
    acts=$(grep "activations per pipeline rank" <<< "$out" | sed 's/activations per pipeline rank, peak: //')
    measured=$(sed -n 's/.*measured \([0-9.]*\) on.*/\1/p' <<< "$bubble")
    paper=$(sed -n 's/.*timeline; \([0-9.]*\) for.*/\1/p' <<< "$bubble")
    formula=$(sed -n 's/.* = \([0-9.]*\)$/\1/p' <<< "$bubble")
    f=$(sed -n 's/.*(F \([0-9.]*\) ms.*/\1/p' <<< "$bubble")
    b=$(sed -n 's/.* B \([0-9.]*\) ms.*/\1/p' <<< "$bubble")
    acts=$(sed 's/ micro-batches in flight, formula /\//g; s/rank [0-9]* //g; s/ MiB//g' <<< "$acts")
    echo "| $schedule | $m | $measured | $paper | $formula | $f | $b | $acts |"
  done
done
