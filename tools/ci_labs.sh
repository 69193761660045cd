#!/usr/bin/env bash
# CI for the labs (called from .ci/run): proves that the lab contract holds.
#   1. labs/ is in sync with reference/          (tools/labgen.py --check)
#   2. the reference scores full marks            (tools/grade.py NN --reference --expect full, every lab)
#   3. the skeleton of all labs compiles, and each lab's skeleton scores zero without a crash, hang
#      or flood, every failure naming the missing function ("Lab NN: implement ...")
#                                                 (tools/grade.py NN --expect zero, every lab)
#   4. deliberately wrong solutions (the reference with one mistake students make: a missing 1/k,
#      a scaler that grows one step late, truncation instead of round-to-nearest-even, a bucket
#      launched before its gradients are final, an online softmax that forgets a rescale, ...; at least three per lab, listed with the
#      tests they lose in docs/instructors.md) each lose exactly the tests that cover the wrong
#      function, but those named as out of the mistake's reach, which must pass
#                                                 (tools/grade.py NN --student-dir ... --expect-lose)
#   5. forged submissions (tools/forged/lab00/*.cpp spliced into adamw_step of the reference: print
#      Catch2's summary and exit 0, flood, fork a child, write the results file, ...) score 0 on
#      every test that covers adamw_step, and full marks elsewhere
#   6. a write one element past an array no test can guard (the student's own vector) keeps full
#      marks when graded as above, and loses exactly the tests that cover its function when graded
#      under the sanitizers              (tools/grade.py NN --student-dir ... --sanitize --expect-lose)
# Environment (all optional):
#   CI_LABS_BUILD   build directory root (default build/ci-labs); reference/ and skeleton/ under it
#   CI_LABS_CMAKE   extra cmake arguments, e.g. "-DSCALELAB_CUDA=OFF -DSCALELAB_BUILD_BENCH=OFF"
#   CI_LABS_REFERENCE_BUILD  the build directory step 2 grades the reference in (default
#                   $CI_LABS_BUILD/reference); .ci/run points it at the release build it has just
#                   made, so the reference is graded without a second build of it
#   CI_LABS_REFERENCE_CMAKE  step 2's extra cmake arguments (default: CI_LABS_CMAKE; set it empty
#                   to keep an existing build directory's settings)
#   CI_LABS_SANITIZE_BUILD  the sanitizer build directory of step 6 (default $CI_LABS_BUILD/sanitize);
#                   .ci/run points it at its debug-asan build
#   CI_LABS_JOBS    parallel build jobs (default: nproc)
#   CI_LABS_TEST_JOBS  graded tests run side by side (grade.py --test-jobs; default 2: most of a
#                   test's time is mpiexec starting its ranks, and every time limit is ten times
#                   the test's time or more)
#   CI_LABS_ONLY    grade only these labs, e.g. "00 01" (default: every lab with graded tests)
#   CI_LABS_STEPS   run only these steps, e.g. "4 5" (default: "1 2 3 4 5 6"); steps 4-6 reuse the
#                   build directories of an earlier run's steps 2 and 3
#   CI_LABS_WRONG   grade only the wrong solutions (steps 4-6) of these names, e.g. "missing-1-over-k"
#   PYTHON          the interpreter (default python3; the tools need only the standard library)
set -uo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# The lab builds (ours below, grade.py's) use Ninja as the presets do, where it is installed.
if [[ -z ${CMAKE_GENERATOR:-} ]] && command -v ninja > /dev/null; then export CMAKE_GENERATOR=Ninja; fi
build=${CI_LABS_BUILD:-$root/build/ci-labs}
jobs=${CI_LABS_JOBS:-$(nproc)}
test_jobs=${CI_LABS_TEST_JOBS:-2}
grade_jobs=(-j "$jobs" -J "$test_jobs")  # every grade.py run: build jobs, tests side by side
py=${PYTHON:-python3}
read -r -a cmake_extra <<< "${CI_LABS_CMAKE:-}"
cmake_args=()
for a in "${cmake_extra[@]}"; do cmake_args+=("--cmake-arg=$a"); done
reference_build=${CI_LABS_REFERENCE_BUILD:-$build/reference}
read -r -a reference_extra <<< "${CI_LABS_REFERENCE_CMAKE-${CI_LABS_CMAKE:-}}"
reference_args=()
for a in "${reference_extra[@]}"; do reference_args+=("--cmake-arg=$a"); done
results=$build/results
mkdir -p "$results"
failures=()
summary=()

