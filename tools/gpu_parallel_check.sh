#!/usr/bin/env bash
# The parallel stages on a GPU against the same runs on the CPU (docs/gpu.md): each layout trains
# a small model for a few steps with --device cpu and with --device cuda (every rank sharing the
# machine's GPUs, by local rank), in fp32 and bf16, and every step's loss must agree: 1e-4
# relative in fp32 (cuBLAS's and the reductions' summation orders over a few AdamW steps), 2e-2
# in bf16. The runs' output (the memory tables, the GPU memory of the shards and chunks, the
# ledgers) stays in OUT for the results page.
#
#   bash tools/gpu_parallel_check.sh [--bin DIR] [--out DIR] [--only NAME,...] [--device D]
#                                    [--backend B] [--emulated] [--steps N]
#
#   --device D   the device checked against the CPU (default cuda); `--device cpu` checks the
#                script itself on any machine (the test suite's tools.gpu_parallel_check)
#   --backend B  the checked runs' --backend for every layout (e.g. nccl: GPU to GPU)
#   --emulated   DIR's scalelab is the emulated one (build/<preset>/emulated/bin: CPU twins for the
#                kernels, the CUDA runtime and NCCL emulated, tests/simt/), with 8 devices: the
#                test suite's tools.gpu_parallel_check_emulated, with --backend nccl
#   --steps N    training steps of each run (default 4; at least 2, so that an update is checked:
#                the loss of step 1 comes before any); the sanitizer build's test runs 2
#
# Needs mpirun (OpenMPI) for the layouts of several ranks, and a layout over NCCL one GPU per
# rank; without them those layouts are reported skipped.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
bin=build/gpu/bin out=out/gpu/parallel only="" checked=cuda backend="" emulated=0 steps=4
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    --device) checked=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --emulated) emulated=1; shift ;;
    --steps) steps=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "gpu_parallel_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if ! [[ $steps =~ ^[0-9]+$ ]] || [[ $steps -lt 2 ]]; then
  echo "gpu_parallel_check: --steps is '$steps'; give 2 or more (step 1's loss comes before any update)" >&2
  exit 2
fi
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# name | ranks | flags (a small model: mini's width, 2 layers, 4 for pipelines) | flags of the
# checked device's run only | GPUs it needs (NCCL wants one per rank; the rest share the GPUs)
layouts=(
  "ddp2|2|--ddp bucketed --layers 2||1"
  "zero2|2|--zero 2 --layers 2||1"
  "tp2|2|--tp 2 --layers 2||1"
  "tp2-sp|2|--tp 2 --sequence-parallel --layers 2||1"
  "pp2|2|--pp 2 --micro-batches 4 --layers 4||1"
  "pp2-interleaved|2|--pp 2 --micro-batches 4 --schedule interleaved:2 --layers 4||1"
  "tp2-pp2|4|--tp 2 --pp 2 --micro-batches 4 --layers 4||1"
  "dp2-tp2-pp2-zero1-sp|8|--dp 2 --tp 2 --pp 2 --zero 1 --sequence-parallel --micro-batches 2 --layers 4||1"
  # Stage 08's flash attention and stage 02's checkpointing inside the parallel layouts.
  "zero3-flash|2|--zero 3 --attention flash --layers 2||1"
  "dp2-tp2-pp2-zero1-sp-flash|8|--dp 2 --tp 2 --pp 2 --zero 1 --sequence-parallel --micro-batches 2 --layers 4 --attention flash||1"
  "dp2-tp2-pp2-zero1-ckpt|8|--dp 2 --tp 2 --pp 2 --zero 1 --micro-batches 2 --layers 4 --checkpoint sqrt||1"
  # The pipeline's messages over NCCL, GPU to GPU, with the lists repaired for NCCL's rules.
  "pp2-nccl-interleaved|2|--pp 2 --micro-batches 4 --schedule interleaved:2 --layers 4|--backend nccl|2"
)
gpus=0
if [[ $emulated == 1 ]]; then
  export SCALELAB_EMULATED_DEVICES=8 gpus=8
elif [[ $checked != cpu ]]; then
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
fi
# One validation batch at the end, not four: only the training losses are compared, and the
# validation's forward passes were a third of each run's steps.
common=(train --config mini --steps "$steps" --batch 8 --seq-len 64 --seed 5 --val-batches 1)
failed=() skipped=()
for entry in "${layouts[@]}"; do
  IFS='|' read -r name ranks flags device_flags needs <<< "$entry"
  [[ $backend != nccl ]] || needs=$ranks  # NCCL takes one GPU per rank
  [[ -z $only || ",$only," == *",$name,"* ]] || continue
  if ! command -v mpirun >/dev/null; then
    skipped+=("$name (no mpirun)"); continue
  fi
  if [[ $checked != cpu && $gpus -lt $needs ]]; then
    skipped+=("$name (needs $needs GPUs)"); continue
  fi
  [[ $checked != cpu ]] || device_flags=""  # the script checked against itself: the CPU's flags only
  [[ -z $backend || $checked == cpu || $device_flags == *--backend* ]] || device_flags="$device_flags --backend $backend"
  for precision in fp32 bf16; do
    tag=$name-$precision
    for side in want got; do
      device=cpu extra=""; [[ $side == want ]] || { device=$checked; extra=$device_flags; }
      # shellcheck disable=SC2086  # flags are words
      mpirun -np "$ranks" --oversubscribe "$bin/scalelab" "${common[@]}" $flags $extra --precision "$precision" \
        --device "$device" --metrics "$out/$tag-$side.jsonl" > "$out/$tag-$side.log" 2>&1 ||
        { echo "== $tag: the $device run failed (log: $out/$tag-$side.log)"; failed+=("$tag-$device"); continue 2; }
    done
    tol=1e-4; [[ $precision == fp32 ]] || tol=2e-2
    if python3 - "$out/$tag-want.jsonl" "$out/$tag-got.jsonl" "$tol" "$tag" "$checked" <<'EOF_PY'; then
import json, sys
cpu, gpu = ([json.loads(line)["loss"] for line in open(path)] for path in sys.argv[1:3])
tol, tag, device = float(sys.argv[3]), sys.argv[4], sys.argv[5]
worst = max(abs(g - c) / abs(c) for c, g in zip(cpu, gpu)) if cpu and len(cpu) == len(gpu) else float("inf")
print(f"== {tag}: {len(gpu)} steps, losses cpu {[round(x, 5) for x in cpu]} {device} {[round(x, 5) for x in gpu]}, "
      f"worst relative difference {worst:.2e} (tolerance {tol:g})")
sys.exit(0 if worst <= tol else 1)
EOF_PY
      :
    else
      failed+=("$tag")
    fi
  done
done
[[ ${#skipped[@]} -eq 0 ]] || echo "gpu_parallel_check: skipped ${skipped[*]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "gpu_parallel_check: failed: ${failed[*]} (logs in $out/)"
  exit 1
fi
echo "gpu_parallel_check: every layout's losses on $checked agree with the CPU's (logs in $out/)"
