#!/usr/bin/env bash
# CI for the labs (called from .ci/run): proves that the lab contract holds.
#   1. labs/ is in sync with reference/          (tools/labgen.py --check)
#   2. the reference scores full marks            (tools/grade.py NN --reference --expect full, every lab)
#   3. the skeleton of all labs compiles, and each lab's skeleton scores zero without a crash, hang
#      or flood, every failure naming the missing function ("Lab NN: implement ...")
#                                                 (tools/grade.py NN --expect zero, every lab)
#   4. a deliberately wrong solution of lab 00 (the reference with dbias's sign flipped in
#      layernorm_backward) loses exactly the tests that cover layernorm_backward
#                                                 (tools/grade.py 00 --student-dir ... --expect-lose)
#      and one of lab 05 (one_f_one_b_order with a warm-up one forward short, p - r - 2) loses
#      exactly the tests that cover one_f_one_b_order, and one of lab 06 (sequence parallelism
#      without the sum of the replicated gradients) those that cover sum_sequence_parallel_grads;
#      likewise lab 00's matmul_backward with beta = 0 in the weight-gradient GEMM (overwrites
#      instead of accumulating)
#   5. forged submissions (tools/forged/lab00/*.cpp spliced into adamw_step of the reference: print
#      Catch2's summary and exit 0, flood, fork a child, write the results file, ...) score 0 on
#      every test that covers adamw_step, and full marks elsewhere
# Environment (all optional):
#   CI_LABS_BUILD   build directory root (default build/ci-labs); reference/ and skeleton/ under it
#   CI_LABS_CMAKE   extra cmake arguments, e.g. "-DSCALELAB_CUDA=OFF -DSCALELAB_BUILD_BENCH=OFF"
#   CI_LABS_JOBS    parallel build jobs (default: nproc)
#   CI_LABS_ONLY    grade only these labs, e.g. "00 01" (default: every lab with graded tests)
#   PYTHON          the interpreter (default python3; the tools need only the standard library)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CI_LABS_BUILD:-$root/build/ci-labs}
jobs=${CI_LABS_JOBS:-$(nproc)}
py=${PYTHON:-python3}
read -r -a cmake_extra <<< "${CI_LABS_CMAKE:-}"
cmake_args=()
for a in "${cmake_extra[@]}"; do cmake_args+=("--cmake-arg=$a"); done
results=$build/results
mkdir -p "$results"
failures=()
summary=()

step() { printf '\n==== %s\n' "$*"; }

step "1. labs/ in sync with reference/"
if ! "$py" "$root/tools/labgen.py" --check; then
  failures+=("labs/ is out of date: run python3 tools/labgen.py and commit labs/")
fi

# Every lab that has graded tests (tests/grading/*.json), or the ones asked for.
if [[ -n "${CI_LABS_ONLY:-}" ]]; then
  read -r -a labs <<< "$CI_LABS_ONLY"