# step TITLE: starts the next step; the summary ends with the time of each step that ran.
timings=() step_title="" step_started=$SECONDS
step() {
  local number=${step_title%%.*}
  ! runs "${number%[ab]}" || timings+=("$number: $((SECONDS - step_started)) s")
  step_title=$1 step_started=$SECONDS
  printf '\n==== %s\n' "$*"
}
read -r -a steps <<< "${CI_LABS_STEPS:-1 2 3 4 5 6}"
runs() { [[ " ${steps[*]} " == *" $1 "* ]]; }  # runs 3: step 3 is wanted (CI_LABS_STEPS)

step "1. labs/ in sync with reference/"
if runs 1 && ! "$py" "$root/tools/labgen.py" --check; then
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
  runs 2 || break
  if "$py" "$root/tools/grade.py" "$lab" --reference --build-dir "$reference_build" "${grade_jobs[@]}" \
       --results "$results/lab$lab-reference.json" --quiet --expect full "${reference_args[@]}"; then
    summary+=("lab $lab reference: full marks")
  else
    failures+=("lab $lab: the reference does not score full marks (see above)")
    summary+=("lab $lab reference: NOT full marks")
  fi
done

# The library with every lab's skeleton file in it: each lab's test binaries are built and linked
# in 3b, with that lab's skeleton and the other labs' reference.
step "3a. the skeleton of every lab compiles (SCALELAB_LABS=all)"
if ! runs 3; then
  echo "(not run: CI_LABS_STEPS=${steps[*]})"
elif cmake -S "$root" -B "$build/skeleton" -U "SCALELAB_LAB_DIR_*" -DSCALELAB_LABS=all -DSCALELAB_HIDDEN_TESTS= \
     "${cmake_extra[@]}" \
     > "$results/skeleton-configure.log" 2>&1 \
   && cmake --build "$build/skeleton" --target scalelab -j "$jobs" > "$results/skeleton-build.log" 2>&1; then
  summary+=("skeleton (all labs): compiles")
  grep -E "warning:" "$results/skeleton-build.log" | sort -u | head -20 || true
else
  tail -60 "$results/skeleton-configure.log" "$results/skeleton-build.log" 2>/dev/null
  failures+=("the skeleton with SCALELAB_LABS=all does not build (see $results/skeleton-build.log)")
  summary+=("skeleton (all labs): DOES NOT BUILD")
fi

step "3b. each lab's skeleton scores zero, cleanly"
for lab in "${labs[@]}"; do
  runs 3 || break
  # The same build directory, reconfigured with SCALELAB_LABS=<lab>: only the swapped files rebuild.
  if "$py" "$root/tools/grade.py" "$lab" --build-dir "$build/skeleton" "${grade_jobs[@]}" \
       --results "$results/lab$lab-skeleton.json" --expect zero "${cmake_args[@]}"; then
    summary+=("lab $lab skeleton: zero, every failure names 'Lab $lab: implement ...'")
  else
    failures+=("lab $lab: the skeleton does not score a clean zero (see above)")
    summary+=("lab $lab skeleton: NOT a clean zero")
  fi
done

