#!/usr/bin/env bash
# Runs tools/plan_vs_runs.sh (23 one-step runs of the tiny model and the planner on the same
# layouts), then executes notebooks/zero.ipynb and notebooks/planner.ipynb on what it wrote; both
# notebooks assert that the measured bytes equal the planned ones. Checks the plots exist.
set -euo pipefail
cli="$1" root="$2" work="$3"
if ! /usr/bin/python3 -c "import matplotlib, nbformat" 2>/dev/null || ! command -v jupyter-nbconvert >/dev/null; then
  echo "SKIP: Jupyter/matplotlib missing (bash tools/setup.sh --with-python installs them)"
  exit 77
fi
if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun missing (tools/setup.sh installs openmpi-bin)"
  exit 77
fi
mkdir -p "$work/out"
bash "$root/tools/plan_vs_runs.sh" "$cli" "$work/out/plan_vs_runs"
for nb in zero planner; do
  cp "$root/notebooks/$nb.ipynb" "$work/"
  SCALELAB_ROOT="$work" SCALELAB_PLAN_RUNS="$work/out/plan_vs_runs" \
    jupyter-nbconvert --to notebook --execute --output "$nb.executed.ipynb" "$work/$nb.ipynb"
  grep -q "max |measured - planned|" "$work/$nb.executed.ipynb" || { echo "FAIL: $nb printed no comparison"; exit 1; }
done
for f in zero_memory.png planner_vs_measured.png planner_gpt2_1.5b.png; do
  test -s "$work/out/$f" || { echo "FAIL: the notebooks did not write out/$f"; exit 1; }
done
echo "notebooks ran; plots in $work/out"
