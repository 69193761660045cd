#!/usr/bin/env bash
# Collective bandwidth on this machine: `scalelab bench comm` (our ring vs the MPI built-in) on 2
# and 4 ranks, several rounds, written to docs/results/comm-cpu.md (stage 04).
#   round 1: the full default sweep (8 B .. 256 MiB, all three collectives), kept verbatim
#   rounds 2..R: all-reduce from 1 MiB only, for the medians
# The summary table is, per size >= 1 MiB, the median over rounds of the busbw ratio ring/builtin
# (each ratio is taken within one run, where the two ran back to back on the same buffer).
#
#   bash tools/bench_comm.sh [--bin build/release/bin/scalelab] [--rounds 3] [--ranks "2 4"] [--out FILE]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
bin=$root/build/release/bin/scalelab
rounds=3
ranks="2 4"
out=$root/docs/results/comm-cpu.md
while [[ $# -gt 0 ]]; do
  case $1 in
    --bin) bin=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --ranks) ranks=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "bench_comm.sh: unknown option '$1'; see the header of $0 for the options" >&2; exit 2 ;;
  esac
done
[[ -x $bin ]] || { echo "bench_comm.sh: no scalelab binary at $bin; build it or pass --bin" >&2; exit 2; }
[[ $rounds -ge 1 ]] || { echo "bench_comm.sh: --rounds must be at least 1" >&2; exit 2; }

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
load_before=$(cut -d' ' -f1-3 /proc/loadavg)

for n in $ranks; do
  for ((r = 1; r <= rounds; ++r)); do
    if [[ $r -eq 1 ]]; then args=(--op all); else args=(--op all_reduce --min-bytes 1M); fi
    cmd="mpirun --oversubscribe -np $n scalelab bench comm ${args[*]}"
    echo "== $cmd (round $r)" >&2
    mpirun --oversubscribe -np "$n" "$bin" bench comm "${args[@]}" --json "$work/np$n-r$r.json" \
      > "$work/np$n-r$r.txt"
    echo "$cmd" > "$work/np$n-r$r.cmd"
  done
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

/usr/bin/python3 - "$work" "$out" "$rounds" "$ranks" "$load_before" "$load_after" <<'EOF'
import json, pathlib, statistics, subprocess, sys
work, out, rounds, ranks = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split()
load_before, load_after = sys.argv[5], sys.argv[6]

def ratios(n, r):
    """size -> (ring busbw, builtin busbw) for all-reduce rows >= 1 MiB of one run."""
    rows = json.loads((work / f"np{n}-r{r}.json").read_text())["rows"]
    by = {}
    for row in rows:
        if row["op"] == "all_reduce" and row["size_bytes"] >= 1 << 20:
            by.setdefault(row["size_bytes"], {})[row["impl"]] = row["busbw_gbs"]
    return by

meta = json.loads((work / f"np{ranks[0]}-r1.json").read_text())
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
lines = ["# Collective bandwidth on the CPU: our ring vs OpenMPI", "",
         "Written by `tools/bench_comm.sh`; rerun it to replace this file.", "",
         f"- Machine: {cpu}, {len([l for l in open('/proc/cpuinfo') if l.startswith('processor')])} cores; "
         f"host {meta['host']}; load average before / after: {load_before} / {load_after}",
         f"- Date: {meta['date_utc']}; scalelab commit {commit}; backend {meta['backend']}; "
         f"{meta['iters']} iterations after {meta['warmup']} warm-up per size; ring pieces of "
         f"{meta['ring_chunk_bytes']} B, window {meta['ring_window']}",
         f"- Ranks share the cores (`--oversubscribe`); other jobs on a shared machine make single sizes noisy.",
         "", "## All-reduce busbw, ring / MPI_Allreduce, median over rounds", "",
         f"Per size, the ratio within each of {rounds} runs, then the median (and the range) over the runs; "
         "busbw in GB/s is the median of each column on its own (so the ratio column is not their quotient).", ""]
for n in ranks:
    per = [ratios(n, r) for r in range(1, rounds + 1)]
    lines += [f"### {n} ranks", "", "| size | ring busbw | MPI busbw | ratio (median) | ratio (min..max) |",
              "|---:|---:|---:|---:|---:|"]
    all_medians = []
    for size in sorted(per[0]):
        ring = [p[size]["ring"] for p in per]
        mpi = [p[size]["builtin"] for p in per]
        rat = [a / b for a, b in zip(ring, mpi)]
        all_medians.append(statistics.median(rat))
        lines.append(f"| {size >> 20} MiB | {statistics.median(ring):.2f} | {statistics.median(mpi):.2f} | "
                     f"**{statistics.median(rat):.2f}x** | {min(rat):.2f}..{max(rat):.2f} |")
    lines += ["", f"Over the sizes: min {min(all_medians):.2f}x, median {statistics.median(all_medians):.2f}x.", ""]
lines += ["## Raw output", ""]
for n in ranks:
    for r in range(1, rounds + 1):
        lines += [f"### {n} ranks, round {r}: `{(work / f'np{n}-r{r}.cmd').read_text().strip()}`", "", "```",
                  (work / f"np{n}-r{r}.txt").read_text().rstrip(), "```", ""]
out.write_text("\n".join(lines))
print(f"wrote {out}")
EOF