else
  mapfile -t labs < <("$py" - "$root/tests/grading" <<'EOF'
import json, pathlib, sys
labs = set()
for p in pathlib.Path(sys.argv[1]).glob("*.json"):
    for t in json.loads(p.read_text()).get("tests", []):
        labs.add(str(t["lab"]).zfill(2))
print("\n".join(sorted(labs)))
EOF
)
fi
if [[ ${#labs[@]} -eq 0 ]]; then
  echo "no graded tests in tests/grading: nothing to grade"
fi

step "2. the reference scores full marks (labs: ${labs[*]:-none})"
for lab in "${labs[@]}"; do
  if "$py" "$root/tools/grade.py" "$lab" --reference --build-dir "$build/reference" -j "$jobs" \
       --results "$results/lab$lab-reference.json" --quiet --expect full "${cmake_args[@]}"; then
    summary+=("lab $lab reference: full marks")
  else
    failures+=("lab $lab: the reference does not score full marks (see above)")
    summary+=("lab $lab reference: NOT full marks")
  fi
done

step "3a. the skeleton of every lab compiles (SCALELAB_LABS=all)"
if cmake -S "$root" -B "$build/skeleton" -U "SCALELAB_LAB_DIR_*" -DSCALELAB_LABS=all -DSCALELAB_HIDDEN_TESTS= \
     "${cmake_extra[@]}" \
     > "$results/skeleton-configure.log" 2>&1 \
   && cmake --build "$build/skeleton" -j "$jobs" > "$results/skeleton-build.log" 2>&1; then
  summary+=("skeleton (all labs): compiles")
  grep -E "warning:" "$results/skeleton-build.log" | sort -u | head -20 || true
else
  tail -60 "$results/skeleton-configure.log" "$results/skeleton-build.log" 2>/dev/null
  failures+=("the skeleton with SCALELAB_LABS=all does not build (see $results/skeleton-build.log)")
  summary+=("skeleton (all labs): DOES NOT BUILD")
fi

step "3b. each lab's skeleton scores zero, cleanly"
for lab in "${labs[@]}"; do
  # The same build directory, reconfigured with SCALELAB_LABS=<lab>: only the swapped files rebuild.
  if "$py" "$root/tools/grade.py" "$lab" --build-dir "$build/skeleton" -j "$jobs" \
       --results "$results/lab$lab-skeleton.json" --expect zero "${cmake_args[@]}"; then
    summary+=("lab $lab skeleton: zero, every failure names 'Lab $lab: implement ...'")
  else
    failures+=("lab $lab: the skeleton does not score a clean zero (see above)")
    summary+=("lab $lab skeleton: NOT a clean zero")
  fi
done

step "4. a wrong solution loses exactly the tests that cover it"
# wrong_solution LAB LAB_DIR NAME FILE FROM TO FUNCTION WHAT: the whole reference solution of LAB
# as a submission (every file of labs/LAB_DIR taken from reference/), with FROM replaced by TO in
# FILE (a literal line fragment); grading it must lose exactly the tests that cover FUNCTION.
# PREPEND (optional): a file whose text goes at the top of FILE (the forged submissions' code).
wrong_solution() {
  local lab=$1 lab_dir=$2 name=$3 file=$4 from=$5 to=$6 function=$7 what=$8 prepend=${9:-/dev/null}
  local wrong=$build/wrong-$name
  rm -rf "$wrong"
  (cd "$root/labs/$lab_dir" && find . -name '*.cpp' -o -name '*.hpp') | while read -r rel; do
    mkdir -p "$wrong/$(dirname "$rel")" && cp "$root/reference/$rel" "$wrong/$rel"
  done
  FROM=$from TO=$to "$py" - "$wrong/$file" "$prepend" <<'EOF_PY' || true
import os, pathlib, sys
p = pathlib.Path(sys.argv[1])
text = p.read_text().replace(os.environ["FROM"], os.environ["TO"], 1)
p.write_text(pathlib.Path(sys.argv[2]).read_text() + text)
EOF_PY
  if ! grep -qF -- "$to" "$wrong/$file"; then
    failures+=("the wrong solution of lab $lab was not made: $file no longer has '$from'")
  elif "$py" "$root/tools/grade.py" "$lab" --student-dir "$wrong" --build-dir "$build/skeleton" -j "$jobs" \
         --results "$results/lab$lab-wrong-$name.json" --expect-lose "$function" "${cmake_args[@]}"; then
    summary+=("lab $lab with $what: loses exactly the tests covering $function")
  else
    failures+=("lab $lab wrong solution ($what): not exactly the tests of $function failed (see above)")
    summary+=("lab $lab wrong solution: WRONG tests failed")
  fi
}
if [[ " ${labs[*]} " == *" 00 "* ]]; then
  # One sign flipped.
  wrong_solution 00 00-naive layernorm model/layers/layernorm.cpp 'dbias[c] += d[c];' 'dbias[c] -= d[c];' \
    layernorm_backward "a wrong dbias in layernorm_backward"
  # dweight overwritten (beta = 0) instead of accumulated: right whenever the gradient starts at
  # zero, so only tests that start from non-zero gradients see it.
  wrong_solution 00 00-naive matmul-beta0 model/layers/matmul.cpp \
    'gemm<F>(true, false, OC, C, N, F(1), dout, OC, inp, C, F(1), dweight, C);' \
    'gemm<F>(true, false, OC, C, N, F(1), dout, OC, inp, C, F(0), dweight, C);' \
    matmul_backward "dweight overwritten (beta = 0) in matmul_backward"
fi
if [[ " ${labs[*]} " == *" 05 "* ]]; then
  # 1F1B's warm-up one forward short: still a valid order (no deadlock, the same gradients), but
  # one micro-batch fewer in flight on every rank but the last.
  wrong_solution 05 05-pipeline 1f1b schedule/pipeline_schedule.cpp \
    'std::min(stages - rank - 1, micro_batches)' 'std::min(stages - rank - 2, micro_batches)' \
    one_f_one_b_order "a 1F1B warm-up one forward short"
fi
if [[ " ${labs[*]} " == *" 06 "* ]]; then
  # Sequence parallelism without the sum of the replicated gradients: runs, trains, and is wrong.
  wrong_solution 06 06-tensor-parallel sp-sum dist/tp_grad_sync.cpp \
    'tp_all_reduce(tp, staging.data(), staging.size(), ReduceOp::kSum);' '(void)tp;  // the sum forgotten' \
    sum_sequence_parallel_grads "sequence parallelism without the LayerNorm gradient sum"
fi
if [[ " ${labs[*]} " == *" 07 "* ]]; then
  # Shards cut in proportion (b * count / parts) instead of BlockPartition's cut, which gives the
  # first count % parts shards one element more: right whenever d divides psi.
  wrong_solution 07 07-zero pieces comm/partition.cpp \
    'const std::size_t shard_end = shards.offset(b) + shards.size(b);' \
    'const std::size_t shard_end = (b + 1) * shards.count / static_cast<std::size_t>(shards.parts);' \
    Pieces::of_range "a ZeRO shard off by one at an uneven split"
  # The ring leaves each rank's piece of the sum at pieces.offset(rank); read from the start.
  wrong_solution 07 07-zero piece-offset dist/zero_model.cpp \
    'r.grads.data()) + u.pieces.offset(shards_.rank())' 'r.grads.data())' \
    ZeroModel::finish_reduction "the reduced piece read from the start of the unit, not from this rank's offset"
  # The clipping norm from this rank's shard alone: every rank clips by a different factor.
  wrong_solution 07 07-zero local-norm dist/zero_model.cpp \
    'comm_.all_reduce(&squares, 1);' '(void)comm_;  // the partial sums never added' \
    ZeroModel::optimizer_step "the gradient norm of this rank's shard only"
  # No prefetch: each block gathered only when it is reached; the same numbers, no overlap.
  wrong_solution 07 07-zero no-prefetch dist/zero_model.cpp \
    'if (next >= 0 && next < config().num_layers) {' 'if (false && next >= 0) {' \
    ZeroModel::gather_around_block "stage 3 without the next block's prefetch"
fi

step "5. forged submissions earn nothing"
# Each tools/forged/lab00/NAME.cpp defines forged(), called first thing in adamw_step of an
# otherwise complete reference: the tests that cover adamw_step must all fail, the rest pass.
# The same build directory as step 4: each one recompiles adamw.cpp and relinks two binaries.
if [[ " ${labs[*]} " == *" 00 "* ]]; then
  for forged in "$root"/tools/forged/lab00/*.cpp; do
    name=$(basename "$forged" .cpp)
    wrong_solution 00 00-naive "forged-$name" optim/adamw.cpp '// LAB 00 BEGIN adamw_step: section 5' \
      $'// LAB 00 BEGIN adamw_step: section 5\n  forged();' adamw_step "the forged submission $name" "$forged"
  done
fi

step "summary"
printf '  %s\n' "${summary[@]}"
if [[ ${#failures[@]} -gt 0 ]]; then
  echo "FAILED:"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "labs CI passed (results.json files in $results)"