step "4. a wrong solution loses exactly the tests that cover it"
# make_wrong LAB WHAT NAME LAB_DIR FILE FROM TO [PREPEND]: $build/wrong-NAME, the reference's
# files of labs/LAB_DIR with FROM replaced by TO in FILE (and PREPEND's text at its top); when FILE
# does not have FROM exactly once, records the failure and fails.
make_wrong() {
  local lab=$1 what=$2 wrong=$build/wrong-$3 lab_dir=$4 file=$5 from=$6 to=$7 prepend=${8:-/dev/null}
  rm -rf "$wrong"
  (cd "$root/labs/$lab_dir" && find . -name '*.cpp' -o -name '*.hpp') | while read -r rel; do
    mkdir -p "$wrong/$(dirname "$rel")" && cp "$root/reference/$rel" "$wrong/$rel"
  done
  if ! FROM=$from TO=$to "$py" - "$wrong/$file" "$prepend" <<'EOF_PY'
import os, pathlib, sys
p = pathlib.Path(sys.argv[1])
text = p.read_text()
if text.count(os.environ["FROM"]) != 1:
    sys.exit(1)
p.write_text(pathlib.Path(sys.argv[2]).read_text() + text.replace(os.environ["FROM"], os.environ["TO"], 1))
EOF_PY
  then
    failures+=("the wrong solution of lab $lab ($what) was not made: $file does not have '$from' exactly once")
    return 1
  fi
}
# lose_exactly LAB WRONG BUILD_DIR RESULTS FUNCTION [grade.py options]: grades the submission in
# WRONG, which must lose exactly the tests that cover FUNCTION but those KEEP names (in the
# environment), which must pass. Tests whose binary does not link the submission's files are not
# run (--skip-unlinked): they run exactly the reference's code, graded full in step 2.
lose_exactly() {
  local lab=$1 wrong=$2 build_dir=$3 out=$4 function=$5 keep_args=() k
  shift 5
  for k in ${KEEP:-}; do keep_args+=(--expect-keep "$k"); done
  "$py" "$root/tools/grade.py" "$lab" --student-dir "$wrong" --build-dir "$build_dir" "${grade_jobs[@]}" --results "$out" \
    --quiet --expect-lose "$function" "${keep_args[@]}" --skip-unlinked "${cmake_args[@]}" "$@"
}
kept() { [[ -z ${KEEP:-} ]] || echo ", except $KEEP (pass)"; }  # the summary's words for KEEP
wanted() { [[ -z ${CI_LABS_WRONG:-} || " $CI_LABS_WRONG " == *" $1 "* ]]; }  # CI_LABS_WRONG names it, or is empty
# wrong_solution LAB LAB_DIR NAME FILE FROM TO FUNCTION WHAT [PREPEND]: the whole reference solution
# of LAB as a submission (every file of labs/LAB_DIR taken from reference/), with FROM replaced by
# TO in FILE (a literal fragment; $'...' for several lines); grading it must lose exactly the tests
# that cover FUNCTION. PREPEND (optional): a file whose text goes at the top of FILE (the forged
# submissions' code). KEEP (optional, in the environment: KEEP="lab01.accumulation_memory"):
# space-separated names (or prefixes) of tests that cover FUNCTION but that this mistake cannot
# reach; they must pass (grade.py --expect-keep).
wrong_solution() {
  local lab=$1 lab_dir=$2 name=$3 file=$4 from=$5 to=$6 function=$7 what=$8 prepend=${9:-/dev/null}
  local started=$SECONDS
  runs "$current_step" && wanted "$name" || return 0
  make_wrong "$lab" "$what" "$name" "$lab_dir" "$file" "$from" "$to" "$prepend" || return 0
  if lose_exactly "$lab" "$build/wrong-$name" "$build/skeleton" "$results/lab$lab-wrong-$name.json" "$function"; then
    summary+=("lab $lab with $what: loses exactly the tests covering $function$(kept) ($((SECONDS - started)) s)")
  else
    failures+=("lab $lab wrong solution ($what): not exactly the tests of $function failed (see above)")
    summary+=("lab $lab wrong solution ($what): WRONG tests failed ($((SECONDS - started)) s)")
  fi
}
current_step=4
# Each line is a mistake students make; docs/instructors.md lists them with the tests they lose.
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
  # The 1/sqrt(hs) of the scores forgotten in dq (kept in dk).
  wrong_solution 00 00-naive attention-dq-scale model/layers/attention.cpp \
    'gemm<F>(false, false, t1 - t0, hs, t1, scale, da' 'gemm<F>(false, false, t1 - t0, hs, t1, F(1), da' \
    attention_backward "dq without the 1/sqrt(hs) scale in attention_backward"
  # Weight decay after the Adam update instead of before: off by lr * wd * update. At the fixture's
  # lr 1e-3 only the loss after 3 training steps shows it (1.6 times its tolerance); oracle_adamw's
  # closed-form check at lr 0.1 is off by 5e-3. memory00 counts bytes only.
  KEEP=lab00.memory00 wrong_solution 00 00-naive adamw-decay-after optim/adamw.cpp \
    $'    params[i] *= decay;  // decoupled weight decay\n    m[i] = m[i] * beta1 + g * one_minus_b1;\n    v[i] = v[i] * beta2 + g * g * one_minus_b2;\n    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;\n    params[i] -= step_size * (m[i] / denom);' \
    $'    m[i] = m[i] * beta1 + g * one_minus_b1;\n    v[i] = v[i] * beta2 + g * g * one_minus_b2;\n    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;\n    params[i] -= step_size * (m[i] / denom);\n    params[i] *= decay;  // decay after the update' \
    adamw_step "weight decay applied after the update in adamw_step"
