#!/usr/bin/env bash
# Runs a driver that makes the notebooks' data (tools/plan_vs_runs.sh or tools/pipeline_runs.sh:
# short runs under mpirun, the planner, the collective benchmark), executes the notebooks on what it
# wrote, and checks each printed its comparison and wrote its figures. The notebooks assert what
# must hold (e.g. measured bytes equal the planned ones), so a wrong number fails the test.
#   run_notebooks.sh CLI ROOT WORK DRIVER ENV_VAR "NOTEBOOKS" "FIGURES"
set -euo pipefail
cli="$1" root="$2" work="$3" driver="$4" env_var="$5"
read -r -a notebooks <<< "$6"
read -r -a figures <<< "$7"
if ! /usr/bin/python3 -c "import matplotlib, nbformat" 2>/dev/null || ! command -v jupyter-nbconvert >/dev/null; then
  echo "SKIP: Jupyter/matplotlib missing (bash tools/setup.sh --with-python installs them)"
  exit 77
fi
if ! command -v mpirun >/dev/null; then
  echo "SKIP: mpirun missing (tools/setup.sh installs openmpi-bin)"
  exit 77
fi
mkdir -p "$work/out"
data="$work/out/$(basename "$driver" .sh)"
bash "$root/tools/$driver" "$cli" "$data"
for nb in "${notebooks[@]}"; do
  cp "$root/notebooks/$nb.ipynb" "$work/"
  env SCALELAB_ROOT="$work" "$env_var=$data" \
    jupyter-nbconvert --to notebook --execute --output "$nb.executed.ipynb" "$work/$nb.ipynb"
done
for f in "${figures[@]}"; do
  test -s "$work/out/$f" || { echo "FAIL: the notebooks did not write out/$f"; exit 1; }
done
echo "notebooks ${notebooks[*]} ran; figures in $work/out"
