#!/usr/bin/env bash
# The GPU measurement run (docs/gpu.md): on a machine with an NVIDIA GPU, build scalelab with CUDA,
# run the GPU tests, check the parallel stages' losses against the CPU's, benchmark every kernel against the device's measured ceilings, time the
# training step of the GPT-2 124M shape (fp32 and bf16), time the same model in PyTorch on the
# same GPU (eager and torch.compile), and write docs/results/gpu-<device>.md with the ratios.
#
#   bash tools/gpu_measure.sh [--deps DIR] [--out DIR] [--build DIR] [--steps N] [--only LIST]
#
#   --deps DIR   dependencies from tools/offline_deps.sh, unpacked or as .deb files (a machine with no
#                package registry; with them, OpenMPI for the multi-rank GPU tests)
#   --out DIR    logs and JSON (default out/gpu); the report goes to docs/results/ and to DIR
#   --only LIST  comma-separated subset of: env,build,test,parallel,kernels,step,torch,report (default all)
#
# Every step's output is kept in DIR; a failing step is reported and the later steps still run,
# so one broken benchmark does not cost the whole run. The exit status is non-zero if any failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

deps="" out=out/gpu build=build/gpu steps=20 only="env,build,test,parallel,kernels,step,torch,report"
while [[ $# -gt 0 ]]; do
  case $1 in
    --deps) deps=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --build) build=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    *) echo "gpu_measure: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
mkdir -p "$out"
wants() { [[ ",$only," == *",$1,"* ]]; }
failed=()
step() {  # step NAME COMMAND...: run, log to $out/NAME.log, remember a failure
  local name=$1; shift
  echo "== $name: $*"
  "$@" 2>&1 | tee "$out/$name.log"
  local rc=${PIPESTATUS[0]}
  [[ $rc -eq 0 ]] || { echo "== $name failed (exit $rc)"; failed+=("$name"); }
}

if [[ -n $deps ]]; then
  # Carried as .deb files (offline_deps.sh --download-only): unpack them here first.
  [[ -f $deps/env.sh ]] || bash tools/offline_deps.sh --unpack "$deps" || exit 1
  # shellcheck disable=SC1091
  source "$deps/env.sh"
fi
# mpirun as root (the GPU machines run commands as root) for the multi-rank GPU tests.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PATH=/usr/local/cuda/bin:$PATH
python=$(command -v python3)
bin=$build/bin

if wants env; then
  # shellcheck disable=SC2016  # ${CXX:-c++} is the inner shell's to expand
  step env bash -c 'nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv;
    nvcc --version | tail -2; cmake --version | head -1; ${CXX:-c++} --version | head -1; nproc'
fi
if wants build; then
  gen=(); command -v ninja >/dev/null && gen=(-G Ninja)
  step configure cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DSCALELAB_CUDA=ON \
    -DSCALELAB_BUILD_BENCH=OFF
  step build cmake --build "$build" -j "$(nproc)"
fi
if wants test; then
  step gpu_tests ctest --test-dir "$build" -L gpu --output-on-failure
fi
if wants parallel; then
  # Stages 04-07 composed on the GPU against the CPU, loss by loss (tools/gpu_parallel_check.sh).
  step parallel bash tools/gpu_parallel_check.sh --bin "$bin" --out "$out/parallel"
fi
if wants kernels; then
  step kernels "$bin/scalelab_gpu_bench" --json "$out/kernels.json"
fi
if wants step; then
  # MFU against the bf16 GEMM this device reached in the kernel step (0, i.e. no MFU, without it).
  peak=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["ceilings"]["bf16_gemm_tflops"])' \
         "$out/kernels.json" 2>/dev/null || echo 0)
  step train_step "$bin/scalelab_gpu_step_bench" --config gpt2 --precision all --steps "$steps" \
    --peak-tflops "$peak" --json "$out/step.json"
  # Stage 08: naive against flash attention at shorter contexts (memory and speed against T).
  for T in 256 512; do
    step "step_T$T" "$bin/scalelab_gpu_step_bench" --config gpt2 --precision bf16,bf16+flash --seq "$T" --steps 5 \
      --peak-tflops "$peak" --json "$out/step_T$T.json"
  done
fi
if wants torch; then
  step torch env PYTHONUNBUFFERED=1 "$python" tools/torch_gpu_bench.py --steps "$steps" --sdpa --json "$out/torch.json"
fi
if wants report; then
  step report "$python" tools/gpu_report.py --dir "$out" --docs docs/results
fi

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "gpu_measure: failed steps: ${failed[*]} (logs in $out/)"
  exit 1
fi
echo "gpu_measure: all steps passed (logs in $out/)"