fi
if [[ " ${labs[*]} " == *" 01 "* ]]; then
  # The 1/k forgotten: k times the gradient (the loss, a mean of means, is still right).
  KEEP=lab01.accumulation_memory wrong_solution 01 01-accumulation missing-1-over-k train/accumulate.cpp \
    'model.backward(loss_scale / k);' 'model.backward(loss_scale);' \
    accumulate_gradients "the 1/k loss scaling forgotten in accumulate_gradients"
  # The sum of the micro-batch losses returned instead of their mean (the gradients are right).
  KEEP=lab01.accumulation_memory wrong_solution 01 01-accumulation loss-sum train/accumulate.cpp \
    'return loss_sum / k;' 'return loss_sum;' \
    accumulate_gradients "the sum of the k losses returned instead of the mean"
  # The whole batch forwarded k times (each scaled by 1/k): the right gradients and loss at k
  # times the memory of a micro-batch, which only the memory test sees.
  KEEP=lab01.accumulation_equals_stage00 wrong_solution 01 01-accumulation whole-batch train/accumulate.cpp \
    'loss_sum += model.forward(inputs + i * stride, targets + i * stride, micro, T);' \
    'loss_sum += model.forward(inputs, targets, B, T);' \
    accumulate_gradients "the whole batch forwarded k times instead of one micro-batch each"
fi
if [[ " ${labs[*]} " == *" 02 "* ]]; then
  # The segment's input not kept: its recompute (and its forward) start from a stale boundary.
  KEEP=lab02.checkpointing_memory wrong_solution 02 02-checkpointing no-boundary model/block_walk.cpp \
    'model.keep_boundary(seg, x);' '// model.keep_boundary(seg, x) forgotten' \
    forward_blocks_checkpointed "the segment boundary not kept in forward_blocks_checkpointed"
  # The recompute loop one block short: the segment's last block backpropagates through the
  # activations of another block.
  wrong_solution 02 02-checkpointing recompute-short model/block_walk.cpp \
    'for (int l = first; l <= last; ++l) model.forward_block(l, l - first, input(l));' \
    'for (int l = first; l < last; ++l) model.forward_block(l, l - first, input(l));' \
    backward_blocks_checkpointed "the recompute loop one block short in backward_blocks_checkpointed"
  # Selective: the attention probabilities not recomputed (the shared buffer holds the last block's).
  wrong_solution 02 02-checkpointing selective-no-recompute model/block_walk.cpp \
    'if (l != L - 1) model.recompute_attention(l, l);' '// recompute_attention forgotten' \
    backward_blocks_selective "no attention recompute in backward_blocks_selective"
