#!/usr/bin/env bash
# Sets up (tools/setup.sh, with the Python packages the notebook test uses), builds the release
# preset and runs the whole test suite with CTest.
#   bash tools/test.sh            # everything
#   bash tools/test.sh -L lab00   # extra arguments go to ctest (labels: unit, lab00.., mpi, gpu, labs)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh --preset release --with-python
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
ctest --test-dir build/release --output-on-failure -j2 "$@"
