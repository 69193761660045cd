#!/usr/bin/env bash
# Our CPU training step against PyTorch's, side by side on this machine: builds bench/bench_step,
# then runs it and the PyTorch peer (bench/peers/torch_gpt_bench.py, the same GPT shape,
# forward + backward + AdamW) one after the other, single-threaded, for several alternating
# rounds, prints a table with the ratio and writes it to docs/results/cpu.md.
#
#   bash tools/bench_cpu.sh                      # mini shape, 3 rounds of 10 steps each
#   bash tools/bench_cpu.sh --rounds 5 --steps 10
#   bash tools/bench_cpu.sh --march native       # also a build with -march=native (repeatable)
#   bash tools/bench_cpu.sh --blas openblas      # also a build with SCALELAB_BLAS=openblas (repeatable)
#   bash tools/bench_cpu.sh --peer-blas-pool     # also PyTorch without OPENBLAS_NUM_THREADS=1
#   bash tools/bench_cpu.sh --no-write           # print only
# Shape flags (--V --T --C --L --H --B) go to both programs; the defaults are the mini config.
#
# Single-threaded means one thread for everything: BLAS pinned to 1 thread in both programs
# (OPENBLAS_NUM_THREADS=1, and OMP_NUM_THREADS=1, which OpenBLAS and oneDNN also read;
# BLIS_NUM_THREADS=1). PyTorch's
# --threads 1 alone leaves OpenBLAS's own thread pool running, one thread per core;
# --peer-blas-pool adds that run as an extra row, which is not single-threaded.
# Each program reports the median step over --steps steps after 2 warm-up steps. Two numbers per
# step: wall-clock time (what the peer reports, tokens/s) and the process's CPU time, which on a
# shared machine is the steadier of the two; the peer's CPU time is read through a wrapper that
# records time.process_time() beside each of its own time.perf_counter() calls.
#
# The default build is the portable one (no -march: SSE2 code for our own loops; the BLAS picks
# its kernels at run time either way) with the default matrix-product library (SCALELAB_BLAS).
# An --march X build adds -march=X -ffp-contract=off: wider SIMD for our loops, and no fused
# multiply-add contraction, so it computes the same bits. A --blas LIB build is the portable one
# with SCALELAB_BLAS=LIB (onednn, openblas or blis): the same step with another sgemm.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"

rounds=3 steps=10 write=1 blas_pool=0
marches=() blases=()
peer="$repo/bench/peers/torch_gpt_bench.py"
python=/usr/bin/python3  # Debian's interpreter, the one with torch
declare -A mini=([V]=256 [T]=256 [C]=256 [L]=4 [H]=4 [B]=16) shape
for k in "${!mini[@]}"; do shape[$k]="${mini[$k]}"; done
usage() { sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit "${1:-0}"; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rounds) rounds="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --march) marches+=("$2"); shift 2 ;;
    --blas) blases+=("$2"); shift 2 ;;
    --peer) peer="$2"; shift 2 ;;
    --no-write) write=0; shift ;;
    --peer-blas-pool) blas_pool=1; shift ;;
    --V|--T|--C|--L|--H|--B) shape[${1#--}]="$2"; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "bench_cpu.sh: unknown argument '$1'; see --help" >&2; exit 2 ;;
  esac
done
[[ "$rounds" -ge 1 && "$steps" -ge 1 ]] || { echo "bench_cpu.sh: --rounds and --steps must be at least 1" >&2; exit 2; }
[[ -f "$peer" ]] || { echo "bench_cpu.sh: the PyTorch peer '$peer' is missing; pass --peer PATH/torch_gpt_bench.py" >&2; exit 2; }
"$python" -c "import torch" 2>/dev/null || { echo "bench_cpu.sh: $python cannot import torch; install python3-torch (Debian)" >&2; exit 2; }

# One build directory per set of compiler flags and BLAS; only the bench_step target is built.
# The default build's library is whatever SCALELAB_BLAS defaults to (its cache entry is reset, so
# an old directory follows a changed default); the --blas builds name theirs.
names=("portable") dirs=("$repo/build/bench-cpu") flagsets=("") blasopts=("-USCALELAB_BLAS")
for m in "${marches[@]}"; do
  names+=("-march=$m") dirs+=("$repo/build/bench-cpu-$m") flagsets+=("-march=$m -ffp-contract=off")
  blasopts+=("-USCALELAB_BLAS")
done
for b in "${blases[@]}"; do
  case "$b" in onednn|openblas|blis) ;; *) echo "bench_cpu.sh: --blas '$b': use onednn, openblas or blis" >&2; exit 2 ;; esac
  names+=("portable") dirs+=("$repo/build/bench-cpu-blas-$b") flagsets+=("") blasopts+=("-DSCALELAB_BLAS=$b")