fi
if [[ " ${labs[*]} " == *" 03 "* ]]; then
  # Truncation instead of round-to-nearest-even.
  wrong_solution 03 03-mixed-precision truncate precision/half.cpp \
    $'const std::uint32_t odd = (v >> n) & 1u;\n  return (v + ((1u << (n - 1)) - 1u) + odd) >> n;' \
    'return v >> n;  // truncates instead of rounding to nearest even' \
    shift_round_even "truncation instead of round-to-nearest-even in shift_round_even"
  # The scale grows one clean step late (after growth_interval + 1 clean steps). The training
  # tests never reach the growth interval; the scaler's own test counts the steps.
  KEEP="lab03.mixed_curves lab03.mixed_overflow" wrong_solution 03 03-mixed-precision scaler-late train/loss_scaler.cpp \
    '} else if (++clean_steps >= growth_interval) {' '} else if (++clean_steps > growth_interval) {' \
    loss_scaler_update "a loss scaler that grows one step late"
  # The gradients not unscaled (multiplied by 1/loss_scale) before the norm and the update. Adam's
  # update m / sqrt(v) does not change when every gradient is scaled (but for eps), so the
  # training tests cannot see it; the step against the fp32 step on the same gradients does.
  KEEP="lab03.mixed_skip lab03.mixed_curves lab03.mixed_overflow lab03.mixed_memory lab03.mixed_compose" \
    wrong_solution 03 03-mixed-precision no-unscale precision/mixed_step.cpp \
    'for (std::size_t i = 0; i < count; ++i) g[i] *= scale;' '(void)scale;  // the unscale forgotten' \
    mixed_optimizer_step "the gradients not unscaled in mixed_optimizer_step"
  # The updated fp32 master weights never rounded back to the half parameters: the model the next
  # forward uses never learns.
  KEEP=lab03.mixed_memory wrong_solution 03 03-mixed-precision no-copy-back \
    precision/mixed_step.cpp 'float_to_half(half_params + offset, master + offset, count, format);' \
    '(void)half_params;  // the master weights never rounded back to half' \
    mixed_optimizer_step "the master weights not rounded back to half in mixed_optimizer_step"
fi
if [[ " ${labs[*]} " == *" 04 "* ]]; then
  # Reduce-scatter that overwrites its block with the neighbour's partial sum instead of adding.
  # One rank has nothing to reduce, the bytes on the wire are right, and every rank ends with the
  # same (wrong) sums, so DDP's parameters stay identical across ranks.
  KEEP="lab04.ring_reduce_scatter_1rank lab04.ring_all_reduce_1rank lab04.ring_bytes lab04.ddp_identical" \
    wrong_solution 04 04-data-parallel ring-copy comm/ring.cpp \
    'add_into(mine, theirs, p.length);' 'std::copy(theirs, theirs + p.length, mine);' \
    ring_reduce_scatter "a reduce-scatter that copies instead of adding"
  # All-reduce = reduce-scatter alone: each rank holds only its own block of the sum.
  KEEP="lab04.ring_all_reduce_1rank lab04.ring_bytes_1rank" wrong_solution 04 04-data-parallel ring-no-gather comm/ring.cpp \
    'all_gather_steps(comm, data, blocks, options);' '// all_gather_steps forgotten' \
    ring_all_reduce "an all-reduce without its all-gather"
  # The window ignored: one receive in flight at a time. The same bytes and the same sums, a
  # message latency per piece; only the count of receives in flight sees it.
  KEEP="lab04.ring_reduce_scatter lab04.ring_all_reduce lab04.ring_bytes_1rank lab04.ddp_equal lab04.ddp_identical" \
    wrong_solution 04 04-data-parallel ring-window-1 comm/ring.cpp \
    $'window = std::min<std::size_t>(std::max(options.window, 1), incoming.size());\n  const std::size_t slot_elems' \
    $'window = std::min<std::size_t>(1, incoming.size());  // one at a time\n  const std::size_t slot_elems' \
    ring_reduce_scatter "a reduce-scatter that ignores the receive window"
  # The first bucket's own (smaller) cap ignored.
  wrong_solution 04 04-data-parallel first-bucket dist/ddp.cpp \
    'const std::size_t cap = out.empty() ? first_bytes : bucket_bytes;' 'const std::size_t cap = bucket_bytes;' \
    plan_buckets "plan_buckets without the first bucket's cap"
  # A bucket launched as soon as its first gradient is ready, before the rest of it is final:
  # wrong sums, and ddp_overlap sees it start before the notification that completes it.
  wrong_solution 04 04-data-parallel bucket-early dist/ddp.cpp \
    'buckets_[next_].begin >= offset' 'buckets_[next_].end > offset' \
    ddp_launch_ready_buckets "a bucket launched before its gradients are final"
  # A bucket launched one notification late (when a later offset arrives; the last bucket only by
  # finish_step): the right sums, less overlap. The overlap test compares the order of launches
  # with the order of notifications.
  KEEP="lab04.ddp_equal lab04.ddp_identical" wrong_solution 04 04-data-parallel bucket-late dist/ddp.cpp \
    'buckets_[next_].begin >= offset' 'buckets_[next_].begin > offset' \
    ddp_launch_ready_buckets "a bucket launched one notification late"
  # Naive DDP reducing the first elements of the buffer for every tensor (its offset forgotten).
  wrong_solution 04 04-data-parallel naive-offset dist/ddp.cpp \
    'all_reduce_now(g + t.offset, t.numel);' 'all_reduce_now(g, t.numel);' \
    ddp_naive "naive DDP without each tensor's offset"
