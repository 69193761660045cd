#!/usr/bin/env bash
# Gradescope autograder setup (runs once, as root, when Gradescope builds the autograder image).
# The autograder zip made by tools/gradescope/make_autograder.py holds the scalelab sources with
# this file at the top, so they are in /autograder/source. Everything comes from Debian/Ubuntu
# packages: no other download. Needs CMake >= 3.25 and Catch2 2.x: Debian 12 (bookworm) has both;
# on Gradescope's Ubuntu 22.04 image CMake is 3.22 (see docs/instructors.md for the options).
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive
ag=${AUTOGRADER_ROOT:-/autograder}   # overridable, to try the scripts outside Gradescope
src=$ag/source
# shellcheck disable=SC1091
source "$src/gradescope.conf"   # LAB, CMAKE_ARGS, GRADE_ARGS

apt-get update
apt-get install -y --no-install-recommends \
  build-essential cmake ninja-build python3 \
  catch2 libopenblas-dev libdnnl-dev libopenmpi-dev openmpi-bin nlohmann-json3-dev libcli11-dev libbenchmark-dev

cmake_version=$(cmake --version | head -1 | awk '{print $3}')
if [[ "$(printf '%s\n' 3.25 "$cmake_version" | sort -V | head -1)" != 3.25 ]]; then
  echo "setup.sh: CMake $cmake_version is too old; scalelab needs 3.25 or newer." >&2
  echo "Use a Debian 12 base image, or install a newer CMake (see docs/instructors.md)." >&2
  exit 1
fi
if ! grep -q "define CATCH_VERSION_MAJOR 2" /usr/include/catch2/catch.hpp 2>/dev/null; then
  echo "setup.sh: Catch2 2.x (/usr/include/catch2/catch.hpp) is required; this image has another version." >&2
  exit 1
fi

# Build once now with the lab's skeleton, so that grading a submission recompiles only the
# student's files (the grader stages them at the same path) and relinks the test binaries.
empty=$(mktemp -d)
hidden=()
[[ -d "$src/hidden-tests" ]] && hidden=(--hidden-tests "$src/hidden-tests")
# shellcheck disable=SC2086
python3 "$src/tools/grade.py" "$LAB" --student-dir "$empty" --build-dir "$ag/build" \
  --results /tmp/setup-results.json --quiet "${hidden[@]}" $CMAKE_ARGS ${GRADE_ARGS:-} || true
rmdir "$empty"
echo "setup.sh: ready to grade lab $LAB"
