#!/usr/bin/env bash
# Runs a 3-step ladder, then executes notebooks/ladder.ipynb on its JSON and checks the plots exist.
set -euo pipefail
cli="$1" root="$2" work="$3"
if ! /usr/bin/python3 -c "import matplotlib, nbformat" 2>/dev/null || ! command -v jupyter-nbconvert >/dev/null; then
  echo "SKIP: Jupyter/matplotlib missing (bash tools/setup.sh --with-python installs them)"
  exit 77
fi
mkdir -p "$work/out"
"$cli" ladder --steps 3 --batch 4 --seq-len 32 --stages 00,01,02 --json "$work/out/ladder.json" > "$work/ladder.log"
cp "$root/notebooks/ladder.ipynb" "$work/"
SCALELAB_ROOT="$work" SCALELAB_LADDER_JSON="$work/out/ladder.json" \
  jupyter-nbconvert --to notebook --execute --output executed.ipynb "$work/ladder.ipynb"
for f in ladder_loss.png ladder_memory.png ladder_throughput.png; do
  test -s "$work/out/$f" || { echo "FAIL: the notebook did not write out/$f"; exit 1; }
done
grep -q "max |loss - stage 00|" "$work/executed.ipynb" || { echo "FAIL: no loss comparison in the output"; exit 1; }
echo "notebook ran; plots in $work/out"