fi
if [[ " ${labs[*]} " == *" 05 "* ]]; then
  # 1F1B's warm-up one forward short: still a valid order (no deadlock, the same gradients), but
  # one micro-batch fewer in flight on every rank but the last.
  wrong_solution 05 05-pipeline 1f1b schedule/pipeline_schedule.cpp \
    'std::min(stages - rank - 1, micro_batches)' 'std::min(stages - rank - 2, micro_batches)' \
    one_f_one_b_order "a 1F1B warm-up one forward short"
  # Received elements counted as bytes.
  KEEP="lab05.pipeline_equal lab05.pipeline_tied lab05.pipeline_memory lab05.pipeline_dp lab05.pipeline_nonblocking" \
    wrong_solution 05 05-pipeline recv-elements dist/pipeline_executor.cpp \
    '(grad ? stats_.grad_bytes_received : stats_.activation_bytes_received) += in.bytes();' \
    '(grad ? stats_.grad_bytes_received : stats_.activation_bytes_received) += in.size();' \
    pipeline_receive "received elements counted as bytes in pipeline_receive"
  # Every message sent counted as activations, gradients included.
  KEEP="lab05.pipeline_equal lab05.pipeline_tied lab05.pipeline_memory lab05.pipeline_dp lab05.pipeline_nonblocking" \
    wrong_solution 05 05-pipeline send-kind dist/pipeline_executor.cpp \
    '(grad ? stats_.grad_bytes_sent : stats_.activation_bytes_sent) += out.data.bytes();' \
    'stats_.activation_bytes_sent += out.data.bytes();' \
    pipeline_send "gradients counted as activation bytes in pipeline_send"
  # The send's Request dropped instead of kept in sending_: its destructor waits, so every send
  # waits for its receive. Messages of a few KB go out at once anyway; 256 KiB ones deadlock 1F1B.
  KEEP="lab05.pipeline_equal lab05.pipeline_tied lab05.pipeline_memory lab05.pipeline_bytes lab05.pipeline_dp" \
    wrong_solution 05 05-pipeline send-dropped dist/pipeline_executor.cpp \
    'sending_.push_back(std::move(out));' '(void)out;  // the send is started: nothing more to do' \
    pipeline_send "the send's Request not kept in sending_ in pipeline_send"
fi
if [[ " ${labs[*]} " == *" 06 "* ]]; then
  # Sequence parallelism without the sum of the replicated gradients: runs, trains, and is wrong.
  # The memory test runs it too, and counts bytes only.
  KEEP=lab06.tp_memory wrong_solution 06 06-tensor-parallel sp-sum dist/tp_grad_sync.cpp \
    'tp_all_reduce(tp, staging.data(), staging.size(), ReduceOp::kSum);' '(void)tp;  // the sum forgotten' \
    sum_sequence_parallel_grads "sequence parallelism without the LayerNorm gradient sum"
  # The bias added to every rank's partial sum before g's all-reduce (t + 1 times in all). The
  # communication is unchanged, and the outputs checked bit for bit come before any row-parallel layer.
  # Every rank adds the same wrong bias, so the replicated tensors stay equal (tp_sp_grads).
  KEEP="lab06.tp_bitwise lab06.tp_ledger lab06.tp_memory lab06.tp_sp_grads" wrong_solution 06 06-tensor-parallel row-bias dist/tp_linear.cpp \
    'matmul_forward<float>(y_partial, x, weight, nullptr, N, IC_local, OC);' \
    'matmul_forward<float>(y_partial, x, weight, bias, N, IC_local, OC);' \
    row_parallel_forward "the bias added before the sum in row_parallel_forward"
  # Each rank's own row maximum in the softmax, not the maximum over all ranks. The replicated
  # tensors' gradients are still summed over the group, so they stay equal (tp_sp_grads).
  KEEP="lab06.tp_memory lab06.tp_sp_grads" wrong_solution 06 06-tensor-parallel vocab-max dist/vocab_parallel.cpp \
    'tp_all_reduce(tp, maxv.data(), rows, ReduceOp::kMax);' '// the maximum over ranks forgotten' \
    vocab_parallel_cross_entropy_forward "the softmax maximum not reduced over ranks"
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
  # Offload runs the same wrong norm with and without offload, so their parameters still agree.
  KEEP=lab07.zero_offload wrong_solution 07 07-zero local-norm dist/zero_model.cpp \
    'comm_.all_reduce(&squares, 1);' '(void)comm_;  // the partial sums never added' \
    ZeroModel::optimizer_step "the gradient norm of this rank's shard only"
  # Under offload the updated host shard never copied back: every rank all-gathers its old one.
  KEEP="lab07.zero1_equal lab07.zero2_equal lab07.zero3_equal" \
    wrong_solution 07 07-zero no-copy-in dist/zero_model.cpp \
    'copy_master_in();' '// the host shard: already in place' \
    ZeroModel::optimizer_step "the host shard not copied back under offload in optimizer_step"
  # No prefetch: each block gathered only when it is reached; the same numbers, no overlap.
  wrong_solution 07 07-zero no-prefetch dist/zero_model.cpp \
    'if (next >= 0 && next < config().num_layers) {' 'if (false && next >= 0) {' \
    ZeroModel::gather_around_block "stage 3 without the next block's prefetch"