done
for i in "${!names[@]}"; do
  echo "== building bench_step (${names[$i]}, ${blasopts[$i]}) in ${dirs[$i]}"
  cmake -S "$repo" -B "${dirs[$i]}" -DCMAKE_BUILD_TYPE=Release -DSCALELAB_CUDA=OFF -DSCALELAB_BUILD_TESTS=OFF \
    -DSCALELAB_BUILD_BENCH=ON "-DCMAKE_CXX_FLAGS=${flagsets[$i]}" "${blasopts[$i]}" >/dev/null
  cmake --build "${dirs[$i]}" --target bench_step -j2 >/dev/null
done

export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 BLIS_NUM_THREADS=1
shape_args=()
for k in V T C L H B; do shape_args+=("--$k" "${shape[$k]}"); done
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
load_before="$(cut -d' ' -f1-3 /proc/loadavg)"

# The peer, unchanged, with its clock calls observed: every time.perf_counter() call also
# records the CPU time, so (start, end) pairs give the CPU time of each timed step.
cat >"$work/peer_cpu.py" <<'EOF'
import json, runpy, sys, time
wall, cpu_marks = time.perf_counter, []
def observed_perf_counter():
    cpu_marks.append(time.process_time())
    return wall()
time.perf_counter = observed_perf_counter
peer, out = sys.argv[1], sys.argv[2]
sys.argv = [peer] + sys.argv[3:]
runpy.run_path(peer, run_name="__main__")
steps = sorted(b - a for a, b in zip(cpu_marks[0::2], cpu_marks[1::2]))
json.dump(dict(cpu_ms_per_step=1e3 * steps[len(steps) // 2]), open(out, "w"))
EOF

for ((r = 1; r <= rounds; ++r)); do
  for i in "${!names[@]}"; do
    lib="${blasopts[$i]#-D}" && [[ $lib != -U* ]] || lib="default SCALELAB_BLAS"
    echo "== round $r/$rounds: scalelab (${names[$i]}, $lib)"
    "${dirs[$i]}/bench/bench_step" "${shape_args[@]}" --steps "$steps" --threads 1 \
      --benchmark_format=json --benchmark_out="$work/ours_${i}_$r.json" --benchmark_out_format=json >/dev/null
  done
  echo "== round $r/$rounds: PyTorch"
  "$python" "$work/peer_cpu.py" "$peer" "$work/peer_cpu_$r.json" "${shape_args[@]}" --steps "$steps" --threads 1 \
    >"$work/peer_$r.json"
  if [[ $blas_pool == 1 ]]; then
    echo "== round $r/$rounds: PyTorch, OpenBLAS thread pool left on"
    env -u OPENBLAS_NUM_THREADS -u OMP_NUM_THREADS -u MKL_NUM_THREADS \
      "$python" "$work/peer_cpu.py" "$peer" "$work/peerpool_cpu_$r.json" "${shape_args[@]}" --steps "$steps" \
      --threads 1 >"$work/peerpool_$r.json"
  fi
done
load_after="$(cut -d' ' -f1-3 /proc/loadavg)"

machine="$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)"
commit="$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)"
if [[ -n "$(git -C "$repo" status --porcelain --untracked-files=no -- reference bench 2>/dev/null)" ]]; then
  commit="$commit (plus uncommitted changes under reference/ or bench/)"
fi
cmd="bash tools/bench_cpu.sh --rounds $rounds --steps $steps"
for m in "${marches[@]}"; do cmd+=" --march $m"; done
for b in "${blases[@]}"; do cmd+=" --blas $b"; done
[[ $blas_pool == 1 ]] && cmd+=" --peer-blas-pool"
for k in V T C L H B; do [[ "${shape[$k]}" == "${mini[$k]}" ]] || cmd+=" --$k ${shape[$k]}"; done

"$python" - "$work" "$rounds" "$write" "$repo/docs/results/cpu.md" "$machine" "$(nproc --all)" "$commit" \
  "$("$python" -c 'import torch; print(torch.__version__)')" "$cmd" "$load_before" "$load_after" \
  "${shape_args[*]}" "$steps" "$(IFS='|'; echo "${names[*]}")" "$("${CXX:-c++}" --version | head -1)" "$blas_pool" <<'EOF'
import datetime, json, statistics, sys
(work, rounds, write, out_md, machine, cores, commit, torch_version, cmd, load0, load1, shape, steps, names,
 compiler, blas_pool) = sys.argv[1:]
rounds, names = int(rounds), names.split("|")

def library(i):  # bench_step's label: "sgemm: <library>"
    rows = json.load(open(f"{work}/ours_{i}_1.json"))["benchmarks"]
    return rows[0].get("label", "sgemm: OpenBLAS").split(": ", 1)[-1]

def ours(i, r):
    rows = json.load(open(f"{work}/ours_{i}_{r}.json"))["benchmarks"]
    med = next((b for b in rows if b.get("aggregate_name") == "median"), rows[0])  # one step: no aggregates
    to_ms = {"ns": 1e-6, "us": 1e-3, "ms": 1.0, "s": 1e3}[med["time_unit"]]
    return dict(ms=med["real_time"] * to_ms, tok=med["tokens_per_s"], gf=med["GFLOP_per_s"],
                cpu=med["cpu_time"] * to_ms), dict(share=med["sgemm_share"], gf=med["sgemm_GFLOP_per_s"],
                                                   bound=med["sgemm_bound_tokens_per_s"])

def peer(r, kind="peer"):
    p = json.loads(open(f"{work}/{kind}_{r}.json").read().strip().splitlines()[-1])
    cpu = json.load(open(f"{work}/{kind}_cpu_{r}.json"))["cpu_ms_per_step"]
    return dict(ms=p["ms_per_step"], tok=p["tokens_per_s"], gf=p["gflops"], cpu=cpu), p["peer"]

programs = [f"scalelab ({n}, {library(i)})" for i, n in enumerate(names)]
programs = [p if programs.count(p) == 1 else f"{p} #{i + 1}" for i, p in enumerate(programs)]
runs = {}  # (program, round) -> numbers
gemm = {}  # (program, round) -> our step's matrix products on their own (bench/sgemm_clock.hpp)
for r in range(1, rounds + 1):
    for i, prog in enumerate(programs):
        runs[prog, r], gemm[prog, r] = ours(i, r)
    runs["PyTorch", r], peer_name = peer(r)
    for prog in programs:
        gemm[prog, r]["vs_tok"] = gemm[prog, r]["bound"] / runs["PyTorch", r]["tok"]
    if blas_pool == "1":
        runs["PyTorch, OpenBLAS pool (not 1 thread)", r], _ = peer(r, "peerpool")
programs.append("PyTorch")
if blas_pool == "1":
    programs.append("PyTorch, OpenBLAS pool (not 1 thread)")

header = ("| round | program | ms/step | tokens/s | GFLOP/s | CPU ms/step | tokens/s vs PyTorch "
          "| CPU time vs PyTorch |\n|---|---|---:|---:|---:|---:|---:|---:|")
# Ratios are taken within a round (the programs ran back to back); the summary row gives the
# median of each column, the ratios included.
for r in range(1, rounds + 1):
    ref = runs["PyTorch", r]
    for prog in programs:
        x = runs[prog, r]
        x["vs_tok"], x["vs_cpu"] = x["tok"] / ref["tok"], ref["cpu"] / x["cpu"]
def row(label, x):
    return (f"| {label} | {x['ms']:,.0f} | {x['tok']:,.0f} | {x['gf']:.1f} | {x['cpu']:,.0f} "
            f"| **{x['vs_tok']:.2f}x** | {x['vs_cpu']:.2f}x |")
lines = [header]
for r in range(1, rounds + 1):
    for prog in programs:
        lines.append(row(f"{r} | {prog}", runs[prog, r]))
med = {p: {k: statistics.median(runs[p, r][k] for r in range(1, rounds + 1)) for k in runs[p, 1]} for p in programs}
summary = [header.replace("| round | program |", "| program |", 1).replace("|---|---|", "|---|", 1)]
summary += [row(p, med[p]) for p in programs]
table, summary = "\n".join(lines), "\n".join(summary)
ours_programs = [p for p in programs if p.startswith("scalelab")]
gmed = {p: {k: statistics.median(gemm[p, r][k] for r in range(1, rounds + 1)) for k in gemm[p, 1]}
        for p in ours_programs}
bound = ["| program | share of the step in sgemm | sgemm GFLOP/s | tokens/s if only sgemm took time "
         "| that bound vs PyTorch |", "|---|---:|---:|---:|---:|"]
bound += [f"| {p} | {g['share']:.0%} | {g['gf']:.1f} | {g['bound']:,.0f} | **{g['vs_tok']:.2f}x** |"
          for p, g in gmed.items()]
bound = "\n".join(bound)
print("\n" + summary + "\n\nmatrix products only:\n" + bound + "\n\nper round:\n" + table)
print("\nx vs PyTorch: tokens/s over PyTorch's (wall clock), and PyTorch's CPU time per step over ours")

if write == "1":
    now = datetime.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z")
    dims = shape.split()
    dims = dict(zip(dims[0::2], dims[1::2]))
    tokens = int(dims["--B"]) * int(dims["--T"])
    doc = f"""# CPU training step: scalelab against PyTorch

Written by `tools/bench_cpu.sh`; rerun it to replace this file (see the script's header for the options).

- Machine: {machine}, {cores} cores (lscpu); load average before / after: {load0} / {load1}
- Date: {now}; scalelab commit {commit}; compiler: {compiler}; peer: {peer_name}
- Command: `{cmd}`
- Shape: {shape} ({tokens:,.0f} tokens per step). Each program: forward + backward + AdamW,
  median of {steps} steps after 2 warm-up steps; the programs alternate, round by round.
- Threads: one for everything (OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 BLIS_NUM_THREADS=1,
  `--threads 1`). The "OpenBLAS pool" row, if present, is PyTorch with those variables unset.
- Matrix products: each scalelab row names the library of its float products (SCALELAB_BLAS;
  double products, not in the step, go through OpenBLAS except with BLIS). PyTorch's go through
  Debian's OpenBLAS (libopenblas0, the same library as the OpenBLAS rows).
- FLOPs per step as the peer counts them: 6 P B T + 12 L B T T C.
- Builds: "portable" is the default Release build (no -march); "-march=X" adds
  `-march=X -ffp-contract=off` (wider SIMD in our own loops, the same bits).

## Medians over {rounds} rounds

{summary}

Each figure is the median over the rounds; the ratios are taken within each round (the programs
ran back to back) and then their median. "tokens/s vs PyTorch" is the ratio the target (at least
1.5x) is about. "CPU time vs PyTorch" compares CPU time per step, which other processes on a
shared machine disturb less than the wall clock; where the two disagree, the machine was busy.
(For a run with OpenBLAS's thread pool on, CPU time counts every thread, so only its wall-clock
figures compare.)

## The matrix-product libraries

scalelab's float products go through the library its build chose (`SCALELAB_BLAS`, README
"Builds"): oneDNN's `dnnl_sgemm` by default, or OpenBLAS's or BLIS's `cblas_sgemm` (`--blas LIB`
adds such a build to the run). All are Debian 12's: oneDNN 2.6.3, OpenBLAS 0.3.21, BLIS 0.9.0.
Each picks its kernels from the CPU at run time. On an AMD Zen 5 (CPU family 26) OpenBLAS 0.3.21
takes its Haswell (AVX2) kernels (`OPENBLAS_VERBOSE=2` prints `Core: Haswell`), and BLIS 0.9.0
would take its generic C kernels, as neither knows that family; oneDNN looks at the instruction
sets and uses AVX-512. For BLIS, `core/blas.cpp` then asks for its skx (AVX-512) kernels unless
`BLIS_ARCH_TYPE` is set. PyTorch's products go through the same OpenBLAS as the OpenBLAS rows.
Each library gives the same bits run after run; two libraries give different bits (a different
order of the sums), within the tolerances of the PyTorch-oracle tests.

## What bounds the ratio: the matrix products

Both programs compute the same matrix products (scalelab skips the products above the causal
diagonal, PyTorch does not), and those products are most of the step. bench_step times every
sgemm call inside its own step (an interposer on dnnl_sgemm or cblas_sgemm,
`bench/sgemm_clock.hpp`); dividing the step's tokens by that time alone gives the tokens/s of a
step whose layers, optimizer and bookkeeping took no time at all. No implementation that keeps
these fp32 products in that library can pass that bound; the last column sets it against
PyTorch's tokens/s in the same round.

{bound}

What a faster implementation can still remove is the gap between a row above and its bound
(elementwise and row-wise layers, the optimizer); past that, only a faster GEMM (or fewer
FLOPs, e.g. lower precision, which would no longer be the same computation) moves the ratio.
Per-layer numbers: `build/<dir>/bench/bench_layers`.

## Every round

{table}
"""
    with open(out_md, "w") as f:
        f.write(doc)
    print(f"wrote {out_md}")
EOF