fi
if [[ " ${labs[*]} " == *" 08 "* ]]; then
  # The running sum l not rescaled by exp(m_old - m_new) when a chunk raises the maximum (the
  # output row still is): right whenever a query's keys fit in one chunk. Causality and the
  # activation bytes do not depend on it.
  KEEP="lab08.attention_chunked_causal lab08.attention_memory" \
    wrong_solution 08 08-attention no-rescale-l model/layers/attention_chunked.cpp \
    'l = l * alpha + reduce_sum(s, n);' 'l = l + reduce_sum(s, n);  // the rescale forgotten' \
    attention_chunked_forward "the running sum not rescaled in attention_chunked_forward"
  # lse = log(l), the log-sum-exp of exp(s - m) instead of exp(s): out is right, but the backward
  # recomputes p = exp(s - lse) from it, so every gradient through the attention is wrong.
  KEEP="lab08.attention_chunked_causal lab08.attention_memory" \
    wrong_solution 08 08-attention lse-no-max model/layers/attention_chunked.cpp \
    'lse_bh[t] = m + std::log(l);' 'lse_bh[t] = std::log(l);  // the maximum left out' \
    attention_chunked_forward "an lse without the running maximum in attention_chunked_forward"
  # D_t = dout_t . dout_t instead of dout_t . out_t: dv is right (it needs only P), dq and dk not.
  KEEP="lab08.attention_flash_causal lab08.attention_memory" \
    wrong_solution 08 08-attention d-from-dout model/layers/attention_flash.cpp \
    'D[t] = reduce_dot(d + static_cast<std::size_t>(t) * C, o + static_cast<std::size_t>(t) * C, hs);' \
    'D[t] = reduce_dot(d + static_cast<std::size_t>(t) * C, d + static_cast<std::size_t>(t) * C, hs);' \
    attention_flash_backward "D from dout . dout instead of dout . out in attention_flash_backward"
  # dq without the 1/sqrt(hs) of the scores (dk keeps it).
  KEEP="lab08.attention_flash_causal lab08.attention_memory" \
    wrong_solution 08 08-attention flash-dq-scale model/layers/attention_flash.cpp \
    'gemm<F>(false, false, nr, hs, nc, scale, dS, Bc, ku, C3, F(1), dq' \
    'gemm<F>(false, false, nr, hs, nc, F(1), dS, Bc, ku, C3, F(1), dq' \
    attention_flash_backward "dq without the 1/sqrt(hs) scale in attention_flash_backward"
  # The recomputed P not masked above the diagonal: future keys leak into dv, dS, dq and dk.
  KEEP=lab08.attention_memory wrong_solution 08 08-attention flash-no-mask model/layers/attention_flash.cpp \
    'const int valid = std::clamp(t0 + i + 1 - u0, 0, nc);' 'const int valid = nc;  // the causal mask forgotten' \
    attention_flash_backward "the recomputed probabilities not masked in attention_flash_backward"
fi

step "5. forged submissions earn nothing"
current_step=5
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

step "6. under the sanitizers: a write past an array that no number shows"
# sanitizer_only LAB LAB_DIR NAME FILE FROM TO FUNCTION WHAT: a mistake that writes one element past
# an array the tests cannot place guards around (the student's own vector): graded as in steps 2-5
# it keeps full marks (every number is right), and graded with grade.py --sanitize it loses exactly
# the tests that cover FUNCTION (KEEP as for wrong_solution). The sanitizer build is
# CI_LABS_SANITIZE_BUILD (.ci/run points it at its debug-asan build, so that only the lab's files
# and scalelab_ref, the reference the tests compare against, compile there).
sanitizer_only() {
  local lab=$1 lab_dir=$2 name=$3 file=$4 from=$5 to=$6 function=$7 what=$8
  local wrong=$build/wrong-$name started=$SECONDS
  runs 6 && wanted "$name" || return 0
  make_wrong "$lab" "$what" "$name" "$lab_dir" "$file" "$from" "$to" || return 0
  if ! "$py" "$root/tools/grade.py" "$lab" --student-dir "$wrong" --build-dir "$build/skeleton" "${grade_jobs[@]}" \
         --results "$results/lab$lab-wrong-$name.json" --quiet --expect full --skip-unlinked "${cmake_args[@]}"; then
    failures+=("lab $lab ($what): lost points without the sanitizers; a test sees it, so it belongs in step 4")
    summary+=("lab $lab with $what: NOT full marks without the sanitizers")
  elif lose_exactly "$lab" "$wrong" "$sanitize_build" "$results/lab$lab-wrong-$name-sanitize.json" "$function" \
         --sanitize; then
    summary+=("lab $lab with $what: full marks without the sanitizers; under them loses exactly the tests covering $function$(kept) ($((SECONDS - started)) s)")
  else
    failures+=("lab $lab ($what) under the sanitizers: not exactly the tests of $function failed (see above)")
    summary+=("lab $lab with $what: WRONG tests failed under the sanitizers ($((SECONDS - started)) s)")
  fi
}
sanitize_build=${CI_LABS_SANITIZE_BUILD:-$build/sanitize}
if [[ " ${labs[*]} " == *" 06 "* ]]; then
  # The row loop of the local maximum one row too far: maxv[rows] is written (and one row past
  # the logits read) before the all-reduce, which reduces only the first rows.
  sanitizer_only 06 06-tensor-parallel vocab-max-past dist/vocab_parallel.cpp \
    $'for (std::size_t i = 0; i < rows; ++i)\n    maxv[i] =' $'for (std::size_t i = 0; i <= rows; ++i)\n    maxv[i] =' \
    vocab_parallel_cross_entropy_forward "the local-maximum loop one row too far in vocab_parallel_cross_entropy_forward"
fi
if [[ " ${labs[*]} " == *" 08 "* ]]; then
  # The recomputed probabilities one row past the query tile: row nr of P lands in dS, its
  # neighbour in the same scratch (recomputed before it is read), and the lse of query t1 is
  # read. For the last head that is one past the lse buffer: ASan sees it in the unit tests, whose
  # lse is a vector of the test's own, not in the model's runs, whose lse lies inside the
  # activation arena (they pass).
  KEEP="lab08.attention_model_flash lab08.attention_memory lab08.attention_zero" sanitizer_only 08 08-attention flash-p-past model/layers/attention_flash.cpp \
    $'for (int i = 0; i < nr; ++i) {\n            F* row = P +' $'for (int i = 0; i <= nr; ++i) {\n            F* row = P +' \
    attention_flash_backward "the probability loop one row past the tile in attention_flash_backward"
fi

step "summary"
[[ ${#summary[@]} -eq 0 ]] || printf '  %s\n' "${summary[@]}"
printf -v joined '%s, ' "${timings[@]}"
[[ ${#timings[@]} -eq 0 ]] || echo "  time by step: ${joined%, }"
if [[ ${#failures[@]} -gt 0 ]]; then
  echo "FAILED:"
  printf '  %s\n' "${failures[@]}"
  exit 1
fi
echo "labs CI passed (results.json files in $results)"
